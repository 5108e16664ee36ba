"""Inject the faults that could mix up or lose a run folder, on the tiny CPU preset, and print what happened.

    python -m experiments.fault_injection                  # prints the Markdown table (a few minutes, 1 thread)
    python -m experiments.fault_injection --out results/faults/table.md
    python -m experiments.fault_injection --only restart_killed,pack_damaged   # some rows (function names)

Each row is one fault: how it is made, what the trainer did (exit status and its message), and what data was
lost. Every outcome is checked (an unexpected one fails the command with exit 1), so the table is also a test.
The runs are ``configs/cpu/textcraft_tiny.yaml`` shrunk to P=2, G=2, 3 steps, 2 iterations, a checkpoint every
iteration; they run in this process (``experiments.train.main``) except where two processes are the fault.
The disk-full fault is injected at the file-write layer: the safetensors write of a checkpoint file fails with
``ENOSPC`` after writing part of the file, as on a full disk.

Besides the run folder: a DeepSpeed build lock left by a killed start (child processes whose
``TORCH_EXTENSIONS_DIR`` is a temporary folder), a ``--restart`` killed between its two steps, a resume on another
rank count (``torchrun``, 2 gloo ranks) or ZeRO stage, ``analysis.pack`` on a study whose packed file holds more
runs than its folders, a record path with ``..`` or a truncated file, and env worker processes killed with SIGKILL
during the rollout. Each outcome is judged from the process's exit status, its messages and the files it left
(the ``classify_*`` functions), never written in.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.procs import child_env

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
PRESET = str(REPO / "configs" / "cpu" / "textcraft_tiny.yaml")
ARGS = ["--config", PRESET, "env.groups=2", "env.group_size=2", "env.max_steps=3", "rollout.max_response_tokens=16",
        "trainer.iterations=2", "trainer.save_every=1", "eval.every=2", "eval.max_tasks_per_split=1",
        "env.eval_splits=[eval_depth2]", "logging.progress_bar=false", "logging.tensorboard=false"]


class FaultFailed(AssertionError):
    pass


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise FaultFailed(what)


def _train(args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``experiments.train.main`` in this process."""
    from experiments.train import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([*ARGS, *args])
        except SystemExit as e:
            rc = int(e.code or 0)
    return rc, out.getvalue(), err.getvalue()


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in rows]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


_TMP: list[str] = []  # the temporary folder, written <tmp> in the table


def _first_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    msg = (lines[-1] if lines else "").replace("[deepspeed op] ", "")
    for t in _TMP:
        msg = msg.replace(t, "<tmp>")
    msg = re.sub(r" on \S+ since \S+:", " on <host> since <time>:", msg)
    return msg.replace("python -m experiments.train: ", "").replace("|", "/")


def _short(msg: str, n: int = 170) -> str:
    return msg if len(msg) <= n else msg[: n - 3] + "..."


