"""Checkpoints that resume exactly and never unpickle: safetensors for tensors, JSON for everything else.

Layout of a run's checkpoint folder::

    checkpoints/
      latest                         name of the newest complete checkpoint (replaced atomically)
      iter_00000010/
        model/                       the actor as a Hugging Face folder (config.json, *.safetensors; LoRA merged)
        adapter.safetensors          LoRA only: the trainable adapter weights
        optimizer/rank_00000.safetensors   per rank: AdamW state + fp32 master partitions (metadata: JSON)
        rng/rank_00000.safetensors   per rank: torch CPU/CUDA RNG states and torch generators
        rng/rank_00000.json          per rank: Python, NumPy (global and Generator) RNG states
        state.json                   iteration, actor counters, task-sampler state, caller's extra state
        manifest.json                every file with its size and SHA-256; written last: a folder without it is partial

Decision [choice]: DeepSpeed's own ``save_checkpoint`` pickles Python objects (its loader calls ``torch.load``
with ``weights_only=False``; the optimizer file holds DeepSpeed classes that ``weights_only=True`` rejects), so
this module saves the optimizer state itself (``PPOActor.optimizer_state``: flat tensors and JSON). Loading
reads only safetensors and JSON: nothing is unpickled.

Writing is crash-safe: files go to ``iter_XXXXXXXX.partial/``; every rank fsyncs its files, rank 0 hashes
and fsyncs them all, writes the manifest after every rank finished, fsyncs the folder, renames it, then replaces
``latest`` with ``os.replace`` (fsynced with its folder), so a power loss leaves either the previous checkpoint
or the new one complete on disk. A save that fails (a full disk) removes its partial folder and temporary files
before the error goes on. Loading validates a candidate (manifest present, every file with its recorded size
and SHA-256, headers readable) before touching the actor, and falls back to the previous checkpoint with a
warning naming the file when the latest one is missing, partial, corrupt or altered. Checkpoints written before
the manifest held checksums (``"files": {name: size}``) are still loaded, with a warning that their content
could not be verified [choice: backward compatible]. Hashing costs about 1 s per GB on save and on load. The
newest ``keep_last`` checkpoints are kept. Multi-node runs need the run folder on a shared file system. A save
first checks every weight for NaN/Inf on every rank and writes nothing if one is found (``save_checkpoint``).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from common.fsio import atomic_write_text, disk_full, fsync_dir, fsync_path

__all__ = ["save_checkpoint", "load_checkpoint", "list_checkpoints", "validate_checkpoint", "LoadedCheckpoint",
           "CheckpointError", "CheckpointMismatch", "rng_state", "set_rng_state"]

FORMAT_VERSION = 1
_NAME_RE = re.compile(r"^iter_(\d{8})$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (the message says why)."""


class CheckpointMismatch(CheckpointError):
    """A good checkpoint written by another rank count or ZeRO stage: not a reason to fall back to an older one."""

    def __init__(self, message: str, path: Path, world_size, zero_stage):
        super().__init__(message)
        self.path, self.world_size, self.zero_stage = path, world_size, zero_stage


@dataclass
class LoadedCheckpoint:
    path: Path
    iteration: int
    extra: dict
    fell_back: bool  # True when the latest checkpoint was unusable and an older one was loaded


# ------------------------------------------------------------------------------------------------- RNG state
def _torch_gen_state(g: torch.Generator) -> torch.Tensor:
    return g.get_state().clone()


