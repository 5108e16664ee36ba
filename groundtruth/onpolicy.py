"""The exact advantage of the policy being trained: its action distributions, then dynamic programming.

Issue 20's second point. In a finite MDP (``envs.finite.mdp``) the actions are enumerable, so for every row i of
a batch (step t_i, state s_i = ``info["state_key"]``) the actor can score every action string and give
``log P(response = a | prompt_i)`` for each action a. From those:

Row distribution [choice]: p_i(a) = exp(logp_i(a)) for the named actions; the mass left over, 1 − Σ_a p_i(a), is
what the model spends on responses that name no action, i.e. the malformed action when the MDP has one
(``MALFORMED_ACTION``), and is dropped by renormalising when it has none.

State policy [choice]: π_t(·|s) = the mean of p_i over the batch's rows with (t_i, s_i) = (t, s). A language
model's distribution depends on the rendered text (paraphrases, distractors, the history in its prompt), not only
on s, so this is the policy averaged over the renderings the batch saw; cells (t, s) the batch did not visit take
``fallback`` (uniform over the actions unless given; the live probe gives ``groundtruth.cells.cell_policy``). The step
index is part of the cell because the prompt shows the step.

Responses that name no action [choice, as the env and the estimators see them]: the env plays an invalid response
(no tags; ``valid = False``) and a well-formed one whose action text names nothing in the world alike, as the "not
understood" no-op (the MDP's malformed action, parsed by ``TabularMDP.action_of``); the estimators charge λ to the
invalid ones only. The truth does the same: with ``invalid`` (N,) given, a row on the malformed action is charged λ
when it is invalid and 0 when it is well-formed, and the policy's no-action mass, whose split the scoring cannot see,
is charged the expected λ·q in the DP, q = the share of invalid rows among the batch's rows that name no action (1
when there are none). Without ``invalid`` every no-action row is charged λ (q = 1).

Truth: ``evaluate_policy(mdp, π)`` with the (H, S, A) policy, and A_{t_i}(s_i, a_i) per row. It is exact for the
Markov policy π; where the model's choices depend on more than (t, s), the residual is what the averaging hides,
and the visited share (``OnPolicyTruth.visited``) says how much of π came from the batch itself.

Scoring (``score_actions``) [choice]: the agent answers ``<think>…</think><action>a</action>``, and the thought is
free text, so P(response names a) would be a sum over every thought. We score each action's closing text after the
row's own sampled thought: log P(``action_ids[a]`` | prompt_i, thought_i), one forward over N × A continuations whose
shared prefix (prompt + thought) is computed once per row (``trainer.forward.pack_rows_shared``). That is the
policy's action distribution given the reasoning it actually produced.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.finite.mdp import TabularMDP

from .policy import Values, evaluate_policy

__all__ = ["OnPolicyTruth", "row_distributions", "policy_from_rows", "exact_row_advantages", "score_actions",
           "invalid_share", "row_thought", "action_token_ids"]

#: slack on Σ_a P(response = a) ≤ 1 for the rounding of summed log-probs
MASS_TOLERANCE = 1e-4


@dataclass
class OnPolicyTruth:
    """A (N,) true advantage per row; pi (H, S, A) the policy DP used; values its V/Q/A; visited (H, S) cells
    whose π came from the batch's rows; Q (N,) the row's exact expected return Q^π_{t_i}(s_i, a_i) (its own λ charge
    included), so A = Q − V_{t_i}(s_i)."""

    A: np.ndarray
    pi: np.ndarray
    values: Values
    visited: np.ndarray
    Q: np.ndarray | None = None


def row_distributions(mdp: TabularMDP, action_logprobs: np.ndarray) -> np.ndarray:
    """(N, A) log P(response = action a | prompt_i) -> (N, A) distributions over the MDP's actions.

    The malformed action's column, when the MDP has one, is ignored on input and receives the leftover mass.
    ``-inf`` is a zero probability; NaN, +inf or named mass above 1 raise ``ValueError`` naming the first row.
    """
    lp = np.asarray(action_logprobs, dtype=np.float64)
    n_act = mdp.num_actions
    if lp.ndim != 2 or lp.shape[1] != n_act:
        raise ValueError(f"action_logprobs has shape {lp.shape}, needs (rows, {n_act}) in the order of mdp.actions")
    m = mdp.malformed_action
    named = np.ones(n_act, dtype=bool)
    if m is not None:
        named[m] = False
    bad = np.isnan(lp[:, named]) | (lp[:, named] == np.inf)
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise ValueError(f"action_logprobs[{i}] is {lp[i, np.flatnonzero(named)[j]]} for action "
                         f"{mdp.actions[np.flatnonzero(named)[j]]!r}; log-probs must be finite or -inf")
    p = np.zeros_like(lp)
    p[:, named] = np.exp(lp[:, named])
    mass = p.sum(1)
    over = mass > 1 + MASS_TOLERANCE
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ValueError(f"row {i}: the named actions carry probability {mass[i]:.6f} > 1; the log-probs must be of "
                         "whole responses under one prompt (not per-token or unnormalised scores)")
    if m is not None:
        p[:, m] = np.clip(1.0 - mass, 0.0, None)
    else:
        if (mass <= 0).any():
            i = int(np.flatnonzero(mass <= 0)[0])
            raise ValueError(f"row {i}: every action has probability 0 and the MDP has no malformed action to hold it")
        p /= mass[:, None]
    return p / p.sum(1, keepdims=True)


def policy_from_rows(mdp: TabularMDP, step: np.ndarray, state: np.ndarray, dist: np.ndarray,
                     fallback: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pi (H, S, A), visited (H, S)): the mean row distribution per (step, state), ``fallback`` elsewhere.

    fallback : (S, A) or (H, S, A) probabilities, or None for uniform over the actions.
    """
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    step = np.asarray(step, dtype=np.int64).reshape(-1)
    state = np.asarray(state, dtype=np.int64).reshape(-1)
    dist = np.asarray(dist, dtype=np.float64)
    if dist.shape != (step.size, A) or state.size != step.size:
        raise ValueError(f"step {step.shape}, state {state.shape} and dist {dist.shape} must be (N,), (N,), (N, {A})")
    if step.size and (step.min() < 0 or step.max() >= H):
        raise ValueError(f"steps must lie in [0, {H}) (the MDP's horizon); got {step.min()}..{step.max()}")
    if state.size and (state.min() < 0 or state.max() >= S):
        raise ValueError(f"states must lie in [0, {S}); got {state.min()}..{state.max()}")
    if fallback is None:
        pi = np.full((H, S, A), 1.0 / A)
    else:
        fb = np.asarray(fallback, dtype=np.float64)
        if fb.shape not in ((S, A), (H, S, A)):
            raise ValueError(f"fallback has shape {fb.shape}, needs ({S}, {A}) or ({H}, {S}, {A})")
        pi = np.broadcast_to(fb, (H, S, A)).copy()
    total = np.zeros((H, S, A))
    count = np.zeros((H, S))
    np.add.at(total, (step, state), dist)
    np.add.at(count, (step, state), 1.0)
    visited = count > 0
    pi[visited] = total[visited] / count[visited][:, None]
    return pi, visited


