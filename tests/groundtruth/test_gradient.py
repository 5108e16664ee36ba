"""Policy-gradient code: autograd agreement, finite differences, and the expectation of the score sum."""
from __future__ import annotations

import numpy as np
import torch

from groundtruth.policy import (
    cosine,
    evaluate_policy,
    exact_gradient,
    expert_logits,
    occupancy,
    score_gradient,
    softmax,
    start_distribution,
)
from groundtruth.sampling import sample_rollout


def test_score_gradient_matches_autograd():
    rng = np.random.default_rng(0)
    S, A, N = 5, 4, 40
    theta = rng.standard_normal((S, A))
    states, actions, w = rng.integers(S, size=N), rng.integers(A, size=N), rng.standard_normal(N)
    t = torch.tensor(theta, requires_grad=True)
    logp = torch.log_softmax(t, dim=1)[torch.as_tensor(states), torch.as_tensor(actions)]
    (torch.as_tensor(w) * logp).sum().backward()
    np.testing.assert_allclose(score_gradient(softmax(theta), states, actions, w), t.grad.numpy(), atol=1e-12)


def _J(mdp, theta, rho):
    return float(rho @ evaluate_policy(mdp, softmax(theta)).V[0])


def test_objective_gradient_matches_finite_differences(small_craft):
    mdp = small_craft
    rng = np.random.default_rng(1)
    theta = expert_logits(mdp, 1.0, 1.0, rng)
    pi = softmax(theta)
    rho = start_distribution(mdp, [0, 1])
    v = evaluate_policy(mdp, pi)
    d, _ = occupancy(mdp, pi, rho)
    g = exact_gradient(mdp, pi, v, d, "objective")
    h = 1e-6
    idx = [tuple(x) for x in rng.integers([mdp.num_states, mdp.num_actions], size=(25, 2))]
    idx += [tuple(x) for x in np.argwhere(np.abs(g) > 1e-3)[:25]]
    for s, a in idx:
        e = np.zeros_like(theta)
        e[s, a] = h
        fd = (_J(mdp, theta + e, rho) - _J(mdp, theta - e, rho)) / (2 * h)
        assert abs(fd - g[s, a]) < 1e-6, (s, a, fd, g[s, a])


def test_target_gradient_is_the_expected_score_sum_with_true_advantages(chain_mdp):
    """g* = E[Σ_t ∇log π(a_t|s_t) A_t(s_t, a_t)]: a large sample with the true A converges to it."""
    pi = np.array([[0.6, 0.4], [0.3, 0.7]])
    v = evaluate_policy(chain_mdp, pi)
    rho = start_distribution(chain_mdp, [0])
    d, _ = occupancy(chain_mdp, pi, rho)
    g_star = exact_gradient(chain_mdp, pi, v, d, "target")
    ro = sample_rollout(chain_mdp, pi, [0], 200_000, np.random.default_rng(3))
    adv = v.A[ro.step, ro.state, ro.action]
    g_hat = score_gradient(pi, ro.state, ro.action, adv) / 200_000
    np.testing.assert_allclose(g_hat, g_star, atol=5e-3)
    assert cosine(g_hat, g_star) > 0.999
    # and it differs from the objective gradient by the γ^t weights only
    g_obj = exact_gradient(chain_mdp, pi, v, d, "objective")
    assert not np.allclose(g_obj, g_star)
    np.testing.assert_allclose(g_obj[0], ((d[:, 0] * 0.95 ** np.arange(3)) @ v.A[:, 0, :]) * pi[0])


def test_cosine_edge_cases():
    assert cosine(np.zeros(3), np.ones(3)) == 0.0
    assert cosine(np.array([1.0, 0.0]), np.array([2.0, 0.0])) == 1.0
    assert cosine(np.array([1.0, 0.0]), np.array([-1.0, 0.0])) == -1.0
