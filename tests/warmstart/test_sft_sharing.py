"""The SFT warm start's shared-prefix pass (``SFTLearner(share_prompt_loss=True)``) and its episode batches.

The rows are real expert TextCraft rows (the warm start's own shape: the rows of one episode share most of their
prompt); the reference is the unshared pass, which tests/warmstart/test_sft.py checks against a hand computation.
"""
from __future__ import annotations

import pytest
import torch

from envs.pool import Task
from trainer.forward import PrefixPackedBatch, pack_rows_shared
from warmstart import sft

ENV_KW = {"show_inventory": True}


@pytest.fixture(scope="module")
def rows():
    tasks = [Task("train", k, 300 + k) for k in range(0, 24, 4)]
    return sft.collect_expert_rows("TextCraft-v0", tasks, env_kwargs=ENV_KW)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, rows):
    from agents.models import load_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    out = build_tiny_model(tmp_path_factory.mktemp("sft-share") / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2),
                           corpus=list(sft.rows_corpus(rows, "textcraft")))
    return out, load_tokenizer(out)


def _data(rows, tok):
    from agents.rollout import prompt_config_for

    return sft.encode_rows(rows, tok, "textcraft", prompt_config_for(tok, 2048, 0))


def _loss_and_grads(path, data, idx, *, share, w=0.3, micro=8):
    """The loss of one step's rows and its gradient, as SFTLearner.step would backpropagate them."""
    from agents.models import load_model

    eng = sft.SFTLearner(load_model(path, dtype="float32"),
                         sft.sft_trainer_config(batch_rows=len(idx), micro_batch_rows=micro),
                         prompt_weight=w, share_prompt_loss=share)
    ps, rs = [data.prompt_ids[i] for i in idx], [data.response_ids[i] for i in idx]
    total = float(sum(int(r.numel()) for r in rs))
    lm = eng.lm
    lm.zero_grad(set_to_none=True)
    loss_sum, nll_sum, bad = 0.0, 0.0, []
    for _rows, b, loss, nll in eng._micro_losses(ps, rs, 0, total):
        loss.backward()
        loss_sum += float(loss.detach())
        nll_sum += float(nll.detach())
        bad += b
    grads = {n: p.grad.detach().clone() for n, p in lm.named_parameters() if p.grad is not None}
    return loss_sum, nll_sum, grads, bad


def test_episode_rows_share_most_of_their_prompt(tiny, rows):
    """The premise: one episode's rows share a long prefix, so a batch of them packs into far fewer positions."""
    path, tok = tiny
    data = _data(rows, tok)
    idx = [i for i, e in enumerate(data.episode) if e == data.episode[0]]
    assert len(idx) >= 3
    packed = pack_rows_shared([data.prompt_ids[i] for i in idx], [data.response_ids[i] for i in idx], 0,
                              score_prompt=True)
    unshared = sum(int(data.prompt_ids[i].numel() + data.response_ids[i].numel()) for i in idx)
    assert packed.num_tokens < 0.75 * unshared


