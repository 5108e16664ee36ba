"""The exact advantage of a policy given by its rows' action log-probs (groundtruth.onpolicy)."""
from __future__ import annotations

import numpy as np
import pytest

from envs.finite.mdp import GAMMA
from groundtruth.onpolicy import exact_row_advantages, policy_from_rows, row_distributions
from groundtruth.policy import evaluate_policy, expert_logits, softmax


def _grid_rows(mdp):
    """One row per (step, state), in step-major order."""
    step, state = np.meshgrid(np.arange(mdp.horizon), np.arange(mdp.num_states), indexing="ij")
    return step.reshape(-1), state.reshape(-1)


def test_chain_with_a_step_dependent_policy_by_hand(chain_mdp):
    """States 0 -> 1 -> win; π_t(go) = p_t differs per step, and two rows at (t=0, s=0) average."""
    p = np.array([0.6, 0.3, 0.8])  # π_t(go) at t = 0, 1, 2 in both states
    step, state = _grid_rows(chain_mdp)
    go = p[step]
    lp = np.log(np.stack([go, 1 - go], 1))
    # a second row at (0, 0) with π(go) = 0.2: the cell's policy is the mean, 0.4
    step = np.append(step, 0)
    state = np.append(state, 0)
    lp = np.vstack([lp, np.log([[0.2, 0.8]])])
    p0_cell0 = (0.6 + 0.2) / 2
    action = np.zeros(step.size, dtype=np.int64)  # every row took "go"
    truth = exact_row_advantages(chain_mdp, step, state, action, lp)
    g = GAMMA
    V2 = np.array([0.0, 10 * p[2]])
    V1 = np.array([p[1] * g * V2[1] + (1 - p[1]) * g * V2[0], 10 * p[1] + (1 - p[1]) * g * V2[1]])
    # A_t(s, go) = Q_t(s, go) − V_t(s) with Q(0, go) = γ V(1), Q(0, stay) = γ V(0), Q(1, go) = 10, Q(1, stay) = γ V(1)
    A0_0 = (1 - p0_cell0) * g * (V1[1] - V1[0])
    A0_1 = (1 - p[0]) * (10 - g * V1[1])
    A1_0 = (1 - p[1]) * g * (V2[1] - V2[0])
    A1_1 = (1 - p[1]) * (10 - g * V2[1])
    A2_0 = 0.0
    A2_1 = (1 - p[2]) * 10
    expected = np.array([A0_0, A0_1, A1_0, A1_1, A2_0, A2_1, A0_0])
    np.testing.assert_allclose(truth.A, expected, rtol=1e-12, atol=1e-12)
    assert truth.pi[0, 0, 0] == pytest.approx(p0_cell0)
    assert truth.visited.all()


def test_stationary_policy_equals_the_tabular_dp(small_craft):
    """Rows scored by a fixed tabular policy give exactly evaluate_policy's advantages, malformed mass included."""
    rng = np.random.default_rng(3)
    pi = softmax(expert_logits(small_craft, 1.5, 1.0, rng))
    m = small_craft.malformed_action
    step, state = _grid_rows(small_craft)
    lp = np.log(pi[state])
    lp[:, m] = np.nan  # ignored: the leftover mass is the malformed action's
    action = rng.integers(0, small_craft.num_actions, step.size)
    truth = exact_row_advantages(small_craft, step, state, action, lp)
    ref = evaluate_policy(small_craft, pi)
    np.testing.assert_allclose(truth.A, ref.A[step, state, action], atol=1e-10)
    np.testing.assert_allclose(truth.values.V, ref.V, atol=1e-10)


def test_unvisited_cells_take_the_fallback(small_rooms):
    """A batch that visits a few cells, with the true policy as fallback, still gives the tabular DP's values;
    with the uniform fallback it does not."""
    rng = np.random.default_rng(1)
    pi = softmax(expert_logits(small_rooms, 2.0, 0.5, rng))
    n = 30
    step = rng.integers(0, small_rooms.horizon, n)
    state = rng.integers(0, small_rooms.num_states, n)
    action = rng.integers(0, small_rooms.num_actions, n)
    lp = np.log(pi[state])
    truth = exact_row_advantages(small_rooms, step, state, action, lp, fallback=pi)
    ref = evaluate_policy(small_rooms, pi)
    np.testing.assert_allclose(truth.A, ref.A[step, state, action], atol=1e-10)
    assert truth.visited.sum() <= n < truth.visited.size
    uniform = exact_row_advantages(small_rooms, step, state, action, lp)
    assert not np.allclose(uniform.A, ref.A[step, state, action], atol=1e-6)


