"""Sample groups of trajectories as in training and turn them into ``estimators.StepBatch`` rows.

A batch holds P prompt groups (one task each) of G trajectories; every trajectory runs until it is won or
reaches the horizon H. Sampling is vectorised over the P·G trajectories (one NumPy pass per step);
observation text is rendered afterwards, row by row, from the event that led into each state.

Row order: (group, trajectory, step), as a rollout stored per trajectory.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from envs.finite.mdp import MALFORMED_ACTION, TabularMDP
from estimators import StepBatch

__all__ = ["Rollout", "sample_rollout", "render_observations", "response_texts", "to_step_batch"]


@dataclass
class Rollout:
    """Step rows of P·G trajectories. All arrays are (N,) except ``tasks`` (P,).

    group, traj, step : int    prompt group, trajectory inside the group, step index t
    state, action     : int    true state s_t and action a_t
    obs_event         : int    event that produced the observation of s_t (start event at t = 0)
    reward            : float  environment reward of the step (10 on the winning step)
    done              : bool   the step won the episode
    valid             : bool   the action is not the malformed response
    tasks             : int    the task of each group
    """

    group: np.ndarray
    traj: np.ndarray
    step: np.ndarray
    state: np.ndarray
    action: np.ndarray
    obs_event: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    valid: np.ndarray
    tasks: np.ndarray

    def __len__(self) -> int:
        return int(self.group.shape[0])

    @property
    def num_trajectories(self) -> int:
        return int(len(np.unique(self.group * (self.traj.max() + 1) + self.traj)))

    def success_rate(self) -> float:
        return float(self.done.sum() / self.num_trajectories)


def _sample_rows(cdf: np.ndarray, u: np.ndarray, last: np.ndarray | int) -> np.ndarray:
    """Index of the first entry of each row of ``cdf`` (M, K) that exceeds ``u`` (M,), at most ``last``
    (the last entry with non-zero probability, so rounding never selects padding)."""
    idx = (cdf <= u[:, None]).sum(axis=1)
    return np.minimum(idx, last)


def sample_rollout(mdp: TabularMDP, pi: np.ndarray, tasks, group_size: int, rng: np.random.Generator) -> Rollout:
    """Run ``group_size`` trajectories of each task in ``tasks`` (P,) under policy ``pi`` (S, A)."""
    tasks = np.asarray(tasks, dtype=np.int64).reshape(-1)
    if group_size < 1:
        raise ValueError(f"group_size={group_size} must be >= 1")
    if tasks.size == 0 or tasks.min() < 0 or tasks.max() >= mdp.num_tasks:
        raise ValueError(f"tasks {tasks.tolist()[:8]} must be task indices in [0, {mdp.num_tasks})")
    P, G, H = tasks.size, group_size, mdp.horizon
    M = P * G
    group = np.repeat(np.arange(P), G)  # (M,)
    traj = np.tile(np.arange(G), P)  # (M,)
    s = mdp.start_states[tasks][group].copy()  # (M,)
    ev = mdp.start_events[tasks][group].copy()  # (M,)
    alive = np.ones(M, dtype=bool)
    pi_cdf = np.cumsum(pi, axis=1)
    last_outcome = (mdp.prob > 0).sum(-1) - 1  # (S, A)
    cols: dict[str, list] = {k: [] for k in ("i", "step", "state", "action", "obs_event", "reward", "done")}
    for t in range(H):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        st = s[idx]
        a = _sample_rows(pi_cdf[st], rng.random(idx.size), pi.shape[1] - 1)  # (m,)
        k = _sample_rows(np.cumsum(mdp.prob[st, a], axis=1), rng.random(idx.size), last_outcome[st, a])  # (m,)
        ns, r, d, e = mdp.next_state[st, a, k], mdp.env_reward[st, a, k], mdp.done[st, a, k], mdp.event[st, a, k]
        for name, v in (("i", idx), ("step", np.full(idx.size, t)), ("state", st), ("action", a),
                        ("obs_event", ev[idx]), ("reward", r), ("done", d)):
            cols[name].append(v)
        s[idx], ev[idx] = ns, e
        alive[idx] = ~d
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["step"], c["i"]))  # (group, traj, step): i = group * G + traj
    i = c["i"][order]
    mal = mdp.malformed_action
    action = c["action"][order]
    return Rollout(
        group=group[i], traj=traj[i], step=c["step"][order], state=c["state"][order], action=action,
        obs_event=c["obs_event"][order], reward=c["reward"][order], done=c["done"][order],
        valid=np.ones(action.size, dtype=bool) if mal is None else action != mal, tasks=tasks,
    )


def render_observations(mdp: TabularMDP, ro: Rollout, rng: np.random.Generator) -> list[str]:
    """The observation text o_i of every row (the anchor observation), in row order.

    One draw from ``rng`` seeds a ``random.Random`` that renders all rows (``envs.finite.text``).
    """
    fam = mdp.family
    r = random.Random(int(rng.integers(2**63)))
    rows = zip(ro.obs_event.tolist(), ro.state.tolist(), ro.step.tolist())
    if not fam.surface.deterministic:
        return [fam.render(mdp.events[e], mdp.states[s], t, r) for e, s, t in rows]
    # no variation: the string depends on (event, state) only, so render each pair once
    cache = fam.__dict__.setdefault("_render_cache", {})
    out = []
    for e, s, t in rows:
        text = cache.get((e, s))
        if text is None:
            text = cache[(e, s)] = fam.render(mdp.events[e], mdp.states[s], t, r)
        out.append(text)
    return out


def response_texts(mdp: TabularMDP, actions: np.ndarray) -> list[str]:
    """Model-style responses: ``<think>..</think><action>X</action>``; the malformed action has no tags."""
    out = []
    for a in actions.tolist():
        text = mdp.actions[a]
        if text == MALFORMED_ACTION:
            out.append("<think>I am not sure what to do.</think> Maybe I should wait a bit.")
        else:
            out.append(f"<think>Next I will {text}.</think>\n<action>{text}</action>")
    return out


def to_step_batch(mdp: TabularMDP, ro: Rollout, observations: list[str], hidden: np.ndarray | None = None,
                  group_offset: int = 0) -> StepBatch:
    """A validated ``StepBatch``; ``state_key`` holds the true state index of each row."""
    if len(observations) != len(ro):
        raise ValueError(f"{len(observations)} observations for {len(ro)} rows")
    batch = StepBatch(
        group_id=torch.as_tensor(ro.group + group_offset, dtype=torch.long),
        traj_id=torch.as_tensor(ro.traj, dtype=torch.long),
        step=torch.as_tensor(ro.step, dtype=torch.long),
        reward=torch.as_tensor(ro.reward, dtype=torch.float32),
        valid=torch.as_tensor(ro.valid, dtype=torch.bool),
        anchor_obs=list(observations),
        response_text=response_texts(mdp, ro.action),
        hidden=None if hidden is None else torch.as_tensor(np.asarray(hidden), dtype=torch.float32),
        state_key=ro.state.tolist(),
    )
    batch.validate(need_hidden=hidden is not None)
    return batch
