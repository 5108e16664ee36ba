"""Sweeps as Slurm jobs, through submitit: ``python -m experiments.sweep ... --launcher slurm``.

    python -m experiments.sweep --config configs/paper/alfworld_qwen2.5-7b.yaml --estimators grpo,gigpo,bipace_q \\
        --seeds 0-2 --launcher slurm --partition gpu --gpus-per-run 4 --time 24 model.path=/models/Qwen2.5-7B
    python -m experiments.sweep ... --status          # queued / running / finished / failed, per run

Each run of the sweep (``lab.sweep.expand``) becomes one Slurm job; several are submitted as one job array. The
sweep's rules hold: a finished run is skipped, a run whose job is queued or running is not submitted twice, and an
unfinished one resumes from its newest checkpoint (``experiments.train`` does that itself). Inside its job a run is
``python -m experiments.train --config <preset> <overrides>`` (``torch.distributed.run --nproc_per_node N`` with
``--gpus-per-run N`` > 1), its output in ``<run folder>/console.log`` and each attempt's exit status and times
appended to ``<runs root>/sweep.jsonl``, as with the local launcher.

Preemption and time limits: Slurm signals the job (``USR2``, ``signal_delay_s`` before the end; submitit's
convention); the job passes SIGINT to its run, which saves nothing new and marks itself ``interrupted`` (its last
checkpoint stands), and submitit requeues the job (``scontrol requeue``), whose next start resumes the run. A job is
requeued at most ``--max-requeues`` times after a time-out (preemptions do not count), as submitit rules.
``scancel`` (SIGTERM) stops a run the same way without a requeue: the job passes SIGTERM to its run, which keeps its
last checkpoint, marks itself ``interrupted`` and exits 143; ``--status`` says ``interrupted`` and the same sweep
command resubmits and resumes it.

As clusters use it: ``--max-running K`` throttles the job array (``--array=0-N%K``); ``--setup LINE`` and
``--setup-file FILE`` put shell lines (modules, conda, exports) into the job script before the run;
``--job-python`` starts the job's Python through a container wrapper; ``--job-name`` names the jobs (default
``bipace-<preset>``), and ``<runs root>/slurm/logs/by-run/<env>.<model>.<method>.seed_<k>.out`` links each run to its
job's log. A value with a control character is refused naming its option (each becomes one line of the script).

Bookkeeping lives in ``<runs root>/slurm/``: submitit's pickles and job logs (``logs/``) and ``jobs.jsonl``, one line
per event (submitted, start, requeue, end) naming run, job id and host; ``--status`` reads it with the run folders
and asks the scheduler (``sacct`` through submitit) about jobs that are not over.

``--launcher submitit-local`` runs the same jobs through submitit's local executor (detached processes on this
machine, with the same signals, requeue and bookkeeping): a rehearsal of a Slurm sweep without a cluster, and what
the tests run.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .sweep import (
    PROG,
    RunSpec,
    SweepError,
    _run_folder,
    _set_pdeathsig,
    attempt_record,
    print_plan,
)

__all__ = ["LAUNCHERS", "SlurmRun", "add_arguments", "handles", "job_name", "main", "run_states", "setup_lines",
           "slurm_parameters"]

LAUNCHERS = ("slurm", "submitit-local")
#: scheduler states (sacct / squeue) -> the word --status shows for a run that is not finished
_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING", "SUSPENDED",
           "RESV_DEL_HOLD", "SPECIAL_EXIT"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
_OVER = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED", "REVOKED", "FINISHED", "INTERRUPTED", "NO PROCESS AND NO RESULT"}


# ------------------------------------------------------------------------------------------------ command line
def add_arguments(ap) -> None:
    """The Slurm options of ``experiments.sweep`` (``--launcher slurm`` is the sweep's own ``--launcher``)."""
    g = ap.add_argument_group("Slurm (--launcher slurm | submitit-local; lab/slurm.py)")
    g.add_argument("--partition", default=None, help="Slurm partition of every run's job")
    g.add_argument("--gpus-per-run", type=int, default=0,
                   help="GPUs per run (one node); > 1 launches torch.distributed.run --nproc_per_node N (default 0)")
    g.add_argument("--cpus-per-run", type=int, default=None, help="CPUs per run (Slurm --cpus-per-task)")
    g.add_argument("--mem-gb", type=float, default=None, help="memory per run in GB (Slurm --mem)")
    g.add_argument("--time", type=float, default=None, metavar="HOURS",
                   help="time limit of one job in hours (needed with --launcher slurm; a run that needs longer is "
                        "requeued and resumes from its checkpoint)")
    g.add_argument("--max-requeues", type=int, default=3, help="requeues after time-outs per job (default 3)")
    g.add_argument("--slurm-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. --slurm-arg account=proj --slurm-arg qos=normal")
    g.add_argument("--max-running", type=int, default=None, metavar="K",
                   help="at most K of the sweep's jobs run at once: the job array's throttle (#SBATCH "
                        "--array=0-N%%K; default: submitit's 256)")
    g.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="a shell line the job script runs before the run (repeatable, in order), e.g. --setup "
                        "'module load cuda/12.4' --setup 'source ~/venvs/bipace/bin/activate'")
    g.add_argument("--setup-file", default=None, metavar="FILE",
                   help="a file of such lines (module loads, conda activate, exports; blank lines and # comments "
                        "skipped), run before the --setup lines")
    g.add_argument("--job-python", default=None, metavar="COMMAND",
                   help="the command that starts Python inside a job, for a container: e.g. 'apptainer exec --nv "
                        "img.sif python' (default: this venv's Python); the run uses the same interpreter")
    g.add_argument("--job-name", default=None, metavar="NAME",
                   help="Slurm job name (default: bipace-<preset file name>, bipace-sweep for several presets); a "
                        "job of one run adds .<method>.s<seed>; each run's job log is also linked as "
                        "<runs root>/slurm/logs/by-run/<env>.<model>.<method>.seed_<k>.out")
    g.add_argument("--status", action="store_true",
                   help="show each run's state (queued / running / finished / failed / interrupted / not submitted) "
                        "and submit nothing")
    g.add_argument("--wait", action="store_true", help="after submitting, wait until every job is over")


