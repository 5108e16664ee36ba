"""Inject the faults that could mix up or lose a run folder, on the tiny CPU preset, and print what happened.

    python -m experiments.fault_injection                  # prints the Markdown table (a few minutes, 1 thread)
    python -m experiments.fault_injection --out results/faults/table.md

Each row is one fault: how it is made, what the trainer did (exit status and its message), and what data was
lost. Every outcome is checked (an unexpected one fails the command with exit 1), so the table is also a test.
The runs are ``configs/cpu/textcraft_tiny.yaml`` shrunk to P=2, G=2, 3 steps, 2 iterations, a checkpoint every
iteration; they run in this process (``experiments.train.main``) except where two processes are the fault.
The disk-full fault is injected at the file-write layer: the safetensors write of a checkpoint file fails with
``ENOSPC`` after writing part of the file, as on a full disk.
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
    msg = lines[-1] if lines else ""
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
                happened, lost, ok = f"UNEXPECTED: {_short(str(e).strip(), 300)}", "?", "NO"
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
