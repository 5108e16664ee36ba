"""Expand presets x estimators x seeds (x ablation grids) into runs of ``experiments.train`` and run them.

    python -m experiments.sweep --config configs/cpu/textcraft_tiny.yaml --estimators grpo,gigpo --seeds 0,1 --dry-run
    python -m experiments.sweep --config configs/paper/alfworld_qwen2.5-7b.yaml --nproc 4 \\
        --estimators grpo,gigpo,hgpo,bipace_q --seeds 0,1,2 model.path=/models/Qwen2.5-7B-Instruct
    python -m experiments.sweep --config configs/cpu/textcraft_tiny.yaml --estimators bipace_q \\
        --grid estimator.epsilon=0.02,0.05,0.10 --grid estimator.pace_fallback=either,none --jobs 2

One run = one preset (environment and model), estimator, grid point and seed, i.e. one
``python -m experiments.train --config <preset> estimator.name=<e> seed=<k> [variant=<v> <grid keys>] [overrides]``.
Every run's config is loaded and checked before anything starts (a bad key fails the whole sweep, naming the
run). Runs whose folder is finished are skipped; unfinished ones resume (``experiments.train`` resumes from the
newest checkpoint), so an interrupted sweep continues where it stopped when started again with the same command.

* Order: preset, then seed, then grid point, then estimator: a sweep stopped half-way holds the early seeds of
  every method rather than every seed of the first methods [choice].
* Ablation grids (``--grid key=v1,v2``) give each run a ``variant`` (its method folder and report name):
  ``<estimator>_<short><value>`` per grid key, numbers glued on (``bipace_q_eps0.10``, ``bigpo_layer-8``),
  words after a hyphen (``bipace_v_key-first_tokens``, ``bipace_q_fallback-none``); short names in
  ``GRID_SHORT_NAMES``, otherwise the key's last part [choice].
* ``--jobs N`` runs N at a time as subprocesses, each with ``OMP_NUM_THREADS`` = cores / N unless you set it,
  and on GPUs with its own ``--nproc`` devices (``CUDA_VISIBLE_DEVICES`` by job slot).
* Each run's console output goes to ``<run folder>/console.log``; each attempt's exit status, wall-clock and
  CPU seconds (``os.wait4`` rusage of the run and its children) are appended to ``<runs root>/sweep.jsonl``.
* Ctrl-C (or SIGTERM) is passed on to the running runs as SIGINT: they save nothing new, mark themselves
  ``interrupted`` and resume from their last checkpoint next time. If the sweep itself is killed, its runs get
  SIGINT from the kernel (``PR_SET_PDEATHSIG``), so no orphan keeps writing a run folder. A run whose
  ``run.json`` says it finished every iteration counts as finished whatever its exit status (a signal can reach it
  while it closes its logs); ``sweep.jsonl`` keeps the true exit status.

* A sweep holds ``<runs root>/.lock`` while it runs (``common.locks``): a second sweep (or study) on the same runs
  root starts nothing and exits 2, naming the first one's PID and command. Each run also locks its own folder.

Exit status: 0 every run finished (or was already), 1 some run failed (named, with its log), 2 a config error
or a runs root another sweep is using (nothing started), 130 interrupted.
"""
from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common.fsio import ConsoleCopy, SettledLines
from envs.paths import portable_text

__all__ = ["RunSpec", "GRID_SHORT_NAMES", "parse_grid", "variant_name", "expand", "plan", "run_sweep", "main"]

PROG = "python -m experiments.sweep"
DEFAULT_RUNS_ROOT = "results/runs"

#: short names of common ablation keys in variant names [choice]
GRID_SHORT_NAMES = {
    "estimator.epsilon": "eps",
    "model.hidden_layer": "layer",
    "estimator.pace_key": "key",
    "estimator.pace_fallback": "fallback",
    "estimator.pace_norm": "pacenorm",
    "estimator.centroid": "centroid",
    "estimator.norm_mode": "norm",
    "estimator.step_weight": "w",
    "estimator.hgpo_alpha": "alpha",
    "trainer.lr": "lr",
}

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class SweepError(ValueError):
    """A sweep argument or one of its runs' configs is wrong (the message names it)."""