# ---------------------------------------------------------------------------------------------------- faults
def two_processes(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "two"
    cmd = [sys.executable, "-m", "experiments.train", *ARGS, f"output_dir={out}"]
    first = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if json.loads((out / ".lock").read_text() or "{}").get("pid") == first.pid:
                break
        except (OSError, ValueError):
            pass
        _check(first.poll() is None, "the first run ended early")
        time.sleep(0.05)
    t = time.perf_counter()
    second = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t
    running = first.poll() is None
    _, err1 = first.communicate(timeout=600)
    _check(running and second.returncode == 2 and f"PID {first.pid}" in second.stderr, second.stderr[-500:])
    _check(first.returncode == 0, err1[-500:])
    _check(_comparable(_lines(out / "metrics.jsonl")) == _comparable(_lines(ref / "metrics.jsonl")), "metrics differ")
    return (f"second: exit 2 in {took:.0f} s (interpreter start included): "
            f"\"{_short(_first_line(second.stderr), 120)}\"; "
            "first: exit 0, logs equal to an undisturbed run", "none")


def stale_lock(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "stale"
    shutil.copytree(ref, out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / ".lock").write_text(json.dumps({"pid": int(dead.stdout), "host": "h", "command": "python -m x"}))
    rc, so, _ = _train([f"output_dir={out}"])
    _check(rc == 0 and "already finished" in so, so)
    return "taken over: exit 0 \"already finished\"", "none"


def config_unreadable_other_estimator(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "cfg"
    shutil.copytree(ref, out)
    (out / "config.yaml").write_text(": [\n")
    before = _files(out)
    rc, _, err = _train(["estimator.name=grpo", f"output_dir={out}"])
    _check(rc == 2 and "estimator.name: 'bipace_q' -> 'grpo'" in err and _files(out) == before, err)
    rc2, so, _ = _train([f"output_dir={out}"])
    _check(rc2 == 0 and "already finished" in so, so)
    return (f"exit 2, identity read from the checkpoint's copy of the config: \"{_short(_first_line(err))}\"; "
            "the same estimator: exit 0 \"already finished\"", "none (folder unchanged)")


def config_and_checkpoints_gone(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "nocfg"
    shutil.copytree(ref, out)
    (out / "config.yaml").unlink()
    shutil.rmtree(out / "checkpoints")
    before = _files(out)
    rc, _, err = _train(["estimator.name=grpo", f"output_dir={out}"])
    _check(rc == 2 and "config.yaml is missing" in err and _files(out) == before, err)
    return f"exit 2: \"{_short(_first_line(err))}\"", "none (folder unchanged)"


def xor_model(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "xor"
    shutil.copytree(ref, out)
    f = out / "checkpoints" / "iter_00000002" / "model" / "model.safetensors"
    data = bytearray(f.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    f.write_bytes(bytes(data))
    rc, so, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    log = (out / "train.log").read_text()
    _check(rc == 0 and "model.safetensors does not match the SHA-256" in log and "resumed from iter_00000001" in so,
           so + err)
    got = _comparable(_lines(out / "metrics.jsonl"))
    want = _comparable(_lines(ref / "metrics.jsonl"))
    _check(got[:3] == want[:3], "recomputed iteration 2 differs")
    return ("exit 0, warning names the file (\"...model.safetensors does not match the SHA-256...\"), resumed from "
            "checkpoint 1; iteration 2 recomputed equal"), "the corrupt checkpoint (recomputed)"


def edit_state(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "state"
    shutil.copytree(ref, out)
    st = out / "checkpoints" / "iter_00000002" / "state.json"
    text = st.read_text()
    st.write_text(text.replace('"iteration": 2', '"iteration": 7'))
    rc, so, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    _check(rc == 0 and "state.json does not match the SHA-256" in (out / "train.log").read_text()
           and "resumed from iter_00000001" in so, so + err)
    return "exit 0, warning names state.json, resumed from checkpoint 1", "the edited checkpoint (recomputed)"


def no_checkpoints(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "nock"
    shutil.copytree(ref, out)
    shutil.rmtree(out / "checkpoints")
    before = _files(out)
    rc, _, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    _check(rc == 2 and "--restart" in err and _files(out) == before, err)
    rc2, _, err2 = _train(["--restart", "trainer.iterations=3", f"output_dir={out}"])
    kept = list(out.glob("restarted_*"))
    _check(rc2 == 0 and len(kept) == 1 and (kept[0] / "metrics.jsonl").read_bytes() == before["metrics.jsonl"], err2)
    return (f"exit 2: \"{_short(_first_line(err))}\"; then `--restart`: exit 0, old logs in restarted_<date>/"), \
        "none (old logs kept)"


def empty_checkpoints(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "emptyck"
    shutil.copytree(ref, out)
    shutil.rmtree(out / "checkpoints")
    (out / "checkpoints").mkdir()
    before = _files(out)
    rc, _, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    _check(rc == 2 and "no usable checkpoint" in err and _files(out) == before, err)
    return "exit 2, same refusal; run.json keeps `finished`, 2 iterations", "none"


def torn_line(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "torn"
    shutil.copytree(ref, out)
    lines = (out / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines.insert(2, '{"iteration": 1, "loss/pol\n')
    (out / "metrics.jsonl").write_text("".join(lines))
    rc, so, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    said = [x for x in so.splitlines() if "unparseable" in x]
    _check(rc == 0 and said, so + err)
    return f"exit 0, reported: \"{_short(said[0].replace('[train] ', '').replace(str(out), '<run>'))}\"", \
        "the torn line (it held no complete record)"


def disk_full(tmp: Path, ref: Path) -> tuple[str, str]:
    from safetensors import SafetensorError

    import trainer.checkpoint as ck

    out = tmp / "full"
    real = ck.save_file

    def full_at_2(tensors, filename, metadata=None):
        if "iter_00000002.partial" in str(filename) and "optimizer" in str(filename):
            Path(filename).write_bytes(b"\0" * 4096)
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                                  '"No space left on device" })')
        return real(tensors, filename, metadata=metadata)

    ck.save_file = full_at_2
    try:
        rc, _, err = _train([f"output_dir={out}"])
    finally:
        ck.save_file = real
    info = json.loads((out / "run.json").read_text())
    leftovers = [p.name for p in out.rglob("*") if ".partial" in p.name or ".tmp" in p.name]
    _check(rc == 4 and "Traceback" not in err and info["status"] == "interrupted" and not leftovers, err)
    rc2, _, err2 = _train([f"output_dir={out}"])
    _check(rc2 == 0 and _comparable(_lines(out / "metrics.jsonl")) == _comparable(_lines(ref / "metrics.jsonl")),
           err2)
    msg = _first_line(err.replace(str(out), "<run>"))
    return (f"exit 4, one message: \"{_short(msg, 260)}\"; run.json `interrupted`, no .partial/.tmp left; rerun: "
            "exit 0, logs equal"), "none"


def bad_configs(tmp: Path, ref: Path) -> tuple[str, str]:
    latin = tmp / "latin1.yaml"
    latin.write_bytes(Path(PRESET).read_bytes() + "# caf\xe9\n".encode("latin-1"))
    dup = tmp / "dup.yaml"
    dup.write_text(Path(PRESET).read_text() + "env:\n  id: TextCraft-v0\n")
    afile = tmp / "afile"
    afile.write_text("x")
    cases = [
        (["--config", str(latin)], "is not UTF-8 text"),
        (["--config", str(tmp)], "is a folder"),
        (["--config", str(dup)], "found the key 'env' twice"),
        (["model.hidden_layer=-100"], "model.hidden_layer=-100 is out of range"),
        (["rollout.max_prompt_tokens=5"], "rollout.max_prompt_tokens=5"),
        (["env.kwargs.max_stepz=3"], "env.kwargs.max_stepz=3 is not an argument"),
        (["env.groups=1e11"], "trajectories per iteration is more than"),
        ([f"output_dir={afile}"], "is a file, not a folder"),
        ([f"output_dir={tmp}/caf\udce9"], "is not valid UTF-8"),
    ]
    for i, (extra, needle) in enumerate(cases):
        args = [*extra] if extra[0].startswith("output_dir") else [*extra, f"output_dir={tmp / f'bad{i}'}"]
        rc, _, err = _train(args)
        _check(rc == 2 and needle in err and "Traceback" not in err, f"{extra}: {err[-400:]}")
    return (f"{len(cases)} of {len(cases)} exit 2 with field, value and fix, before the weights are loaded "
            "(non-UTF-8 file, a folder, duplicate keys, hidden_layer=-100, max_prompt_tokens=5, env.kwargs typo, "
            "groups=1e11, output_dir a file or non-UTF-8)"), "none"


def webshop_garbage(tmp: Path, ref: Path) -> tuple[str, str]:
    data = tmp / "webshop"
    data.mkdir()
    (data / "items_shuffle_1000.json").write_text('[{"asin": "B0')  # truncated
    (data / "items_ins_v2_1000.json").write_text("{}")
    old = os.environ.get("WEBSHOP_DATA")
    os.environ["WEBSHOP_DATA"] = str(data)
    try:
        rc, _, err = _train(["env.id=WebShop-v0", "env.eval_splits=null", f"output_dir={tmp / 'ws'}"])
    finally:
        if old is None:
            os.environ.pop("WEBSHOP_DATA", None)
        else:
            os.environ["WEBSHOP_DATA"] = old
    _check(rc == 2 and "items_shuffle_1000.json" in err and "envs.webshop.generate" in err, err[-600:])
    return "exit 2 naming the file and the command that fills the folder", "none"


# ------------------------------------------------------------------------------ DeepSpeed build lock (item 1)
_LOCK_OP = "deepspeed_shm_comm"  # the op experiments.train JIT-loads on CPU (trainer.ppo_actor.init_distributed)
#: a run that reaches DeepSpeed's start: one iteration, no evaluation
_SHORT = ["trainer.iterations=1", "eval.every=0", "eval.at_start=false"]


def aged_lock(folder: Path, age_s: float) -> Path:
    """``folder/lock``, created with a modification time ``age_s`` seconds ago (a build lock of that age)."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / "lock"
    lock.touch()
    os.utime(lock, (time.time() - age_s, time.time() - age_s))
    return lock


def _train_child(args: list[str], env: dict | None = None, timeout: float = 600) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, seconds) of ``python -m experiments.train`` in a child process."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "experiments.train", *ARGS, *args], cwd=REPO, env=env or child_env(),
                         capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout, res.stderr, time.perf_counter() - t


def _ext_env(ext: Path) -> dict:
    """A child environment whose torch extensions (DeepSpeed's JIT-built ops) live in ``ext``."""
    from trainer.ppo_actor import _AUTO_EXT_FLAG

    env = child_env()
    env.pop(_AUTO_EXT_FLAG, None)  # a value set by this process's own start would be replaced by the venv's
    env.update(TORCH_EXTENSIONS_DIR=str(ext), DS_ACCELERATOR="cpu")
    return env


def classify_lock_not_waited(rc: int, err: str, lock: Path, lock_left: bool, took: float) -> str:
    """A stale lock on an op that is built: the run goes on at once, says which lock it did not wait on and which
    file only to remove, and leaves the lock alone."""
    _check(rc == 0, f"exit {rc}: {err[-400:]}")
    _check(re.search(re.escape(str(lock)) + r" \(\d+ s old\) is not waited on", err) is not None
           and f"rm {lock})" in err and err.count("is not waited on") == 1, f"no line about the lock: {err[-600:]}")
    _check(lock_left, "the lock file was removed")
    line = next(x for x in err.splitlines() if "is not waited on" in x)
    return f"exit 0 in {took:.0f} s, one line: \"{_short(_first_line(line), 200)}\"; the lock left in place"


def classify_lock_refused(rc: int, err: str, lock: Path, lock_left: bool, computed: bool, took: float, *,
                          holder: str | None = None, bound_s: float | None = None) -> str:
    """A lock on an op that has to be built: exit 2 naming the lock file to remove (only that file), before any
    compute; with ``holder`` (a process working in the op's folder), first a line that names it, the lock's age and
    the bound (``bound_s``, default the trainer's), then the refusal once the lock is older than the bound."""
    from trainer.ppo_actor import STALE_BUILD_LOCK_S

    bound = f"after it is {(STALE_BUILD_LOCK_S if bound_s is None else bound_s) / 60:.0f} minutes old"
    _check(rc == 2, f"exit {rc}: {err[-600:]}")
    _check(f"build lock {lock} is " in err and f"(rm {lock}; not its folder" in err and "Traceback" not in err,
           f"the refusal does not name the lock file: {err[-600:]}")
    _check(lock_left and not computed, "the lock was removed or an iteration was computed")
    refusal = next(x for x in err.splitlines() if f"(rm {lock}; not its folder" in x)
    if holder is None:
        _check("waiting for DeepSpeed's op" not in err, "waited on a lock older than the bound")
        return f"exit 2 in {took:.0f} s, nothing computed: \"{_short(_first_line(refusal), 260)}\""
    waits = [x for x in err.splitlines() if "waiting for DeepSpeed's op" in x]
    _check(len(waits) == 1 and f"held by {holder}" in waits[0] and bound in waits[0] and f"rm {lock})" in waits[0],
           f"no single line naming the holder {holder} and the bound: {err[-800:]}")
    _check(f"the processes {holder} work in its folder" in refusal, f"the refusal does not name {holder}")
    return (f"one line: \"{_short(_first_line(waits[0]), 230)}\"; at the bound: exit 2 ({took:.0f} s in all), "
            f"nothing computed: \"{_short(_first_line(refusal), 200)}\"")


def build_lock_built_op(tmp: Path, ref: Path) -> tuple[str, str]:
    from trainer.ppo_actor import built_op_is_current

    mine = Path(os.environ.get("TORCH_EXTENSIONS_DIR", "")) / _LOCK_OP  # built by the reference run's start
    _check(built_op_is_current(_LOCK_OP, mine), f"no built {_LOCK_OP} in {mine} to copy")
    folder = tmp / "ext_built" / _LOCK_OP
    shutil.copytree(mine, folder, ignore=shutil.ignore_patterns("lock"))  # mtimes kept: ninja sees it built
    lock = aged_lock(folder, 3600.0)
    rc, _, err, took = _train_child([*_SHORT, f"output_dir={tmp / 'lock_built'}"], _ext_env(folder.parent))
    return classify_lock_not_waited(rc, err, lock, lock.exists(), took), "none"


def build_lock_stale(tmp: Path, ref: Path) -> tuple[str, str]:
    lock = aged_lock(tmp / "ext_stale" / _LOCK_OP, 3600.0)
    out = tmp / "lock_stale"
    rc, _, err, took = _train_child([*_SHORT, f"output_dir={out}"], _ext_env(lock.parent.parent))
    return classify_lock_refused(rc, err, lock, lock.exists(), (out / "metrics.jsonl").exists(), took), "none"


def build_lock_held(tmp: Path, ref: Path) -> tuple[str, str]:
    from trainer.ppo_actor import STALE_BUILD_LOCK_S

    lock = aged_lock(tmp / "ext_held" / _LOCK_OP, STALE_BUILD_LOCK_S - 60.0)
    holder = subprocess.Popen(["sleep", "600"], cwd=lock.parent)  # a process working in the op's folder
    out = tmp / "lock_held"
    try:
        rc, _, err, took = _train_child([*_SHORT, f"output_dir={out}"], _ext_env(lock.parent.parent))
    finally:
        holder.kill()
        holder.wait()
    return classify_lock_refused(rc, err, lock, lock.exists(), (out / "metrics.jsonl").exists(), took,
                                 holder=f"{holder.pid} (sleep)"), "none"


# ------------------------------------------------------------------------ logs a checkpoint covers (item 3)
def classify_logs_refused(rc: int, err: str, needle: str, unchanged: bool) -> str:
    """A resume whose logs miss what the checkpoint covers: exit 2 before compute, the message names the missing
    lines and the choices (restore the logs, ``--restart``, another output_dir), the folder unchanged."""
    _check(rc == 2 and needle in err and "Traceback" not in err, f"exit {rc}: {err[-600:]}")
    _check(all(c in err for c in ("restore the logs", "--restart", "output_dir=<folder>")),
           f"the choices are not all named: {err[-600:]}")
    _check(unchanged, "the run folder changed")
    return f"exit 2, folder unchanged: \"{_short(_first_line(err).replace('refused: ', ''), 230)}\""


def logs_no_metrics(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "nometrics"
    shutil.copytree(ref, out)
    (out / "metrics.jsonl").unlink()
    before = _files(out)
    rc, _, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    said = classify_logs_refused(rc, err, "metrics.jsonl is missing (it should hold iteration(s) 0-2)",
                                 _files(out) == before)
    rc2, _, err2 = _train(["--restart", "trainer.iterations=3", f"output_dir={out}"])
    kept = list(out.glob("restarted_*"))
    _check(rc2 == 0 and len(kept) == 1 and (kept[0] / "eval.jsonl").read_bytes() == before["eval.jsonl"],
           f"--restart: exit {rc2}: {err2[-400:]}")
    return f"{said}; then `--restart`: exit 0, old logs in restarted_<date>/", "metrics.jsonl (deleted by hand)"


def logs_no_eval_line(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "noeval"
    shutil.copytree(ref, out)
    lines = (out / "eval.jsonl").read_text().splitlines(keepends=True)
    _check(json.loads(lines[-1])["iteration"] == 2, "the reference has no evaluation at iteration 2")
    (out / "eval.jsonl").write_text("".join(lines[:-1]))
    before = _files(out)
    rc, _, err = _train(["trainer.iterations=3", f"output_dir={out}"])
    return classify_logs_refused(rc, err, "eval.jsonl has no line for evaluation at iteration(s) 2",
                                 _files(out) == before), "the eval line (deleted by hand)"


_KILL_AFTER_CHECKPOINTS_GO = """
import os, shutil, signal, sys
from trainer import run_folder
real = shutil.rmtree
def rmtree(path, *a, **k):
    real(path, *a, **k)
    if os.path.basename(str(path)).startswith(run_folder._DELETING):
        os.kill(os.getpid(), signal.SIGKILL)  # checkpoints deleted, logs not moved yet
shutil.rmtree = rmtree
from experiments.train import main
sys.exit(main(sys.argv[1:]))
"""


def restart_killed(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "restartkill"
    shutil.copytree(ref, out)
    metrics = (out / "metrics.jsonl").read_bytes()
    res = subprocess.run([sys.executable, "-c", _KILL_AFTER_CHECKPOINTS_GO, *ARGS, "--restart",
                          f"output_dir={out}"], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    _check(res.returncode == -9, f"the --restart was not killed where planned: exit {res.returncode}: "
                                 f"{res.stderr[-400:]}")
    _check(not (out / "checkpoints").exists() and (out / "metrics.jsonl").read_bytes() == metrics,
           "the kill did not leave logs without checkpoints")
    before = _files(out)
    rc, _, err = _train(["trainer.iterations=3", f"output_dir={out}"])  # 2 would be "already finished"
    _check(rc == 2 and "no usable checkpoint" in err and "--restart" in err and _files(out) == before,
           f"resume: exit {rc}: {err[-400:]}")
    rc2, _, err2 = _train(["--restart", "trainer.iterations=3", f"output_dir={out}"])
    kept = list(out.glob("restarted_*"))
    _check(rc2 == 0 and len(kept) == 1 and (kept[0] / "metrics.jsonl").read_bytes() == metrics,
           f"second --restart: exit {rc2}: {err2[-400:]}")
    return ("killed: checkpoints gone, logs in place; rerun: exit 2 \"...holds a run (...) but no usable checkpoint "
            "(...)\" with the choices; `--restart` again: exit 0, old logs in restarted_<date>/"), \
        "none (the checkpoints were being discarded)"


# --------------------------------------------------------------------- rank count and ZeRO stage (item 4)
def classify_world_refused(rc: int, err: str, saved_world: int, unchanged: bool, built: bool) -> str:
    """A resume on another rank count than the checkpoint's: refused before the model is built, saying how to
    relaunch; the folder unchanged."""
    how = "a plain python process" if saved_world == 1 else f"torchrun --nproc_per_node {saved_world}"
    _check(rc != 0 and f"Relaunch with {saved_world} rank(s) ({how}" in err, f"exit {rc}: {err[-800:]}")
    _check(unchanged and not built, "the run folder changed, or a rank built its model")
    line = _first_line(next(x for x in err.splitlines() if "Relaunch with" in x))
    said = re.search(r"was written by .*? to resume it", line)
    return f"exit {rc}, folder unchanged: \"...{said.group(0) if said else _short(line, 250)}...\""


def other_rank_count(tmp: Path, ref: Path) -> tuple[str, str]:
    from trainer.ppo_actor import free_port

    out = tmp / "ranks"
    shutil.copytree(ref, out)
    before = _files(out)
    env = dict(child_env(), DS_ACCELERATOR="cpu")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                          "127.0.0.1", "--master_port", str(free_port()), "-m", "experiments.train", *ARGS,
                          "trainer.iterations=3", f"output_dir={out}"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
    built = (out / "train.rank1.log").exists() or (out / "train.log").read_bytes() != before["train.log"]
    said = classify_world_refused(res.returncode, res.stderr, 1, _files(out) == before, built)
    _check(re.search(r"exitcode\s*: 2 ", res.stderr) is not None, f"no rank exited 2: {res.stderr[-800:]}")
    return f"2 ranks (torchrun, gloo): a rank exit 2, torchrun {said}", "none (folder unchanged)"


def other_zero_stage(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "zero"
    shutil.copytree(ref, out)
    before = _files(out)
    rc, _, err = _train(["trainer.zero_stage=1", "trainer.iterations=3", f"output_dir={out}"])
    _check(rc == 2 and "trainer.zero_stage: 0 -> 1" in err and _files(out) == before and "Traceback" not in err,
           f"exit {rc}: {err[-600:]}")
    return f"exit 2 before the model is built, folder unchanged: \"{_short(_first_line(err), 200)}\"", "none"


# ----------------------------------------------------------------------------------- analysis.pack (item 5)
def _pack(args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m analysis.pack`` in this process."""
    from analysis.pack import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def _study(tmp: Path, ref: Path, name: str, seeds: tuple[int, ...] = (0, 1)) -> Path:
    """A study folder whose runs/ holds copies of ``ref`` (without checkpoints) at textcraft/tiny/<method>/seed_k."""
    study = tmp / name
    for k in seeds:
        shutil.copytree(ref, study / "runs" / "textcraft" / "tiny" / "bipace_q" / f"seed_{k}",
                        ignore=shutil.ignore_patterns("checkpoints", ".lock"))
    return study


def pack_drop_runs(tmp: Path, ref: Path) -> tuple[str, str]:
    from analysis.runs import PACKED_NAME, read_packed

    study = _study(tmp, ref, "study_drop")
    rc, _, err = _pack([str(study)])
    _check(rc == 0, f"first pack: exit {rc}: {err[-400:]}")
    packed = study / PACKED_NAME
    data = packed.read_bytes()
    shutil.rmtree(study / "runs" / "textcraft" / "tiny" / "bipace_q" / "seed_1")
    rc, _, err = _pack([str(study)])
    _check(rc == 2 and "textcraft/tiny/bipace_q/seed_1" in err and "--force" in err and "--unpack" in err,
           f"pack after a run folder was deleted: exit {rc}: {err[-400:]}")
    _check(packed.read_bytes() == data and not list(study.glob(".packing-*")), "the packed file changed")
    rc2, _, err2 = _pack([str(study), "--force"])
    _check(rc2 == 0 and [r["path"] for r in read_packed(packed)[1]] == ["textcraft/tiny/bipace_q/seed_0"],
           f"--force: exit {rc2}: {err2[-400:]}")
    msg = _first_line(err).replace(str(study), "<study>").replace("python -m analysis.pack: ", "")
    return (f"exit 2, packed file unchanged: \"{_short(msg, 230)}\"; with `--force`: exit 0, 1 run"), \
        "none (with --force: the run dropped, as asked)"


def pack_escaping_record(tmp: Path, ref: Path) -> tuple[str, str]:
    import lzma

    from analysis.runs import PACKED_NAME

    study = _study(tmp, ref, "study_escape", seeds=(0,))
    rc, _, err = _pack([str(study)])
    _check(rc == 0, f"pack: exit {rc}: {err[-400:]}")
    packed = study / PACKED_NAME
    lines = lzma.decompress(packed.read_bytes()).decode().splitlines()
    rec = json.loads(lines[1])
    rec["path"] = "../../escaped/seed_0"  # four names, as a record path has, two of them ..
    lines[1] = json.dumps(rec, separators=(",", ":"))
    packed.write_bytes(lzma.compress(("\n".join(lines) + "\n").encode(), format=lzma.FORMAT_XZ))
    shutil.rmtree(study / "runs")  # a committed study: the packed file alone
    around = tmp / "escape"
    around.mkdir()
    into = around / "a" / "into"  # the record would land in escape/escaped/seed_0
    rc, _, err = _pack([str(study), "--unpack", "--into", str(into)])
    _check(rc == 2 and "record path '../../escaped/seed_0'" in err and "git checkout --" in err,
           f"unpack: exit {rc}: {err[-400:]}")
    _check(not any(around.rglob("*")), f"something was written below {around}: {list(around.rglob('*'))}")
    # a run folder not at <env>/<model>/<method>/seed_<k>: refused on packing
    odd = _study(tmp, ref, "study_odd", seeds=(0,))
    shutil.move(odd / "runs" / "textcraft" / "tiny" / "bipace_q" / "seed_0", odd / "runs" / "textcraft" / "seed_0")
    rc2, _, err2 = _pack([str(odd)])
    _check(rc2 == 2 and "sits at <env>/<model>/<method>/seed_<k>" in err2 and not (odd / PACKED_NAME).exists(),
           f"pack of a misplaced run folder: exit {rc2}: {err2[-400:]}")
    msg = _first_line(err).replace(str(study), "<study>").replace("python -m analysis.pack: ", "")
    return (f"unpack: exit 2, nothing written: \"{_short(msg, 260)}\"; a run folder at runs/textcraft/seed_0: "
            "pack exit 2, nothing written"), "none"


def pack_damaged(tmp: Path, ref: Path) -> tuple[str, str]:
    from analysis.runs import PACKED_NAME

    study = _study(tmp, ref, "study_damaged", seeds=(0,))
    rc, _, err = _pack([str(study)])
    _check(rc == 0, f"pack: exit {rc}: {err[-400:]}")
    packed = study / PACKED_NAME
    packed.write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
    data = packed.read_bytes()
    rc, _, err = _pack([str(study), "--unpack", "--into", str(tmp / "damaged_into")])
    _check(rc == 2 and "--force` writes it again from the run folders" in err and "Traceback" not in err,
           f"unpack with run folders on disk: exit {rc}: {err[-400:]}")
    shutil.rmtree(study / "runs")
    rc2, _, err2 = _pack([str(study), "--unpack", "--into", str(tmp / "damaged_into2")])
    _check(rc2 == 2 and f"git checkout -- {packed}" in err2, f"unpack without run folders: exit {rc2}: {err2[-400:]}")
    _check(packed.read_bytes() == data, "the damaged file was changed")
    msg = _first_line(err2).replace(str(study), "<study>").replace("python -m analysis.pack: ", "")
    return ("`--unpack`: exit 2; the fix named is `analysis.pack <study> --force` while the run folders exist, else: "
            f"\"{_short(msg, 230)}\""), "none (the file was damaged by hand)"


# ---------------------------------------------------------------------------------- env workers (item 6)
def classify_worker_restarts(rc: int, out: str, err: str, rows: list[dict], kills: list[int], limit: int) -> str:
    """Env workers SIGKILLed ``kills`` (their pids): one console warning per restart naming the worker, its exit
    code (-9) and the limit; ``rollout/worker_restarts`` counts them per iteration; a restart past ``limit``
    (env.max_worker_restarts) stops the run with exit 3 naming the setting."""
    warnings = [x for x in out.splitlines() if "warning: iteration" in x and "env worker" in x]
    allowed = min(len(kills), limit)  # restarts the run goes on after; the one past the limit is a line too
    _check(len(warnings) == len(kills), f"{len(warnings)} restart warnings for {len(kills)} kills (limit {limit})")
    for pid, w in zip(kills, warnings):
        _check(f"(pid {pid})" in w and "exit code -9: restart" in w and f"(at most {limit})" in w, f"warning: {w}")
    _check(sum(r.get("rollout/worker_restarts", 0) for r in rows) == allowed,
           f"rollout/worker_restarts: {[r.get('rollout/worker_restarts') for r in rows]}")
    if len(kills) <= limit:
        _check(rc == 0, f"exit {rc}: {err[-600:]}")
        per = [int(r["rollout/worker_restarts"]) for r in rows if "rollout/worker_restarts" in r]
        return (f"exit 0; {len(warnings)} warnings, e.g. \"{_short(warnings[0].replace('[train] ', ''), 200)}\"; "
                f"rollout/worker_restarts per iteration: {per}")
    _check(rc == 3 and "env.max_worker_restarts" in err and "exit code -9" in err and "Traceback" not in err
           and "non-finite" not in err, f"exit {rc}: {err[-600:]}")  # worker failures are not named as NaN stops
    return (f"exit 3 at restart {limit + 1}: \"{_short(_first_line(err), 230)}\"; "
            f"{len(rows)} iteration(s) logged before it")


def _kill_workers_in_rollouts(out: Path, extra: list[str]) -> tuple[int, str, str, list[int]]:
    """Train 2 iterations with one env worker process, SIGKILLing it at the second step of each rollout."""
    import signal

    from envs.pool import EnvPool

    kills: list[int] = []
    steps = [0]
    reset, step = EnvPool.reset, EnvPool.step

    def counted_reset(self, *args, **kwargs):
        steps[0] = 0
        return reset(self, *args, **kwargs)

    def killing_step(self, indices, actions):
        steps[0] += 1
        proc = self._workers[0].process
        if steps[0] == 2 and proc is not None and proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(5.0)
            kills.append(proc.pid)
        return step(self, indices, actions)

    EnvPool.reset, EnvPool.step = counted_reset, killing_step
    try:
        rc, so, err = _train(["env.num_workers=1", "eval.every=0", "eval.at_start=false", *extra,
                              f"output_dir={out}"])
    finally:
        EnvPool.reset, EnvPool.step = reset, step
    return rc, so, err, kills


def worker_killed(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "workers"
    rc, so, err, kills = _kill_workers_in_rollouts(out, [])
    _check(len(kills) == 2, f"{len(kills)} kills")
    said = classify_worker_restarts(rc, so, err, _lines(out / "metrics.jsonl"), kills, limit=10)
    return said, "the killed worker's live episodes (truncated)"


def worker_killed_past_limit(tmp: Path, ref: Path) -> tuple[str, str]:
    out = tmp / "workers_limit"
    rc, so, err, kills = _kill_workers_in_rollouts(out, ["env.max_worker_restarts=1"])
    rows = _lines(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    said = classify_worker_restarts(rc, so, err, rows, kills, limit=1)
    status = json.loads((out / "run.json").read_text()).get("status")
    _check(status == "failed", f"run.json status {status!r}")
    from trainer.checkpoint import list_checkpoints

    kept = [p.name for p in list_checkpoints(out / "checkpoints")]
    _check(kept == ["iter_00000001"], f"checkpoints {kept}")
    return f"{said}; run.json `failed`, checkpoint 1 kept", "iteration 2's rollout"


FAULTS = [
    ("two `experiments.train` on one folder", "start the same command twice", two_processes),
    ("lock file of a dead process", "a `.lock` naming a PID that has exited", stale_lock),
    ("unreadable config.yaml, another estimator", "`echo ': [' > config.yaml`, rerun with estimator.name=grpo",
     config_unreadable_other_estimator),
    ("no config.yaml and no checkpoints", "delete both, rerun with estimator.name=grpo", config_and_checkpoints_gone),
    ("64 bytes flipped in the latest model.safetensors", "XOR 0xFF over 64 bytes mid-file (same size)", xor_model),
    ("iteration edited in the latest state.json", "`\"iteration\": 2` -> `7` (same size)", edit_state),
    ("checkpoints/ deleted, run extended", "rm -r checkpoints, trainer.iterations=3", no_checkpoints),
    ("checkpoints/ emptied, run extended", "rm -r checkpoints/*, trainer.iterations=3", empty_checkpoints),
    ("torn line inside metrics.jsonl", "a half line inserted after iteration 0, extend by 1", torn_line),
    ("disk full while writing checkpoint 2", "ENOSPC from the safetensors write after 4 KB", disk_full),
    ("bad configs", "9 configs from the hostile-user list", bad_configs),
    ("garbage WEBSHOP_DATA", "a truncated product file", webshop_garbage),
    ("stale DeepSpeed build lock, op built", "a copy of the built `deepspeed_shm_comm` op folder with a `lock` 1 h "
     "old, as TORCH_EXTENSIONS_DIR", build_lock_built_op),
    ("stale DeepSpeed build lock, op not built", "an op folder holding only a `lock` 1 h old", build_lock_stale),
    ("DeepSpeed build lock younger than the bound", "a `lock` 4 min old and a `sleep` process working in the op "
     "folder", build_lock_held),
    ("metrics.jsonl deleted after checkpoint 2", "rm metrics.jsonl, trainer.iterations=3", logs_no_metrics),
    ("eval.jsonl without the evaluation checkpoint 2 lists", "its last line deleted, trainer.iterations=3",
     logs_no_eval_line),
    ("`--restart` killed between its two steps", "SIGKILL right after checkpoints/ is deleted, before the logs move",
     restart_killed),
    ("another rank count than the checkpoint's", "resume a 1-rank run with `torchrun --nproc_per_node 2`",
     other_rank_count),
    ("another ZeRO stage than the checkpoint's", "resume a stage-0 run with trainer.zero_stage=1", other_zero_stage),
    ("`analysis.pack` after a run folder was deleted", "pack 2 runs, rm -r one, pack again", pack_drop_runs),
    ("packed record path with `../`", "a record's path set to `../../escaped/seed_0`, `--unpack --into`; a run "
     "folder at runs/textcraft/seed_0",
     pack_escaping_record),
    ("truncated packed file", "the xz file cut in half, `--unpack`", pack_damaged),
    ("env worker SIGKILLed, twice", "env.num_workers=1, `kill -9` of the worker at step 2 of each of 2 rollouts",
     worker_killed),
    ("env worker SIGKILLed past env.max_worker_restarts", "the same with env.max_worker_restarts=1",
     worker_killed_past_limit),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.fault_injection", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--only", default=None, help="comma-separated fault function names (default: all)")
    args = ap.parse_args(argv)
    os.environ.update(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), WANDB_MODE="offline",
                      TOKENIZERS_PARALLELISM="false")
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="faults") as d:
        tmp = Path(d)
        _TMP.append(str(tmp))
        ref = tmp / "reference"
        rc, _, err = _train([f"output_dir={ref}"])
        if rc != 0:
            print(err[-3000:], file=sys.stderr)
            return 1
        only = set(args.only.split(",")) if args.only else None
        for fault, how, fn in FAULTS:
            if only and fn.__name__ not in only:
                continue
            t = time.perf_counter()
            try:
                happened, lost = fn(tmp, ref)
                ok = "yes"
            except FaultFailed as e:
                said = str(e).strip().replace(str(tmp), "<tmp>").replace("|", "/")
                happened, lost, ok = f"UNEXPECTED: {_short(said, 300)}", "?", "NO"
                failed += 1
            rows.append((fault, how, happened, lost, ok, time.perf_counter() - t))
            print(f"[faults] {fault}: {'as expected' if ok == 'yes' else 'UNEXPECTED'} "
                  f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    table = ["| fault | how it is made | what happened | data lost | as expected |", "|---|---|---|---|---|"]
    table += [f"| {f} | {h} | {w} | {lost} | {ok} |" for f, h, w, lost, ok, _ in rows]
    text = "\n".join(table) + "\n"
    print(text)
    print(f"{len(rows)} faults in {time.perf_counter() - t0:.0f} s, {failed} unexpected", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
