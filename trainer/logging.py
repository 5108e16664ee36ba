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
TensorBoard (``<run>/tb``) and W&B (offline by default: ``<run>/wandb/offline-run-*``; group = the experiment and
the method, name = method and seed, tags env/model/estimator/method/seed/commit, the resolved config attached), and
advances the bar. ``logging.metric_names=verl`` also writes, to TensorBoard and W&B, each metric that has a verl /
verl-agent counterpart under that name (``VERL_NAMES``), so that panels of the two stacks overlay. Only rank 0
logs. On resume (``start_iteration=k``) lines and events after iteration k are dropped, so that a resumed run's
log equals an uninterrupted one; lines that do not parse (a line torn by a crash) are dropped too, and reported
with their count, file and line numbers (a warning in ``train.log`` and on the console). The loop fsyncs the JSONL files
(``MetricLogger.sync``) before each checkpoint, so a power loss cannot tear a line the checkpoint covers.

W&B keeps what a run logged before a crash; a resumed run must not show iterations it went back on. So W&B's
history is kept equal to ``metrics.jsonl``: a fresh start (and ``--restart``) opens a W&B run with a new id (stored in
``<run>/wandb/run_id``); a resume from iteration k opens a new run as well, replays ``metrics.jsonl`` (already cut
to iterations <= k) into it and, offline, deletes the superseded offline run of this folder (online, the old run
stays on the server with the tag ``superseded``; W&B's ``resume_from`` rewind is not used because offline runs
cannot rewind).
"""
from __future__ import annotations

import json
import logging as _pylogging
import math
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from .config import METRIC_NAMESPACES, LoggingConfig

__all__ = ["MetricLogger", "JsonlSink", "TensorBoardSink", "WandbSink", "ProgressBar", "check_metric_names",
           "read_jsonl", "read_jsonl_report", "setup_text_log", "VERL_NAMES", "verl_named", "read_wandb_history"]

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

    def __init__(self, log_dir: str | Path, start_iteration: int = 0, rename=None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=start_iteration + 1 if start_iteration > 0 else None)
        self.rename = rename or (lambda m: m)

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        for k, v in self.rename(metrics).items():
            self.writer.add_scalar(k, float(v), global_step=int(iteration))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


#: this repo's metric -> the name verl (``dp_actor``, ``metric_utils``) or verl-agent (``episode/...``, ``val/...``)
#: logs the same quantity under (``logging.metric_names=verl``). Left out where the two differ in what they measure
#: (verl's ``critic/score`` is a per-sequence score, ``timing_s/old_log_prob`` excludes the reference pass).
VERL_NAMES = {
    "rollout/success_rate": "episode/success_rate",
    "rollout/valid_action_rate": "episode/valid_action_ratio",
    "rollout/response_tokens_mean": "response_length/mean",
    "rollout/response_truncated_frac": "response_length/clip_ratio",
    "rollout/prompt_tokens_mean": "prompt_length/mean",
    "rollout/prompt_truncated_frac": "prompt_length/clip_ratio",
    "adv/total_mean": "critic/advantages/mean",
    "loss/policy": "actor/pg_loss",
    "loss/entropy": "actor/entropy_loss",
    "loss/kl": "actor/kl_loss",
    "loss/clipfrac": "actor/pg_clipfrac",
    "loss/clipfrac_dual": "actor/pg_clipfrac_lower",
    "loss/approx_kl": "actor/ppo_kl",
    "loss/grad_norm": "actor/grad_norm",
    "loss/lr": "actor/lr",
    "perf/time_iteration": "timing_s/step",
    "perf/time_rollout": "timing_s/gen",
    "perf/time_update": "timing_s/update_actor",
}
_EVAL_SUCCESS = re.compile(r"^eval/[^/]+/(?P<split>[^/]+)/success_rate$")


def verl_named(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` plus their verl / verl-agent names: ``VERL_NAMES``, and ``eval/<env>/<split>/success_rate`` as
    ``val/<split>/success_rate`` (and as ``val/success_rate`` when the row holds one split, as verl-agent's single
    validation set)."""
    out = dict(metrics)
    for k, v in metrics.items():
        if k in VERL_NAMES:
            out[VERL_NAMES[k]] = v
    splits = {m["split"]: v for k, v in metrics.items() if (m := _EVAL_SUCCESS.match(k))}
    for split, v in splits.items():
        out[f"val/{split}/success_rate"] = v
    if len(splits) == 1:
        out["val/success_rate"] = next(iter(splits.values()))
    return out


