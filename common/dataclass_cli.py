"""The one dataclass -> command-line adapter: every ``--help`` built from a dataclass comes from here.

    ap = argparse.ArgumentParser(...)
    add_dataclass_arguments(ap, WarmStartConfig)       # --field-name per field, help = the field's docstring
    cfg = dataclass_from_args(WarmStartConfig, ap.parse_args())

The option's type follows the field's annotation: ``bool`` -> true/false (also yes/no, on/off, 1/0); ``int``,
``float``, ``str``; ``dict`` -> JSON (``'{"show_inventory": true}'``); an optional field (``X | None``) also takes
``none``/``null``. The help is the docstring under the field (``common.dataclass_docs``) and its default.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from collections.abc import Iterable
from typing import Any

from common.dataclass_docs import field_docs

__all__ = ["add_dataclass_arguments", "dataclass_from_args", "parse_bool", "TRUE_WORDS", "FALSE_WORDS"]

#: the spellings of a boolean on a command line or in a ``key=value`` override (the run config reads them too)
TRUE_WORDS, FALSE_WORDS = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


def parse_bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in TRUE_WORDS:
        return True
    if t in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean: use true or false")


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({e.msg}): e.g. '{{\"key\": 1}}'") from e


def _parser_for(tp) -> tuple[Any, bool]:
    """(parse function, optional?) of an annotation."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        fn, _ = _parser_for(inner[0] if len(inner) == 1 else str)
        return fn, True
    if tp is bool:
        return parse_bool, False
    if tp in (int, float, str):
        return tp, False
    if tp is dict or origin is dict:
        return _json, False
    return str, False


def _optional(fn):
    def parse(text: str):
        return None if str(text).strip().lower() in ("none", "null") else fn(text)

    parse.__name__ = getattr(fn, "__name__", "value")
    return parse


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, *, skip: Iterable[str] = (),
                            extra_help: dict[str, str] | None = None) -> None:
    """Add ``--<field-name>`` for every field of dataclass ``cls`` (but ``skip``), default = the field's default,
    help = its docstring, the default and ``extra_help[field]``."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    skip, extra_help = set(skip), dict(extra_help or {})
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = None
        fn, optional = _parser_for(hints[f.name])
        text = " ".join(x for x in (docs.get(f.name, ""), f"(default: {default})", extra_help.get(f.name, "")) if x)
        metavar = "BOOL" if fn is parse_bool else ("JSON" if fn is _json else None)
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=_optional(fn) if optional else fn,
                            default=default, metavar=metavar, help=text.replace("%", "%%"))


def dataclass_from_args(cls, namespace: argparse.Namespace, **overrides):
    """``cls`` built from the parsed options that are its fields (others, e.g. ``--force``, are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in vars(namespace).items() if k in names}
    values.update(overrides)
    return cls(**values)
