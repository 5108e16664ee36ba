"""The actor forward: response log-probs, entropy and the hidden-state hook, all from one pass."""
from __future__ import annotations

import pytest
import torch

from estimators.cluster import greedy_cosine_clusters
from tests.trainer.helpers import make_rollout_batch, tiny_qwen2
from trainer.forward import ForwardModule, ForwardOutput, hidden_state_module, pack_rows, policy_forward

LAYERS = 4


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model(request):
    return tiny_qwen2(layers=LAYERS, tie=request.param).eval()


@pytest.fixture(scope="module")
def batch():
    return make_rollout_batch(n=7, seed=3)


def _reference(model, prompt, response, temperature=1.0):
    """Log-probs and entropy of ``response`` from a plain full-vocabulary forward of one row."""
    ids = torch.cat([prompt, response])[None]
    logits = model(input_ids=ids).logits[0].float() / temperature
    p = prompt.numel()
    lp_all = logits[p - 1: p - 1 + response.numel()].log_softmax(-1)
    lp = lp_all.gather(1, response[:, None]).squeeze(1)
    ent = -(lp_all.exp() * lp_all).sum(-1)
    return lp, ent


@pytest.mark.parametrize("layer", [-1, -2, -3, -LAYERS, -(LAYERS + 1)])
def test_hook_equals_output_hidden_states_on_prompts_alone(model, batch, layer):
    packed = pack_rows(batch.prompt_ids, batch.response_ids)
    with torch.no_grad():
        out = policy_forward(model, packed, hidden_layer=layer)
        for i, prompt in enumerate(batch.prompt_ids):
            ref = model(input_ids=prompt[None], output_hidden_states=True).hidden_states
            assert len(ref) == LAYERS + 1
            want = ref[layer][0, -1]
            assert torch.allclose(out.hidden[i], want, rtol=1e-4, atol=1e-4), (layer, i)
    assert out.hidden.shape == (len(batch), model.config.hidden_size)


def test_last_entry_is_after_the_final_norm(model, batch):
    """HF's hidden_states[-1] is the final norm's output, not the last layer's; the hook must match that."""
    packed = pack_rows(batch.prompt_ids, batch.response_ids)
    module, what = hidden_state_module(model, -1)
    assert module is model.model.norm and "norm" in what
    assert hidden_state_module(model, -(LAYERS + 1))[0] is model.model.embed_tokens
    # entry L - 1 (= -2) is the output of layer L - 2; layer L - 1's own output only appears normed, as entry L
    assert hidden_state_module(model, -2)[0] is model.model.layers[LAYERS - 2]
    with torch.no_grad():
        last = policy_forward(model, packed, hidden_layer=-1).hidden
        pre_norm = []
        h = model.model.layers[LAYERS - 1].register_forward_hook(lambda m, i, o: pre_norm.append(o))
        model(input_ids=batch.prompt_ids[0][None])
        h.remove()
    assert not torch.allclose(last[0], pre_norm[0][0, -1], atol=1e-3)


def test_hidden_layer_out_of_range(model):
    with pytest.raises(ValueError, match=r"out of range for a 4-layer model.*\[-5, -1\]"):
        hidden_state_module(model, -12)


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_logprobs_and_entropy_equal_full_softmax(model, batch, chunk):
    packed = pack_rows(batch.prompt_ids, batch.response_ids)
    with torch.no_grad():
        out = policy_forward(model, packed, chunk_tokens=chunk, temperature=0.7)
        for i, (p, r) in enumerate(zip(batch.prompt_ids, batch.response_ids)):
            lp, ent = _reference(model, p, r, temperature=0.7)
            n = r.numel()
            assert torch.allclose(out.logprobs[i, :n], lp, atol=1e-5)
            assert torch.allclose(out.entropy[i, :n], ent, atol=1e-4)
            assert torch.all(out.logprobs[i, n:] == 0) and torch.all(out.entropy[i, n:] == 0)
            assert out.mask[i, :n].all() and not out.mask[i, n:].any()
    assert out.nonfinite_rows.numel() == 0