def invalid_share(mdp: TabularMDP, action: np.ndarray, invalid: np.ndarray | None) -> float:
    """q: the share of invalid rows among the rows on the malformed action (1 without ``invalid`` or such rows)."""
    m = mdp.malformed_action
    if invalid is None or m is None:
        return 1.0
    on_m = np.asarray(action).reshape(-1) == m
    return float(np.asarray(invalid, dtype=bool).reshape(-1)[on_m].mean()) if on_m.any() else 1.0


def exact_row_advantages(mdp: TabularMDP, step: np.ndarray, state: np.ndarray, action: np.ndarray,
                         action_logprobs: np.ndarray, fallback: np.ndarray | None = None,
                         invalid: np.ndarray | None = None, policy: np.ndarray | None = None) -> OnPolicyTruth:
    """The true A^π_{t_i}(s_i, a_i) of every row under the policy its own action log-probs define (module
    docstring). action : (N,) the index of the action each row took (the malformed index for invalid responses and
    for well-formed ones naming no action); invalid : (N,) bool, the rows the estimators charge λ (module docstring,
    "Responses that name no action"); policy : (H, S, A), if given, the policy of every cell instead of the rows' mean
    (the rows still give ``visited``)."""
    action = np.asarray(action, dtype=np.int64).reshape(-1)
    if action.size and (action.min() < 0 or action.max() >= mdp.num_actions):
        raise ValueError(f"actions must lie in [0, {mdp.num_actions}); got {action.min()}..{action.max()}")
    if invalid is not None:
        invalid = np.asarray(invalid, dtype=bool).reshape(-1)
        if invalid.shape != action.shape:
            raise ValueError(f"invalid has {invalid.size} rows, action {action.size}: one flag per row")
        m = mdp.malformed_action
        if m is not None and invalid.any() and (action[invalid] != m).any():
            i = int(np.flatnonzero(invalid & (action != m))[0])
            raise ValueError(f"row {i} is invalid but took action {mdp.actions[action[i]]!r}: an invalid response "
                             "plays the malformed action")
    dist = row_distributions(mdp, action_logprobs)
    pi, visited = policy_from_rows(mdp, step, state, dist, fallback)
    if policy is not None:
        policy = np.asarray(policy, dtype=np.float64)
        if policy.shape != pi.shape:
            raise ValueError(f"policy has shape {policy.shape}, needs {pi.shape}")
        pi = policy
    lam = mdp.invalid_penalty
    q = invalid_share(mdp, action, invalid)
    values = evaluate_policy(mdp.with_returns(mdp.gamma, lam * q), pi)
    step = np.asarray(step, dtype=np.int64).reshape(-1)
    state = np.asarray(state, dtype=np.int64).reshape(-1)
    Q = values.Q[step, state, action]
    if invalid is not None and mdp.malformed_action is not None:  # the row's own charge: λ if invalid, else 0
        Q = Q - (action == mdp.malformed_action) * lam * (invalid.astype(np.float64) - q)
    return OnPolicyTruth(A=Q - values.V[step, state], pi=pi, values=values, visited=visited, Q=Q)