def handles(args) -> bool:
    return getattr(args, "launcher", None) in LAUNCHERS or bool(getattr(args, "status", False))


def _one_line(option: str, value) -> None:
    """``value`` holds no control character: each option becomes one ``#SBATCH`` line of the job script, and a
    newline (or a carriage return, a NUL) in it would add lines of its own to the script."""
    if value is None:
        return
    bad = sorted({repr(c) for c in str(value) if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise SweepError(f"{option} {value!r} holds control character(s) {', '.join(bad)}; an sbatch option is one "
                         "line: give the value without newlines or other control characters")


def job_name(args, specs: list[RunSpec] | None = None) -> str:
    """The Slurm job name of the sweep: ``--job-name``, else ``bipace-<preset file name>`` (``bipace-sweep`` for
    several presets); a job that holds one run adds ``.<method>.s<seed>`` (an array's tasks share their name: its
    runs are told apart by their job ids in ``--status`` and the per-run log links)."""
    name = getattr(args, "job_name", None)
    if name is None:
        configs = getattr(args, "config", None) or []
        stems = sorted({Path(c).stem for c in configs})
        name = f"bipace-{stems[0]}" if len(stems) == 1 else "bipace-sweep"
    _one_line("--job-name", name)
    if not name.strip() or any(c.isspace() for c in name):
        raise SweepError(f"--job-name {name!r} must be one word without spaces (it becomes #SBATCH --job-name=...)")
    if specs is not None and len(specs) == 1:
        name = f"{name}.{specs[0].method}.s{specs[0].seed}"
    return name


def setup_lines(args) -> list[str]:
    """The shell lines a job runs before the run: ``--setup-file``'s (blank lines and ``#`` comments skipped), then
    the ``--setup`` ones, each checked to be one line."""
    lines = []
    path = getattr(args, "setup_file", None)
    if path:
        try:
            text = Path(path).read_bytes().decode("utf-8")  # not read_text: its universal newlines hide a CR
        except (OSError, UnicodeDecodeError) as e:
            raise SweepError(f"--setup-file {path!r} cannot be read ({type(e).__name__}: {e}); give a text file of "
                             "shell lines") from None
        for k, line in enumerate(text.split("\n"), 1):  # a CR (a Windows file) stays, and is refused
            if line.strip() and not line.lstrip().startswith("#"):
                _one_line(f"--setup-file {path} line {k}:", line)
                lines.append(line)
    for line in getattr(args, "setup", None) or []:
        _one_line("--setup", line)
        if not line.strip():
            raise SweepError("--setup '' is empty: give a shell line, e.g. --setup 'module load cuda'")
        lines.append(line)
    return lines


def job_python(args) -> str | None:
    """``--job-python``, checked: one line that names a command."""
    cmd = getattr(args, "job_python", None)
    if cmd is None:
        return None
    _one_line("--job-python", cmd)
    try:
        words = shlex.split(cmd)
    except ValueError as e:
        raise SweepError(f"--job-python {cmd!r} is not a shell command ({e})") from None
    if not words:
        raise SweepError("--job-python '' is empty: give the command that starts Python in a job, e.g. "
                         "'apptainer exec --nv img.sif python'")
    return cmd


def _check_common(args) -> None:
    """The options both submitit launchers use: the throttle, the setup lines, the Python command, the job name."""
    k = getattr(args, "max_running", None)
    if k is not None and k < 1:
        raise SweepError(f"--max-running {k} must be >= 1 (jobs of the sweep that run at once)")
    setup_lines(args)
    job_python(args)
    job_name(args)


def slurm_parameters(args, specs: list[RunSpec] | None = None) -> dict:
    """``SlurmExecutor.update_parameters`` keywords of the sweep's options (checked; ``SweepError`` names the bad
    one)."""
    if args.time is None:
        raise SweepError("--launcher slurm needs --time HOURS, the time limit of one job (a longer run is requeued "
                         "and resumes from its checkpoint)")
    if not args.time > 0:
        raise SweepError(f"--time {args.time} must be > 0 hours")
    if args.gpus_per_run < 0:
        raise SweepError(f"--gpus-per-run {args.gpus_per_run} must be >= 0")
    _check_common(args)
    params = {"job_name": job_name(args, specs), "time": max(1, int(round(args.time * 60))), "nodes": 1,
              "ntasks_per_node": 1, "signal_delay_s": 120, "additional_parameters": {"requeue": True}}
    if getattr(args, "max_running", None) is not None:
        params["array_parallelism"] = args.max_running
    setup = setup_lines(args)
    if setup:
        params["setup"] = setup
    _one_line("--partition", args.partition)
    if args.partition:
        params["partition"] = args.partition
    if args.gpus_per_run:
        params["gpus_per_node"] = args.gpus_per_run
    if args.cpus_per_run:
        params["cpus_per_task"] = args.cpus_per_run
    if args.mem_gb:
        params["mem"] = f"{int(args.mem_gb)}GB" if args.mem_gb == int(args.mem_gb) else f"{int(args.mem_gb * 1024)}MB"
    for item in args.slurm_arg:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SweepError(f"--slurm-arg {item!r} must look like key=value (e.g. account=myproject)")
        _one_line("--slurm-arg", item)
        params["additional_parameters"][key.strip().replace("_", "-")] = value.strip()
    return params


# ------------------------------------------------------------------------------------------------ bookkeeping
def _folder(runs_root: Path) -> Path:
    return Path(runs_root) / "slurm"


def _append(path: Path, record: dict) -> None:
    """One JSON line, under an exclusive lock (several jobs append to the same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(json.dumps(record) + "\n")
            f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _events(runs_root: Path) -> list[dict]:
    path = _folder(runs_root) / "jobs.jsonl"
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


def _job_id() -> str | None:
    try:
        import submitit

        return str(submitit.JobEnvironment().job_id)
    except Exception:  # not inside a submitit job (a direct call, as in a test)
        return None


def _wait(pid: int, timeout: float | None):
    """``(exit status, rusage)`` of child ``pid``, or None if it is still running after ``timeout`` seconds.

    Polls (every 0.2 s) rather than blocking in ``wait4``, also without a timeout: a signal the kernel delivers to
    another thread of this process (submitit's preemption signal, with torch's threads about) does not interrupt a
    blocking ``wait4`` of the main thread, so Python would run the handler only once the run had ended."""
    end = None if timeout is None else time.time() + timeout
    while True:
        got, status, ru = os.wait4(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status), ru
        if end is not None and time.time() >= end:
            return None
        time.sleep(0.2)


def _child_setup() -> None:  # in the run's process, between fork and exec
    _set_pdeathsig()
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # the scheduler's warning is the job's to handle, not the run's


# ------------------------------------------------------------------------------------------------ the job
class SlurmRun:
    """One run of the sweep as a submitit job: ``__call__`` runs it, ``checkpoint`` (called by submitit on
    preemption or time-out) stops it at its last checkpoint and hands submitit the same job to requeue."""

    def __init__(self, spec: RunSpec, runs_root: Path, cwd: str, python: str | None, gpus: int,
                 grace_s: float = 90.0, kind: str = "slurm"):
        self.spec, self.runs_root, self.cwd, self.python, self.gpus, self.grace_s, self.kind = \
            spec, Path(runs_root), cwd, python, gpus, grace_s, kind
        self._proc: subprocess.Popen | None = None
        self._started = 0.0

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_proc"] = None
        return state

    def launcher(self) -> list[str]:
        """``python`` None: the job's own interpreter (the one ``--job-python`` starts, e.g. inside a container)."""
        python = self.python or sys.executable
        if self.gpus > 1:
            return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.gpus}", "-m"]
        return [python, "-m"]

    def command(self) -> list[str]:
        return self.spec.command(self.launcher())

    def _record(self, event: str, **extra) -> None:
        _append(_folder(self.runs_root) / "jobs.jsonl", {"event": event, "run": self.spec.label, "job_id": _job_id(),
                                                         "host": socket.gethostname(), "pid": os.getpid(),
                                                         "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra})

    def _attempt(self, rc: int, ru, status_before: str, preempted: bool = False) -> dict:
        t = attempt_record(self.spec, rc, ru, self._started, status_before, self.command(), launcher=self.kind,
                           job_id=_job_id(), preempted=preempted)
        _append(Path(self.runs_root) / "sweep.jsonl", t)
        return t

    def __call__(self) -> dict:
        spec = self.spec
        folder = _run_folder(spec)
        if folder.is_finished():  # e.g. requeued after the run had finished
            self._record("end", exit=0, note="already finished")
            return {"run": spec.label, "exit": 0, "status": "finished"}
        st = folder.status()
        before = "resume" if st.status is not None else "new"
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if "OMP_NUM_THREADS" not in env and env.get("SLURM_CPUS_PER_TASK"):
            env["OMP_NUM_THREADS"] = str(max(1, int(env["SLURM_CPUS_PER_TASK"]) // max(1, self.gpus)))
        env["PYTHONPATH"] = os.pathsep.join([self.cwd, *[p for p in [env.get("PYTHONPATH")] if p]])
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        cmd = self.command()
        with open(spec.run_dir / "console.log", "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} job {_job_id()} on {socket.gethostname()}: "
                      f"{shlex.join(cmd)}\n".encode())
            log.flush()
            self._started = time.time()
            self._proc = subprocess.Popen(cmd, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True, preexec_fn=_child_setup)
            self._record("start", run_pid=self._proc.pid, status_before=before)
            old = signal.signal(signal.SIGTERM, self._pass_sigterm)
            try:
                rc, ru = _wait(self._proc.pid, None)  # submitit's signal handler may run (and exit) while this waits
            finally:
                signal.signal(signal.SIGTERM, old)
        self._proc = None
        self._attempt(rc, ru, before)
        finished = rc == 0 or _run_folder(spec).is_finished()
        interrupted = not finished and _run_folder(spec).status().status == "interrupted"
        self._record("end", exit=rc, finished=finished, **({"interrupted": True} if interrupted else {}))
        if interrupted:
            raise RuntimeError(f"{spec.label}: stopped at its last checkpoint (exit {rc}, marked interrupted): the "
                               "same sweep command resumes it")
        if not finished:
            raise RuntimeError(f"{spec.label}: experiments.train exited with status {rc}; see "
                               f"{spec.run_dir / 'console.log'}")
        return {"run": spec.label, "exit": rc, "status": "finished"}

    def _pass_sigterm(self, signum, _frame) -> None:
        """``scancel`` (or a preemption that requeues) sends SIGTERM to the job: the run gets it too (it stops at its
        last checkpoint, marked ``interrupted``, exit 143), also where the scheduler signals only the job's own
        process group (the run has a process group of its own); the run ignores a second one. submitit only logs it."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

    def checkpoint(self, *args, **kwargs):
        """Preempted or out of time: SIGINT to the run (it keeps its last checkpoint and exits 130), then the same job
        to requeue, which resumes the run."""
        import submitit

        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            got = _wait(proc.pid, self.grace_s)
            if got is None:  # did not stop in time: the last checkpoint is on disk all the same
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                got = _wait(proc.pid, None)
            proc.returncode = got[0]
            self._attempt(got[0], got[1], "running", preempted=True)
        self._record("requeue")
        return submitit.helpers.DelayedSubmission(
            SlurmRun(self.spec, self.runs_root, self.cwd, self.python, self.gpus, self.grace_s, self.kind))


# ------------------------------------------------------------------------------------------------ states
def _local_state(folder: Path, job_id: str) -> str:
    """State of a submitit local job seen from another process: its controller's pid is the job id."""
    import submitit

    paths = submitit.core.utils.JobPaths(folder, job_id=job_id, task_id=0)
    try:
        os.kill(int(job_id), 0)
        alive = True
    except (ProcessLookupError, ValueError):
        alive = False
    except PermissionError:
        alive = True
    if paths.result_pickle.exists():
        try:
            outcome = submitit.core.utils.pickle_load(paths.result_pickle)[0]
        except Exception:
            outcome = "error"
        return "COMPLETED" if outcome == "success" else "FAILED"
    return "RUNNING" if alive else "INTERRUPTED"


def _slurm_states(folder: Path, job_ids: list[str]) -> dict[str, str]:
    import submitit

    out = {}
    for jid in job_ids:
        try:
            out[jid] = str(submitit.SlurmJob(folder, jid).state).upper()
        except Exception as e:  # sacct missing or failing: say so rather than guess
            out[jid] = f"UNKNOWN ({type(e).__name__})"
    return out


def state_word(run_finished: bool, has_progress: bool, job_state: str | None, folder_status: str | None = None) -> str:
    """The word ``--status`` shows for one run: its folder first, then its newest job's scheduler state. A job that
    is over (cancelled, preempted, out of time) whose run marked itself ``interrupted`` (it caught the signal and
    kept its last checkpoint) is ``interrupted``, as its folder says: the same command resumes it."""
    if run_finished:
        return "finished"
    if job_state is None:
        return "interrupted" if has_progress else "not submitted"
    base = job_state.split()[0].rstrip("+")
    if base in _QUEUED:
        return "queued"
    if base in _RUNNING:
        return "running"
    if base in _OVER:
        return "interrupted" if folder_status == "interrupted" else "failed"
    return f"unknown ({job_state})"


def run_states(specs: list[RunSpec], runs_root: Path) -> list[dict]:
    """One dict per run: label, state (``state_word``), job id, scheduler state, iterations saved / total."""
    runs_root = Path(runs_root)
    last: dict[str, dict] = {}
    for e in _events(runs_root):
        if e.get("event") == "submitted":
            last[e["run"]] = e
    by_kind: dict[str, list[str]] = {}
    for e in last.values():
        by_kind.setdefault(e.get("launcher", "slurm"), []).append(str(e["job_id"]))
    logs = _folder(runs_root) / "logs"
    states: dict[str, str] = {}
    if by_kind.get("slurm"):
        states.update(_slurm_states(logs, by_kind["slurm"]))
    for jid in by_kind.get("submitit-local", []):
        states[jid] = _local_state(logs, jid)
    rows = []
    for s in specs:
        folder = _run_folder(s)
        st = folder.status()
        sub = last.get(s.label)
        jstate = states.get(str(sub["job_id"])) if sub else None
        word = state_word(folder.is_finished(), st.status is not None, jstate, st.status)
        rows.append({"run": s.label, "state": word,
                     "job_id": sub["job_id"] if sub else None, "scheduler": jstate,
                     "iterations": f"{int(st.iterations_done or 0)}/{s.iterations}", "run_dir": str(s.run_dir)})
    return rows


def print_status(rows: list[dict], out=None) -> None:
    out = out or sys.stdout
    words = ("queued", "running", "finished", "failed", "interrupted", "not submitted")
    counts = {w: sum(r["state"] == w for r in rows) for w in words}
    out.write(f"# {len(rows)} runs: " + ", ".join(f"{counts[w]} {w}" for w in words) + "\n")
    for r in rows:
        job = f"job {r['job_id']} ({r['scheduler']})" if r["job_id"] else "no job"
        out.write(f"{r['state']:<13} {r['iterations']:>9} it  {r['run']}  {job}\n")


# ------------------------------------------------------------------------------------------------ submission
def _executor(kind: str, folder: Path, args, specs: list[RunSpec] | None = None):
    import submitit

    if kind == "slurm":
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=args.max_requeues, python=job_python(args))
        ex.update_parameters(**slurm_parameters(args, specs))
        return ex
    # the local executor runs each job at once (no throttle) and names none; it runs the setup lines (in a shell,
    # joined by &&) and --job-python as a Slurm job would
    ex = submitit.LocalExecutor(folder=folder, max_num_timeout=args.max_requeues, python=job_python(args))
    hours = args.time if args.time is not None else 24.0
    ex.update_parameters(timeout_min=hours * 60, signal_delay_s=120 if hours * 60 > 10 else 5,
                         gpus_per_node=args.gpus_per_run)
    if setup_lines(args):
        ex.update_parameters(setup=setup_lines(args))
    return ex


def submit(specs: list[RunSpec], args, say=print) -> list:
    """Submit the runs that are neither finished nor queued/running; returns ``(spec, job)`` pairs."""
    kind = args.launcher
    runs_root = Path(args.runs_root)
    rows = {r["run"]: r for r in run_states(specs, runs_root)}
    todo, busy = [], []
    for s in specs:
        if s.status == "finished":
            continue
        if rows[s.label]["state"] in ("queued", "running"):
            busy.append(s)
        else:
            todo.append(s)
    n_fin = sum(s.status == "finished" for s in specs)
    say(f"[sweep] {len(specs)} runs: {n_fin} already finished, {len(busy)} queued or running already, "
        f"{len(todo)} to submit ({kind}); runs under {runs_root}")
    for s in busy:
        r = rows[s.label]
        say(f"[sweep] not submitted again: {s.label} is {r['state']} (job {r['job_id']})")
    if not todo:
        return []
    folder = _folder(runs_root) / "logs"
    try:
        ex = _executor(kind, folder, args, todo)
    except RuntimeError as e:  # submitit's SlurmExecutor refuses a machine without srun
        raise SweepError(f"--launcher {kind}: {e} (run the sweep on a Slurm login node, or rehearse it here with "
                         "--launcher submitit-local)") from e
    python = None if job_python(args) else sys.executable  # with --job-python: the job's own interpreter
    runs = [SlurmRun(s, runs_root, os.getcwd(), python, args.gpus_per_run, kind=kind) for s in todo]
    with ex.batch():  # one job array on Slurm
        jobs = [ex.submit(r) for r in runs]
    for s, job in zip(todo, jobs):
        log = _link_job_log(folder, s, job)
        _append(_folder(runs_root) / "jobs.jsonl", {"event": "submitted", "run": s.label, "job_id": str(job.job_id),
                                                    "launcher": kind, "run_dir": str(s.run_dir),
                                                    "status_before": s.status, "job_log": str(log),
                                                    "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
        say(f"[sweep] submitted {s.label} as job {job.job_id}" + (f" ({s.detail})" if s.status == "resume" else ""))
    if todo:
        say(f"[sweep] job logs by run: {folder / 'by-run'}/<env>.<model>.<method>.seed_<k>.out")
    return list(zip(todo, jobs))


def run_log_name(spec: RunSpec) -> str:
    """``<env>.<model>.<method>.seed_<k>``: the name of a run's job log links (the job ids name submitit's files)."""
    return f"{spec.env}.{spec.model}.{spec.method}.seed_{spec.seed}"


def _link_job_log(folder: Path, spec: RunSpec, job) -> Path:
    """``<logs>/by-run/<run>.out`` (and ``.err``): relative links to the job's log files, replaced when the run is
    submitted again (a requeued job appends to the same files). Returns the ``.out`` link."""
    by_run = folder / "by-run"
    by_run.mkdir(parents=True, exist_ok=True)
    out = by_run / f"{run_log_name(spec)}.out"
    for link, target in ((out, job.paths.stdout), (by_run / f"{run_log_name(spec)}.err", job.paths.stderr)):
        tmp = link.with_name(f".{link.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        os.symlink(os.path.relpath(target, by_run), tmp)
        os.replace(tmp, link)
    return out


def wait(pairs: list, runs_root: Path, poll_s: float = 2.0, say=print) -> int:
    """Wait until every submitted job is over; 0 if every run finished, 1 if some failed (named), 130 if the others
    finished and some stopped at their last checkpoint (``interrupted``: scancel, preemption without requeue)."""
    def word(s) -> str:
        folder = _run_folder(s)
        if folder.is_finished():
            return "finished"
        if folder.status().status == "interrupted":
            return "interrupted"
        return "failed"

    pending = list(pairs)
    while pending:
        still = []
        for s, job in pending:
            if job.done():
                w = word(s)
                say(f"[sweep] job {job.job_id} over: {s.label} " + {
                    "finished": "finished",
                    "interrupted": "interrupted at its last checkpoint (the same command resumes it)",
                    "failed": "NOT finished (see its console.log)"}[w])
            else:
                still.append((s, job))
        pending = still
        if pending:
            time.sleep(poll_s)
    words = {s.label: word(s) for s, _ in pairs}
    for label, w in words.items():
        if w != "finished":
            say(f"[sweep] {w}: {label}")
    if "failed" in words.values():
        return 1
    return 130 if "interrupted" in words.values() else 0


def main(args, specs: list[RunSpec]) -> int:
    """The sweep's hook: ``--status``, or submission (``--dry-run`` prints the plan and the job parameters)."""
    runs_root = Path(args.runs_root)
    if args.status:
        print_status(run_states(specs, runs_root))
        return 0
    try:
        import submitit  # noqa: F401
    except ImportError:
        print(f"{PROG}: error: --launcher {args.launcher} needs submitit: pip install submitit (or the [slurm] "
              "extra)", file=sys.stderr)
        return 2
    try:
        if args.nproc:
            raise SweepError("with --launcher slurm give --gpus-per-run N, not --nproc")
        if args.jobs != 1:
            raise SweepError("--jobs is the local launcher's; the scheduler decides how many jobs run at once")
        params = slurm_parameters(args, [s for s in specs if s.status != "finished"]) \
            if args.launcher == "slurm" else None
        if args.launcher == "submitit-local":
            if args.time is not None and not args.time > 0:
                raise SweepError(f"--time {args.time} must be > 0 hours")
            _check_common(args)
    except SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        gpus = args.gpus_per_run
        launcher = SlurmRun(specs[0], runs_root, os.getcwd(), sys.executable, gpus).launcher() if specs else []
        print_plan(specs, launcher)
        if params is not None:
            print(f"# sbatch: {json.dumps(params, sort_keys=True)}")
        if job_python(args):
            print(f"# each job starts with: {job_python(args)} (the commands above then use its python)")
        return 0
    try:
        pairs = submit(specs, args)
    except SweepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if args.wait and pairs:
        return wait(pairs, runs_root)
    if pairs:
        print(f"[sweep] {len(pairs)} jobs submitted; follow them with the same command and --status")
    return 0
