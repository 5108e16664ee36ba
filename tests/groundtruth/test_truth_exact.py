"""The truth of a training run is that of the run's return and its policy (issue: "make the truth exact"): γ and λ
from the estimator config, one parser for the env and the truth, every reachable cell scored, the ceiling."""
from __future__ import annotations

import numpy as np
import pytest

from common.config_checks import ConfigError
from groundtruth.live import probe_for
from groundtruth.policy import evaluate_policy


def _independent_values(mdp, pi, gamma, lam):
    """V_0, Q by a plain backward loop over outcomes, written apart from ``evaluate_policy``."""
    H, S, A = pi.shape
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    m = mdp.malformed_action
    for t in range(H - 1, -1, -1):
        for s in range(S):
            for a in range(A):
                q = -lam if a == m else 0.0
                for p, ns, r, done, _ in mdp.outcomes(s, a):
                    q += p * (r + (0.0 if done else gamma * V[t + 1, ns]))
                Q[t, s, a] = q
            V[t, s] = pi[t, s] @ Q[t, s]
    return V, Q


def test_gamma_and_penalty_come_from_the_run_config(small_rooms):
    from trainer.config.io import load_config

    cfg = load_config("configs/cpu/finite_rooms_gt.yaml", ["estimator.gamma=0.8", "estimator.invalid_penalty=0.5",
                                                           "env.kwargs.alias=0.5"])
    probe = probe_for(cfg)
    assert probe.mdp.gamma == 0.8 and probe.mdp.invalid_penalty == 0.5
    rng = np.random.default_rng(0)
    mdp = probe.mdp
    pi = rng.dirichlet(np.ones(mdp.num_actions), size=(mdp.horizon, mdp.num_states))
    v = evaluate_policy(mdp, pi)
    V, Q = _independent_values(mdp, pi, 0.8, 0.5)
    np.testing.assert_allclose(v.Q, Q, atol=1e-10)
    np.testing.assert_allclose(v.V[:mdp.horizon], V[:mdp.horizon], atol=1e-10)
    default = probe_for(load_config("configs/cpu/finite_rooms_gt.yaml", ["env.kwargs.alias=0.5"])).mdp
    assert default.gamma == 0.95 and default.invalid_penalty == 0.1
    v_default = evaluate_policy(default, pi)
    assert np.abs(v_default.V[0] - v.V[0]).max() > 0.1  # another γ is another truth


def test_a_setting_the_mdp_cannot_honour_is_a_config_error(chain_mdp, small_rooms):
    with pytest.raises(ConfigError, match=r"estimator.invalid_penalty=0.3 .* no malformed action.*invalid_penalty: 0"):
        chain_mdp.with_returns(0.9, 0.3)
    assert chain_mdp.with_returns(0.9, 0.0).gamma == 0.9
    with pytest.raises(ConfigError, match=r"estimator.gamma=1.5"):
        small_rooms.with_returns(1.5, 0.1)
    assert small_rooms.with_returns(small_rooms.gamma, small_rooms.invalid_penalty) is small_rooms
    other = small_rooms.with_returns(0.5, 0.2)
    assert small_rooms.gamma != 0.5 and small_rooms.invalid_penalty == 0.1  # the original is untouched
    assert other.penalty[other.malformed_action] == 0.2 and other.penalty.sum() == 0.2
