"""Finite MDPs with known dynamics, enumerated into arrays from a family's transition function.

A *family* (``envs.finite.families``) describes states as hashable Python objects and gives, for each
(state, action), the list of outcomes ``(probability, next_state, reward, done, event)``. ``build_mdp``
enumerates every state reachable from the family's start states (one start per task) and stores the
dynamics as padded arrays so that dynamic programming and sampling are vectorised:

======================  ==================  ==================================================
field                   shape               meaning
======================  ==================  ==================================================
next_state              (S, A, K) int64     successor of outcome k (padding: the state itself)
prob                    (S, A, K) float64   outcome probability (padding: 0); rows sum to 1
env_reward              (S, A, K) float64   environment reward (10 on the winning step, else 0)
done                    (S, A, K) bool      the episode ends with this outcome (success)
event                   (S, A, K) int64     index into ``events``: what the observation reports
penalty                 (A,) float64        lambda on the malformed-response action, else 0
admissible              (S, A) bool         the action's preconditions hold (ALFWorld's list)
features                (S, F) float64      true-state features (for the hidden-state proxy)
start_states            (n_tasks,) int64    the start state of each task
======================  ==================  ==================================================

S = states, A = actions, K = most outcomes of any (state, action), F = features.

Reward of the MDP used by dynamic programming [choice]: ``r = env_reward − penalty[a]``. The malformed
action (a response without ``<action>`` tags, ``valid = False`` in the ``StepBatch``) costs the invalid-action
penalty λ = 0.1 at its own step [GiGPO], so that its true value includes the penalty the estimators
charge. The estimators subtract λ from the row's own return only (docs/method.md) while the MDP's value also
discounts future penalties into earlier steps; with λ = 0.1 against a success reward of 10 the difference
is small and is named in the README. On a language model's batch the no-op also stands for well-formed responses
that name no action of the world, which the estimators do not charge; ``groundtruth.onpolicy`` charges those rows 0
and the policy's no-action mass the share of λ its invalid rows carry ("Responses that name no action").

Parsing [one parser]: ``TabularMDP.action_of(text)`` is the only map from a response's action text to an MDP action,
used both by the env (``FiniteMDPEnv`` plays its result) and by the ground truth (``groundtruth.live.row_actions``):
the env contract's ``envs.base.clean_action`` (NFKC, control characters to spaces, runs of whitespace collapsed,
stripped), then lower case, then the world's action strings; anything else (including the malformed action's own
placeholder text) is None, which the env plays as the "not understood" no-op, the malformed action's dynamics.

γ and λ default to ``GAMMA`` and ``INVALID_PENALTY``; a run whose estimator uses others takes the MDP through
``TabularMDP.with_returns(gamma, invalid_penalty)`` (``groundtruth.live.probe_for`` passes ``estimator.gamma`` and
``estimator.invalid_penalty``), so that the truth is that of the return the estimators estimate.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TabularMDP", "build_mdp", "MALFORMED_ACTION", "INVALID_PENALTY", "GAMMA", "SUCCESS_REWARD"]

#: text of the extra action that stands for a response the projection cannot parse
MALFORMED_ACTION = "<malformed>"
#: lambda, the invalid-format penalty [GiGPO]
INVALID_PENALTY = 0.1
#: discount of the step return [GiGPO]
GAMMA = 0.95
#: reward on the step that solves the task [GiGPO]
SUCCESS_REWARD = 10.0


@dataclass
class TabularMDP:
    """An enumerated finite MDP (see the module docstring for the arrays)."""

    name: str
    states: list[Hashable]
    actions: list[str]
    next_state: np.ndarray
    prob: np.ndarray
    env_reward: np.ndarray
    done: np.ndarray
    event: np.ndarray
    events: list[tuple]
    penalty: np.ndarray
    admissible: np.ndarray
    features: np.ndarray
    feature_names: list[str]
    start_states: np.ndarray
    start_events: np.ndarray
    horizon: int
    gamma: float = GAMMA
    family: object = field(default=None, repr=False)

    @property
    def num_states(self) -> int:
        return len(self.states)

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    @property
    def num_tasks(self) -> int:
        return int(self.start_states.shape[0])

    @property
    def malformed_action(self) -> int | None:
        """Index of the malformed-response action, or None when the MDP has none."""
        return self.actions.index(MALFORMED_ACTION) if MALFORMED_ACTION in self.actions else None

    @property
    def reward(self) -> np.ndarray:
        """(S, A, K) reward used by dynamic programming: env reward minus the action's penalty."""
        return self.env_reward - self.penalty[None, :, None]

    @property
    def invalid_penalty(self) -> float:
        """λ: the penalty of the malformed action (0 when the MDP has none)."""
        m = self.malformed_action
        return float(self.penalty[m]) if m is not None else 0.0

    def action_of(self, text) -> int | None:
        """The index of the world action that ``text`` names, or None when it names none (module docstring,
        "Parsing"). Never raises: any object ``clean_action`` refuses names no action."""
        from envs.base import clean_action

        index = getattr(self, "_parse_index", None)
        if index is None:
            index = {a: i for i, a in enumerate(self.actions) if a != MALFORMED_ACTION}
            self._parse_index = index
        cleaned = clean_action(text)
        return None if cleaned is None else index.get(cleaned.lower())

    def with_returns(self, gamma: float, invalid_penalty: float) -> TabularMDP:
        """This MDP with discount ``gamma`` and malformed-action penalty ``invalid_penalty`` (a copy sharing the
        dynamics arrays; ``self`` when both already hold). The values are an estimator config's
        (``estimator.gamma``, ``estimator.invalid_penalty``); one this MDP cannot honour raises ``ConfigError``
        naming the field, the value and the fix, before any value is computed."""
        from common.config_checks import check_number, fail

        check_number("estimator", "gamma", gamma, lo=0, hi=1, fix="a discount in [0, 1] (GiGPO: 0.95)")
        check_number("estimator", "invalid_penalty", invalid_penalty, lo=0, fix="a penalty >= 0 (GiGPO: 0.1)")
        gamma, invalid_penalty = float(gamma), float(invalid_penalty)
        m = self.malformed_action
        if m is None and invalid_penalty != 0:
            fail(f"estimator.invalid_penalty={invalid_penalty} cannot be charged by the ground truth of "
                 f"{self.name!r}: its MDP has no malformed action; build it with malformed_action=True or set "
                 "estimator.invalid_penalty: 0")
        if gamma == self.gamma and invalid_penalty == self.invalid_penalty:
            return self
        penalty = self.penalty.copy()
        if m is not None:
            penalty[m] = invalid_penalty
        return dataclasses.replace(self, gamma=gamma, penalty=penalty)

    def _build_sparse(self) -> None:
        from scipy import sparse

        S, A, K = self.prob.shape
        cont = (self.prob * (~self.done)).reshape(S * A, K)  # (S·A, K) probability of going on to s'
        rows = np.repeat(np.arange(S * A), K)
        m = sparse.csr_matrix((cont.reshape(-1), (rows, self.next_state.reshape(-1))), shape=(S * A, S))
        m.eliminate_zeros()
        self._cont = m  # (S·A, S)
        self._cont_t = m.T.tocsr()  # (S, S·A)
        self._exp_reward = (self.prob * self.reward).sum(-1)  # (S, A) expected DP reward
        self._win = (self.prob * (self.done & (self.env_reward > 0))).sum(-1)  # (S, A) P(win now)

    @property
    def continuation(self):
        """scipy CSR (S·A, S): P(s' and the episode goes on | s, a); row index s·A + a."""
        if getattr(self, "_cont", None) is None:
            self._build_sparse()
        return self._cont

    @property
    def continuation_t(self):
        """scipy CSR (S, S·A): transpose of ``continuation`` (for forward occupancy)."""
        if getattr(self, "_cont_t", None) is None:
            self._build_sparse()
        return self._cont_t

    @property
    def expected_reward(self) -> np.ndarray:
        """(S, A) Σ_k p(k|s,a) r(s,a,k) with the DP reward."""
        if getattr(self, "_exp_reward", None) is None:
            self._build_sparse()
        return self._exp_reward

    @property
    def win_probability(self) -> np.ndarray:
        """(S, A) probability that taking a in s wins the episode at this step."""
        if getattr(self, "_win", None) is None:
            self._build_sparse()
        return self._win

    def outcomes(self, s: int, a: int) -> list[tuple[float, int, float, bool, int]]:
        """Non-zero outcomes of (s, a): (prob, next_state, env_reward, done, event)."""
        return [
            (float(self.prob[s, a, k]), int(self.next_state[s, a, k]), float(self.env_reward[s, a, k]),
             bool(self.done[s, a, k]), int(self.event[s, a, k]))
            for k in range(self.prob.shape[2]) if self.prob[s, a, k] > 0
        ]

    def optimal_actions(self) -> np.ndarray:
        """(H, S) int64: an optimal action per step and state of the finite-horizon MDP (ties: lowest index).

        Finite-horizon value iteration on the DP reward; this is the ``expert`` of the family.
        """
        H, S, A = self.horizon, self.num_states, self.num_actions
        v = np.zeros(S)
        best = np.zeros((H, S), dtype=np.int64)
        for t in range(H - 1, -1, -1):
            q = self.expected_reward + self.gamma * (self.continuation @ v).reshape(S, A)  # (S, A)
            best[t] = q.argmax(axis=1)
            v = q.max(axis=1)
        return best