def rng_state(generators: dict[str, Any] | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, json) of Python, NumPy, torch (CPU and CUDA) RNGs and of the named ``generators``
    (``torch.Generator`` or ``numpy.random.Generator``)."""
    tensors: dict[str, torch.Tensor] = {"torch_cpu": torch.get_rng_state().clone()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s.clone()
    py = random.getstate()
    npst = np.random.get_state()
    js: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [npst[0], npst[1].tolist(), int(npst[2]), int(npst[3]), float(npst[4])],
        "generators": {},
    }
    for name, g in (generators or {}).items():
        if isinstance(g, torch.Generator):
            tensors[f"gen.{name}"] = _torch_gen_state(g)
        elif isinstance(g, np.random.Generator):
            js["generators"][name] = g.bit_generator.state
        else:
            raise TypeError(f"generator {name!r} is a {type(g).__name__}: pass torch.Generator or numpy Generator")
    return tensors, js


def set_rng_state(tensors: dict[str, torch.Tensor], js: dict, generators: dict[str, Any] | None = None) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("torch_cuda_"))]
        if states and len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)
    v, st, gauss = js["python"]
    random.setstate((v, tuple(st), gauss))
    name, keys, pos, has_gauss, cached = js["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    for gname, g in (generators or {}).items():
        if isinstance(g, torch.Generator):
            if f"gen.{gname}" not in tensors:
                raise CheckpointError(f"checkpoint has no state for torch generator {gname!r}")
            g.set_state(tensors[f"gen.{gname}"])
        else:
            if gname not in js["generators"]:
                raise CheckpointError(f"checkpoint has no state for numpy generator {gname!r}")
            g.bit_generator.state = js["generators"][gname]


# ------------------------------------------------------------------------------------------------ helpers
def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _barrier() -> None:
    d = _dist()
    if d is not None and d.get_world_size() > 1:
        d.barrier()


def _rank_world() -> tuple[int, int]:
    d = _dist()
    return (d.get_rank(), d.get_world_size()) if d is not None else (0, 1)


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write_text(path, text, durable=True)


def file_sha256(path: str | Path, chunk: int = 1 << 23) -> str:
    """Hex SHA-256 of a file's bytes (read in 8 MB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _iteration_of(path: Path) -> int | None:
    m = _NAME_RE.match(path.name)
    return int(m.group(1)) if m else None


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete-looking checkpoint folders (``iter_XXXXXXXX`` with a manifest), oldest first."""
    root = Path(root)
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _iteration_of(p) is not None
             and (p / "manifest.json").exists()]
    return sorted(found, key=lambda p: _iteration_of(p))


def validate_checkpoint(path: str | Path, only: tuple[str, ...] | None = None) -> str | None:
    """None if ``path`` looks usable, else the reason it is not (missing/partial/corrupt); ``only``: check just these
    files of the manifest (e.g. ``("state.json",)``, a cheap check before the whole load)."""
    path = Path(path)
    man = path / "manifest.json"
    if not man.exists():
        return f"{path} has no manifest.json (a partial save)"
    try:
        manifest = json.loads(man.read_text())
        files = manifest["files"]
    except Exception as e:
        return f"{man} is unreadable ({e})"
    if not isinstance(files, dict):
        return f"{man} is unreadable (its 'files' is not a mapping)"
    unverified = []
    for rel, entry in files.items():
        if only is not None and rel not in only:
            continue
        f = path / rel
        if not f.exists():
            return f"{f} is missing"
        size, digest = (entry.get("size"), entry.get("sha256")) if isinstance(entry, dict) else (entry, None)
        if f.stat().st_size != size:
            return f"{f} has {f.stat().st_size} bytes, the manifest says {size} (truncated or overwritten)"
        if digest is None:
            unverified.append(rel)
        else:
            try:
                got = file_sha256(f)
            except OSError as e:
                return f"{f} is unreadable ({e})"
            if got != digest:
                return (f"{f} does not match the SHA-256 in {man} (the file changed after the save: a disk error or "
                        "an edit)")
        try:
            if rel.endswith(".safetensors"):
                with safe_open(str(f), framework="pt") as h:
                    list(h.keys())
            elif rel.endswith(".json"):
                json.loads(f.read_text())
        except Exception as e:
            return f"{f} is corrupt ({e})"
    if unverified:
        warnings.warn(f"{path} was saved without checksums (an older manifest): {len(unverified)} file(s) checked "
                      "by size and header only", stacklevel=2)
    return None


# -------------------------------------------------------------------------------------------------- saving
def save_checkpoint(root: str | Path, iteration: int, actor, *, sampler=None, generators: dict | None = None,
                    extra: dict | None = None, keep_last: int = 2, tokenizer=None) -> Path:
    """Save everything needed to continue after iteration ``iteration``; collective over ranks.

    actor      : ``trainer.ppo_actor.PPOActor``
    sampler    : object with ``state_dict() -> JSON-able dict`` and ``load_state_dict(d)`` (the task sampler)
    generators : named ``torch.Generator``/``numpy.random.Generator`` objects (e.g. ``Seeds.task``/``rollout``)
    extra      : JSON-able dict of the caller's own state (returned by ``load_checkpoint``)

    Raises ``NonFiniteError`` (the run's non-finite stop), writing nothing, when any weight holds a NaN/Inf on any
    rank (``PPOActor.nonfinite_parameters``: one collective every rank joins): a checkpoint is never written
    with weights that cannot be trained on, and the previous one stays the newest.
    """
    root = Path(root)
    rank, world = _rank_world()
    _refuse_nonfinite(root, iteration, actor)
    name = f"iter_{int(iteration):08d}"
    final = root / name
    partial = root / (name + ".partial")
    try:
        _write_partial(partial, root, iteration, actor, sampler, generators, extra, tokenizer, rank, world)
        if rank == 0:
            files = {}
            for p in sorted(partial.rglob("*")):
                if p.is_file():
                    fsync_path(p)
                    files[str(p.relative_to(partial))] = {"size": p.stat().st_size, "sha256": file_sha256(p)}
            for d in sorted({p.parent for p in partial.rglob("*")} | {partial}):
                fsync_dir(d)
            _atomic_write_text(partial / "manifest.json",
                               json.dumps({"format": FORMAT_VERSION, "files": files}, indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(partial, final)
            fsync_dir(root)
            _atomic_write_text(root / "latest", name + "\n")
            _prune(root, keep_last, keep=final)
    except BaseException as e:
        if rank == 0:  # a failed save (a full disk) leaves no half-written folder or temporary file behind
            shutil.rmtree(partial, ignore_errors=True)
            for tmp in root.glob("latest.tmp*"):
                tmp.unlink(missing_ok=True)
        full = disk_full(e)
        if full is not None and not getattr(full, "filename", None):
            raise OSError(errno.ENOSPC, "No space left on device", str(partial)) from e
        raise
    _barrier()
    return final


def _refuse_nonfinite(root: Path, iteration: int, actor) -> None:
    """Raise the run's non-finite stop, naming the weights, if any weight is NaN/Inf on any rank (collective)."""
    bad = actor.nonfinite_parameters()
    if not bad:
        return
    from .ppo_actor import NonFiniteError

    kept = list_checkpoints(root)
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    newest = f"the newest checkpoint, {kept[-1].name}, is kept" if kept else "there is no earlier checkpoint"
    raise NonFiniteError(
        f"iteration {int(iteration)}: no checkpoint saved, {len(bad)} weight(s) hold NaN/Inf: {', '.join(bad[:5])}"
        f"{more}; {newest}. Lower trainer.lr or try trainer.precision=fp32 before resuming (the same settings "
        "would diverge again), or check the rollout data of the iterations since that checkpoint."
    )


def _write_partial(partial: Path, root: Path, iteration: int, actor, sampler, generators, extra, tokenizer,
                   rank: int, world: int) -> None:
    """Every rank's files into ``partial`` (fsynced by the rank that wrote them); returns after the barrier."""
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir()
        (partial / "optimizer").mkdir()
        (partial / "rng").mkdir()
    _barrier()
    # model weights (collective under ZeRO-3; rank 0 writes)
    actor.export_hf(partial / "model", tokenizer=tokenizer)
    if actor.is_lora:
        adapter = {n: t.detach().cpu().contiguous() for n, t in actor.trainable_named_parameters()}
        if rank == 0:
            save_file(adapter, str(partial / "adapter.safetensors"), metadata={"format": "pt"})
    # per-rank optimizer and RNG state
    opt_t, opt_meta = actor.optimizer_state(copy=False)  # written at once: no second host copy
    mine = [partial / "optimizer" / f"rank_{rank:05d}.safetensors", partial / "rng" / f"rank_{rank:05d}.safetensors",
            partial / "rng" / f"rank_{rank:05d}.json"]
    save_file({k: v.contiguous() for k, v in opt_t.items()}, str(mine[0]), metadata={"meta": json.dumps(opt_meta)})
    rng_t, rng_js = rng_state(generators)
    save_file(rng_t, str(mine[1]))
    mine[2].write_text(json.dumps(rng_js))
    if rank != 0:  # rank 0 syncs everything once the manifest is made
        for f in mine:
            fsync_path(f)
    if rank == 0:
        sampler_state = sampler.state_dict() if sampler is not None else None
        state = {
            "format": FORMAT_VERSION,
            "iteration": int(iteration),
            "world_size": world,
            "zero_stage": actor.zero_stage,
            "lora": bool(actor.is_lora),
            "engine": actor.counters_state(),
            "sampler": sampler_state,
            "extra": extra or {},
        }
        try:
            text = json.dumps(state, indent=1)
        except TypeError as e:
            raise CheckpointError(
                f"checkpoint state is not JSON-serialisable ({e}): sampler.state_dict() and extra must hold only "
                "dicts, lists, str, int, float, bool and None"
            ) from e
        (partial / "state.json").write_text(text)
    _barrier()


def _prune(root: Path, keep_last: int, keep: Path) -> None:
    done = list_checkpoints(root)
    for p in done[: max(0, len(done) - keep_last)]:
        if p != keep:
            shutil.rmtree(p, ignore_errors=True)
    newest = _iteration_of(keep) or 0
    for p in root.glob("iter_*.partial"):  # leftovers of crashed saves
        it = _iteration_of(Path(p.name.removesuffix(".partial")))
        if it is not None and it <= newest:
            shutil.rmtree(p, ignore_errors=True)


def drop_optimizer_state(root: str | Path) -> tuple[int, int, list[str]]:
    """Delete the per-rank optimizer state (``optimizer/``: fp32 master + AdamW partitions, ~12 B per trained
    parameter, most of a full-model checkpoint) of every complete checkpoint under ``root``, once a run is
    finished; returns (checkpoints, bytes freed, what each keeps).

    Each checkpoint keeps its Hugging Face export (``model/``; ``adapter.safetensors`` with LoRA), its RNG state,
    ``state.json``, and a manifest rewritten to the files left, with ``"optimizer_dropped": true``: the weights
    stay loadable and verifiable, but the run can no longer be resumed or extended from it (``load_checkpoint``
    says so). Call on rank 0 only, after the last save."""
    root = Path(root)
    n, freed = 0, 0
    kept: set[str] = set()
    for ck in list_checkpoints(root):
        man_path = ck / "manifest.json"
        manifest = json.loads(man_path.read_text())
        files = manifest.get("files", {})
        opt = ck / "optimizer"
        gone = [rel for rel in files if rel.startswith("optimizer/")]
        if not gone and not opt.exists():
            continue
        manifest["files"] = {rel: e for rel, e in files.items() if not rel.startswith("optimizer/")}
        manifest["optimizer_dropped"] = True
        _atomic_write_text(man_path, json.dumps(manifest, indent=1))  # first: a crash leaves a loadable manifest
        if opt.exists():
            freed += sum(f.stat().st_size for f in opt.rglob("*") if f.is_file())
            shutil.rmtree(opt)
        kept.update(rel.split("/")[0] for rel in manifest["files"])
        n += 1
    return n, freed, sorted(kept | {"manifest.json"} if n else kept)


# ------------------------------------------------------------------------------------------------- loading
def _candidates(root: Path) -> tuple[list[Path], Path | None]:
    """Checkpoint folders to try, newest first, with the one ``latest`` names at the front."""
    named = None
    latest = root / "latest"
    if latest.exists():
        try:
            text = latest.read_text().strip()
            if _NAME_RE.match(text):
                named = root / text
        except OSError:
            named = None
    others = [p for p in reversed(list_checkpoints(root)) if p != named]
    return ([named] if named is not None else []) + others, named


def load_checkpoint(root: str | Path, actor, *, sampler=None,
                    generators: dict | None = None) -> LoadedCheckpoint | None:
    """Restore the newest usable checkpoint under ``root`` into ``actor``, ``sampler`` and ``generators`` (and the
    global RNGs). Returns None when there is none; warns and falls back when the latest is unusable."""
    root = Path(root)
    rank, world = _rank_world()
    cands, named = _candidates(root)
    if not cands:
        if root.exists() and any(root.glob("iter_*.partial")):
            warnings.warn(f"no complete checkpoint under {root} (only partial saves): starting from scratch",
                          stacklevel=2)
        return None
    first = True
    for cand in cands:
        problem = validate_checkpoint(cand) if cand.exists() else f"{cand} does not exist"
        if problem is None:
            try:
                it, extra = _load_one(cand, actor, sampler, generators, rank, world)
                fell_back = not first
                if fell_back:
                    warnings.warn(f"loaded the older checkpoint {cand}, because the latest one was unusable",
                                  stacklevel=2)
                elif named is None:
                    warnings.warn(f"{root / 'latest'} is missing: loaded the newest complete checkpoint {cand}",
                                  stacklevel=2)
                return LoadedCheckpoint(path=cand, iteration=it, extra=extra, fell_back=fell_back)
            except CheckpointMismatch:  # a good checkpoint of another rank count: the older ones share it
                raise
            except (CheckpointError, OSError, ValueError, KeyError) as e:
                problem = f"{cand} could not be loaded ({e})"
        warnings.warn(f"skipping checkpoint: {problem}; trying the previous one", stacklevel=2)
        first = False
    raise CheckpointError(f"every checkpoint under {root} is unusable (see the warnings); delete the folder to start "
                          "over")


def _read_model_folder(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} holds no .safetensors weights")
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def _load_one(path: Path, actor, sampler, generators, rank: int, world: int) -> tuple[int, dict]:
    state = json.loads((path / "state.json").read_text())
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"format {state.get('format')} is not {FORMAT_VERSION}")
    if state["world_size"] != world or state["zero_stage"] != actor.zero_stage:
        raise CheckpointMismatch(
            f"it was written by {state['world_size']} ranks with ZeRO stage {state['zero_stage']}; this run has "
            f"{world} ranks with stage {actor.zero_stage}: resume with the same launcher and trainer.zero_stage",
            path, state["world_size"], state["zero_stage"])
    if bool(state.get("lora")) != bool(actor.is_lora):
        raise CheckpointError("LoRA setting differs from the checkpoint's (model.lora_rank)")
    if json.loads((path / "manifest.json").read_text()).get("optimizer_dropped"):
        raise CheckpointError("its optimizer state was dropped when the run finished (trainer.drop_optimizer_at_end):"
                              " its model/ folder holds the weights, but training cannot continue from it")
    opt_file = path / "optimizer" / f"rank_{rank:05d}.safetensors"
    with safe_open(str(opt_file), framework="pt") as h:
        opt_meta = json.loads(h.metadata()["meta"])
    opt_t = load_file(str(opt_file))
    rng_t = load_file(str(path / "rng" / f"rank_{rank:05d}.safetensors"))
    rng_js = json.loads((path / "rng" / f"rank_{rank:05d}.json").read_text())
    if actor.is_lora:
        actor.load_named_parameters(load_file(str(path / "adapter.safetensors")), trainable_only=True)
    else:
        actor.load_named_parameters(_read_model_folder(path / "model"))
    actor.load_optimizer_state(opt_t, opt_meta)
    actor.load_counters_state(state["engine"])
    if sampler is not None:
        if state.get("sampler") is None:
            raise CheckpointError("it holds no task-sampler state but a sampler was passed")
        sampler.load_state_dict(state["sampler"])
    set_rng_state(rng_t, rng_js, generators)
    return int(state["iteration"]), dict(state.get("extra") or {})
