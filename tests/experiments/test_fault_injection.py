"""``experiments.fault_injection``: the outcome of each injected fault is judged from what the process did, so a
fault the code no longer handles makes its row UNEXPECTED (and the command exit 1) rather than a stale "yes"."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from experiments import fault_injection as fi
from experiments.fault_injection import FaultFailed

PROG = "python -m experiments.train: "


def _refusal(tmp_path: Path, *, holder: bool) -> tuple[str, Path, str | None]:
    """The stderr ``experiments.train`` prints for a build lock it refuses, made by the trainer's own
    ``wait_for_build_lock`` (with a bound of 0.6 s: ``holder`` gives it a process working in the op's folder)."""
    import contextlib
    import io

    from trainer.ppo_actor import BuildLockError, wait_for_build_lock

    lock = fi.aged_lock(tmp_path / "ext" / "deepspeed_shm_comm", 0.3 if holder else 3600.0)
    proc = subprocess.Popen(["sleep", "60"], cwd=lock.parent) if holder else None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), pytest.raises(BuildLockError) as e:
            wait_for_build_lock(max_age_s=0.6, poll_s=0.05)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    return err.getvalue() + PROG + str(e.value) + "\n", lock, (f"{proc.pid} (sleep)" if proc else None)


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    return tmp_path


def test_a_stale_build_lock_refusal_is_judged_from_its_message(lock_env):
    err, lock, _ = _refusal(lock_env, holder=False)
    said = fi.classify_lock_refused(2, err, lock, True, False, 9.0, bound_s=0.6)
    assert said.startswith("exit 2 in 9 s, nothing computed: \"DeepSpeed's op deepspeed_shm_comm has to be built")
    for rc, text, left, computed in ((0, err, True, False),  # it ran anyway
                                     (2, err.replace("; not its folder", ""), True, False),  # no file to remove
                                     (2, err, False, False),  # the lock was removed
                                     (2, err, True, True),  # an iteration was computed
                                     (2, err + "Traceback (most recent call last):\n", True, False)):
        with pytest.raises(FaultFailed):
            fi.classify_lock_refused(rc, text, lock, left, computed, 9.0, bound_s=0.6)
    with pytest.raises(FaultFailed, match="holder"):  # no waiting line, though a process works in the folder
        fi.classify_lock_refused(2, err, lock, True, False, 9.0, holder="123 (sleep)", bound_s=0.6)


def test_a_held_build_lock_needs_one_line_naming_holder_age_and_bound_then_the_refusal(lock_env):
    err, lock, holder = _refusal(lock_env, holder=True)
    said = fi.classify_lock_refused(2, err, lock, True, False, 9.0, holder=holder, bound_s=0.6)
    assert said.startswith("one line: \"waiting for DeepSpeed's op deepspeed_shm_comm") and f"held by {holder}" in said
    with pytest.raises(FaultFailed):  # another holder than the one that works in the folder
        fi.classify_lock_refused(2, err, lock, True, False, 9.0, holder="1 (ninja)", bound_s=0.6)
    with pytest.raises(FaultFailed):  # the line must state the bound the wait has
        fi.classify_lock_refused(2, err, lock, True, False, 9.0, holder=holder, bound_s=600.0)


def test_a_lock_on_a_built_op_must_be_passed_with_one_line_and_left_in_place(tmp_path):
    lock = tmp_path / "ext" / "deepspeed_shm_comm" / "lock"
    line = (f"[deepspeed op] DeepSpeed's op deepspeed_shm_comm is already built in {lock.parent}, so its build lock "
            f"{lock} (3600 s old) is not waited on. If no DeepSpeed start is running on this machine, the lock was "
            f"left by a killed one: remove that file only (rm {lock}); other programs wait on it.\n")
    assert fi.classify_lock_not_waited(0, line, lock, True, 12.0).startswith("exit 0 in 12 s, one line:")
    for rc, err, left in ((2, line, True), (0, "", True), (0, line + line, True), (0, line, False)):
        with pytest.raises(FaultFailed):
            fi.classify_lock_not_waited(rc, err, lock, left, 12.0)


LOGS = (f"{PROG}refused: the run folder <run> has a checkpoint of iteration 2 (iter_00000002), but its logs lack what "
        "that checkpoint covers: <run>/metrics.jsonl is missing (it should hold iteration(s) 0-2). Resuming would "
        "finish a run whose logs miss those lines, so nothing was changed. Choose: restore the logs (from a backup, "
        "or from a restarted_<date>/ folder left by a restart that was stopped) and rerun the same command; or rerun "
        "with --restart to start over (the old logs move to <run>/restarted_<date>/); or set output_dir=<folder> "
        "for a new run\n")


def test_a_resume_whose_logs_miss_lines_must_be_refused_with_the_choices():
    needle = "metrics.jsonl is missing (it should hold iteration(s) 0-2)"
    assert fi.classify_logs_refused(2, LOGS, needle, True).startswith("exit 2, folder unchanged: \"the run folder")
    for rc, err, unchanged in ((0, LOGS, True), (2, LOGS, False), (2, LOGS.replace("restore the logs", ""), True),
                               (2, LOGS.replace("metrics.jsonl is", "eval.jsonl is"), True)):
        with pytest.raises(FaultFailed):
            fi.classify_logs_refused(rc, err, needle, unchanged)


