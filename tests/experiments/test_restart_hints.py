"""Every refusal that says how to start a run folder over names a flag the command the user ran accepts:
``experiments.train`` takes ``--restart``; ``experiments.sweep`` (and ``experiments.study``, which plans the same way)
has no such flag, so its message gives the run's own ``experiments.train`` command with ``--restart``."""
from __future__ import annotations

import re
import shlex

import pytest

from lab import sweep
from tests.experiments.test_sweep import FAST, SMOKE, _fixture_run
from trainer.config import ConfigError, load_config
from trainer.config.reference import config_from_argv
from trainer.run_folder import RunFolder


def _quoted_command(message: str) -> list[str]:
    (cmd,) = re.findall(r"`(python -m experiments\.train [^`]*)`", message)
    return shlex.split(cmd)


def test_the_sweeps_mismatch_message_gives_a_train_command_that_restarts_that_run(tmp_path, capsys):
    root = tmp_path / "runs"
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, root)
    _fixture_run(spec, "interrupted", 1, ["trainer.lr=0.5"])
    assert sweep.main(["--config", SMOKE, "--estimators", "grpo", "--runs-root", str(root), *FAST]) == 2
    err = capsys.readouterr().err
    assert "hold a different experiment" in err
    assert "rerun with --restart" not in err and "or `--restart`" not in err  # a flag the sweep rejects
    cmd = _quoted_command(err)
    assert cmd[:3] == ["python", "-m", "experiments.train"] and cmd[-1] == "--restart"
    cfg = config_from_argv(cmd[3:])  # experiments.train's own parser accepts the command as written
    assert cfg.trainer.resume is False and cfg.run_dir(root) == spec.run_dir
    assert cfg.trainer.lr == load_config(SMOKE).trainer.lr  # this sweep's experiment, not the folder's
    with pytest.raises(SystemExit) as e:  # the sweep has no --restart (it would discard every unfinished run)
        sweep.build_parser().parse_intermixed_args(["--config", SMOKE, "--restart"])
    assert e.value.code == 2


def test_the_sweeps_other_refusals_name_the_train_command_too(tmp_path):
    (spec,) = sweep.expand([SMOKE], ["grpo"], [0], (), FAST, tmp_path / "runs")
    _fixture_run(spec, "interrupted", 1)
    folder = sweep._run_folder(spec)
    for message in (str(folder.no_checkpoint_error("no checkpoints/ folder")),
                    str(folder.world_mismatch_error(2, 0, 1, spec.run_dir / "checkpoints" / "iter_00000001"))):
        assert "--restart" in message and "rerun with --restart" not in message
        assert config_from_argv(_quoted_command(message)[3:]).trainer.resume is False


def test_train_refusals_say_rerun_with_restart_which_train_accepts(tmp_path):
    out = tmp_path / "run"
    cfg = load_config(SMOKE, [*FAST, f"output_dir={out}"])
    folder = RunFolder(cfg)
    out.mkdir()
    folder.write_config()
    changed = RunFolder(load_config(SMOKE, [*FAST, f"output_dir={out}", "trainer.lr=0.5"]))
    with pytest.raises(ConfigError, match="or rerun with --restart to start this one over"):
        changed.check_compatible()
    assert "rerun with --restart" in str(folder.no_checkpoint_error("x"))
    assert config_from_argv(["--config", SMOKE, f"output_dir={out}", "--restart"]).trainer.resume is False
