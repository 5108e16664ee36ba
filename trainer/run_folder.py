"""One folder per run: what it holds, its status, and whether a new invocation may continue it.

Layout (read by ``analysis.runs``; docs/conventions.md, "Run folders")::

    <run>/                         results/runs/<env>/<model>/<method>/seed_<k>/ or output_dir
      config.yaml                  the resolved config (every key, reloadable with trainer.config.load_config)
      run.json                     env, model, method, seed, estimator, git commit, status, iterations done
      metrics.jsonl                one line per iteration (and one for the evaluation before training)
      eval.jsonl                   one line per evaluation: iteration + eval/<env>/<split>/... keys
      train.log                    warnings and progress messages (skipped steps, checkpoint fall-backs, errors)
      epsilon.json                 with estimator.epsilon=auto: the epsilon frozen at the first step and its scan
      epsilon_scan.md              the same scan as a table
      grouping_scan.jsonl          with logging.grouping_scan=true: every iteration's groupings over the epsilon grid
      checkpoints/                 trainer.checkpoint layout (iter_XXXXXXXX/, latest)
      .lock                        held by the process that runs the folder (its PID and command inside)
      restarted_<date>/            the logs of a run that --restart started over
      tb/, wandb/                  TensorBoard events, W&B offline run (when enabled)

``run.json`` status: ``running`` (also what a killed run leaves behind), ``finished``, ``failed`` (with
``error``), ``interrupted`` (Ctrl-C, a full disk). A new invocation on a folder whose status is ``finished`` with
every iteration done does nothing; anything else resumes from the newest usable checkpoint (``trainer.resume``).

What protects a folder [choice]:

* One process at a time: ``experiments.train`` holds ``<run>/.lock`` (``common.locks.FolderLock``) from before it
  reads the folder until it exits; a second invocation exits 2 at once naming the holder's PID and command.
* Its identity: the experiment is read from ``config.yaml``, or, when that file is missing or unreadable, from the
  copy of the config in the newest checkpoint (``state.json``); a folder with logs or checkpoints and neither
  record is refused, never resumed under another label or reported as finished.
* Its logs: a folder whose ``run.json`` records progress (or that holds checkpoints) but has no usable checkpoint
  is refused with the choices; so is one whose newest checkpoint (iteration k) is not covered by its logs
  (``metrics.jsonl`` without a line of iterations 1..k, ``eval.jsonl`` without an evaluation the checkpoint lists).
  ``--restart`` (``trainer.resume=false``) starts it over: it deletes the checkpoints first, then moves the old
  logs to ``<run>/restarted_<date>/``, so that a kill half-way never leaves checkpoints without their logs. Lines
  logged after the newest checkpoint are dropped on resume (the resumed run writes them again).
* Its rank count: a checkpoint resumes only with the rank count and ZeRO stage that wrote it (``state.json``
  records both); another is refused before any compute, saying how to relaunch.

The config of a resumed run must
equal the saved one except for the keys in ``RESUMABLE_CHANGES`` (the folder's location, logging, the length
of the run, checkpoint frequency, worker count and the workers' timeout and restart limit, the warm start's
settings, whose folder `sft.init_from` is compared, the speed switches that change results only by float
rounding: shared prefixes, suffix buckets, the decode step, the source of the old log-probs):
changing anything else would mix two experiments in one folder.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from common.fsio import atomic_write_text
from common.locks import FolderLock, LockHeld
from envs.paths import portable_text

from .config import REMOVED_KEYS, ConfigError, RunConfig, config_to_dict, save_config

__all__ = ["RunFolder", "RunStatus", "RunFolderError", "RESUMABLE_CHANGES", "git_commit", "config_differences"]


class RunFolderError(ConfigError):
    """The run folder cannot be used as asked (in use, of unknown identity, logs without a checkpoint); nothing
    was computed or changed. Exit status 2."""


#: files a restart moves to ``restarted_<date>/`` (the run's record); checkpoints are deleted
_ARCHIVED = ("config.yaml", "run.json", "metrics.jsonl", "eval.jsonl", "train.log", "epsilon.json", "epsilon_scan.md",
             "grouping_scan.jsonl", "tb", "wandb")

#: ``--restart`` renames ``checkpoints/`` to this (+ its PID) before deleting it
_DELETING = ".checkpoints.deleting-"


def _checked_state(ck: Path) -> dict:
    """A checkpoint's ``state.json`` as saved: ``ValueError`` when the loader's check of it fails (missing, or not
    the SHA-256 its manifest lists: an edit or a disk error; the loader skips such a checkpoint, so its iteration
    says nothing about the resume)."""
    from .checkpoint import validate_checkpoint

    reason = validate_checkpoint(ck, only=("state.json",))
    if reason is not None:
        raise ValueError(reason)
    return json.loads((ck / "state.json").read_text())


def _spans(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    out, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


#: config keys (dotted prefixes) that may differ between the saved config and a resuming invocation [choice]
#: ``sft.warmstart`` describes how ``sft.init_from`` was made; the folder it names (compared) is what a run starts from
#: The speed switches (shared prefixes, suffix buckets, the decode step and its packed weights, the old log-probs'
#: source) change results
#: only by float rounding (their tests).
RESUMABLE_CHANGES = ("output_dir", "logging.", "trainer.iterations", "trainer.resume", "trainer.save_every",
                     "trainer.keep_last", "env.num_workers", "env.worker_timeout_s",
                     "env.max_worker_restarts", "sft.warmstart", "sft.warmstart.",
                     "trainer.prefix_sharing", "trainer.suffix_buckets", "trainer.old_logprobs", "rollout.hf_decode",
                     "rollout.hf_share_prefixes", "rollout.hf_pack_weights", "trainer.optimizer_threads",
                     "trainer.drop_optimizer_at_end", "trainer.collective_timeout_min", "eval.share_start")


#: settings added with a default that changes what older runs computed: a saved config without the key, where any
#: of the ``when`` keys holds one of its values, ran with ``value`` (dotted key -> ({when key: values}, value)). HGPO's
#: rule entered every HGPO run, and every run on a finite world (the live ground truth scores HGPO there).
IMPLIED_WHEN_ABSENT = {"estimator.hgpo_rule": ({"estimator.name": ("hgpo",),
                                                "env.id": ("FiniteRooms-v0", "FiniteCraft-v0")}, "start_marker")}


@dataclass
class RunStatus:
    status: str | None  # None: no run.json yet
    iterations_done: int
    iterations_total: int | None


def git_commit(repo: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit hash, working tree has uncommitted changes) of the repo, or (None, None) outside git."""
    repo = repo or Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return head, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and key != "env.kwargs":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _defaults() -> dict:
    return _flatten(config_to_dict(RunConfig()))