@pytest.mark.parametrize("w", [0.3, 1.0])
def test_shared_prompt_loss_equals_unshared(tiny, rows, w, monkeypatch):
    """Loss, response NLL and every parameter's gradient equal the unshared pass's to float tolerance, on a batch
    of two episodes' rows (several prefixes, one row per prefix too) split over two micro-batches."""
    path, tok = tiny
    data = _data(rows, tok)
    eps = sorted(set(data.episode))[:2]
    idx = [i for i, e in enumerate(data.episode) if e in eps]
    a = _loss_and_grads(path, data, idx, share=False, w=w, micro=(len(idx) + 1) // 2)
    packs = []
    import trainer.forward as actor_mod

    real = actor_mod.pack_rows_shared
    monkeypatch.setattr(actor_mod, "pack_rows_shared", lambda *a, **k: packs.append(real(*a, **k)) or packs[-1])
    b = _loss_and_grads(path, data, idx, share=True, w=w, micro=(len(idx) + 1) // 2)
    assert len(packs) == 2 and all(isinstance(p, PrefixPackedBatch) for p in packs)  # both really shared
    assert sum(int((p.row_prefix == k).sum()) > 1 for p in packs for k in range(p.prefix_ids.shape[0])) >= 2
    assert b[0] == pytest.approx(a[0], rel=1e-5)
    assert b[1] == pytest.approx(a[1], rel=1e-5)
    assert set(a[2]) == set(b[2])
    for name in a[2]:
        torch.testing.assert_close(b[2][name], a[2][name], atol=2e-6, rtol=1e-4, msg=name)
    assert a[3] == b[3] == []


def test_shared_prompt_loss_detects_a_wrong_prefix(tiny, rows):
    """The comparison can fail: scoring the prefix once instead of once per row gives another loss."""
    path, tok = tiny
    data = _data(rows, tok)
    idx = [i for i, e in enumerate(data.episode) if e == data.episode[0]]
    ref = _loss_and_grads(path, data, idx, share=False)[0]
    orig = torch.bincount

    def once_per_prefix(x, minlength=0):
        return (orig(x, minlength=minlength) > 0).long()

    torch.bincount = once_per_prefix
    try:
        wrong = _loss_and_grads(path, data, idx, share=True)[0]
    finally:
        torch.bincount = orig
    assert wrong < ref - 1e-3


def test_shared_prompt_loss_needs_the_switches(tiny, rows):
    """Off by default; no prompt weight or prefix_sharing=false keep the unshared packing."""
    from agents.models import load_model

    path, tok = tiny
    assert sft.SFTLearner(load_model(path, dtype="float32"), sft.sft_trainer_config()).share_prompt_loss is False
    with pytest.raises(ValueError, match="prefix_targets needs a shared batch"):
        from trainer.forward import pack_rows, policy_forward

        data = _data(rows[:2], tok)
        policy_forward(load_model(path, dtype="float32"), pack_rows(data.prompt_ids, data.response_ids, 0),
                      prefix_targets=True)


def test_shared_prompt_loss_poisoned_prefix_marks_its_rows(tiny, rows):
    """A NaN in a shared prefix's scores marks every row of that prefix (the step is then skipped)."""
    from agents.models import load_model
    from trainer.forward import policy_forward

    path, tok = tiny
    data = _data(rows, tok)
    idx = [i for i, e in enumerate(data.episode) if e == data.episode[0]]
    packed = pack_rows_shared([data.prompt_ids[i] for i in idx], [data.response_ids[i] for i in idx], 0,
                              score_prompt=True)
    model = load_model(path, dtype="float32")
    with torch.no_grad():
        model.get_output_embeddings().weight[int(packed.prefix_ids[0, 1])] = float("nan")
        out = policy_forward(model, packed, compute_entropy=False, prefix_targets=True)
    rows_of_0 = torch.nonzero(packed.row_prefix == 0).flatten().tolist()
    assert set(rows_of_0) <= set(out.nonfinite_rows.tolist())


def test_episode_batches_cover_every_row_once(tiny, rows):
    """batch_by='episode': every row once per epoch, an episode's rows contiguous in the cut, seeded."""
    path, tok = tiny
    data = _data(rows, tok)
    b1 = sft._episode_batches(data, 4, torch.Generator().manual_seed(0))
    b2 = sft._episode_batches(data, 4, torch.Generator().manual_seed(0))
    assert b1 == b2
    flat = sorted(i for b in b1 for i in b)
    assert flat == list(range(len(data)))
    assert all(len(b) == 4 for b in b1[:-1]) or sum(len(b) < 4 for b in b1) == 1
    same_episode = sum(data.episode[b[j]] == data.episode[b[j + 1]] for b in b1 for j in range(len(b) - 1))
    pairs = sum(len(b) - 1 for b in b1)
    assert same_episode / pairs > 0.6
    with pytest.raises(ValueError, match="batch_by"):
        sft.SFTSchedule(batch_by="goal")


def test_warm_start_options_are_keyed_and_checked():
    """batch_by / share_prefixes: the old values keep the cache keys of earlier entries, new values get their own;
    bad values fail with the field's name before any compute."""
    from warmstart import config as warmstart_config
    from warmstart.recipe import WarmStartConfig, cache_key

    assert sft.BATCH_BY is warmstart_config.BATCH_BY
    assert cache_key(WarmStartConfig(env="textcraft", batch_by="row", share_prefixes=False)) == "ee351835b46a"
    keys = {cache_key(WarmStartConfig(env="textcraft", batch_by=b, share_prefixes=s))
            for b in ("row", "episode") for s in (False, True)}
    assert len(keys) == 4
    with pytest.raises(ValueError, match="batch_by='goal'"):
        WarmStartConfig(batch_by="goal")
    with pytest.raises(ValueError, match="share_prefixes"):
        WarmStartConfig(share_prefixes="yes")
