"""The language model's policy in every reachable (step, state) cell, scored from the prompt it would see there.

``groundtruth.onpolicy`` turns rows into a policy table; cells the batch did not visit need a policy too, since the
DP of a visited cell reaches them. ``cell_policy`` supplies it for every cell reachable from the start states
within the horizon, scored with the env's own renderer and the rollout's own prompt encoding.

What "exact" means here [choice, measured]: a language model's choice depends on the whole prompt, and with
``rollout.history_length: 2`` the prompt of a cell holds the last two (observation, action) pairs, each observation a
random rendering (paraphrases, distractors, shuffled lists, step counters on the ``high`` surface), and the response
starts with a free-text thought. No finite node set makes that policy Markov: even a DP over (step, history window)
nodes would average over renderings and thoughts. So the truth is exact for the Markov policy defined by

* **visited cells**: the mean of the batch rows' own distributions there (real prompts, real thoughts: samples of
  the policy's prompt distribution in that cell; ``onpolicy.policy_from_rows``), and
* **every other reachable cell**: the distribution at the cell's *canonical prompt*: the observation rendered by
  the family's renderer (``rng`` seeded by the cell), the history of the cell's most probable arrival under the
  policy already scored (built forward step by step: at step t + 1 a state's predecessor is the (state, action,
  outcome) of step t that maximises d_t(s) π_t(a|s) p(s'|s, a), d_t the occupancy from the start states), the chat
  template and length bound of the rollout (``agents.rollout.encode_transcript``), then the *canonical thought*:
  the most frequent thought among the batch's rows (``onpolicy.row_thought``; the tiny warm start writes empty think
  tags).

The residual of that choice is measured on every batch and logged (``TruthProbe``): the mean total-variation
distance between the canonical-prompt policy and the rows' mean in the visited cells
(``groundtruth/canonical_tv``). The alternative over (step, history-window) nodes is counted by
``history_nodes``: 175,000 nodes against 732 cells on the over-split study world (horizon 10), unaffordable per
iteration, and still not exact for the renderings and thoughts above.
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from envs.finite.mdp import TabularMDP

from .onpolicy import action_token_ids, row_distributions, row_thought, score_actions

__all__ = ["reachable_cells", "history_nodes", "CellPolicy", "cell_policy", "canonical_thought"]


def reachable_cells(mdp: TabularMDP, start_states=None) -> np.ndarray:
    """(H, S) bool: the cells (t, s) some action sequence reaches from ``start_states`` (default: every task's) with
    the episode still running."""
    H, S = mdp.horizon, mdp.num_states
    starts = mdp.start_states if start_states is None else np.asarray(start_states, dtype=np.int64)
    reach = np.zeros((H, S), dtype=bool)
    reach[0, starts] = True
    cont = mdp.continuation  # (S·A, S)
    for t in range(H - 1):
        sa = np.repeat(reach[t].astype(np.float64), mdp.num_actions)  # (S·A,)
        reach[t + 1] = (cont.T @ sa) > 0
    return reach


def history_nodes(mdp: TabularMDP, history_length: int, start_states=None) -> np.ndarray:
    """(H,) the number of distinct reachable nodes (step, last ``history_length`` (state, action, event) steps,
    state) per step: the node set of a DP whose policy depends on the prompt's history window."""
    starts = mdp.start_states if start_states is None else np.asarray(start_states, dtype=np.int64)
    layer = {((), int(s)) for s in starts}
    counts = []
    for _t in range(mdp.horizon):
        counts.append(len(layer))
        nxt = set()
        for hist, s in layer:
            for a in range(mdp.num_actions):
                for _p, ns, _, done, ev in mdp.outcomes(s, a):
                    if not done:
                        h = (hist + ((s, a, ev),))[-history_length:] if history_length > 0 else ()
                        nxt.add((h, ns))
        layer = nxt
    return np.asarray(counts)


@dataclass
class CellPolicy:
    """pi (H, S, A): the canonical-prompt policy (uniform in unreachable cells, which no reachable cell's value
    depends on); reachable (H, S); prompts: the number of prompts scored; prompt_ids: {(t, s): the canonical prompt's
    token ids} (without the thought)."""

    pi: np.ndarray
    reachable: np.ndarray
    prompts: int
    prompt_ids: dict


def canonical_thought(response_text) -> str:
    """The most frequent thought (``onpolicy.row_thought``) among responses that hold an
    ``<action>`` tag; ``<think></think>`` when none does (the protocol's empty thought)."""
    thoughts = [row_thought(t or "") for t in response_text if t and "<action>" in t.lower()]
    if not thoughts:
        return "<think></think>"
    return Counter(thoughts).most_common(1)[0][0]


def _cell_rng(t: int, s: int, seed: int) -> random.Random:
    return random.Random((int(seed) * 1_000_003 + t) * 1_000_003 + s)


def _info(mdp: TabularMDP, s: int, t: int) -> dict:
    adm = [mdp.actions[a] for a in np.flatnonzero(mdp.admissible[s])] if mdp.name == "rooms" else []
    return {"task": mdp.family.task_text(mdp.states[s]), "admissible_actions": adm, "step": t}


def cell_policy(mdp: TabularMDP, model, tokenizer, *, env_name: str, prompt_config, max_prompt_tokens: int,
                thought: str = "<think></think>", start_weights=None, pad_id: int = 0, temperature: float = 1.0,
                max_rows: int = 64, seed: int = 0) -> CellPolicy:
    """The policy at the canonical prompt of every reachable cell (module docstring), built forward step by step.

    model : a causal LM or a scoring function (``onpolicy.score_actions``); env_name : the prompt wording
    (``agents.prompts.get_prompt_builder``); prompt_config / max_prompt_tokens : the rollout's (``Agent``);
    start_weights : (n_tasks,) weights of the tasks' start states in the occupancy (default equal); seed : the
    renderings' seed.
    """
    from agents.prompts import Transcript, get_prompt_builder
    from agents.rollout import INVALID_ACTION_TEXT, encode_transcript
    from envs.base import clean_observation

    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    builder = get_prompt_builder(env_name)
    acts = action_token_ids(tokenizer, mdp)
    thought_ids = tokenizer(thought, add_special_tokens=False)["input_ids"] if thought else []
    m = mdp.malformed_action
    w = np.ones(mdp.num_tasks) if start_weights is None else np.asarray(start_weights, dtype=np.float64)
    if w.shape != (mdp.num_tasks,) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"start_weights must be {mdp.num_tasks} non-negative weights, not all 0; got {w.tolist()}")
    pi = np.full((H, S, A), 1.0 / A)
    reach = np.zeros((H, S), dtype=bool)
    d = np.zeros(S)
    layer: dict[int, Transcript] = {}
    for k, s in enumerate(mdp.start_states):
        s = int(s)
        if w[k] <= 0 or s in layer:
            d[s] += w[k] / w.sum()
            continue
        d[s] += w[k] / w.sum()
        obs = clean_observation(mdp.family.render(mdp.events[mdp.start_events[k]], mdp.states[s], 0,
                                                  _cell_rng(0, s, seed)))
        layer[s] = Transcript.start(obs, _info(mdp, s, 0))
    prompts = 0
    prompt_ids: dict[tuple[int, int], list[int]] = {}
    for t in range(H):
        cells = sorted(layer)
        reach[t, cells] = True
        contexts = []
        for s in cells:
            ids, _ = encode_transcript(tokenizer, builder, layer[s], prompt_config, max_prompt_tokens)
            prompt_ids[(t, s)] = list(ids)
            contexts.append(torch.tensor(list(ids) + list(thought_ids), dtype=torch.long))
        lp = score_actions(model, contexts, acts, pad_id=pad_id, temperature=temperature, max_rows=max_rows)
        pi[t, cells] = row_distributions(mdp, lp)
        prompts += len(cells)
        if t == H - 1:
            break
        best: dict[int, tuple[float, int, int, int]] = {}  # next state -> (weight, state, action, event)
        for s in cells:
            for a in range(A):
                wa = d[s] * pi[t, s, a]
                for p, ns, _, done, ev in mdp.outcomes(s, a):
                    if done:
                        continue
                    if ns not in best or wa * p > best[ns][0]:
                        best[ns] = (wa * p, s, a, ev)
        d = mdp.continuation_t @ (d[:, None] * pi[t]).reshape(-1)
        nxt = {}
        for ns, (_, s, a, ev) in best.items():
            tr = dataclasses.replace(layer[s], pairs=list(layer[s].pairs))
            obs = clean_observation(mdp.family.render(mdp.events[ev], mdp.states[ns], t + 1,
                                                      _cell_rng(t + 1, ns, seed)))
            tr.record(INVALID_ACTION_TEXT if a == m else mdp.actions[a], obs, _info(mdp, ns, t + 1))
            nxt[ns] = tr
        layer = nxt
    return CellPolicy(pi=pi, reachable=reach, prompts=prompts, prompt_ids=prompt_ids)
