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


@pytest.fixture(scope="session")
def action_biased_state(tiny_dir):
    """State dict of ``tiny_dir`` whose ``</action>`` embedding row points along the mean final hidden
    state, so random-weight sampling emits ``</action>`` after a few tokens (the tiny model is tied, so
    both ``model.embed_tokens.weight`` and ``lm_head.weight`` carry the change)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    ids = [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=True,
                                   return_dict=False) for c in ("hi", "Goal: craft stick.", "get 1 oak log")]
    with torch.no_grad():
        h = torch.cat([model(torch.tensor([p]), output_hidden_states=True).hidden_states[-1][0] for p in ids])
    direction = h.mean(0) / h.mean(0).norm()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    emb = state["model.embed_tokens.weight"]
    emb[tok.convert_tokens_to_ids("</action>")] = 1.5 * direction
    if "lm_head.weight" in state:
        state["lm_head.weight"] = emb
    return state