def score_actions(model, context_ids, action_ids, pad_id: int = 0, temperature: float = 1.0,
                  max_rows: int = 256) -> np.ndarray:
    """(N, A) log P(action_ids[a] | context_ids[i]) under ``model``, the sum over a's tokens.

    model : a causal LM (``torch.nn.Module``), or a function ``(prompts, responses) -> ForwardOutput`` such as the
            trainer's ``PPOActor.compute_logprobs``, which knows the run's sharding and chunking.

    context_ids : N 1-D LongTensors, each row's prompt followed by its response up to where the action text starts.
    action_ids  : A 1-D LongTensors, the token ids of each action's text (end-of-sequence included, so that a
                  longer response that merely starts the same way is not counted).
    Rows run in chunks of ``max_rows`` contexts (× A continuations each), without gradients.
    """
    import torch

    from trainer.forward import pack_rows_shared, policy_forward

    if not action_ids or any(int(a.numel()) == 0 for a in action_ids):
        raise ValueError("score_actions: every action needs at least one token")
    n, n_act = len(context_ids), len(action_ids)
    out = np.zeros((n, n_act))
    with torch.no_grad():
        for lo in range(0, n, max_rows):
            ctx = context_ids[lo: lo + max_rows]
            prompts = [c for c in ctx for _ in range(n_act)]
            responses = [a for _ in ctx for a in action_ids]
            if isinstance(model, torch.nn.Module):
                packed = pack_rows_shared(prompts, responses, pad_id)
                res = policy_forward(model, packed, compute_entropy=False, temperature=temperature)
            else:
                res = model(prompts, responses)
            lp = (res.logprobs.double().cpu() * res.mask.cpu()).sum(1)
            if res.nonfinite_rows is not None and res.nonfinite_rows.numel():
                raise ValueError(f"score_actions: non-finite log-probs in rows "
                                 f"{(res.nonfinite_rows // n_act + lo).unique().tolist()[:5]}")
            out[lo: lo + len(ctx)] = lp.view(len(ctx), n_act).cpu().numpy()
    return out


def row_thought(text: str) -> str:
    """A response's thought: the text up to the first ``<action>``; without one, up to the end of ``</think>``, else
    "" (``groundtruth.live``, "Each row's context")."""
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case has another length: cut the lowered text
        text = low
    k = low.find("<action>")
    if k >= 0:
        return text[:k]
    k = low.find("</think>")
    return text[: k + len("</think>")] if k >= 0 else ""


def action_token_ids(tokenizer, mdp: TabularMDP) -> list:
    """Token ids of ``<action>{a}</action>`` + EOS for each named action of ``mdp`` (the malformed one gets the
    EOS alone, a placeholder: ``row_distributions`` ignores its score)."""
    import torch

    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = []
    for i, a in enumerate(mdp.actions):
        if i == mdp.malformed_action:
            out.append(torch.tensor(eos or [0], dtype=torch.long))
            continue
        ids = tokenizer(f"<action>{a}</action>", add_special_tokens=False)["input_ids"] + eos
        out.append(torch.tensor(ids, dtype=torch.long))
    return out
