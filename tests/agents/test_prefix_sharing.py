"""Shared prompt prefixes in the trainer's forwards (``trainer.forward.pack_rows_shared``): on real rollout rows
(TextCraft, the tiny model, G copies per goal, several turns) the shared pass gives the unshared pass's log-probs,
entropy, hidden states and gradients; so do suffixes split into length buckets (``trainer.suffix_buckets``); the
packing computes fewer positions; and the engine's passes with ``trainer.prefix_sharing`` on and off, and with
buckets, agree."""
from __future__ import annotations

import pytest
import torch

from agents.engines import SamplingConfig, make_engine
from agents.rollout import Agent, collect, prompt_config_for
from envs.pool import EnvPool, TaskSampler
from trainer.forward import (
    PackedBatch,
    PrefixPackedBatch,
    pack_rows,
    pack_rows_shared,
    policy_forward,
    prefix_order,
)


@pytest.fixture(scope="module")
def hf_engine(tiny_dir):
    return make_engine("hf", tiny_dir, dtype="float32")


@pytest.fixture(scope="module")
def rollout_rows(hf_engine):
    """Rows of 2 TextCraft goals x 4 copies, up to 4 turns each, sampled by the tiny model (real prompts)."""
    tok = hf_engine.tokenizer
    with EnvPool("TextCraft-v0", 8, env_kwargs={"max_steps": 4}, mode="inline") as pool:
        tasks = TaskSampler("train", pool.num_tasks("train"), seed=3).sample(2)
        batch, _ = collect(Agent(pool=pool, engine=hf_engine, tokenizer=tok,
                                 prompt_config=prompt_config_for(tok, 2048), max_prompt_tokens=2048), tasks,
                           group_size=4, sampling=SamplingConfig(temperature=1.0, max_tokens=16), seed=2)
    assert len(batch) >= 16
    return batch