# ------------------------------------------------------------------------------------------------ expansion
@dataclass
class RunSpec:
    """One run of the sweep: a preset plus ``key=value`` overrides, and where its folder is."""

    config: str
    overrides: list[str]
    env: str
    model: str
    method: str
    estimator: str
    seed: int
    iterations: int
    run_dir: Path
    status: str = "new"  # new | resume | finished
    detail: str = ""
    iterations_done: int = 0  # saved in the run folder (set by ``plan``)

    @property
    def label(self) -> str:
        return f"{self.env}/{self.model}/{self.method}/seed_{self.seed}"

    def command(self, launcher: list[str]) -> list[str]:
        return [*launcher, "experiments.train", "--config", self.config, *self.overrides]


def _split_values(text: str) -> list[str]:
    """``a,b,[c,d]`` -> ``['a', 'b', '[c,d]']`` (commas inside brackets stay)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [v for v in out if v]


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """``['estimator.epsilon=0.05,0.1']`` -> ``[('estimator.epsilon', ['0.05', '0.1'])]``."""
    grid = []
    for item in items or ():
        if "=" not in item:
            raise SweepError(f"--grid {item!r} must look like key=v1,v2 (e.g. estimator.epsilon=0.05,0.10)")
        key, raw = (x.strip() for x in item.split("=", 1))
        values = _split_values(raw)
        if not key or not values:
            raise SweepError(f"--grid {item!r} needs a key and at least one value")
        if key in ("estimator.name", "seed", "variant", "output_dir"):
            raise SweepError(f"--grid {key}=... is set by the sweep itself: use --estimators / --seeds instead")
        if key in (k for k, _ in grid):
            raise SweepError(f"--grid {key} is given twice: put all its values in one --grid")
        grid.append((key, values))
    return grid


def variant_name(estimator: str, point: list[tuple[str, str]]) -> str:
    """Method folder of a grid point: ``bipace_q`` + ``[('estimator.epsilon', '0.10')]`` -> ``bipace_q_eps0.10``."""
    parts = [estimator]
    for key, value in point:
        short = GRID_SHORT_NAMES.get(key, key.rsplit(".", 1)[-1])
        v = str(value).strip()
        part = f"{short}{v}" if _NUMBER.match(v) else f"{short}-{v}"
        parts.append(re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]+", "-", part)).strip("-"))
    return "_".join(parts)


def _csv(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _seeds(text: str) -> list[int]:
    out = []
    for part in _csv(text):
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        if m:  # 0-2 = 0,1,2
            out.extend(range(int(m[1]), int(m[2]) + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise SweepError(f"--seeds {text!r}: {part!r} is not a seed (give e.g. 0,1,2 or 0-2)")
    if not out:
        raise SweepError("--seeds is empty: give e.g. 0,1,2")
    return out


def expand(configs: list[str], estimators: list[str] | None, seeds: list[int], grid=(), overrides=(),
           runs_root: str | Path = DEFAULT_RUNS_ROOT) -> list[RunSpec]:
    """Every run of the sweep, its config loaded and checked, in launch order (see the module docstring).

    ``estimators`` None keeps each preset's ``estimator.name``. Raises ``SweepError`` naming the run whose config
    is wrong, or two runs that would share a folder.
    """
    from trainer.config import ConfigError, load_config
    from warmstart.config import from_run_config

    runs_root = Path(runs_root)
    custom_root = runs_root != Path(DEFAULT_RUNS_ROOT)
    keys = [k for k, _ in grid]
    points = [list(zip(keys, combo)) for combo in itertools.product(*[v for _, v in grid])] if grid else [[]]
    specs: list[RunSpec] = []
    seen: dict[Path, str] = {}
    for config in configs:
        if not Path(config).is_file():
            raise SweepError(f"--config {config!r} does not exist: pass a preset under configs/")
        for seed in seeds:
            for point in points:
                for est in (estimators or [None]):
                    ov = list(overrides)
                    if est is not None:
                        ov.append(f"estimator.name={est}")
                    ov += [f"{k}={v}" for k, v in point]
                    ov.append(f"seed={seed}")
                    try:
                        cfg = load_config(config, ov)
                        from_run_config(cfg)
                        if point:
                            cfg = load_config(config, ov + [f"variant={variant_name(cfg.estimator.name, point)}"])
                            ov.append(f"variant={cfg.variant}")
                    except ConfigError as e:
                        where = " ".join([config, *ov])
                        raise SweepError(f"run [{where}]: config error: {e}") from e
                    run_dir = cfg.run_dir(runs_root)
                    if custom_root and not cfg.output_dir:
                        ov.append(f"output_dir={run_dir}")
                    spec = RunSpec(config=config, overrides=ov, env=cfg.env_name, model=cfg.model.short_name,
                                   method=cfg.method, estimator=cfg.estimator.name, seed=cfg.seed,
                                   iterations=cfg.trainer.iterations, run_dir=run_dir)
                    key = run_dir.resolve()
                    if key in seen:
                        raise SweepError(f"runs [{seen[key]}] and [{' '.join(ov)}] would share the folder {run_dir}: "
                                         "give the grid keys distinct values or set variant names")
                    seen[key] = " ".join(ov)
                    specs.append(spec)
    return specs


def _run_folder(spec: RunSpec):
    """The ``trainer.run_folder.RunFolder`` of a spec's run (its status, ``run.json``, compatibility)."""
    from trainer.config import load_config
    from trainer.run_folder import RunFolder

    folder = RunFolder(load_config(spec.config, spec.overrides), spec.run_dir.parent)  # output_dir or root/...
    folder.path = spec.run_dir
    folder.restart_how = restart_hint(spec)
    return folder


