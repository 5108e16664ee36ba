"""The checks every config class shares (``estimators.config_checks``, re-exported by ``common.config_checks``): one
error type, one message per kind of check."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from estimators.config_checks import ConfigError, check_choices, check_number, choice_message, is_choice


def test_config_error_is_a_value_error():
    """Code written against ``except ValueError`` (the estimators' callers, the warm-start command line) still
    catches every config error."""
    with pytest.raises(ValueError, match="x.y=-1 must be >= 0"):
        check_number("x", "y", -1, lo=0)


@pytest.mark.parametrize("kw,value,message", [
    (dict(lo=0), -1, "s.f=-1 must be >= 0"),
    (dict(lo=0, lo_open=True), 0, "s.f=0 must be > 0"),
    (dict(hi=1), 2, "s.f=2 must be <= 1"),
    (dict(lo=0, hi=1), 1.5, "s.f=1.5 must lie in [0, 1]"),
    (dict(lo=0, lo_open=True, hi=1), 0.0, "s.f=0.0 must lie in (0, 1]"),
    (dict(lo=1, integer=True), 1.5, "s.f=1.5 must be a finite integer"),
    (dict(lo=1, integer=True), True, "s.f=True must be a finite integer"),
    (dict(), float("nan"), "s.f=nan must be a finite number"),
    (dict(), "3", "s.f='3' must be a finite number"),
    (dict(lo=0, fix="0 turns it off"), -2, "s.f=-2 must be >= 0; 0 turns it off"),
])
def test_check_number_names_the_field_the_value_and_the_bound(kw, value, message):
    with pytest.raises(ConfigError) as e:
        check_number("s", "f", value, **kw)
    assert str(e.value) == message


def test_check_number_accepts_the_bounds_and_a_top_level_key():
    check_number("s", "f", 0, lo=0, hi=1)
    check_number("s", "f", 1, lo=0, hi=1)
    check_number("s", "f", 3, lo=1, integer=True)
    with pytest.raises(ConfigError, match=r"^seed=-1 must be >= 0$"):
        check_number("", "seed", -1, lo=0)


def test_a_choice_has_its_type():
    assert is_choice(2, (0, 1, 2, 3)) and is_choice("hf", ("hf", "vllm"))
    assert not is_choice(True, (0, 1, 2, 3))  # True == 1, but a bool is no ZeRO stage
    assert not is_choice("2", (0, 1, 2, 3))


def test_choice_message_lists_the_values_and_the_closest():
    assert choice_message("rollout.engine", "vlm", ("hf", "vllm")) == (
        "rollout.engine='vlm' must be one of ['hf', 'vllm']; did you mean 'vllm'?")
    assert choice_message("k", "zzz", ("a", "b")) == "k='zzz' must be one of ['a', 'b']"


@dataclass
class _Cfg:
    mode: Literal["a", "b"] = "a"
    stage: Literal[0, 1, 2] = 0
    maybe: Literal["x", "y"] | None = None
    free: str = "anything"


def test_check_choices_reads_the_literal_fields():
    check_choices(_Cfg(), "cfg")
    check_choices(_Cfg(mode="b", stage=2, maybe="y", free="other"), "cfg")
    for kw, message in [({"mode": "c"}, "cfg.mode='c' must be one of ['a', 'b']"),
                        ({"stage": 3}, "cfg.stage=3 must be one of [0, 1, 2]"),
                        ({"stage": False}, "cfg.stage=False must be one of [0, 1, 2]"),
                        ({"maybe": "z"}, "cfg.maybe='z' must be one of ['x', 'y']")]:
        with pytest.raises(ConfigError) as e:
            check_choices(_Cfg(**kw), "cfg")
        assert str(e.value).startswith(message)


def test_common_re_exports_the_one_set_of_checks():
    """The run config, the warm start and the environments import ``common.config_checks``: the same objects, so
    ``except ConfigError`` catches the estimators' errors too."""
    import common.config_checks
    import estimators.config_checks

    for name in estimators.config_checks.__all__:
        assert getattr(common.config_checks, name) is getattr(estimators.config_checks, name), name
    assert common.config_checks.__all__ == estimators.config_checks.__all__