def build_mdp(family, horizon: int, malformed_action: bool = True, max_states: int = 50_000) -> TabularMDP:
    """Enumerate the states reachable from ``family.start_states()`` and return a ``TabularMDP``.

    ``family`` must provide ``name``, ``actions() -> list[str]``, ``start_states() -> list``,
    ``start_event(state) -> tuple``, ``transition(state, a) -> list[(p, next, reward, done, event)]``,
    ``admissible(state, a) -> bool``, ``feature_names() -> list[str]``, ``features(state) -> ndarray (F,)``.
    ``malformed_action`` appends ``MALFORMED_ACTION``: state unchanged, penalty λ, ``valid = False``.
    """
    if horizon < 1:
        raise ValueError(f"horizon={horizon} must be >= 1 (the episode's max_steps)")
    actions = list(family.actions())
    if len(set(actions)) != len(actions):
        raise ValueError(f"family {family.name!r} has duplicate action texts")
    n_env_actions = len(actions)
    if malformed_action:
        actions.append(MALFORMED_ACTION)
    starts = list(family.start_states())
    if not starts:
        raise ValueError(f"family {family.name!r} has no start states (n_tasks must be >= 1)")

    index: dict[Hashable, int] = {}
    states: list[Hashable] = []
    queue: deque = deque()

    def intern(s):
        if s not in index:
            if len(states) >= max_states:
                raise ValueError(
                    f"family {family.name!r} has more than max_states={max_states} reachable states: "
                    "choose smaller size parameters"
                )
            index[s] = len(states)
            states.append(s)
            queue.append(s)
        return index[s]

    start_idx = [intern(s) for s in starts]
    events: list[tuple] = []
    event_index: dict[tuple, int] = {}

    def ev(e: tuple) -> int:
        if e not in event_index:
            event_index[e] = len(events)
            events.append(e)
        return event_index[e]

    table: dict[int, list] = {}
    while queue:
        s = queue.popleft()
        si = index[s]
        rows = []
        for a in range(n_env_actions):
            outs = family.transition(s, a)
            total = sum(p for p, *_ in outs)
            if not outs or abs(total - 1.0) > 1e-9:
                raise ValueError(f"family {family.name!r}: outcomes of ({s!r}, {actions[a]!r}) sum to {total}, not 1")
            rows.append([(p, intern(ns), r, d, ev(e)) for p, ns, r, d, e in outs if p > 0])
        if malformed_action:
            rows.append([(1.0, si, 0.0, False, ev(("malformed",)))])
        table[si] = rows

    S, A = len(states), len(actions)
    K = max(len(o) for rows in table.values() for o in rows)
    next_state = np.repeat(np.arange(S)[:, None, None], A, axis=1).repeat(K, axis=2)
    prob = np.zeros((S, A, K))
    env_reward = np.zeros((S, A, K))
    done = np.zeros((S, A, K), dtype=bool)
    event = np.zeros((S, A, K), dtype=np.int64)
    for si, rows in table.items():
        for a, outs in enumerate(rows):
            for k, (p, ns, r, d, e) in enumerate(outs):
                next_state[si, a, k], prob[si, a, k], env_reward[si, a, k], done[si, a, k], event[si, a,
                                                                                                  k] = ns, p, r, d, e
    penalty = np.zeros(A)
    if malformed_action:
        penalty[-1] = INVALID_PENALTY
    admissible = np.zeros((S, A), dtype=bool)
    for si, s in enumerate(states):
        for a in range(n_env_actions):
            admissible[si, a] = bool(family.admissible(s, a))
    features = np.stack([np.asarray(family.features(s), dtype=np.float64) for s in states])
    start_events = np.array([ev(family.start_event(s)) for s in starts], dtype=np.int64)
    return TabularMDP(
        name=family.name, states=states, actions=actions, next_state=next_state.astype(np.int64), prob=prob,
        env_reward=env_reward, done=done, event=event, events=events, penalty=penalty, admissible=admissible,
        features=features, feature_names=list(family.feature_names()), start_states=np.array(start_idx, dtype=np.int64),
        start_events=start_events, horizon=int(horizon), family=family,
    )
