"""The checks every config class shares (the run config's sections, ``EstimatorConfig``, ``WarmStartConfig``): one
error type, and one helper per kind of check, each message naming the field, the value and the fix.

They live in the estimators' package because the installed library (``bipace.estimators``) must import nothing
outside it; the rest of the repo imports them as ``common.config_checks``, which re-exports this module.

A field with a fixed set of values is typed ``Literal[...]``: the run config's reader refuses any other value as it
reads a file or an override (``trainer.config.io``), and ``check_choices`` refuses it in a config built in code,
with the same message (``choice_message``).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from typing import Any, Literal, NoReturn

__all__ = ["ConfigError", "fail", "check_number", "check_choices", "choice_message", "is_choice", "literal_choices"]


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the field, the value and the fix. A ``ValueError``,
    so ``except ValueError`` catches it too."""


def fail(msg: str) -> NoReturn:
    raise ConfigError(msg)


def _key(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name


def check_number(section: str, name: str, value, *, lo=None, hi=None, lo_open: bool = False, integer: bool = False,
                 fix: str = "") -> None:
    """Range check of one numeric field ``section.name`` (``name`` alone when ``section`` is empty): a finite number
    (an integer with ``integer``, never a bool) within ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``; either bound may
    be None); ``fix`` is appended to the message."""
    full = _key(section, name)
    tail = f"; {fix}" if fix else ""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or (not integer and not math.isfinite(value)):
        fail(f"{full}={value!r} must be a finite {'integer' if integer else 'number'}{tail}")
    below = lo is not None and (value <= lo if lo_open else value < lo)
    above = hi is not None and value > hi
    if (below or above) and lo is not None and hi is not None:
        fail(f"{full}={value!r} must lie in {'(' if lo_open else '['}{lo}, {hi}]{tail}")
    if below:
        fail(f"{full}={value!r} must be {'>' if lo_open else '>='} {lo}{tail}")
    if above:
        fail(f"{full}={value!r} must be <= {hi}{tail}")


def is_choice(value, allowed: tuple) -> bool:
    """``value`` is one of ``allowed``, of the same type (``True`` is not the choice ``1``)."""
    return any(type(value) is type(a) and value == a for a in allowed)


def choice_message(key: str, value, allowed: tuple) -> str:
    """``key=value must be one of [...]``, with the closest allowed value as the fix when one is close."""
    by_text = {str(a): a for a in allowed}
    close = difflib.get_close_matches(str(value), list(by_text), n=1)
    hint = f"; did you mean {by_text[close[0]]!r}?" if close else ""
    return f"{key}={value!r} must be one of {list(allowed)}{hint}"


def literal_choices(tp) -> tuple[tuple, bool] | None:
    """(allowed values, None allowed too) of ``Literal[...]`` or ``Literal[...] | None``; None for other types."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp), False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args) and typing.get_origin(rest[0]) is Literal:
            return typing.get_args(rest[0]), True
    return None


@functools.cache
def _choice_fields(cls) -> tuple[tuple[str, tuple, bool], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        found = literal_choices(hints[f.name])
        if found is not None:
            out.append((f.name, *found))
    return tuple(out)


def check_choices(obj: Any, section: str) -> None:
    """Every ``Literal``-typed field of dataclass ``obj`` holds one of its values (``ConfigError`` naming
    ``section.field`` otherwise)."""
    for name, allowed, nullable in _choice_fields(type(obj)):
        value = getattr(obj, name)
        if value is None and nullable:
            continue
        if not is_choice(value, allowed):
            fail(choice_message(_key(section, name), value, allowed))
