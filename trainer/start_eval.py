"""The iteration-0 evaluation, shared by the runs that start from the same weights (``eval.share_start``).

Before its first update every run of a sweep evaluates the weights it starts from, on the fixed, seeded task lists
(``eval.seed``): the same weights, tasks and sampling seeds in every run of a comparison, whatever its estimator or
run seed. On a paper preset this pass takes 8-15 minutes per run (``python -m experiments.plan_time``); with
``eval.share_start`` the first run to finish it stores its metrics under ``$BIPACE_CACHE/start_evals/<key>.json``
and every later run with the same key logs them as its own iteration 0 instead of evaluating.

The key is a SHA-256 over everything the evaluation's result depends on:

* the start weights' content: every file of the model folder (``sft.init_from`` or ``model.path``), hashed once per
  (path, size, modification time) and remembered in ``start_evals/weights.json``;
* the config except what only training reads: ``seed``, ``estimator``, ``logging``, ``trainer`` (its ``precision``
  kept), ``experiment``, ``variant``, ``name``, ``output_dir``, and of ``eval`` its schedule (``every``,
  ``at_start``, ``share_start``);
* the number of ranks (each evaluates its share of the task list) and the code's commit. A working tree with
  uncommitted changes shares nothing: its code has no name.

On CPU the shared metrics equal what the run would have measured (same batches, same seeds; tested). On a GPU,
vLLM's batched sampling is not bitwise reproducible between processes, so the shared values are one draw of the
same evaluation that each run would otherwise have drawn anew. The file is JSON (nothing in it can run code), written
atomically; a damaged one is reported and ignored. Rank 0 decides and tells the others, so that every rank skips
or runs the evaluation (whose reduction is a collective) together.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path

from common.fsio import atomic_write_text

__all__ = ["start_eval_key", "load_start_eval", "store_start_eval", "weights_digest"]

log = logging.getLogger(__name__)

#: top-level config keys the iteration-0 evaluation does not read
TRAINING_ONLY = ("seed", "estimator", "logging", "experiment", "variant", "name", "output_dir")
#: eval keys that say when to evaluate, not what
SCHEDULE_ONLY = ("every", "at_start", "share_start")


def _folder() -> Path:
    from envs.paths import cache_dir

    return cache_dir("start_evals")


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over the names and bytes of every file below ``model_dir``, remembered per (path, size, mtime)."""
    model_dir = Path(model_dir).resolve()
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    stamp = [[str(p.relative_to(model_dir)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    memo_path = _folder() / "weights.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    entry = memo.get(str(model_dir)) if isinstance(memo, dict) else None
    if isinstance(entry, dict) and entry.get("files") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    h = hashlib.sha256()
    for (name, _, _), p in zip(stamp, files):
        h.update(name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    digest = h.hexdigest()
    memo = memo if isinstance(memo, dict) else {}
    memo[str(model_dir)] = {"files": stamp, "sha256": digest}
    try:
        atomic_write_text(memo_path, json.dumps(memo, indent=1) + "\n", durable=False)
    except OSError as e:  # a read-only cache: hash again next time
        log.warning("could not remember the weights' digest in %s: %s", memo_path, e)
    return digest


def start_eval_key(cfg, world_size: int, model_dir: Path) -> tuple[str | None, dict]:
    """``(key, inputs)``; key None (nothing shared) when the code's commit is unknown or the tree is dirty."""
    from .run_folder import git_commit

    commit, dirty = git_commit()
    d = cfg.to_dict()
    for k in TRAINING_ONLY:
        d.pop(k, None)
    d["trainer"] = {"precision": d["trainer"]["precision"]}
    d["eval"] = {k: v for k, v in d["eval"].items() if k not in SCHEDULE_ONLY}
    inputs = {"config": d, "world_size": int(world_size), "commit": commit, "weights": weights_digest(model_dir)}
    if commit is None or dirty:
        return None, inputs
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return key, inputs


def load_start_eval(key: str) -> dict[str, float] | None:
    """The stored metrics of ``key``, or None (absent, or damaged: reported, then evaluated anew)."""
    path = _folder() / f"{key}.json"
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        metrics = record["metrics"]
        if record.get("key") != key or not isinstance(metrics, dict) or not metrics:
            raise ValueError("not a record of this key")
        out = {str(k): float(v) for k, v in metrics.items()}
        if not all(k.startswith("eval/") and math.isfinite(v) for k, v in out.items()):
            raise ValueError("a key outside eval/ or a non-finite value")
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring the shared iteration-0 evaluation %s (%s); evaluating anew", path, e)
        return None


def store_start_eval(key: str, inputs: dict, metrics: dict[str, float], run: str) -> Path | None:
    """Write ``key``'s record (metrics, the key's inputs, the run that measured it) atomically."""
    path = _folder() / f"{key}.json"
    kept = {k: float(v) for k, v in metrics.items() if k.startswith("eval/")}
    if not kept or not all(math.isfinite(v) for v in kept.values()):
        log.warning("the iteration-0 evaluation has no finite eval/ metrics to share; %s not written", path)
        return None
    record = {"key": key, "metrics": kept, "measured_by": run, "inputs": inputs}
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    return path
