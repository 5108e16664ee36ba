"""Reading and writing run configs: YAML files and dotted ``key=value`` overrides, typed against the sections
(``trainer.config.sections``), unknown keys and bad values reported before any compute."""
from __future__ import annotations

import difflib
import re
import types
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from common.config_checks import ConfigError, choice_message, fail, is_choice
from common.dataclass_cli import FALSE_WORDS, TRUE_WORDS

from .sections import RunConfig, config_to_dict

_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _type_name(tp) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(tp, "__name__", str(tp))


def _coerce(value, tp, key: str):
    """Convert ``value`` (from YAML or a CLI string) to type ``tp``, or raise ``ConfigError`` naming ``key``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none", "~")):
            if type(None) in args:
                return None
            fail(f"{key}=null is not allowed: give a {_type_name(tp)}")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                errors.append(str(e))
        fail(f"{key}={value!r} is not a {_type_name(tp)}")
    if origin is Literal:  # a choice: read as its values' type ("2" -> 2 for Literal[0, 1, 2, 3]), checked
        allowed = get_args(tp)
        kinds = {type(a) for a in allowed}
        if len(kinds) == 1 and next(iter(kinds)) in (str, int, bool):
            value = _coerce(value, next(iter(kinds)), key)
        if is_choice(value, allowed):
            return value
        fail(choice_message(key, value, allowed))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        fail(f"{key}={value!r} is not a bool: use true or false")
    if tp is int:
        if isinstance(value, bool):
            fail(f"{key}={value!r} is a bool where an integer is expected")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            s = value.strip()
            if re.fullmatch(r"[+-]?\d+", s):
                return int(s)
            if _FLOAT_RE.match(s) and float(s).is_integer():
                return int(float(s))
        fail(f"{key}={value!r} is not an integer")
    if tp is float:
        if isinstance(value, bool):
            fail(f"{key}={value!r} is a bool where a number is expected")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            s = value.strip().lower()
            if _FLOAT_RE.match(s) or s in ("inf", "-inf", "nan"):
                return float(s)
        fail(f"{key}={value!r} is not a number")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        fail(f"{key}={value!r} is not a string")
    if origin in (list, tuple):
        if isinstance(value, str):
            parsed = yaml.safe_load(value)
            value = parsed if isinstance(parsed, list) else [x.strip() for x in value.split(",") if x.strip()]
        if not isinstance(value, (list, tuple)):
            fail(f"{key}={value!r} is not a list: write [a, b] in YAML or key=[a,b] on the command line")
        args = get_args(tp)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
            if len(value) != len(args):
                fail(f"{key}={list(value)!r} must have exactly {len(args)} entries")
            return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            fail(f"{key}={value!r} is not a mapping: write {{a: 1}} in YAML")
        return dict(value)
    if is_dataclass(tp):
        if not isinstance(value, dict):
            fail(f"{key} must be a mapping of its fields, got {value!r}")
        return _build(tp, value, key)
    raise TypeError(f"config field {key} has an unsupported type {tp!r}")  # a bug in this module


def _hints(cls) -> dict[str, Any]:
    return get_type_hints(cls)


#: settings that were removed: dotted key -> the default they had. None of them was ever read, so a config that
#: still holds one (an old run folder's config.yaml) loads, and a run folder whose saved config holds the default
#: resumes; a value other than the default is dropped with a warning.
REMOVED_KEYS: dict[str, Any] = {"sft.episodes": 2000, "sft.epochs": 1, "sft.lr": 1e-4, "sft.batch_rows": 32,
                                "sft.dagger_rounds": 0}


def _unknown_key(cls, key: str, prefix: str) -> ConfigError:
    valid = [f.name for f in fields(cls)]
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    where = f"{prefix}.{key}" if prefix else key
    hint = f"; did you mean {(prefix + '.' if prefix else '') + close[0]!r}?" if close else ""
    return ConfigError(f"unknown config key {where!r}{hint} Valid keys here: {valid}")


def _build(cls, data: dict, prefix: str = ""):
    """Instantiate dataclass ``cls`` from a (possibly partial) mapping, type-checking every value."""
    hints = _hints(cls)
    names = {f.name for f in fields(cls)}
    kwargs = {}
    for k, v in data.items():
        if k not in names:
            dotted = f"{prefix}.{k}" if prefix else k
            if dotted in REMOVED_KEYS:
                if v != REMOVED_KEYS[dotted]:
                    warnings.warn(f"config key {dotted!r} (= {v!r}) was never read and has been removed; "
                                  "it is ignored: delete it from the config", stacklevel=2)
                continue
            raise _unknown_key(cls, k, prefix)
        kwargs[k] = _coerce(v, hints[k], f"{prefix}.{k}" if prefix else k)
    try:
        return cls(**kwargs)
    except ValueError as e:  # a class that checks itself when built: EstimatorConfig names its own fields
        if prefix:
            raise ConfigError(f"{prefix}: {e}") from e
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from e


def config_from_dict(data: dict) -> RunConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"a run config must be a mapping of sections, got {type(data).__name__}")
    cfg = _build(RunConfig, data)
    _portable_paths(cfg)
    return cfg


def _portable_paths(cfg: RunConfig) -> None:
    """Model folders are kept in their portable form (``envs.paths.portable_path``: ``$BIPACE_CACHE/...`` or
    repo-relative), so that a saved ``config.yaml`` reads the same, and compares equal, in every clone; readers
    resolve them with ``envs.paths.resolve_path``."""
    from envs.paths import portable_path

    for section, key in (("model", "path"), ("model", "tokenizer"), ("sft", "init_from")):
        obj = getattr(cfg, section)
        value = getattr(obj, key)
        if isinstance(value, str) and value:
            setattr(obj, key, portable_path(value))


def _set_dotted(data: dict, key: str, raw: str) -> None:
    """Write ``raw`` at dotted ``key`` into nested ``data``, checking the key path against the dataclasses."""
    parts = key.split(".")
    cls = RunConfig
    node = data
    prefix = ""
    for i, part in enumerate(parts):
        names = {f.name: f for f in fields(cls)}
        if part not in names:
            raise _unknown_key(cls, part, prefix)
        tp = _hints(cls)[part]
        last = i == len(parts) - 1
        if last:
            node[part] = _coerce(raw, tp, key)  # type-checked now; rebuilt (and range-checked) after all overrides
            return
        if not is_dataclass(tp):
            if get_origin(tp) is dict or tp is dict:  # env.kwargs.data_dir=...: a free-form mapping
                sub = node.setdefault(part, {})
                rest = ".".join(parts[i + 1:])
                sub[rest] = yaml.safe_load(raw) if isinstance(raw, str) else raw
                return
            raise ConfigError(f"config key {key!r}: {'.'.join(parts[: i + 1])!r} is a value, not a section")
        cls = tp
        prefix = f"{prefix}.{part}" if prefix else part
        existing = node.get(part)
        if is_dataclass(existing):
            existing = config_to_dict(existing)
        node[part] = dict(existing or {})
        node = node[part]


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Apply dotted ``key=value`` strings to a nested dict (later ones win)."""
    data = dict(data or {})
    for item in overrides or ():
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. trainer.lr=1e-6")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        _set_dotted(data, key, raw.strip())
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (PyYAML keeps the last one silently)."""


def _construct_unique_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # the base constructor reports unhashable keys
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found the key {key!r} twice (first at line {seen[key] + 1}): a second entry would silently replace "
                "the first; merge them into one", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_yaml(text: str):
    """``yaml.safe_load`` that rejects duplicate keys (``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML preset (or start from defaults when ``path`` is None), apply overrides, validate."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {str(p)!r} does not exist: pass a file under configs/ (or none)")
        if p.is_dir():
            raise ConfigError(f"--config {str(p)!r} is a folder: pass a YAML file, "
                              "e.g. configs/cpu/textcraft_tiny.yaml")
        try:
            data = load_yaml(p.read_bytes().decode("utf-8")) or {}
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {e.start}: {e.reason}): save it as "
                              "UTF-8") from None
        except OSError as e:
            raise ConfigError(f"config file {str(p)!r} cannot be read ({e.strerror or e})") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping of sections, got {type(data).__name__}")
    data = apply_overrides(data, overrides)
    return config_from_dict(data)


def save_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config as YAML (reloads to an equal ``RunConfig``)."""
    from common.fsio import atomic_write_text

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
    return p