def _grads(model, packed) -> dict[str, torch.Tensor]:
    model.zero_grad()
    out = policy_forward(model, packed, compute_entropy=True)
    # a loss that weighs each token differently, so that a row given another row's prefix would show
    w = torch.linspace(0.5, 1.5, out.logprobs.numel()).reshape(out.logprobs.shape)
    ((out.logprobs * w).sum() + 0.3 * (out.entropy * w).sum()).backward()
    return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def assert_same_pass(model, want, got) -> None:
    """Two packings of the same rows give the same log-probs, entropy, hidden states (layer -2) and gradients."""
    model.eval()
    with torch.no_grad():
        a = policy_forward(model, want, hidden_layer=-2)
        b = policy_forward(model, got, hidden_layer=-2)
    torch.testing.assert_close(b.logprobs, a.logprobs, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(b.entropy, a.entropy, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(b.hidden, a.hidden, atol=1e-5, rtol=1e-5)
    assert torch.equal(b.mask, a.mask)
    ga, gb = _grads(model, want), _grads(model, got)
    assert set(ga) == set(gb)
    for k in ga:
        torch.testing.assert_close(gb[k], ga[k], atol=1e-5, rtol=1e-4, msg=k)


def test_shared_packing_equals_unshared_on_rollout_rows(hf_engine, rollout_rows):
    model = hf_engine.model
    rows = prefix_order(rollout_rows.prompt_ids)
    ps = [rollout_rows.prompt_ids[i] for i in rows]
    rs = [rollout_rows.response_ids[i] for i in rows]
    plain = pack_rows(ps, rs, pad_id=hf_engine.pad_id)
    shared = pack_rows_shared(ps, rs, pad_id=hf_engine.pad_id)
    assert isinstance(shared, PrefixPackedBatch)
    assert shared.padded_tokens < 0.9 * plain.input_ids.numel()
    assert shared.num_response_tokens == plain.num_response_tokens
    # every row keeps >= 1 prompt token after its prefix, and prefix + suffix rebuild the row
    assert bool((shared.prompt_len >= 1).all())
    for j in range(len(ps)):
        k = int(shared.row_prefix[j])
        pre = shared.prefix_ids[k][shared.prefix_mask[k].bool()]
        suf = shared.input_ids[j][shared.attention_mask[j].bool()]
        assert torch.equal(torch.cat([pre, suf]), torch.cat([ps[j], rs[j]]))

    assert_same_pass(model, plain, shared)


def test_suffix_buckets_equal_one_suffix_forward_on_rollout_rows(hf_engine, rollout_rows):
    """Suffixes in length buckets (each its own forward over a copy of the prefixes' cache): the one-forward
    shared pass's log-probs, entropy, hidden states and gradients, in the rows' order, on fewer positions."""
    model = hf_engine.model
    rows = prefix_order(rollout_rows.prompt_ids)
    ps = [rollout_rows.prompt_ids[i] for i in rows]
    # the fixture's responses all run to the token limit: cut them to lengths 1..16 so that suffixes differ
    rs = [rollout_rows.response_ids[i][: 1 + (7 * j) % 16] for j, i in enumerate(rows)]
    one = pack_rows_shared(ps, rs, pad_id=hf_engine.pad_id)
    split = pack_rows_shared(ps, rs, pad_id=hf_engine.pad_id, suffix_buckets=4)
    assert one.suffix_bucket is None and split.suffix_bucket is not None
    assert 2 <= int(split.suffix_bucket.max()) + 1 <= 4
    assert split.padded_tokens < one.padded_tokens
    assert_same_pass(model, one, split)


def test_any_bucket_split_is_exact():
    """Whatever rows a bucket holds, the log-probs are those of the plain pass; the planned split computes fewer
    positions than one suffix forward or than a split that mixes lengths."""
    from tests.trainer.helpers import tiny_qwen2

    model = tiny_qwen2(vocab=64).eval()
    g = torch.Generator().manual_seed(0)
    base = torch.randint(2, 64, (12,), generator=g)
    ps = [torch.cat([base, torch.randint(2, 64, (n,), generator=g)]) for n in (2, 90, 3, 100)]
    rs = [torch.randint(2, 64, (4,), generator=g) for _ in ps]
    split = pack_rows_shared(ps, rs, min_saving=0.0, suffix_buckets=2)
    assert split.suffix_bucket.tolist() == [1, 0, 1, 0]
    planned = split.padded_tokens
    with torch.no_grad():
        plain = policy_forward(model, pack_rows(ps, rs), hidden_layer=-1)
        for buckets in ([1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 2, 3]):
            split.suffix_bucket = torch.tensor(buckets)
            out = policy_forward(model, split, hidden_layer=-1)
            torch.testing.assert_close(out.logprobs, plain.logprobs, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.hidden, plain.hidden, atol=1e-5, rtol=1e-5)
        split.suffix_bucket = torch.tensor([1, 0, 0, 1])
        assert split.padded_tokens > planned
    split.suffix_bucket = None
    assert split.padded_tokens > planned


def test_length_buckets_plan():
    from agents.prefixes import plan_length_buckets

    assert plan_length_buckets([10, 100, 12, 98, 50], 3, overhead=0) == [2, 0, 2, 0, 1]
    assert plan_length_buckets([10, 100, 12, 98, 50], 1) == [0] * 5
    assert plan_length_buckets([7, 7, 7], 4) == [0, 0, 0]  # equal lengths: nothing to save
    assert plan_length_buckets([5, 400, 6], 3, overhead=10_000) == [0, 0, 0]  # overhead above the saving
    assert plan_length_buckets([], 2) == []
    lengths = [int(x) for x in torch.randint(1, 300, (40,), generator=torch.Generator().manual_seed(0))]
    plan = plan_length_buckets(lengths, 4, overhead=0)

    def cost(p):
        return sum(sum(1 for q in p if q == b) * max(n for n, q in zip(lengths, p) if q == b) for b in set(p))

    assert cost(plan) < len(lengths) * max(lengths) and len(set(plan)) == 4
    # optimal among contiguous splits of the sorted lengths: no single cut point moved does better
    srt = sorted(lengths, reverse=True)
    best = min(sum((j - i) * srt[i] for i, j in zip((0, a, b, c), (a, b, c, 40)))
               for a in range(1, 38) for b in range(a + 1, 39) for c in range(b + 1, 40))
    assert cost(plan) == best
    with pytest.raises(ValueError, match="max_buckets"):
        plan_length_buckets([1, 2], 0)


def test_a_wrong_prefix_is_seen():
    """The comparison above can fail: rows pointed at another row's prefix give other log-probs."""
    from tests.trainer.helpers import tiny_qwen2

    model = tiny_qwen2(vocab=64).eval()
    g = torch.Generator().manual_seed(0)
    base = [torch.randint(2, 64, (12,), generator=g) for _ in range(2)]
    ps = [torch.cat([base[i // 3], torch.randint(2, 64, (3,), generator=g)]) for i in range(6)]
    rs = [torch.randint(2, 64, (4,), generator=g) for _ in range(6)]
    shared = pack_rows_shared(ps, rs, min_saving=0.0)
    assert isinstance(shared, PrefixPackedBatch) and shared.prefix_ids.shape[0] == 2
    with torch.no_grad():
        right = policy_forward(model, shared).logprobs
        shared.row_prefix = 1 - shared.row_prefix
        wrong = policy_forward(model, shared).logprobs
        plain = policy_forward(model, pack_rows(ps, rs)).logprobs
    torch.testing.assert_close(right, plain, atol=1e-5, rtol=1e-5)
    assert (wrong - plain).abs().max() > 1e-2


def test_packing_falls_back_when_nothing_is_shared():
    g = torch.Generator().manual_seed(1)
    ps = [torch.randint(2, 64, (n,), generator=g) for n in (5, 7, 3)]
    rs = [torch.randint(2, 64, (2,), generator=g) for _ in ps]
    assert isinstance(pack_rows_shared(ps, rs), PackedBatch)
    assert isinstance(pack_rows_shared(ps[:1], rs[:1]), PackedBatch)
    one_token = [torch.tensor([5]), torch.tensor([5])]  # a row must keep a prompt token: nothing to share
    assert isinstance(pack_rows_shared(one_token, rs[:2], min_saving=0.0), PackedBatch)


def test_gradient_checkpointing_refuses_a_shared_prefix():
    from tests.trainer.helpers import tiny_qwen2

    model = tiny_qwen2(vocab=64)
    model.gradient_checkpointing_enable()
    model.train()
    base = torch.arange(2, 14)
    ps = [torch.cat([base, torch.tensor([20 + i])]) for i in range(4)]
    rs = [torch.tensor([30, 31]) for _ in ps]
    shared = pack_rows_shared(ps, rs, min_saving=0.0)
    with pytest.raises(ValueError, match="gradient checkpointing"):
        policy_forward(model, shared)


def test_actor_passes_agree_with_and_without_sharing(tiny_dir, rollout_rows):
    """``PPOActor.compute_logprobs`` and ``update`` with ``prefix_sharing`` on and off: same log-probs, hidden
    states, loss metrics and updated weights (float tolerance)."""
    from agents.models import load_model
    from trainer.config import ModelConfig, TrainerConfig
    from trainer.ppo_actor import PPOActor, shutdown_distributed

    ps = rollout_rows.prompt_ids
    # responses of 1..64 tokens (the sampled ones, repeated and cut), so that suffix lengths differ
    rs = [torch.cat([r] * 4)[: 1 + (23 * j) % 64] for j, r in enumerate(rollout_rows.response_ids)]
    first = prefix_order(ps)[:8]  # the first log-prob batch of the shared passes is split into buckets
    assert pack_rows_shared([ps[i] for i in first], [rs[i] for i in first], suffix_buckets=3).suffix_bucket is not None
    results = {}
    for share in (False, True, "buckets"):
        model = load_model(tiny_dir, dtype="float32", device="cpu")
        cfg = TrainerConfig(lr=1e-3, zero_stage=0, mini_batch_rows=8, micro_batch_rows=4, logprob_batch_rows=8,
                            use_kl_loss=False, prefix_sharing=bool(share), shuffle_minibatches=True,
                            suffix_buckets=3 if share == "buckets" else 1)
        eng = PPOActor(model, cfg, model_cfg=ModelConfig(path="tiny", hidden_layer=-2), temperature=1.0,
                       device="cpu")
        try:
            old = eng.compute_logprobs(ps, rs, pad_id=0)
            adv = torch.linspace(-1, 1, len(rollout_rows))
            m = eng.update(ps, rs, adv, old.logprobs, generator=torch.Generator().manual_seed(0), pad_id=0)
            w = {k: v.detach().clone() for k, v in eng.lm.named_parameters()}
        finally:
            shutdown_distributed()
        results[share] = (old, m, w)
    o0, m0, w0 = results[False]
    for variant in (True, "buckets"):
        o1, m1, w1 = results[variant]
        torch.testing.assert_close(o1.logprobs, o0.logprobs, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(o1.hidden, o0.hidden, atol=1e-5, rtol=1e-5)
        for k in ("loss/policy", "loss/entropy", "loss/grad_norm", "loss/optimizer_steps"):
            assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), (variant, k)
        # AdamW divides by sqrt(v): an entry whose gradient is ~0 moves by up to lr either way on float noise, so
        # the weights are compared entry by entry and nearly all must agree
        diff = torch.cat([(w1[k] - w0[k]).abs().flatten() for k in w0])
        print(f"{variant}: weights within 1e-6: {float((diff <= 1e-6).float().mean()):.5f}, "
              f"max diff {float(diff.max()):.2e}")
        assert float((diff <= 1e-6).float().mean()) > 0.999
