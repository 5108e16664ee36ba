"""A step group whose returns are all equal carries no signal: GiGPO's step advantage there is exactly 0 here.

verl-agent's GiGPO computes the same formula in float32: ``mean = torch.mean(torch.tensor(values))`` can land an ulp
off the common value, and ``(x - mean) / (std + 1e-6)`` (std then ~1e-7) turns that ulp into +-0.3 to 0.5. The float32
arithmetic below is that formula written out (mean, unbiased std, std + 1e-6), not verl-agent's code.
"""
from __future__ import annotations

import torch

from estimators import EstimatorConfig, compute_advantages

from .helpers import act, make_batch


def _float32_step_advantage(values: list[float]) -> torch.Tensor:
    r = torch.tensor(values, dtype=torch.float32)
    return (r - r.mean()) / (r.std() + 1e-6)


def test_equal_returns_give_exactly_zero_here_and_an_ulp_artefact_in_float32():
    cases = [(n, k) for n in range(3, 9) for k in range(15)]  # n equal returns 10 * 0.95^k
    nonzero = []
    for n, k in cases:
        ret = 10 * 0.95 ** k
        # n trajectories through the same states: reward 10 k steps after the shared state "s"
        rows = [(0, tr, t, 10.0 if t == k else 0.0, True, "s" if t == 0 else f"s{t}", act("x"))
                for tr in range(n) for t in range(k + 1)]
        res = compute_advantages(make_batch(rows), EstimatorConfig(name="gigpo", gamma=0.95, norm_mode="mean_std_norm"))
        assert res.step.abs().max().item() == 0.0, (n, k)
        f32 = _float32_step_advantage([float(torch.tensor(ret, dtype=torch.float32))] * n)
        if f32.abs().max().item() > 0:
            nonzero.append((n, k, round(f32.abs().max().item(), 3)))
    # measured 2026-12-06 (torch 2.13 CPU): the float32 formula is nonzero in 21 of these 90 cases, e.g. 6 rows two
    # steps before the reward (k = 2) get 0.466 in size
    assert len(cases) == 90 and len(nonzero) == 21, nonzero
    assert (6, 2, 0.466) in nonzero
    assert all(0.25 < a < 0.5 for _, _, a in nonzero), nonzero
