"""The one dataclass -> command-line adapter (``common.dataclass_cli``) and the field docstrings it reads."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from common.dataclass_cli import add_dataclass_arguments, dataclass_from_args, parse_bool
from common.dataclass_docs import field_docs


@dataclass
class _Cfg:
    lr: float = 1e-3
    """Learning rate (100% of it)."""
    steps: int = 10
    """Optimizer steps."""
    name: str = "x"
    greedy: bool = False
    """Greedy decoding."""
    cap: int | None = 20
    """At most this many; none = no cap."""
    kwargs: dict | None = None
    tags: dict = field(default_factory=dict)


def _parser():
    ap = argparse.ArgumentParser(prog="t")
    add_dataclass_arguments(ap, _Cfg, skip=("tags",))
    ap.add_argument("--force", action="store_true")
    return ap


def test_types_defaults_and_help():
    ap = _parser()
    cfg = dataclass_from_args(_Cfg, ap.parse_args([]))
    assert cfg == _Cfg()
    args = ap.parse_args(["--lr", "3e-4", "--steps", "7", "--greedy", "yes", "--cap", "none",
                          "--kwargs", '{"show_inventory": true}', "--force"])
    cfg = dataclass_from_args(_Cfg, args)
    assert (cfg.lr, cfg.steps, cfg.greedy, cfg.cap, cfg.kwargs) == (3e-4, 7, True, None, {"show_inventory": True})
    assert type(cfg.lr) is float and type(cfg.steps) is int
    text = ap.format_help()
    assert "Learning rate (100% of it). (default: 0.001)" in text and "--tags" not in text
    assert dataclass_from_args(_Cfg, args, steps=2).steps == 2


@pytest.mark.parametrize("argv,msg", [(["--greedy", "maybe"], "is not a boolean"), (["--steps", "1.5"], "invalid int"),
                                      (["--kwargs", "{bad"], "is not JSON")])
def test_bad_values_name_the_option(argv, msg, capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)
    err = capsys.readouterr().err
    assert argv[0] in err and msg in err


def test_parse_bool_and_field_docs():
    assert [parse_bool(x) for x in ("true", "On", "1", "no", "FALSE", "0")] == [True, True, True, False, False, False]
    assert field_docs(_Cfg) == {"lr": "Learning rate (100% of it).", "steps": "Optimizer steps.",
                                "greedy": "Greedy decoding.", "cap": "At most this many; none = no cap."}


def test_the_warm_start_and_tiny_model_commands_use_it():
    """Both commands take every field of their dataclass, with the same parse (the warm start's cache keys of the
    committed studies are checked in tests/experiments/test_study.py)."""
    import dataclasses

    from agents.models.tiny import TinyModelConfig
    from warmstart.recipe import WarmStartConfig, cli_parser, config_from_args

    ap = cli_parser()
    for f in dataclasses.fields(WarmStartConfig):
        assert "--" + f.name.replace("_", "-") in ap.format_help()
    cfg = config_from_args(ap.parse_args(["--env", "textcraft", "--eval-max-tasks", "null", "--epochs", "20"]))
    assert cfg.eval_max_tasks is None and cfg.epochs == 20
    from agents.models.__main__ import _tiny_args

    tp = argparse.ArgumentParser()
    _tiny_args(tp)
    tiny = dataclass_from_args(TinyModelConfig, tp.parse_args(["--out", "x", "--layers", "3", "--kv-heads", "1"]))
    assert tiny == dataclasses.replace(TinyModelConfig(), layers=3, kv_heads=1)