def restart_hint(spec: RunSpec) -> str:
    """How a sweep's (or study's) refusal says to start one run folder over: that run's own command with
    ``--restart`` (``experiments.train``'s flag), then the sweep again; a sweep has no flag that restarts its runs,
    which would discard every unfinished run's checkpoints at once [choice]."""
    return (f"run `{portable_text(shlex.join(spec.command(['python', '-m'])))} --restart` (this run alone; then the "
            "same sweep or study command again)")


def plan(specs: list[RunSpec]) -> list[RunSpec]:
    """Set each run's ``status``: finished (skipped), resume (a folder with progress) or new.

    Raises ``SweepError`` for a folder that holds a different experiment (``experiments.train`` would refuse it).
    """
    from trainer.config import ConfigError

    conflicts = []
    for s in specs:
        folder = _run_folder(s)
        try:
            folder.check_compatible()
        except ConfigError as e:
            conflicts.append(f"{s.label}: {e}")
            continue
        st = folder.status()
        s.iterations_done = int(st.iterations_done or 0)
        if folder.is_finished():
            s.status, s.detail = "finished", f"{st.iterations_done} iterations"
        elif st.status is not None or folder.checkpoints.exists():
            s.status, s.detail = "resume", f"{st.status or 'started'}, {st.iterations_done}/{s.iterations} saved"
        else:
            s.status, s.detail = "new", ""
    if conflicts:
        raise SweepError("some run folders hold a different experiment:\n  " + "\n  ".join(conflicts))
    return specs


# ------------------------------------------------------------------------------------------------ execution
def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class _Active:
    spec: RunSpec
    proc: subprocess.Popen
    slot: int
    log: object
    started: float
    load_start: float
    threads: str
    tee: threading.Thread | None = None


def attempt_record(spec: RunSpec, rc: int, ru, started: float, status_before: str, command: list[str],
                   **extra) -> dict:
    """One line of ``sweep.jsonl``: a run attempt's exit status, wall and CPU time (``ru``: its rusage, or None),
    iterations, start time, host and command, plus ``extra`` fields of the launcher that ran it."""
    rec = {"run": spec.label, "run_dir": str(spec.run_dir), "exit": rc, "wall_s": round(time.time() - started, 2),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2) if ru else None,
           "user_s": round(ru.ru_utime, 2) if ru else None,
           "max_rss_mb": round(ru.ru_maxrss / 1024, 1) if ru else None,
           "iterations": spec.iterations, "iterations_logged": _iterations_logged(spec.run_dir),
           "status_before": status_before}
    rec.update(extra)
    rec.update(started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), host=socket.gethostname(),
               command=portable_text(shlex.join(command)))
    return rec


