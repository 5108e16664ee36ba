"""Dynamic programming: hand-solved values, loop reference, Monte Carlo agreement."""
from __future__ import annotations

import numpy as np
import pytest

from envs.finite.mdp import GAMMA, INVALID_PENALTY
from groundtruth.policy import evaluate_policy, expert_logits, occupancy, softmax, start_distribution
from groundtruth.sampling import sample_rollout


def test_chain_values_by_hand(chain_mdp):
    p = 0.7  # π(go) in both states
    pi = np.array([[p, 1 - p], [p, 1 - p]])
    v = evaluate_policy(chain_mdp, pi)
    g = GAMMA
    # last step (t = 2): only "go" from state 1 pays
    V2 = np.array([0.0, 10 * p])
    Q2 = np.array([[0.0, 0.0], [10.0, 0.0]])
    # t = 1
    Q1 = np.array([[g * V2[1], g * V2[0]], [10.0, g * V2[1]]])
    V1 = (pi * Q1).sum(1)
    # t = 0
    Q0 = np.array([[g * V1[1], g * V1[0]], [10.0, g * V1[1]]])
    V0 = (pi * Q0).sum(1)
    np.testing.assert_allclose(v.Q[2], Q2)
    np.testing.assert_allclose(v.Q[1], Q1)
    np.testing.assert_allclose(v.Q[0], Q0)
    np.testing.assert_allclose(v.V[:3], np.stack([V0, V1, V2]))
    np.testing.assert_allclose(v.V[3], 0.0)
    np.testing.assert_allclose(v.A, v.Q - v.V[:3, :, None])
    # the advantage is time-dependent: at the last step "stay" from state 1 is worth nothing
    assert v.A[2, 1, 1] == pytest.approx(-10 * p)
    assert v.A[0, 1, 1] != pytest.approx(v.A[2, 1, 1])
    # success within 3 steps from state 0: needs two "go"s among the three steps
    _, won = occupancy(chain_mdp, pi, start_distribution(chain_mdp, [0]))
    assert won.sum() == pytest.approx(p**2 + 2 * p**2 * (1 - p))


def test_malformed_action_costs_the_penalty(small_craft):
    rng = np.random.default_rng(0)
    pi = softmax(expert_logits(small_craft, 1.0, 1.0, rng))
    v = evaluate_policy(small_craft, pi)
    m = small_craft.malformed_action
    assert m == small_craft.num_actions - 1
    # Q_t(s, malformed) = -λ + γ V_{t+1}(s): the state does not change
    np.testing.assert_allclose(v.Q[:, :, m], -INVALID_PENALTY + GAMMA * v.V[1:], atol=1e-12)


def _loop_values(mdp, pi):
    """Plain-loop reference of evaluate_policy (one state, action and outcome at a time)."""
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    for t in range(H - 1, -1, -1):
        for s in range(S):
            for a in range(A):
                q = 0.0
                for p, ns, r, done, _ in mdp.outcomes(s, a):
                    q += p * (r - mdp.penalty[a] + (0.0 if done else GAMMA * V[t + 1, ns]))
                Q[t, s, a] = q
            V[t, s] = sum(pi[s, a] * Q[t, s, a] for a in range(A))
    return V, Q


@pytest.mark.parametrize("world", ["small_craft", "small_rooms"])
def test_vectorised_dp_matches_loop(world, request):
    mdp = request.getfixturevalue(world)
    pi = softmax(expert_logits(mdp, 1.0, 1.0, np.random.default_rng(1)))
    v = evaluate_policy(mdp, pi)
    V, Q = _loop_values(mdp, pi)
    np.testing.assert_allclose(v.V, V, atol=1e-10)
    np.testing.assert_allclose(v.Q, Q, atol=1e-10)


@pytest.mark.parametrize("world", ["small_craft", "small_rooms"])
def test_values_and_success_match_monte_carlo(world, request):
    mdp = request.getfixturevalue(world)
    rng = np.random.default_rng(2)
    pi = softmax(expert_logits(mdp, 1.5, 1.0, rng))
    v = evaluate_policy(mdp, pi)
    G = 4000
    ro = sample_rollout(mdp, pi, [0], G, rng)
    # discounted return from t = 0 with the DP reward (env reward minus the malformed penalty)
    r = ro.reward - mdp.penalty[ro.action]
    ret = np.zeros(G)
    np.add.at(ret, ro.traj, GAMMA ** ro.step * r)
    se = ret.std() / np.sqrt(G)
    assert abs(ret.mean() - v.V[0, mdp.start_states[0]]) < 4 * se + 1e-9
    _, won = occupancy(mdp, pi, start_distribution(mdp, [0]))
    p = won.sum()
    assert abs(ro.done.sum() / G - p) < 4 * np.sqrt(p * (1 - p) / G) + 1e-9
    # occupancy is a sub-probability that loses exactly the mass that won
    d, won = occupancy(mdp, pi, start_distribution(mdp, [0]))
    np.testing.assert_allclose(d.sum(1) + np.concatenate([[0.0], np.cumsum(won)[:-1]]), 1.0, atol=1e-12)