def test_time_dependent_policy_of_constant_steps_is_the_stationary_one(small_craft):
    pi = softmax(expert_logits(small_craft, 1.0, 1.0, np.random.default_rng(0)))
    a = evaluate_policy(small_craft, pi)
    b = evaluate_policy(small_craft, np.broadcast_to(pi, (small_craft.horizon, *pi.shape)).copy())
    np.testing.assert_allclose(a.A, b.A)
    with pytest.raises(ValueError, match="policy has shape"):
        evaluate_policy(small_craft, pi[None, :, :])


def test_row_distribution_gives_the_leftover_to_the_malformed_action(small_craft, chain_mdp):
    m = small_craft.malformed_action
    n_act = small_craft.num_actions
    lp = np.full((1, n_act), -np.inf)
    lp[0, 0], lp[0, 1] = np.log(0.5), np.log(0.2)
    d = row_distributions(small_craft, lp)
    assert d[0, 0] == pytest.approx(0.5) and d[0, 1] == pytest.approx(0.2) and d[0, m] == pytest.approx(0.3)
    # without a malformed action the named mass is renormalised
    d = row_distributions(chain_mdp, np.log([[0.3, 0.1]]))
    np.testing.assert_allclose(d, [[0.75, 0.25]])


@pytest.mark.parametrize("bad, match", [
    (np.log([[0.7, 0.6]]), "probability 1.3"),
    (np.array([[np.nan, -1.0]]), "must be finite or -inf"),
    (np.array([[np.inf, -1.0]]), "must be finite or -inf"),
    (np.array([[-np.inf, -np.inf]]), "every action has probability 0"),
    (np.zeros((1, 3)), "needs \\(rows, 2\\)"),
])
def test_bad_log_probs_are_named(chain_mdp, bad, match):
    with pytest.raises(ValueError, match=match):
        row_distributions(chain_mdp, bad)


def test_bad_rows_are_named(chain_mdp):
    d = np.array([[0.5, 0.5]])
    with pytest.raises(ValueError, match="steps must lie in \\[0, 3\\)"):
        policy_from_rows(chain_mdp, [3], [0], d)
    with pytest.raises(ValueError, match="states must lie"):
        policy_from_rows(chain_mdp, [0], [5], d)
    with pytest.raises(ValueError, match="fallback has shape"):
        policy_from_rows(chain_mdp, [0], [0], d, fallback=np.ones((3, 3)))
    with pytest.raises(ValueError, match="actions must lie"):
        exact_row_advantages(chain_mdp, [0], [0], [2], np.log(d))


def _direct_logprob(model, context, action):
    import torch

    ids = torch.cat([context, action])[None]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    pos = torch.arange(context.numel() - 1, ids.shape[1] - 1)
    return float(logp[pos, ids[0, pos + 1]].sum())


def test_score_actions_equals_a_direct_forward():
    """Each row's action log-probs equal a plain forward of context + action; single-token actions over the whole
    vocabulary sum to probability 1."""
    import torch

    from groundtruth.onpolicy import score_actions
    from tests.trainer.helpers import tiny_qwen2

    model = tiny_qwen2(layers=2).eval()
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(1, 256, (20,), generator=g)
    contexts = [torch.cat([shared, torch.randint(1, 256, (k,), generator=g)]) for k in (3, 7, 1)]
    actions = [torch.tensor([5, 9, 2]), torch.tensor([17]), torch.tensor([5, 9, 3, 2])]
    lp = score_actions(model, contexts, actions, max_rows=2)  # two chunks
    assert lp.shape == (3, 3)
    for i, c in enumerate(contexts):
        for a, act in enumerate(actions):
            assert lp[i, a] == pytest.approx(_direct_logprob(model, c, act), abs=1e-4)
    every_token = [torch.tensor([t]) for t in range(256)]
    total = np.exp(score_actions(model, contexts, every_token)).sum(1)
    np.testing.assert_allclose(total, 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="at least one token"):
        score_actions(model, contexts, [torch.tensor([], dtype=torch.long)])