def _iterations_logged(run_dir: Path) -> int:
    """Highest training iteration in ``metrics.jsonl`` (0 if none), read cheaply from the file's end."""
    p = run_dir / "metrics.jsonl"
    try:
        with p.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return 0
    for line in reversed(tail):
        m = re.match(r'\{"iteration": (\d+)', line)
        if m:
            return int(m[1])
    return 0


def _child_env(slot: int, jobs: int, nproc: int | None, gpus: list[str] | None, tee: bool = False) -> dict:
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if not tee:  # the run writes straight to console.log: no progress-bar frames from transformers or the Hub
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    if gpus is not None and nproc:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[slot * nproc:(slot + 1) * nproc])
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # each run sets up its own process group
    return env


def _tee(src, log, out) -> None:
    settled = SettledLines()  # console.log keeps the progress bars' last frames
    screen = ConsoleCopy(out)  # a terminal gets the bars as they are drawn, a redirected output settled lines
    for chunk in iter(lambda: src.read1(4096) if hasattr(src, "read1") else src.read(4096), b""):
        log.write(settled.feed(chunk))
        log.flush()
        screen(chunk)
    log.write(settled.close())
    log.flush()
    screen.close()


def run_sweep(specs: list[RunSpec], *, launcher: list[str], jobs: int = 1, runs_root: Path,
              nproc: int | None = None, gpus: list[str] | None = None, tee: bool = False,
              progress: bool = True, fail_fast: bool = False, deadline: float | None = None,
              say=print) -> dict:
    """Run the specs whose status is not ``finished``, ``jobs`` at a time. Returns a summary dict
    (``finished``, ``failed``, ``interrupted``, ``skipped``: lists of labels; ``timings``: one dict per attempt;
    ``refused``: why nothing started, when another sweep holds ``runs_root``)."""
    todo = [s for s in specs if s.status != "finished"]
    skipped = [s.label for s in specs if s.status == "finished"]
    runs_root.mkdir(parents=True, exist_ok=True)
    record = runs_root / "sweep.jsonl"
    summary = {"finished": [], "failed": [], "interrupted": [], "skipped": skipped, "timings": [],
               "not_started": []}
    if not todo:
        return summary
    from common.locks import FolderLock, LockHeld

    try:  # one sweep per runs root at a time, held until this function returns
        lock = FolderLock(runs_root, "sweep folder").acquire()
    except LockHeld as e:
        summary["refused"] = str(e)
        summary["not_started"] = [s.label for s in todo]
        return summary
    try:
        return _run_locked(specs, todo, summary, record, launcher=launcher, jobs=jobs, nproc=nproc, gpus=gpus,
                           tee=tee, progress=progress, fail_fast=fail_fast, deadline=deadline, say=say)
    finally:
        lock.release()


#: seconds between the plain progress lines a sweep writes when its stderr is not a terminal
PLAIN_PROGRESS_S = 60.0