def config_differences(saved: dict, new: dict, ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """Dotted keys whose values differ between two config dicts, minus the ``ignore`` prefixes.

    A key the saved config lacks is a setting added to the code after the run was made: it is no difference when
    the new config holds its default, which keeps the behaviour the run had (e.g. ``env.train_pool: null``). A key
    only the saved config holds is a removed setting (``trainer.config.REMOVED_KEYS``): no difference either. Except
    a key of ``IMPLIED_WHEN_ABSENT``, whose default changed what such runs computed: the saved run had the old value
    (an HGPO run, or any run on a finite world, saved without ``estimator.hgpo_rule`` used ``start_marker``)."""
    a, b = _flatten(saved), _flatten(new)
    for k, (when, implied) in IMPLIED_WHEN_ABSENT.items():
        if k not in a and any(a.get(w) in values for w, values in when.items()):
            a[k] = implied
    defaults = None
    diff = []
    for k in sorted(set(a) | set(b)):
        if any(k == p or (p.endswith(".") and k.startswith(p)) for p in ignore):
            continue
        if k not in a and k in b:
            defaults = _defaults() if defaults is None else defaults
            if k in defaults and b[k] == defaults[k]:
                continue
        if k in a and k not in b and k in REMOVED_KEYS:
            continue
        if a.get(k) != b.get(k):
            diff.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return diff


class RunFolder:
    """The run folder of ``cfg`` (``cfg.run_dir(root)``). Only rank 0 writes.

    ``restart_how`` is how the refusals say to start the folder over, for the command the user ran:
    ``experiments.train`` takes ``--restart``; a sweep or study names the run's own ``experiments.train`` command."""

    restart_how = "rerun with --restart"

    def __init__(self, cfg: RunConfig, root: str | Path = "results/runs", rank: int = 0):
        self.cfg = cfg
        self.path = cfg.run_dir(root)
        self.rank = rank

    # ------------------------------------------------------------------------------------------- paths
    @property
    def info_path(self) -> Path:
        return self.path / "run.json"

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def append_grouping_scan(self, record: dict) -> None:
        """One line of ``grouping_scan.jsonl`` (rank 0; a resumed run appends the iterations it redoes again, and a
        reader keeps the last line of each iteration)."""
        if self.rank != 0:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / "grouping_scan.jsonl", "a") as fh:
            fh.write(json.dumps(record, allow_nan=True) + "\n")

    @property
    def epsilon_path(self) -> Path:
        return self.path / "epsilon.json"

    def read_epsilon(self) -> dict | None:
        """The calibration record of ``estimator.epsilon: auto`` (``epsilon.json``), or None."""
        try:
            return json.loads(self.epsilon_path.read_text())
        except (OSError, ValueError):
            return None

    def write_epsilon(self, record: dict, table: str) -> None:
        """Write ``epsilon.json`` (atomically) and ``epsilon_scan.md`` (rank 0)."""
        if self.rank != 0:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.epsilon_path, json.dumps(record, indent=1, allow_nan=True) + "\n")
        (self.path / "epsilon_scan.md").write_text(table + "\n")

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def eval_path(self) -> Path:
        return self.path / "eval.jsonl"

    # ------------------------------------------------------------------------------------------ status
    def read_info(self) -> dict:
        try:
            info = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def status(self) -> RunStatus:
        info = self.read_info()
        try:
            done = int(info.get("iterations_done", 0) or 0)
        except (TypeError, ValueError):
            done = 0
        return RunStatus(info.get("status"), done, info.get("iterations_total"))

    def is_finished(self) -> bool:
        """Finished with at least ``trainer.iterations`` iterations: nothing left to do."""
        st = self.status()
        return st.status == "finished" and st.iterations_done >= self.cfg.trainer.iterations

    def check_location(self) -> None:
        """The folder's path can be a run folder: not an existing file, and text that can be written down."""
        text = str(self.path)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"output_dir={text.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8: "
                              "choose a folder name in UTF-8 (config.yaml and run.json record it)") from None
        p = self.path
        while p != p.parent:  # the folder or one of its parents is a file
            if p.exists() and not p.is_dir():
                key = "output_dir" if self.cfg.output_dir else "the run folder"
                raise ConfigError(f"{key}: {p} is a file, not a folder: choose output_dir=<a folder>")
            p = p.parent

    def lock(self) -> FolderLock:
        """Hold ``<run>/.lock`` for this process (``RunFolderError`` naming the holder when another has it)."""
        lock = FolderLock(self.path, "run folder")
        try:
            return lock.acquire()
        except LockHeld as e:
            raise RunFolderError(str(e)) from None

    def _checkpoint_config(self) -> tuple[dict | None, Path | None]:
        """The config copy in the newest checkpoint that has one (``state.json`` extra), and that checkpoint."""
        from .checkpoint import list_checkpoints

        for ck in reversed(list_checkpoints(self.checkpoints)):
            try:
                saved = json.loads((ck / "state.json").read_text()).get("extra", {}).get("config")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(saved, dict):
                return saved, ck
        return None, None

    def holds_progress(self) -> bool:
        """The folder records work a restart would lose: iterations in ``run.json``, log lines, or checkpoints."""
        from .checkpoint import list_checkpoints

        if self.status().iterations_done > 0 or list_checkpoints(self.checkpoints):
            return True
        for p in (self.metrics_path, self.eval_path):
            try:
                if p.stat().st_size > 0 and not self.info_path.exists():
                    return True
            except OSError:
                pass
        return False

    def _identity(self) -> str:
        info = self.read_info()
        keys = ("env", "model", "estimator", "seed", "status", "iterations_done")
        return ", ".join(f"{k}={info[k]}" for k in keys if k in info) or "run.json is missing or unreadable too"

    def check_compatible(self) -> None:
        """A resuming invocation must not change the experiment (``ConfigError`` listing the differences).

        The saved experiment is ``config.yaml``, or the config copy of the newest checkpoint when that file is
        missing or unreadable; a folder holding progress with neither is refused (``RunFolderError``)."""
        if not self.cfg.trainer.resume:
            return
        saved, problem = None, None
        if self.config_path.exists():
            try:
                saved = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
                if not isinstance(saved, dict):
                    problem = f"{self.config_path} holds no mapping"
                    saved = None
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
                problem = f"{self.config_path} is unreadable ({type(e).__name__}: {str(e).splitlines()[0]})"
        else:
            problem = f"{self.config_path} is missing"
        source = self.config_path
        if saved is None:
            if not self.holds_progress():
                return  # nothing to protect: the folder is (re)started and config.yaml written
            saved, ck = self._checkpoint_config()
            if saved is None:
                raise RunFolderError(
                    f"{problem}, and no checkpoint holds a copy of the config, so it is unknown which experiment the "
                    f"run folder {self.path} holds ({self._identity()}); it is neither resumed nor reported finished "
                    "under this command's config. Choose: restore config.yaml (from a backup or by rerunning the "
                    f"original command elsewhere and copying it) and rerun; or {self.restart_how} to start the folder "
                    "over (its logs move to restarted_<date>/); or set output_dir=<folder> / variant=<name> for a "
                    "new run")
            source = ck / "state.json"
        diff = config_differences(saved, config_to_dict(self.cfg))
        if diff:
            raise ConfigError(
                f"the run folder {self.path} holds a run with a different config ({'; '.join(diff[:8])}"
                f"{' ...' if len(diff) > 8 else ''}; saved config: {source}), because a folder holds one experiment: "
                f"set `variant=<name>` or `output_dir=<folder>` for a new run, or {self.restart_how} to start this "
                "one over"
            )

    def checkpoint_bytes(self) -> int | None:
        """Bytes of the newest complete checkpoint (from its manifest), or None without one."""
        from .checkpoint import list_checkpoints

        for ck in reversed(list_checkpoints(self.checkpoints)):
            try:
                files = json.loads((ck / "manifest.json").read_text())["files"]
                return int(sum(v["size"] if isinstance(v, dict) else v for v in files.values()))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None

    def no_checkpoint_error(self, reason: str) -> RunFolderError:
        """The refusal for a folder that holds progress but no usable checkpoint (``reason`` says why)."""
        st = self.status()
        return RunFolderError(
            f"the run folder {self.path} holds a run ({self._identity()}) but no usable checkpoint ({reason}); "
            "resuming would start it over and overwrite its logs, so nothing was changed. Choose: restore the "
            f"checkpoints/ folder and rerun the same command; or {self.restart_how} to start over (the old logs "
            f"move to {self.path}/restarted_<date>/); or set output_dir=<folder> for a new run"
            + (f" (the logs cover {st.iterations_done} iteration(s))" if st.iterations_done else ""))

    def check_resumable(self, world_size: int = 1) -> None:
        """Before compute (``RunFolderError`` otherwise): a folder that holds progress holds a complete-looking
        checkpoint to resume from; the newest one was written by ``world_size`` ranks with this run's ZeRO stage;
        and the logs hold what it covers (``check_logs_cover``). Whether it is usable (checksums) is checked when it
        is loaded."""
        from .checkpoint import list_checkpoints

        if not self.cfg.trainer.resume:
            return
        found = list_checkpoints(self.checkpoints)
        if not found:
            if not self.holds_progress():
                return
            raise self.no_checkpoint_error("no checkpoints/ folder" if not self.checkpoints.exists()
                                           else "no complete checkpoint in checkpoints/")
        for ck in reversed(found):
            try:
                state = _checked_state(ck)
                iteration = int(state["iteration"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable or not the saved one: the loader falls back past it, with a warning naming it
            saved = (state.get("world_size"), state.get("zero_stage"))
            if saved != (world_size, self.cfg.trainer.zero_stage):
                raise self.world_mismatch_error(saved[0], saved[1], world_size, ck)
            extra = state.get("extra") if isinstance(state.get("extra"), dict) else {}
            evals = extra.get("evals_done") or []
            tasks = extra.get("eval_tasks")
            if isinstance(tasks, dict) and not any(isinstance(n, int) and n > 0 for n in tasks.values()):
                evals = []  # evaluations without tasks write no eval.jsonl line
            self.check_logs_cover(iteration, evals, ck)
            return

    def world_mismatch_error(self, saved_world, saved_stage, world_size: int, ck: Path) -> RunFolderError:
        """The refusal for a checkpoint written by another rank count or ZeRO stage than this run's."""
        stage = self.cfg.trainer.zero_stage
        how = "a plain python process" if saved_world == 1 else \
            f"torchrun --nproc_per_node {saved_world} (or deepspeed --num_gpus {saved_world}) -m experiments.train ..."
        return RunFolderError(
            f"this folder's checkpoint ({ck}) was written by {saved_world} rank(s) with ZeRO stage {saved_stage}; this "
            f"run has {world_size} rank(s) with ZeRO stage {stage}, and a checkpoint resumes only on the rank count "
            f"and stage that wrote it (each rank's optimizer state is its own file). Relaunch with {saved_world} "
            f"rank(s) ({how})" + (f" and trainer.zero_stage={saved_stage}" if saved_stage != stage else "")
            + f" to resume it; or {self.restart_how} to discard it and start over (the old logs move to "
            f"{self.path}/restarted_<date>/); or set output_dir=<folder> for a new run. Nothing was changed")

    def check_logs_cover(self, iteration: int, evals_done: list, ck: Path) -> None:
        """The logs a resume from checkpoint ``iteration`` keeps: ``metrics.jsonl`` holds iterations 1..k (and 0 when
        there was an evaluation before training), ``eval.jsonl`` the evaluations the checkpoint lists
        (``RunFolderError`` with the choices otherwise): resuming would end a run whose logs miss them."""
        from .logging import read_jsonl_report

        evals = {int(i) for i in evals_done if isinstance(i, (int, float)) and 0 <= int(i) <= iteration}
        start = {0} if 0 in evals_done else set()  # the line of the evaluation before training
        problems = []
        for path, wanted, what in ((self.metrics_path, set(range(1, iteration + 1)) | start, "iteration"),
                                   (self.eval_path, evals, "evaluation at iteration")):
            rows, _ = read_jsonl_report(path)
            have = set()
            for r in rows:
                try:
                    have.add(int(r.get("iteration")))
                except (TypeError, ValueError):
                    pass
            missing = sorted(wanted - have)
            if missing and path.exists():
                problems.append(f"{path} has no line for {what}(s) {_spans(missing)}")
            elif missing:
                problems.append(f"{path} is missing (it should hold {what}(s) {_spans(missing)})")
        if problems:
            raise RunFolderError(
                f"the run folder {self.path} has a checkpoint of iteration {iteration} ({ck.name}), but its logs lack "
                f"what that checkpoint covers: {'; '.join(problems)}. Resuming would finish a run whose logs miss "
                "those lines, so nothing was changed. Choose: restore the logs (from a backup, or from a "
                "restarted_<date>/ folder left by a restart that was stopped) and rerun the same command; or "
                f"{self.restart_how} to start over (the old logs move to {self.path}/restarted_<date>/); or set "
                "output_dir=<folder> for a new run")

    # ----------------------------------------------------------------------------------------- writing
    def start_fresh(self) -> Path | None:
        """``--restart`` (``trainer.resume=false``): delete the previous run's checkpoints, then move its logs to
        ``restarted_<date>/`` (rank 0). Returns that sub-folder, or None when there was nothing to keep.

        In that order, so that no kill leaves checkpoints without their logs: ``checkpoints/`` is first renamed
        (one atomic step) and deleted; a kill after that leaves logs without a checkpoint, which a resume refuses
        with the choices, and a second ``--restart`` completes."""
        if self.rank != 0 or not self.path.exists():
            return None
        for old in self.path.glob(f"{_DELETING}*"):  # left by a restart that was stopped
            shutil.rmtree(old, ignore_errors=True)
        if self.checkpoints.exists():
            trash = self.path / f"{_DELETING}{os.getpid()}"
            os.replace(self.checkpoints, trash)
            shutil.rmtree(trash, ignore_errors=True)
        present = [n for n in _ARCHIVED if (self.path / n).exists()]
        present += [p.name for p in self.path.glob("train.rank*.log")]
        dest = None
        if present:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            dest = self.path / f"restarted_{stamp}"
            k = 1
            while dest.exists():
                k += 1
                dest = self.path / f"restarted_{stamp}_{k}"
            dest.mkdir()
            for name in present:
                os.replace(self.path / name, dest / name)
        return dest

    def write_config(self) -> None:
        if self.rank == 0:
            save_config(self.cfg, self.config_path)

    def write_info(self, status: str, iterations_done: int, *, world_size: int = 1, error: str | None = None,
                   resumed_from: int | None = None) -> None:
        """Write ``run.json`` atomically (rank 0)."""
        if self.rank != 0:
            return
        info = self.read_info()
        if "git_commit" not in info or status == "running":
            info["git_commit"], info["git_dirty"] = git_commit()
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        info.update({
            "env": self.cfg.env_name,
            "env_id": self.cfg.env.id,
            "model": self.cfg.model.short_name,
            "model_path": self.cfg.model.path,
            "method": self.cfg.method,
            "estimator": self.cfg.estimator.name,
            "seed": self.cfg.seed,
            "experiment": self.cfg.experiment,
            "run_name": self.cfg.run_name,
            "status": status,
            "iterations_done": int(iterations_done),
            "iterations_total": int(self.cfg.trainer.iterations),
            "world_size": int(world_size),
            "host": socket.gethostname(),
            "command": portable_text(" ".join(["python", *sys.argv])),
            "updated": now,
        })
        info.setdefault("started", now)
        if resumed_from is not None:
            info.setdefault("resumed_from", []).append(int(resumed_from))
        if error is not None:
            info["error"] = error
        else:
            info.pop("error", None)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.info_path, json.dumps(info, indent=1) + "\n")
