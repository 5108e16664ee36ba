"""PPO loss terms against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import PPOLossSettings, agg_loss, kl_penalty, policy_loss, ppo_loss

R = torch.tensor([0.5, 1.0, 1.5, 4.0])


def _rows(adv: float):
    logp = torch.log(R).unsqueeze(0)  # (1, 4), old_logp = 0 -> ratio = R
    return logp, torch.zeros_like(logp), torch.tensor([adv]), torch.ones_like(logp, dtype=torch.bool)


def test_clip_positive_advantage():
    loss, ind = policy_loss(*_rows(1.0), clip_ratio=0.2, dual_clip=3.0)
    # max(-r, -clip(r, 0.8, 1.2)): r=0.5 -> -0.5 (unclipped); 1 -> -1; 1.5 -> -1.2; 4 -> -1.2
    assert torch.allclose(loss[0], torch.tensor([-0.5, -1.0, -1.2, -1.2]))
    assert ind["clipped"][0].tolist() == [False, False, True, True]
    assert not ind["dual_clipped"].any()


def test_clip_and_dual_clip_negative_advantage():
    loss, ind = policy_loss(*_rows(-1.0), clip_ratio=0.2, dual_clip=3.0)
    # max(r, clip(r)): 0.5 -> 0.8 (clipped); 1 -> 1; 1.5 -> 1.5; 4 -> 4, then dual clip min(4, 3) = 3
    assert torch.allclose(loss[0], torch.tensor([0.8, 1.0, 1.5, 3.0]))
    assert ind["clipped"][0].tolist() == [True, False, False, False]
    assert ind["dual_clipped"][0].tolist() == [False, False, False, True]
    loss_nodual, _ = policy_loss(*_rows(-1.0), clip_ratio=0.2, dual_clip=None)
    assert torch.allclose(loss_nodual[0], torch.tensor([0.8, 1.0, 1.5, 4.0]))


def test_dual_clip_scales_with_advantage():
    logp, old, _, mask = _rows(0.0)
    loss, _ = policy_loss(logp, old, torch.tensor([-2.5]), mask, clip_ratio=0.2, dual_clip=3.0)
    assert math.isclose(float(loss[0, 3]), 2.5 * 3.0, rel_tol=1e-6)  # -A * c


def test_advantage_row_broadcast_equals_token_advantage():
    g = torch.Generator().manual_seed(0)
    logp, old = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    adv = torch.tensor([1.0, -2.0, 0.5])
    mask = torch.ones(3, 5, dtype=torch.bool)
    a, _ = policy_loss(logp, old, adv, mask)
    b, _ = policy_loss(logp, old, adv[:, None].expand(3, 5), mask)
    assert torch.equal(a, b)


VALS = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), 7.0]])
MASK = torch.tensor([[True, True, True], [True, False, False]])


@pytest.mark.parametrize(
    "mode,expected",
    [("token-mean", (1 + 2 + 3 + 4) / 4), ("seq-mean-token-mean", (2.0 + 4.0) / 2),
     ("seq-mean-token-sum", (6 + 4) / 2)],
)
def test_aggregation_modes(mode, expected):
    # the NaN on a padding position must not leak into the result
    assert math.isclose(float(agg_loss(VALS, MASK, mode)), expected, rel_tol=1e-6)


def test_aggregation_global_denominators_and_empty_rows():
    assert math.isclose(float(agg_loss(VALS, MASK, "token-mean", total_tokens=8)), 10 / 8, rel_tol=1e-6)
    assert math.isclose(float(agg_loss(VALS, MASK, "seq-mean-token-sum", total_rows=5)), 10 / 5, rel_tol=1e-6)
    empty = torch.zeros(2, 3, dtype=torch.bool)
    assert float(agg_loss(VALS, empty, "token-mean")) == 0.0
    # a row without tokens does not count as a sequence
    mask = torch.tensor([[True, True, True], [False, False, False]])
    assert math.isclose(float(agg_loss(VALS, mask, "seq-mean-token-mean")), 2.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(VALS, MASK, "mean")


def test_k3_low_var_kl_hand_values():
    logp = torch.tensor([[0.0, 0.0, 0.0, 0.0, -1.0]])
    ref = torch.tensor([[math.log(2.0), 0.0, -30.0, 5.0, -0.5]])
    k3 = kl_penalty(logp, ref, "low_var_kl")[0]
    # d = ref - logp: log 2 -> 2 - log 2 - 1; 0 -> 0; -30 -> e^-30 + 30 - 1 = 29 -> clamp 10; 5 -> e^5 - 6 -> 10
    assert math.isclose(float(k3[0]), 1 - math.log(2.0), rel_tol=1e-6)
    assert float(k3[1]) == 0.0
    assert float(k3[2]) == 10.0 and float(k3[3]) == 10.0
    assert math.isclose(float(k3[4]), math.exp(0.5) - 0.5 - 1, rel_tol=1e-6)
    assert torch.allclose(kl_penalty(logp, ref, "kl")[0], logp[0] - ref[0])
    assert torch.allclose(kl_penalty(logp, ref, "mse")[0], 0.5 * (logp[0] - ref[0]) ** 2)
    with pytest.raises(ValueError, match="kl_type"):
        kl_penalty(logp, ref, "k4")


def test_full_loss_combines_terms_by_hand():
    logp = torch.log(torch.tensor([[1.0, 1.5], [1.0, 0.5]]))
    old = torch.zeros(2, 2)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[True, True], [True, False]])
    ent = torch.tensor([[2.0, 4.0], [6.0, 100.0]])
    ref = torch.zeros(2, 2)
    out = ppo_loss(logp, old, adv, mask, entropy=ent, ref_logp=ref,
                   settings=PPOLossSettings(clip_ratio=0.2, dual_clip=3.0, loss_agg_mode="token-mean",
                                            entropy_coef=0.1, kl_coef=0.5, kl_type="low_var_kl"))
    # policy tokens: row0 A=+1: r=1 -> -1; r=1.5 -> -1.2 ; row1 A=-1: r=1 -> 1  => mean = (-1 - 1.2 + 1)/3
    pg = (-1.0 - 1.2 + 1.0) / 3
    # k3 with d = -logp: r=1 -> 0; r=1.5 -> 1/1.5 + log 1.5 - 1; row1 r=1 -> 0
    kl = (1 / 1.5 + math.log(1.5) - 1) / 3
    entropy = (2 + 4 + 6) / 3
    assert math.isclose(float(out.metrics["loss/policy"]), pg, rel_tol=1e-6)
    assert math.isclose(float(out.metrics["loss/kl"]), kl, rel_tol=1e-5)
    assert math.isclose(float(out.metrics["loss/entropy"]), entropy, rel_tol=1e-6)
    assert math.isclose(float(out.loss), pg + 0.5 * kl - 0.1 * entropy, rel_tol=1e-6)
    assert math.isclose(float(out.metrics["loss/clipfrac"]), 1 / 3, rel_tol=1e-6)
    # switches: no KL term when ref_logp is None or kl_coef = 0; no entropy term when coef = 0
    no_kl = ppo_loss(logp, old, adv, mask, entropy=ent, ref_logp=None, settings=PPOLossSettings(entropy_coef=0.1))
    assert "loss/kl" not in no_kl.metrics
    assert math.isclose(float(no_kl.loss), pg - 0.1 * entropy, rel_tol=1e-6)
    no_ent = ppo_loss(logp, old, adv, mask, entropy=ent, ref_logp=ref,
                      settings=PPOLossSettings(entropy_coef=0.0, kl_coef=0.0))
    assert math.isclose(float(no_ent.loss), pg, rel_tol=1e-6)


def test_loss_gradient_zero_outside_clip_region():
    # positive advantage, ratio above 1 + eps: the clipped branch is active and the gradient vanishes
    logp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    out = ppo_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool),
                   entropy=None, ref_logp=None)
    out.loss.backward()
    assert float(logp.grad[0, 0]) == 0.0
    assert math.isclose(float(logp.grad[0, 1]), -1.1 / 2, rel_tol=1e-5)  # d(-r)/dlogp = -r, token-mean over 2