def _run_locked(specs, todo, summary, record, *, launcher, jobs, nproc, gpus, tee, progress, fail_fast, deadline,
                say) -> dict:
    bar = None
    total_it = sum(s.iterations for s in specs)
    done_it = sum(s.iterations for s in specs if s.status == "finished")
    # on a terminal a progress bar; in a log file (nohup, Slurm) a plain line a minute, no carriage-return frames
    plain_every = None if not progress or tee or sys.stderr.isatty() else PLAIN_PROGRESS_S
    last_plain = time.time()
    if progress and not tee and plain_every is None:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_it, initial=done_it + sum(_iterations_logged(s.run_dir) for s in todo),
                   desc=f"sweep ({len(todo)} runs to do)", unit="it", dynamic_ncols=True, file=sys.stderr,
                   mininterval=0.1)

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    active: dict[int, _Active] = {}
    free_slots = list(range(jobs))
    queue = list(todo)
    n_total = len(todo)
    n_started = 0
    try:
        while queue or active:
            # launch
            while (queue and free_slots and stop["signal"] is None
                   and not (fail_fast and summary["failed"])
                   and not (deadline is not None and time.time() >= deadline)):
                spec = queue.pop(0)
                slot = free_slots.pop(0)
                spec.run_dir.mkdir(parents=True, exist_ok=True)
                cmd = spec.command(launcher)
                log = open(spec.run_dir / "console.log", "ab")
                log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n".encode())
                log.flush()
                n_started += 1
                msg = (f"[sweep] {n_started}/{n_total} start {spec.label}"
                       f"{' (' + spec.detail + ')' if spec.status == 'resume' else ''}; log "
                       f"{spec.run_dir / 'console.log'}")
                (bar.write(msg) if bar else say(msg))
                env = _child_env(slot, jobs, nproc, gpus, tee)
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if tee else log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True, preexec_fn=_set_pdeathsig)
                act = _Active(spec, proc, slot, log, time.time(), os.getloadavg()[0], env["OMP_NUM_THREADS"])
                if tee:
                    act.tee = threading.Thread(target=_tee, args=(proc.stdout, log, sys.stdout.buffer), daemon=True)
                    act.tee.start()
                active[proc.pid] = act
            if not active:
                break
            # forward a stop request once
            if stop["signal"] is not None and not stop.get("forwarded"):
                stop["forwarded"] = True
                (bar.write if bar else say)("[sweep] stopping: passing SIGINT to the running runs (they resume "
                                            "from their last checkpoint when you rerun the same command)")
                for a in active.values():
                    try:
                        os.killpg(a.proc.pid, signal.SIGINT)
                    except ProcessLookupError:
                        pass
            # reap
            reaped = False
            for pid in list(active):
                try:
                    got, status, ru = os.wait4(pid, os.WNOHANG)
                except ChildProcessError:
                    got, status, ru = pid, 0, None
                if got == 0:
                    continue
                reaped = True
                a = active.pop(pid)
                a.proc.returncode = rc = os.waitstatus_to_exitcode(status) if ru is not None else 1
                if a.tee is not None:
                    a.tee.join(timeout=5)
                a.log.close()
                free_slots.append(a.slot)
                free_slots.sort()
                t = attempt_record(a.spec, rc, ru, a.started, a.spec.status, a.spec.command(launcher),
                                   jobs=jobs, omp_threads=a.threads, load_avg_start=round(a.load_start, 2),
                                   load_avg_end=round(os.getloadavg()[0], 2))
                summary["timings"].append(t)
                with record.open("a") as f:
                    f.write(json.dumps(t) + "\n")
                if rc == 0:
                    summary["finished"].append(a.spec.label)
                    word = "finished"
                elif _run_folder(a.spec).is_finished():  # a signal reached it while it closed its logs
                    summary["finished"].append(a.spec.label)
                    word = f"finished (exit {rc} after the run had finished)"
                elif rc in (130, 143, -signal.SIGINT) or stop["signal"] is not None:  # 143: SIGTERM, caught
                    summary["interrupted"].append(a.spec.label)
                    word = f"interrupted (exit {rc}; resumable)"
                else:
                    summary["failed"].append(a.spec.label)
                    word = f"FAILED (exit {rc}; see {a.spec.run_dir / 'console.log'})"
                msg = f"[sweep] {word}: {a.spec.label} in {t['wall_s']:.0f} s wall, {t['cpu_s']} s CPU"
                (bar.write(msg) if bar else say(msg))
            plain_due = plain_every is not None and time.time() - last_plain >= plain_every
            if bar is not None or plain_due:
                cur = done_it + sum(s.iterations for s in todo if s.label in summary["finished"])
                cur += sum(_iterations_logged(s.run_dir) for s in todo
                           if s.label not in summary["finished"])
                running = ", ".join(f"{a.spec.method}/s{a.spec.seed} {_iterations_logged(a.spec.run_dir)}/"
                                    f"{a.spec.iterations}" for a in active.values())
                if bar is not None:
                    bar.n = min(cur, total_it)
                    bar.set_postfix_str(running[:80], refresh=False)
                    bar.refresh()
                else:
                    print(f"[sweep] {min(cur, total_it)}/{total_it} iterations; running: {running or 'none'}",
                          file=sys.stderr, flush=True)
                    last_plain = time.time()
            if not reaped:
                time.sleep(0.5)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        if bar is not None:
            bar.close()
    summary["not_started"] = [s.label for s in queue]
    if stop["signal"] is not None:
        summary["stopped_by_signal"] = int(stop["signal"])
    return summary