class WandbSink:
    """Weights & Biases: project/group/name/tags from the config; ``mode=offline`` writes
    ``<dir>/wandb/offline-run-*``. ``replay``: rows of ``metrics.jsonl`` to log first (a resume; module docstring)."""

    def __init__(self, directory: str | Path, *, project: str, group: str, name: str, config: dict | None,
                 mode: str = "offline", entity: str | None = None, tags: list[str] | None = None,
                 replay: list[dict] | None = None, rename=None):
        import wandb

        directory = Path(directory)
        (directory / "wandb").mkdir(parents=True, exist_ok=True)
        id_file = directory / "wandb" / "run_id"
        old_id = id_file.read_text().strip() if replay is not None and id_file.is_file() else None
        run_id = uuid.uuid4().hex[:16]  # W&B ids: lower-case letters and digits
        self.rename = rename or (lambda m: m)
        self.run = wandb.init(dir=str(directory), project=project, group=group, name=name, config=config or {},
                              mode=mode, entity=entity, id=run_id, tags=list(tags or []),
                              settings=wandb.Settings(console="off", silent=True))
        id_file.write_text(run_id + "\n")
        if old_id and old_id != run_id:
            self.superseded(directory, old_id, mode, project, entity)
        for row in replay or []:
            metrics = {k: v for k, v in row.items() if k not in ("iteration", "time") and v is not None}
            if metrics:
                self.log(_iteration(row), metrics)

    @staticmethod
    def superseded(directory: Path, old_id: str, mode: str, project: str, entity: str | None) -> None:
        """The run that logged past the resume point: its offline folder goes (its history holds iterations the
        resumed run went back on); online, it is tagged ``superseded`` (best effort: no network, no tag)."""
        import shutil

        for d in (directory / "wandb").glob(f"offline-run-*-{old_id}"):
            shutil.rmtree(d, ignore_errors=True)
        if mode == "online":
            try:
                import wandb

                api_run = wandb.Api().run(f"{entity + '/' if entity else ''}{project}/{old_id}")
                api_run.tags = sorted(set(api_run.tags) | {"superseded"})
                api_run.update()
            except Exception as e:  # noqa: BLE001 - a tag is a courtesy; the new run is complete without it
                _pylogging.getLogger(__name__).warning("W&B: could not tag the superseded run %s: %s", old_id, e)

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.run.log({k: float(v) for k, v in self.rename(metrics).items()}, step=int(iteration))

    def close(self) -> None:
        self.run.finish()


def read_wandb_history(path: str | Path, wait_s: float = 10.0) -> list[dict]:
    """The history rows (``{"_step": i, <name>: value, ...}``) of an offline W&B run file (``run-<id>.wandb``):
    W&B's record log (a 7-byte ``:W&B`` header, then LevelDB-style 32 KiB blocks of records, each a 7-byte header
    (checksum, length, type: full / first / middle / last) and a chunk of a ``Record`` protobuf). For tests and for
    checking a run folder's W&B copy against ``metrics.jsonl``. W&B's writer process finishes the file shortly after
    ``run.finish()`` returns: this waits up to ``wait_s`` for the run's exit record, then reads what is there."""
    deadline = time.monotonic() + wait_s
    while True:
        rows, finished = _wandb_records(Path(path))
        if finished or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def _wandb_records(path: Path) -> tuple[list[dict], bool]:
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file (no ':W&B' header)")
    rows, finished, pos, buf, block = [], False, 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            kind_of = rec.WhichOneof("record_type")
            if kind_of == "history":
                rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
            finished |= kind_of == "exit"
    return rows, finished


class ProgressBar:
    """tqdm over iterations; the postfix shows the training success rate and seconds per iteration. Where the
    stream is not a terminal (a run's ``console.log``, a batch job's output) a plain line per iteration instead:
    tqdm's carriage-return frames would make one long line of a log."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", file=None):
        import sys

        self.stream = file if file is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.plain = not (callable(isatty) and isatty())
        self.total, self.desc, self.n = total, desc, initial
        self.bar = None
        if not self.plain:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="it", file=self.stream, dynamic_ncols=True)
        self._last = time.perf_counter()

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        post = {}
        if "rollout/success_rate" in metrics:
            post["success"] = f"{float(metrics['rollout/success_rate']):.3f}"
        post["s/it"] = f"{now - self._last:.1f}"
        self._last = now
        if self.plain:
            self.n = max(self.n, int(iteration))
            print(f"{self.desc}: {self.n}/{self.total} it, " + ", ".join(f"{k}={v}" for k, v in post.items()),
                  file=self.stream, flush=True)
            return
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(max(0, int(iteration) - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class MetricLogger:
    """All sinks behind one ``log(iteration, metrics)``.

    run_dir         : the run folder (``metrics.jsonl``, ``tb/``, ``wandb/`` go there)
    cfg             : ``LoggingConfig``
    run_name, group : W&B run name (method and seed) and group (the experiment and the method)
    tags            : W&B tags (the loop: env, model, estimator, method, seed, commit), plus ``logging.wandb_tags``
    config          : the resolved run config as a dict (attached to the W&B run)
    total_iterations: length of the progress bar; start_iteration: resume point (0 = fresh run)
    rank            : only rank 0 writes
    """

    def __init__(self, run_dir: str | Path, cfg: LoggingConfig | None = None, *, run_name: str = "run",
                 group: str = "default", config: dict | None = None, total_iterations: int = 0,
                 start_iteration: int = 0, rank: int = 0, progress_file=None, tags: list[str] | None = None):
        cfg = cfg or LoggingConfig()
        cfg.validate()
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.sinks: list = []
        if rank != 0:
            return
        jsonl = JsonlSink(self.run_dir / "metrics.jsonl", start_iteration, cfg.jsonl_digits)
        self.sinks.append(jsonl)
        rename = verl_named if cfg.metric_names == "verl" else None
        if cfg.tensorboard:
            self.sinks.append(TensorBoardSink(self.run_dir / "tb", start_iteration, rename=rename))
        if cfg.wandb and cfg.wandb_mode != "disabled":
            self.sinks.append(WandbSink(self.run_dir, project=cfg.wandb_project, group=group, name=run_name,
                                        config=config, mode=cfg.wandb_mode, entity=cfg.wandb_entity,
                                        tags=[*(tags or []), *cfg.wandb_tags], rename=rename,
                                        replay=read_jsonl(jsonl.path) if start_iteration > 0 else None))
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