def test_another_rank_count_must_be_refused_saying_how_to_relaunch(tmp_path):
    from tests.trainer.test_run_folder import _folder
    from trainer.run_folder import RunFolder

    out, cfg = _folder(tmp_path, world_size=1)  # the refusal the trainer prints, made by its own code
    err = f"{PROG}refused: {RunFolder(cfg).world_mismatch_error(1, 0, 2, out / 'checkpoints' / 'iter_00000002')}\n"
    said = fi.classify_world_refused(1, err, 1, True, False)
    assert "Relaunch with 1 rank(s) (a plain python process)" in said
    for rc, saved, unchanged, built in ((0, 1, True, False), (1, 2, True, False), (1, 1, False, False),
                                        (1, 1, True, True)):
        with pytest.raises(FaultFailed):
            fi.classify_world_refused(rc, err, saved, unchanged, built)


def _warning(pid: int, k: int, limit: int) -> str:
    return (f"[train] warning: iteration {k}: env worker 0 (pid {pid}) died (exit code -9; EOFError), exit code -9: "
            f"restart {k} (at most {limit}); 4 live episode(s) it held end truncated")


def test_killed_env_workers_need_a_warning_each_the_metric_and_the_limit():
    rows = [{"iteration": 1, "rollout/worker_restarts": 1.0}, {"iteration": 2, "rollout/worker_restarts": 1.0}]
    out = _warning(11, 1, 10) + "\n" + _warning(12, 2, 10) + "\n"
    said = fi.classify_worker_restarts(0, out, "", rows, [11, 12], limit=10)
    assert said.startswith("exit 0; 2 warnings") and said.endswith("per iteration: [1, 1]")
    for rc, text, got in ((0, _warning(11, 1, 10), rows),  # one warning for two restarts
                          (0, out.replace("exit code -9:", "exit code None:"), rows),  # no exit code
                          (0, out, [{"iteration": 1}, {"iteration": 2}]),  # no metric
                          (3, out, rows)):  # stopped within the limit
        with pytest.raises(FaultFailed):
            fi.classify_worker_restarts(rc, text, "", got, [11, 12], limit=10)
    stop = (f"{PROG}training stopped: iteration 2: env workers of textcraft were restarted 2 times, more than the 1 "
            "allowed (env.max_worker_restarts); the last: env worker 0 (pid 12) died (exit code -9; EOFError), exit "
            "code -9: restart 2 (at most 1); ...\n")
    out1 = _warning(11, 1, 1) + "\n" + _warning(12, 2, 1) + "\n"
    said = fi.classify_worker_restarts(3, out1, stop, rows[:1], [11, 12], limit=1)
    assert said.startswith("exit 3 at restart 2:") and said.endswith("1 iteration(s) logged before it")
    with pytest.raises(FaultFailed):  # the run went on past the limit
        fi.classify_worker_restarts(0, out1, "", rows, [11, 12], limit=1)
    with pytest.raises(FaultFailed):  # named as a non-finite stop
        fi.classify_worker_restarts(3, out1, stop.replace("stopped: ", "stopped at a non-finite or broken value: "),
                                    rows[:1], [11, 12], limit=1)


def _ref(tmp_path: Path) -> Path:
    """A finished run folder as far as analysis.pack reads one."""
    ref = tmp_path / "reference"
    ref.mkdir(parents=True)
    (ref / "config.yaml").write_text("estimator:\n  name: bipace_q\nseed: 0\n")
    (ref / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": "bipace_q", "seed": 0,
                                              "status": "finished"}) + "\n")
    (ref / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "time": 1.0 + i}) + "\n"
                                               for i in range(3)))
    (ref / "eval.jsonl").write_text(json.dumps({"iteration": 0, "time": 1.0}) + "\n")
    (ref / "train.log").write_text("progress\n")
    (ref / "checkpoints").mkdir()
    return ref


@pytest.mark.parametrize("fault", [fi.pack_drop_runs, fi.pack_escaping_record, fi.pack_damaged])
def test_the_pack_faults_run_and_are_as_expected(tmp_path, fault):
    happened, lost = fault(tmp_path, _ref(tmp_path))
    assert happened.startswith(("exit 2", "unpack: exit 2", "`--unpack`: exit 2")) and lost


def test_a_pack_that_drops_runs_or_writes_outside_into_makes_its_row_unexpected(tmp_path, monkeypatch):
    import analysis.pack
    import analysis.runs

    monkeypatch.setattr(analysis.pack, "_dropped_runs", lambda out, runs_root: [])
    with pytest.raises(FaultFailed, match="pack after a run folder was deleted: exit 0"):
        fi.pack_drop_runs(tmp_path / "a", _ref(tmp_path))
    monkeypatch.setattr(analysis.runs, "is_record_path", lambda path: True)  # the check read_packed makes
    with pytest.raises(FaultFailed, match="unpack: exit 2"):  # refused later, without naming the record path
        fi.pack_escaping_record(tmp_path / "b", _ref(tmp_path / "b"))
