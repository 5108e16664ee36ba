"""Tabular softmax policies on a ``TabularMDP``: exact values by dynamic programming and exact gradients.

Symbols: S states, A actions, H horizon (max steps), N step rows, ρ the start-state distribution.

Policy [choice]: stationary softmax over state-action logits, π(a|s) = exp θ[s,a] / Σ_b exp θ[s,b].

Values (finite horizon H, discount γ; the step index t is part of every row, so values are
time-dependent) with r = env_reward − penalty (``TabularMDP.reward``)::

    V_H(s) = 0
    Q_t(s,a) = Σ_k p(k|s,a) [ r(s,a,k) + γ (1 − done(s,a,k)) V_{t+1}(s'_k) ]
    V_t(s)  = Σ_a π(a|s) Q_t(s,a)          A_t(s,a) = Q_t(s,a) − V_t(s)

The per-row ground truth of an estimator is ``A_{t(i)}(s_i, a_i)``: the advantage of the discounted
return-to-go inside the episode, which is what the step return ``R_t = r_t + γ R_{t+1}`` of docs/method.md
estimates (truncation at H included).

Occupancy: ``d_t(s)`` = P(s_t = s and the episode is still running at step t) under ρ and π.

Two exact gradients with respect to θ (both (S, A)):

* ``target`` (default): g*[s,a] = Σ_t d_t(s) π(a|s) A_t(s,a) = E[Σ_t ∇ log π(a_t|s_t) A_t(s_t,a_t)],
  the expectation of the very sum the estimators form, ``Σ_i A_i ∇ log π(a_i|s_i)``, with the true
  advantage in place of the estimate. The cosine of an estimated gradient with it measures only the
  quality of the advantages [choice].
* ``objective``: ∇J[s,a] = Σ_t γ^t d_t(s) π(a|s) A_t(s,a), the gradient of J = E_ρ[V_0(s_0)] (policy-gradient
  theorem). Practical estimators, GiGPO's and ours included, drop the γ^t factor, so they follow
  g*, not ∇J; both are reported.

For tabular softmax, ∂ log π(a|s) / ∂θ[s', b] = 1[s' = s] (1[b = a] − π(b|s)), and Σ_a π(a|s) A_t(s,a) = 0 gives
the closed forms above.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.finite.mdp import TabularMDP

__all__ = [
    "softmax",
    "Values",
    "evaluate_policy",
    "occupancy",
    "success_probability",
    "exact_gradient",
    "score_gradient",
    "start_distribution",
    "expert_logits",
    "cosine",
]


def softmax(logits: np.ndarray) -> np.ndarray:
    """(S, A) logits -> (S, A) probabilities (rows sum to 1)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Values:
    """V (H+1, S), Q (H, S, A), A (H, S, A) of one policy."""

    V: np.ndarray
    Q: np.ndarray
    A: np.ndarray


def evaluate_policy(mdp: TabularMDP, pi: np.ndarray) -> Values:
    """Exact finite-horizon V^π, Q^π, A^π by backward induction (module docstring).

    pi : (S, A) a stationary policy, or (H, S, A) one that depends on the step, π_t(a|s) (a language model's
    action distribution does: its prompt shows the step), with ``V_t(s) = Σ_a π_t(a|s) Q_t(s,a)``.
    """
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    if pi.shape not in ((S, A), (H, S, A)):
        raise ValueError(f"policy has shape {pi.shape}, the MDP needs ({S}, {A}) or ({H}, {S}, {A})")
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    r, cont = mdp.expected_reward, mdp.continuation  # (S, A), CSR (S·A, S)
    for t in range(H - 1, -1, -1):
        Q[t] = r + mdp.gamma * (cont @ V[t + 1]).reshape(S, A)  # Σ_k p_k [r_k + γ (1 − done_k) V_{t+1}(s'_k)]
        V[t] = ((pi[t] if pi.ndim == 3 else pi) * Q[t]).sum(-1)
    return Values(V=V, Q=Q, A=Q - V[:H, :, None])


def start_distribution(mdp: TabularMDP, tasks) -> np.ndarray:
    """(S,) ρ: the empirical distribution of the start states of ``tasks`` (task indices, repeats allowed)."""
    tasks = np.asarray(tasks, dtype=np.int64).reshape(-1)
    if tasks.size == 0 or tasks.min() < 0 or tasks.max() >= mdp.num_tasks:
        raise ValueError(f"task indices {tasks.tolist()[:8]} must lie in [0, {mdp.num_tasks})")
    rho = np.zeros(mdp.num_states)
    np.add.at(rho, mdp.start_states[tasks], 1.0 / tasks.size)
    return rho


def occupancy(mdp: TabularMDP, pi: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d, success): d (H, S) = P(s_t = s, episode running); success (H,) = P(the episode is won at step t)."""
    H, S = mdp.horizon, mdp.num_states
    d = np.zeros((H, S))
    won = np.zeros(H)
    cur = np.asarray(rho, dtype=np.float64)
    for t in range(H):
        d[t] = cur
        sa = cur[:, None] * pi  # (S, A) P(s_t = s, a_t = a, running)
        won[t] = (sa * mdp.win_probability).sum()
        cur = mdp.continuation_t @ sa.reshape(-1)  # (S,)
    return d, won


def success_probability(mdp: TabularMDP, pi: np.ndarray, rho: np.ndarray) -> float:
    """Exact probability that an episode from ρ is won within the horizon."""
    return float(occupancy(mdp, pi, rho)[1].sum())


def exact_gradient(mdp: TabularMDP, pi: np.ndarray, values: Values, d: np.ndarray, kind: str = "target") -> np.ndarray:
    """(S, A) exact gradient of the tabular logits: ``target`` g* or ``objective`` ∇J (module docstring)."""
    if kind == "target":
        w = np.ones(mdp.horizon)
    elif kind == "objective":
        w = mdp.gamma ** np.arange(mdp.horizon)
    else:
        raise ValueError(f"exact_gradient kind={kind!r} must be 'target' or 'objective'")
    # Σ_t w_t d_t(s) π(a|s) A_t(s,a)
    return np.einsum("t,ts,tsa->sa", w, d, values.A) * pi


def score_gradient(pi: np.ndarray, states: np.ndarray, actions: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(S, A) Σ_i w_i ∇ log π(a_i|s_i) for tabular softmax: row s_i gets w_i (e_{a_i} − π(·|s_i)).

    states, actions : int (N,);  weights : float (N,), e.g. estimated advantages.
    """
    S, A = pi.shape
    g = np.zeros((S, A))
    np.add.at(g, (states, actions), weights)
    np.add.at(g, states, -weights[:, None] * pi[states])
    return g


def expert_logits(mdp: TabularMDP, strength: float, noise: float, rng: np.random.Generator,
                  malformed_bias: float = -1.0) -> np.ndarray:
    """(S, A) logits: ``strength`` on the step-0 optimal action of each state, ``malformed_bias`` on the
    malformed-response action, plus N(0, noise²) per entry.

    A half-competent starting policy (like an instruction-tuned model before RL) [choice].
    """
    best = mdp.optimal_actions()[0]  # (S,)
    theta = noise * rng.standard_normal((mdp.num_states, mdp.num_actions))
    theta[np.arange(mdp.num_states), best] += strength
    if mdp.malformed_action is not None:
        theta[:, mdp.malformed_action] += malformed_bias
    return theta


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    """Cosine of two flattened arrays; 0 when either is the zero vector."""
    x, y = x.reshape(-1), y.reshape(-1)
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    if nx == 0 or ny == 0:
        return 0.0
    return float(x @ y / (nx * ny))