def test_chunked_gradient_equals_unchunked(batch):
    grads = []
    for chunk in (2, 10_000):
        m = tiny_qwen2(layers=2)
        packed = pack_rows(batch.prompt_ids, batch.response_ids)
        out = policy_forward(m, packed, chunk_tokens=chunk)
        (out.logprobs.sum() + 0.1 * out.entropy.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5 * float(grads[1].abs().max()))


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_head_chunks_pad_the_lm_head_calls_without_changing_anything(batch, tie):
    """``head_chunks`` (ZeRO-3 on several ranks): the LM head runs that many times, forward and backward, and the
    log-probs, entropy and gradients are exactly those of the unpadded pass."""
    results = []
    for head_chunks in (0, 9):
        m = tiny_qwen2(layers=2, tie=tie)
        calls = {"fwd": 0, "bwd": 0}
        head = m.get_output_embeddings()
        h1 = head.register_forward_hook(lambda *a, c=calls: c.__setitem__("fwd", c["fwd"] + 1))
        h2 = head.register_full_backward_hook(lambda *a, c=calls: c.__setitem__("bwd", c["bwd"] + 1))
        packed = pack_rows(batch.prompt_ids, batch.response_ids)
        out = policy_forward(m, packed, chunk_tokens=8, head_chunks=head_chunks)
        (out.logprobs.sum() + 0.1 * out.entropy.sum()).backward()
        h1.remove()
        h2.remove()
        need = -(-packed.num_response_tokens // 8)
        assert need < 9
        # checkpointed chunks run the head twice each (forward, then again in the backward)
        assert calls == ({"fwd": 2 * need, "bwd": need} if head_chunks == 0 else {"fwd": 18, "bwd": 9})
        results.append((out.logprobs.detach(), out.entropy.detach(), [p.grad.clone() for p in m.parameters()]))
    (lp0, en0, g0), (lp1, en1, g1) = results
    assert torch.equal(lp0, lp1) and torch.equal(en0, en1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))


def test_one_forward_only(model, batch):
    """The decoder runs once per call even with the hidden state and entropy requested."""
    calls = []
    h = model.model.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        policy_forward(model, pack_rows(batch.prompt_ids, batch.response_ids), hidden_layer=-2)
    h.remove()
    assert len(calls) == 1


def test_nonfinite_rows_are_reported(model, batch):
    packed = pack_rows(batch.prompt_ids, batch.response_ids)

    def poison(mod, inp, out):
        out = out.clone()
        out[2] = float("nan")
        return out

    h = model.model.norm.register_forward_hook(poison)
    try:
        with torch.no_grad():
            out = policy_forward(model, packed)
    finally:
        h.remove()
    assert out.nonfinite_rows.tolist() == [2]


def test_pack_rows_layout_and_errors():
    p = [torch.tensor([5, 6, 7]), torch.tensor([8])]
    r = [torch.tensor([9]), torch.tensor([10, 11, 12])]
    pk = pack_rows(p, r, pad_id=0)
    assert pk.input_ids.tolist() == [[5, 6, 7, 9], [8, 10, 11, 12]]
    assert pk.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert pk.response_ids.tolist() == [[9, 0, 0], [10, 11, 12]]
    assert pk.prompt_len.tolist() == [3, 1]
    with pytest.raises(ValueError, match="empty prompt"):
        pack_rows([torch.tensor([], dtype=torch.long)], [torch.tensor([1])])


def test_actor_module_and_peft_wrapping(batch):
    import peft

    base = tiny_qwen2(layers=2)
    packed = pack_rows(batch.prompt_ids, batch.response_ids)
    with torch.no_grad():
        want = policy_forward(base, packed, hidden_layer=-2)
        lora = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
        got = ForwardOutput(**ForwardModule(lora)(packed.as_kwargs(), hidden_layer=-2))  # B = 0 at init: same function
    assert torch.allclose(got.logprobs, want.logprobs, atol=1e-6)
    assert torch.allclose(got.hidden, want.hidden, atol=1e-6)


def test_hidden_state_of_one_prompt_moves_only_by_float_noise_with_padding(model):
    """The same prompt alone and beside a longer row (so padded differently) gives hidden states that agree to float
    noise, not necessarily bit for bit: a cosine distance of order 1e-7 (measured 1.2e-7 on the TextCraft warm start,
    results/LOG.md 2026-12-01). The clustering's join tolerance (estimators.cluster.JOIN_TOL, 1e-6) is above that
    noise, so even epsilon = 0 puts the two rows in one cluster."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randint(3, 200, (23,), generator=gen), torch.randint(3, 200, (61,), generator=gen)
    r = torch.randint(3, 200, (4,), generator=gen)

    def hidden(prompts):
        packed = pack_rows(prompts, [r] * len(prompts), pad_id=0)
        with torch.no_grad():
            return policy_forward(model, packed, hidden_layer=-2, compute_entropy=False).hidden

    h_alone, h_padded = hidden([a])[0], hidden([b, a])[1]
    dist = float(1 - torch.nn.functional.cosine_similarity(h_alone, h_padded, dim=0))
    assert abs(dist) < 1e-6
    assert torch.allclose(h_alone, h_padded, atol=1e-5)
    two = torch.zeros(2, dtype=torch.long)
    clusters = greedy_cosine_clusters(torch.stack([h_alone, h_padded]), two, torch.tensor([0, 1]), two, 0.0)
    assert clusters.cluster_id.tolist() == [0, 0]
