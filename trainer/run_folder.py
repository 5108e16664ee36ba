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
      checkpoints/                 trainer.checkpoint layout (iter_XXXXXXXX/, latest)
      tb/, wandb/                  TensorBoard events, W&B offline run (when enabled)

``run.json`` status: ``running`` (also what a killed run leaves behind), ``finished``, ``failed`` (with
``error``). A new invocation on a folder whose status is ``finished`` with every iteration done does nothing;
anything else resumes from the newest usable checkpoint (``trainer.resume``). The config of a resumed run must
equal the saved one except for the keys in ``RESUMABLE_CHANGES`` (the folder's location, logging, the length
of the run, checkpoint frequency, worker count, the warm start's settings, whose folder `sft.init_from` is compared,
the speed switches that change results only by float rounding: shared prefixes, suffix buckets, the decode step,
the source of the old log-probs):
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

from envs.paths import portable_text

from .config import REMOVED_KEYS, ConfigError, RunConfig, config_to_dict, save_config

__all__ = ["RunFolder", "RunStatus", "RESUMABLE_CHANGES", "git_commit", "config_differences"]

#: config keys (dotted prefixes) that may differ between the saved config and a resuming invocation [choice]
#: ``sft.warmstart`` describes how ``sft.init_from`` was made; the folder it names (compared) is what a run starts from
#: The speed switches (shared prefixes, suffix buckets, the decode step and its packed weights, the old log-probs'
#: source) change results
#: only by float rounding (their tests).
RESUMABLE_CHANGES = ("output_dir", "logging.", "trainer.iterations", "trainer.resume", "trainer.save_every",
                     "trainer.keep_last", "env.num_workers", "sft.warmstart", "sft.warmstart.",
                     "trainer.prefix_sharing", "trainer.suffix_buckets", "trainer.old_logprobs", "rollout.hf_decode",
                     "rollout.hf_share_prefixes", "rollout.hf_pack_weights")


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
    only the saved config holds is a removed setting (``trainer.config.REMOVED_KEYS``): no difference either."""
    a, b = _flatten(saved), _flatten(new)
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
    """The run folder of ``cfg`` (``cfg.run_dir(root)``). Only rank 0 writes."""

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
        tmp = self.epsilon_path.with_name(f"epsilon.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, indent=1, allow_nan=True) + "\n")
        os.replace(tmp, self.epsilon_path)
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
            return json.loads(self.info_path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def status(self) -> RunStatus:
        info = self.read_info()
        return RunStatus(info.get("status"), int(info.get("iterations_done", 0) or 0), info.get("iterations_total"))

    def is_finished(self) -> bool:
        """Finished with at least ``trainer.iterations`` iterations: nothing left to do."""
        st = self.status()
        return st.status == "finished" and st.iterations_done >= self.cfg.trainer.iterations

    def check_compatible(self) -> None:
        """A resuming invocation must not change the experiment (``ConfigError`` listing the differences)."""
        if not self.config_path.exists() or not self.cfg.trainer.resume:
            return
        try:
            saved = yaml.safe_load(self.config_path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            return  # unreadable: rewritten by this run
        diff = config_differences(saved, config_to_dict(self.cfg))
        if diff:
            raise ConfigError(
                f"the run folder {self.path} holds a run with a different config ({'; '.join(diff[:8])}"
                f"{' ...' if len(diff) > 8 else ''}), because a folder holds one experiment: set `variant=<name>` "
                "or `output_dir=<folder>` for a new run, or `trainer.resume=false` to start this one over"
            )

    # ----------------------------------------------------------------------------------------- writing
    def start_fresh(self) -> None:
        """``trainer.resume=false``: remove the previous run's logs and checkpoints (rank 0)."""
        if self.rank != 0 or not self.path.exists():
            return
        for name in ("metrics.jsonl", "eval.jsonl", "run.json", "train.log", "epsilon.json", "epsilon_scan.md"):
            (self.path / name).unlink(missing_ok=True)
        for name in ("checkpoints", "tb", "wandb"):
            shutil.rmtree(self.path / name, ignore_errors=True)

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
        tmp = self.info_path.with_name(f"run.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps(info, indent=1) + "\n")
        os.replace(tmp, self.info_path)