# ------------------------------------------------------------------------------------------------ command line
def build_parser(prog: str = PROG, extensions=()) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Run folders: <runs-root>/<env>/<model>/<method>/seed_<k>/ "
                                        "(trainer/README.md).")
    ap.add_argument("--config", nargs="+", required=True, metavar="PRESET",
                    help="one preset per environment/model (configs/...yaml); each is crossed with the rest")
    ap.add_argument("--estimators", default=None,
                    help="comma-separated registry keys (grpo,gigpo,bigpo,bipace_v,bipace_q,hgpo,rloo); default: "
                         "each preset's estimator.name")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds or a range: 0,1,2 or 0-2 (default 0)")
    ap.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="ablation axis (repeatable); every run gets a variant name, e.g. bipace_q_eps0.10")
    ap.add_argument("--runs-root", default=DEFAULT_RUNS_ROOT,
                    help=f"root of the run folders (default {DEFAULT_RUNS_ROOT}; other roots pass output_dir)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (subprocesses; default 1)")
    ap.add_argument("--nproc", type=int, default=None,
                    help="processes (GPUs) per run: launches `torchrun --standalone --nproc_per_node N`")
    ap.add_argument("--gpus", default=None,
                    help="with --jobs > 1 and --nproc: comma-separated device ids shared out by job slot "
                         "(default 0..jobs*nproc-1)")
    ap.add_argument("--launcher", default=None,
                    help="'slurm' or 'submitit-local': each run as a job (lab/slurm.py); otherwise a "
                         "command prefix that takes the module name, e.g. 'deepspeed --hostfile h --module' "
                         "(default: this Python's `-m`); deepspeed's rendezvous port is fixed (29500 unless "
                         "--master_port), so with it run one sweep job at a time")
    ap.add_argument("--dry-run", action="store_true", help="print the runs' status and commands, run nothing")
    ap.add_argument("--tee", action="store_true",
                    help="also show the runs' own output (progress bars); default with --jobs 1 on a terminal")
    ap.add_argument("--no-progress", action="store_true", help="no sweep progress bar")
    ap.add_argument("--fail-fast", action="store_true", help="start no new run after one fails")
    ap.add_argument("--max-hours", type=float, default=None,
                    help="start no new run after this many hours (running ones finish); rerun to go on")
    ap.add_argument("--keep-optimizer", action="store_true",
                    help="keep the optimizer state in a finished run's checkpoints (by default a finished run drops "
                         "it, trainer.drop_optimizer_at_end=true: ~12 B per parameter, 91 GB of a 7B checkpoint; "
                         "the HF export, RNG state and state.json stay; needed only to extend a finished run)")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides applied to every run")
    for ext in extensions:  # launchers of their own (lab/slurm.py: --launcher slurm, --status)
        ext.add_arguments(ap)
    return ap


def launcher_from_args(args) -> list[str]:
    if args.launcher and args.nproc:
        raise SweepError("give --launcher or --nproc, not both")
    if args.launcher:
        return shlex.split(args.launcher)
    if args.nproc:
        if args.nproc < 1:
            raise SweepError(f"--nproc {args.nproc} must be >= 1")
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
                "-m"]
    return [sys.executable, "-m"]


