"""Session fixtures for model and engine tests: one tiny model and one SmolLM2 folder per session.

The tiny model is built in a temporary folder (a few seconds); SmolLM2 is converted once into the
cache (``$BIPACE_CACHE`` or ``<repo>/.cache``; ~15 s the first time, then reused by later sessions and
by the vLLM venv's test run).
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A 2-layer, hidden-64, head-dim-32 Qwen2 with a BPE tokenizer on the default corpus."""
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2))


@pytest.fixture(scope="session")
def tiny_dir_b(tmp_path_factory, tiny_dir):
    """Same shape and tokenizer as ``tiny_dir`` but other random weights (seed 1): the 'updated' model."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("models") / "tiny_b"
    shutil.copytree(tiny_dir, out)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    torch.manual_seed(1)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def smollm2_dir():
    from agents.models.smollm2 import convert_smollm2

    return convert_smollm2()
