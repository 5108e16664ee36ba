"""The decode-matmul benchmark (``python -m benchmarks.switches pack-weights``): its matrices are the lean step's,
and a real run on the tiny shapes gives a table with every row count."""
from __future__ import annotations

import pytest
import torch

from benchmarks.switches.pack_weights import SHAPES, matrices, run, table


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_matrices_are_those_the_lean_step_multiplies_by(model):
    from transformers import LlamaConfig, LlamaForCausalLM

    from agents.engines.lean import LeanWeights

    layers, d, mlp, hq, hk, hd, vocab = SHAPES[model]
    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=d, intermediate_size=mlp, num_attention_heads=hq,
                      num_key_value_heads=hk, head_dim=hd, vocab_size=vocab, tie_word_embeddings=False)
    with torch.device("meta"):  # shapes only: no 540 MB of SmolLM2 weights
        lm = LlamaForCausalLM(cfg)
    w = LeanWeights(lm, pack="off").current()
    got = [tuple(m[0].shape) for i in range(layers) for m in (w.qkv[i], w.o[i], w.gate_up[i], w.down[i])]
    assert got + [tuple(w.head[0].shape)] == matrices(model)


def test_a_run_reports_every_row_count():
    res = run("tiny", [1, 3], repeats=1, threads=1)
    assert res["bytes"] == 4 * sum(o * i for o, i in matrices("tiny")) and res["sum_gbs"] > 0
    text = table(res, "tiny")
    assert "| 1 |" in text and "| 3 |" in text and "GB/s" in text
    assert all(c["linear"] > 0 for c in res["cells"].values())
