"""The run folder's own checks, on hand-made folders (no training): ``--restart`` stopped at any step never leaves
checkpoints without their logs; a resume whose logs lack what the newest checkpoint covers, or whose checkpoint
was written by another rank count, is refused before any compute (exit 2) with the choices."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.experiments.test_train_cli import FAST


def _cfg(out: Path, *extra: str):
    from trainer.config import config_from_argv

    return config_from_argv([*FAST, f"output_dir={out}", *extra])


def _folder(tmp_path: Path, *, world_size: int = 1, zero_stage: int | None = None) -> tuple[Path, object]:
    """A run folder as a 2-iteration run leaves it (evaluations at 0 and 2, checkpoints 1 and 2), with stand-in
    checkpoint folders (their state.json and manifest only: nothing here loads weights)."""
    from trainer.run_folder import RunFolder

    out = tmp_path / "run"
    cfg = _cfg(out)
    folder = RunFolder(cfg)
    folder.write_config()
    folder.write_info("running", 2)
    for name, its in (("metrics.jsonl", [0, 1, 2]), ("eval.jsonl", [0, 2])):
        (out / name).write_text("".join(json.dumps({"iteration": i, "time": 0.0}) + "\n" for i in its))
    (out / "train.log").write_text("log\n")
    for k in (1, 2):
        ck = out / "checkpoints" / f"iter_{k:08d}"
        ck.mkdir(parents=True)
        state = {"format": 1, "iteration": k, "world_size": world_size,
                 "zero_stage": cfg.trainer.zero_stage if zero_stage is None else zero_stage,
                 "extra": {"evals_done": [i for i in (0, 2) if i <= k]}}
        (ck / "state.json").write_text(json.dumps(state))
        (ck / "manifest.json").write_text(json.dumps({"format": 1, "files": {}}))
    (out / "checkpoints" / "latest").write_text("iter_00000002\n")
    return out, cfg


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


class _Killed(BaseException):
    pass


def test_a_restart_stopped_at_any_step_leaves_no_checkpoint_without_its_logs(tmp_path, monkeypatch):
    from trainer.checkpoint import list_checkpoints
    from trainer.run_folder import RunFolder

    steps = 0
    for kill_at in range(1, 50):
        root = tmp_path / f"kill{kill_at}"
        out, cfg = _folder(root)
        calls = 0
        real_replace, real_rmtree = os.replace, shutil.rmtree

        def counted(real, at=kill_at):
            def step(*a, **k):
                nonlocal calls
                calls += 1
                if calls == at:
                    raise _Killed
                return real(*a, **k)
            return step

        monkeypatch.setattr(os, "replace", counted(real_replace))
        monkeypatch.setattr(shutil, "rmtree", counted(real_rmtree))
        try:
            RunFolder(_cfg(out, "--restart")).start_fresh()
            finished = True
        except _Killed:
            finished = False
        monkeypatch.setattr(os, "replace", real_replace)
        monkeypatch.setattr(shutil, "rmtree", real_rmtree)
        if list_checkpoints(out / "checkpoints"):  # checkpoints left: every log beside them
            assert all((out / n).exists() for n in ("config.yaml", "run.json", "metrics.jsonl", "eval.jsonl")), \
                (kill_at, sorted(p.name for p in out.iterdir()))
            RunFolder(cfg).check_resumable()  # and they resume
        if finished:
            steps = kill_at
            break
    assert steps > 3  # the loop did stop the restart at each of its steps
    assert not list_checkpoints(out / "checkpoints") and not list(out.glob(".checkpoints*"))
    kept = next(out.glob("restarted_*"))
    assert (kept / "metrics.jsonl").exists() and not (out / "metrics.jsonl").exists()


@pytest.mark.parametrize("damage,needle", [
    ("no metrics.jsonl", "metrics.jsonl is missing (it should hold iteration(s) 0-2)"),
    ("metrics.jsonl without 1-2", "metrics.jsonl has no line for iteration(s) 1-2"),
    ("eval.jsonl without 2", "eval.jsonl has no line for evaluation at iteration(s) 2"),
])
def test_a_checkpoint_whose_logs_lack_its_iterations_is_refused_before_compute(tmp_path, capsys, damage, needle):
    from experiments.train import main

    out, _ = _folder(tmp_path)
    if damage == "no metrics.jsonl":
        (out / "metrics.jsonl").unlink()
    elif damage == "metrics.jsonl without 1-2":
        (out / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "time": 0.0}) + "\n")
    else:
        (out / "eval.jsonl").write_text(json.dumps({"iteration": 0, "time": 0.0}) + "\n")
    (out / "train.log").unlink()  # written by the trainer's set-up: its absence shows nothing was built
    before = _files(out)
    assert main([*FAST, "trainer.iterations=3", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "checkpoint of iteration 2 (iter_00000002)" in err
    assert "restore the logs" in err and "--restart" in err
    assert _files(out) == before


def test_a_checkpoint_whose_state_json_fails_its_checksum_says_nothing_about_the_logs(tmp_path):
    """The loader skips a checkpoint whose ``state.json`` differs from its manifest's SHA-256 (an edit, a disk
    error) and resumes from the previous one, so the checks before compute read the previous one too: an edited
    iteration (2 -> 7) is neither a gap in the logs nor, with another rank count written in, a reason to refuse."""
    from trainer.checkpoint import file_sha256
    from trainer.run_folder import RunFolder, RunFolderError

    out, cfg = _folder(tmp_path)
    ck = out / "checkpoints" / "iter_00000002"
    state = ck / "state.json"
    (ck / "manifest.json").write_text(json.dumps({"format": 1, "files": {
        "state.json": {"size": state.stat().st_size, "sha256": file_sha256(state)}}}))
    state.write_text(state.read_text().replace('"iteration": 2', '"iteration": 7').replace('"world_size": 1',
                                                                                          '"world_size": 4'))
    RunFolder(cfg).check_resumable()  # checkpoint 1: its world and logs agree
    (out / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "time": 0.0}) + "\n")
    with pytest.raises(RunFolderError, match=r"checkpoint of iteration 1 \(iter_00000001\).*iteration\(s\) 1\b"):
        RunFolder(cfg).check_resumable()


def test_a_checkpoint_of_another_rank_count_is_refused_before_compute_saying_how_to_relaunch(tmp_path, capsys):
    from experiments.train import main

    out, cfg = _folder(tmp_path, world_size=2)
    (out / "train.log").unlink()
    before = _files(out)
    assert main([*FAST, "trainer.iterations=3", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    stage = cfg.trainer.zero_stage
    assert (f"was written by 2 rank(s) with ZeRO stage {stage}; this run has 1 rank(s) with ZeRO stage {stage}"
            in err), err
    assert "Relaunch with 2 rank(s) (torchrun --nproc_per_node 2" in err and "--restart to discard it" in err
    assert _files(out) == before
