"""Metric logging: one interface, sinks JSONL (always), TensorBoard, W&B, and a progress bar.

Metric names live in one namespace (docs/conventions.md, "Metric namespace"), the x-axis is the training iteration:

==========================  ==================================================================
``rollout/...``             success rate, episode length, valid-action rate, response tokens
``adv/...``                 advantage statistics (mean, std, fraction zero, per term)
``group/...``               singleton rate, cluster sizes, PACE row mix
``loss/...``                policy/KL/entropy losses, clip fractions, grad norm, lr, skipped steps
``perf/...``                throughput and seconds per phase
``eval/<env>/<split>/...``  evaluation success (overall and per task family)
``groundtruth/...``         finite worlds only: every estimator against the exact advantages (groundtruth/live.py)
==========================  ==================================================================

``MetricLogger.log(iteration, metrics)`` writes one JSON line per call to ``<run>/metrics.jsonl``
(``{"iteration": i, "time": unix_seconds, <name>: value, ...}``; NaN/Inf are written as ``null``), the scalars to
TensorBoard (``<run>/tb``) and W&B (offline by default: ``<run>/wandb/offline-run-*``; group = the experiment,
name = estimator and seed, the resolved config attached), and advances the bar. Only rank 0 logs. On resume
(``start_iteration=k``) lines and events after iteration k are dropped, so that a resumed run's log equals an
uninterrupted one; lines that do not parse (a line torn by a crash) are dropped too, and reported with their
count, file and line numbers (a warning in ``train.log`` and on the console). The loop fsyncs the JSONL files
(``MetricLogger.sync``) before each checkpoint, so a power loss cannot tear a line the checkpoint covers.
"""
from __future__ import annotations

import hashlib
import json
import logging as _pylogging
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from .config import METRIC_NAMESPACES, LoggingConfig

__all__ = ["MetricLogger", "JsonlSink", "TensorBoardSink", "WandbSink", "ProgressBar", "check_metric_names",
           "read_jsonl", "read_jsonl_report", "setup_text_log"]

_EVAL_RE = re.compile(r"^eval/[^/]+/[^/]+/.+")


def check_metric_names(metrics: dict[str, Any]) -> None:
    """Raise ``ValueError`` for a name outside the namespace or a value that is not a number."""
    for k, v in metrics.items():
        if not isinstance(k, str) or not k.startswith(METRIC_NAMESPACES):
            raise ValueError(f"metric {k!r} is outside the namespace {list(METRIC_NAMESPACES)} "
                             "(see trainer/logging.py)")
        if k.startswith("eval/") and not _EVAL_RE.match(k):
            raise ValueError(f"metric {k!r}: evaluation metrics are named eval/<env>/<split>/<metric>")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"metric {k!r} has value {v!r}: metrics are numbers (convert tensors with float())")


def _finite_or_none(v: float, digits: int = 0) -> float | None:
    """``v`` as ``metrics.jsonl`` holds it: None when not finite, else a float rounded to ``digits`` significant
    digits when ``digits`` > 0."""
    v = float(v)
    if not math.isfinite(v):
        return None
    return float(f"{v:.{digits}g}") if digits > 0 else v


def read_jsonl(path: str | Path) -> list[dict]:
    """The lines of a metrics file that parse as JSON objects (a line torn by a crash is skipped)."""
    return read_jsonl_report(path)[0]


def read_jsonl_report(path: str | Path) -> tuple[list[dict], list[int]]:
    """(parsed lines, 1-based numbers of the non-empty lines that do not parse as a JSON object)."""
    out, bad = [], []
    p = Path(path)
    if not p.exists():
        return out, bad
    for i, line in enumerate(p.read_bytes().decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            out.append(row)
        else:
            bad.append(i)
    return out, bad


class JsonlSink:
    """``metrics.jsonl``: one line per iteration, flushed at once (``sync`` fsyncs it).

    ``start_iteration=k > 0`` keeps the lines of iterations <= k (a resume); ``0`` starts the file over. Which of
    the two is allowed is the run folder's decision (``trainer.run_folder``: a folder whose logs a checkpoint covers
    is never started over implicitly). ``dropped_lines`` lists the line numbers that did not parse.
    """

    def __init__(self, path: str | Path, start_iteration: int = 0, digits: int = 0):
        from common.fsio import atomic_write_text

        self.path = Path(path)
        self.digits = int(digits)
        self.dropped_lines: list[int] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_iteration > 0 and self.path.exists():
            rows, self.dropped_lines = read_jsonl_report(self.path)
            if self.dropped_lines:
                shown = ", ".join(map(str, self.dropped_lines[:10])) + (" ..." if len(self.dropped_lines) > 10 else "")
                _pylogging.getLogger("trainer.logging").warning(
                    "%s: %d line(s) do not parse (torn by a crash or edited) and are dropped on resume: line %s",
                    self.path, len(self.dropped_lines), shown)
            keep = [r for r in rows if _iteration(r) <= start_iteration]
            atomic_write_text(self.path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in keep))
        elif start_iteration == 0 and self.path.exists():
            self.path.unlink()  # a fresh run starts a fresh log
        self._f = open(self.path, "a")

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        row = {"iteration": int(iteration), "time": time.time()}
        row.update({k: _finite_or_none(v, self.digits) for k, v in metrics.items()})
        try:
            self._f.write(json.dumps(row, allow_nan=False) + "\n")
            self._f.flush()
        except OSError as e:  # a full disk: say which file
            raise OSError(e.errno, e.strerror, str(self.path)) from e

    def sync(self) -> None:
        """fsync the file: the lines written so far survive a power loss."""
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            try:
                self._f.close()
            except OSError:  # what a full disk kept in the buffer: lost with the line being written
                pass