def print_plan(specs: list[RunSpec], launcher: list[str], out=None) -> None:
    out = out or sys.stdout  # looked up now (a default of sys.stdout would keep the one at import time)
    n = {k: sum(s.status == k for s in specs) for k in ("finished", "resume", "new")}
    out.write(f"# {len(specs)} runs: {n['finished']} finished (skipped), {n['resume']} to resume, {n['new']} new\n")
    for s in specs:
        if s.status == "finished":
            out.write(f"# skip (finished, {s.detail}): {s.run_dir}\n")
        else:
            tag = f"# resume ({s.detail}): {s.run_dir}" if s.status == "resume" else f"# new: {s.run_dir}"
            out.write(f"{tag}\n{shlex.join(s.command(launcher))}\n")


def main(argv: list[str] | None = None, extensions=()) -> int:
    """``extensions``: modules with ``add_arguments(parser)``, ``handles(args)`` and ``main(args, specs)`` that take
    over after the runs are expanded and planned (``experiments.sweep`` passes ``lab.slurm``)."""
    ap = build_parser(extensions=extensions)
    args = ap.parse_intermixed_args(argv)
    # `--config a.yaml key=value`: nargs='+' takes the override too; give it back
    args.overrides = [c for c in args.config if "=" in c] + args.overrides
    args.config = [c for c in args.config if "=" not in c]
    if not args.keep_optimizer:  # first, so that an explicit trainer.drop_optimizer_at_end=false wins
        args.overrides = ["trainer.drop_optimizer_at_end=true", *args.overrides]
    try:
        if args.jobs < 1:
            raise SweepError(f"--jobs {args.jobs} must be >= 1")
        launcher = launcher_from_args(args)
        gpus = _csv(args.gpus) if args.gpus else (
            [str(i) for i in range(args.jobs * args.nproc)] if args.nproc and args.jobs > 1 else None)
        bad = [o for o in args.overrides if "=" not in o]
        if bad:
            raise SweepError(f"override {bad[0]!r} must look like key=value (did you mean --config {bad[0]}?)")
        estimators = _csv(args.estimators) or None
        specs = plan(expand(args.config, estimators, _seeds(args.seeds), parse_grid(args.grid), args.overrides,
                            args.runs_root))
    except SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for ext in extensions:
        if ext.handles(args):
            return ext.main(args, specs)
    if args.dry_run:
        print_plan(specs, launcher)
        return 0
    n_skip = sum(s.status == "finished" for s in specs)
    print(f"[sweep] {len(specs)} runs: {n_skip} already finished, {len(specs) - n_skip} to run, {args.jobs} at a time; "
          f"runs under {args.runs_root}")
    tee = args.tee or (args.jobs == 1 and sys.stdout.isatty())
    deadline = time.time() + args.max_hours * 3600 if args.max_hours else None
    summary = run_sweep(specs, launcher=launcher, jobs=args.jobs, runs_root=Path(args.runs_root), nproc=args.nproc,
                        gpus=gpus, tee=tee, progress=not args.no_progress, fail_fast=args.fail_fast,
                        deadline=deadline)
    return report_summary(summary, PROG)


def report_summary(summary: dict, prog: str) -> int:
    if summary.get("refused"):
        print(f"{prog}: refused: {summary['refused']}", file=sys.stderr)
        return 2
    print(f"[sweep] done: {len(summary['finished'])} finished now, {len(summary['skipped'])} were finished, "
          f"{len(summary['failed'])} failed, {len(summary['interrupted'])} interrupted, "
          f"{len(summary['not_started'])} not started")
    for label in summary["failed"]:
        print(f"[sweep] failed: {label}", file=sys.stderr)
    if summary.get("stopped_by_signal") is not None or summary["interrupted"]:
        print(f"[sweep] interrupted: rerun the same command to resume ({prog})", file=sys.stderr)
        return 130
    if summary["failed"]:
        return 1
    if summary["not_started"]:
        print("[sweep] stopped before every run started (--max-hours / --fail-fast): rerun the same command to go "
              "on", file=sys.stderr)
        return 1 if summary["failed"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