def _iteration(row: dict) -> int:
    try:
        return int(row.get("iteration", -1))
    except (TypeError, ValueError):
        return -1


class TensorBoardSink:
    """Scalars under ``<run>/tb`` (events after ``start_iteration`` purged on resume)."""

    def __init__(self, log_dir: str | Path, start_iteration: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=start_iteration + 1 if start_iteration > 0 else None)

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, float(v), global_step=int(iteration))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Weights & Biases: project/group/name from the config; ``mode=offline`` writes ``<dir>/wandb/offline-run-*``."""

    def __init__(self, directory: str | Path, *, project: str, group: str, name: str, config: dict | None,
                 mode: str = "offline", entity: str | None = None, run_id: str | None = None):
        import wandb

        Path(directory).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(dir=str(directory), project=project, group=group, name=name, config=config or {},
                              mode=mode, entity=entity, id=run_id, resume="allow" if run_id else None,
                              settings=wandb.Settings(console="off", silent=True))

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.run.log({k: float(v) for k, v in metrics.items()}, step=int(iteration))

    def close(self) -> None:
        self.run.finish()


class ProgressBar:
    """tqdm over iterations; the postfix shows the training success rate and seconds per iteration."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", file=None):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="it", file=file, dynamic_ncols=True)
        self._last = time.perf_counter()

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        post = {}
        if "rollout/success_rate" in metrics:
            post["success"] = f"{float(metrics['rollout/success_rate']):.3f}"
        post["s/it"] = f"{now - self._last:.1f}"
        self._last = now
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(max(0, int(iteration) - self.bar.n))

    def close(self) -> None:
        self.bar.close()


class MetricLogger:
    """All sinks behind one ``log(iteration, metrics)``.

    run_dir         : the run folder (``metrics.jsonl``, ``tb/``, ``wandb/`` go there)
    cfg             : ``LoggingConfig``
    run_name, group : W&B run name (estimator and seed) and group (the experiment)
    config          : the resolved run config as a dict (attached to the W&B run)
    total_iterations: length of the progress bar; start_iteration: resume point (0 = fresh run)
    rank            : only rank 0 writes
    """

    def __init__(self, run_dir: str | Path, cfg: LoggingConfig | None = None, *, run_name: str = "run",
                 group: str = "default", config: dict | None = None, total_iterations: int = 0,
                 start_iteration: int = 0, rank: int = 0, progress_file=None):
        cfg = cfg or LoggingConfig()
        cfg.validate()
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.sinks: list = []
        if rank != 0:
            return
        self.sinks.append(JsonlSink(self.run_dir / "metrics.jsonl", start_iteration, cfg.jsonl_digits))
        if cfg.tensorboard:
            self.sinks.append(TensorBoardSink(self.run_dir / "tb", start_iteration))
        if cfg.wandb and cfg.wandb_mode != "disabled":
            run_id = hashlib.sha1(str(self.run_dir.resolve()).encode()).hexdigest()[:16]
            self.sinks.append(WandbSink(self.run_dir, project=cfg.wandb_project, group=group, name=run_name,
                                        config=config, mode=cfg.wandb_mode, entity=cfg.wandb_entity, run_id=run_id))
        if cfg.progress_bar and total_iterations > 0:
            self.sinks.append(ProgressBar(total_iterations, start_iteration, desc=run_name, file=progress_file))

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        check_metric_names(metrics)
        for s in self.sinks:
            s.log(iteration, metrics)

    def sync(self) -> None:
        """fsync the files that a checkpoint covers (``metrics.jsonl``)."""
        for s in self.sinks:
            if hasattr(s, "sync"):
                s.sync()

    def close(self) -> None:
        for s in self.sinks:
            s.close()
        self.sinks = []

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def setup_text_log(run_dir: str | Path, rank: int = 0, level: int = _pylogging.INFO) -> Path:
    """Send this package's log records (warnings about skipped steps, checkpoint fall-backs) to
    ``<run>/train.log`` (rank 0) or ``<run>/train.rank<k>.log``."""
    path = Path(run_dir) / ("train.log" if rank == 0 else f"train.rank{rank}.log")
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _pylogging.FileHandler(path)
    handler.setFormatter(_pylogging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = _pylogging.getLogger("trainer")
    root.addHandler(handler)
    root.setLevel(level)
    _pylogging.captureWarnings(True)
    _pylogging.getLogger("py.warnings").addHandler(handler)
    return path
