"""BiPACE inside verl-agent: GiGPO's advantage function, with BiPACE's inputs added (docs/verl-agent.md).

    from bipace.estimators.verl_agent import compute_bipace_outcome_advantage   # pip install /path/to/bipace
    advantages, returns = compute_bipace_outcome_advantage(
        token_level_rewards, step_rewards, response_mask, anchor_obs, index, traj_index,   # as verl-agent's GiGPO
        step_advantage_w=1.0, mode="mean_norm",
        estimator="bipace_q", hidden=hidden, action_key=action_key, step_index=step_index, cluster_epsilon=0.05)

The first nine parameters are those of verl-agent's ``gigpo.core_gigpo.compute_gigpo_outcome_advantage`` and mean
the same: one row per agent step (verl-agent's batch after its multi-turn rollout), ``token_level_rewards``
(bs, L) whose row sum is the row's episode score S_i (the episode reward on the last response token, minus the
invalid-action penalty), ``step_rewards`` (bs,) the row's discounted step return R_i (verl-agent's
``compute_step_discounted_returns``, minus the same penalty), ``response_mask`` (bs, L), ``anchor_obs`` (bs,),
``index`` (bs,) the prompt group (verl-agent's ``uid``), ``traj_index`` (bs,) the trajectory (``traj_uid``),
``epsilon`` the 1e-6 of the std normalisation, ``step_advantage_w`` (w), ``mode`` (``mean_std_norm`` | ``mean_norm``).
It returns ``(advantages, returns)``, both (bs, L), the row's A_i on every response token (zeros where the mask is
0), and the same tensor twice, as verl-agent's GiGPO does.

BiPACE's inputs, keyword-only:

* ``estimator``: ``gigpo`` | ``bigpo`` | ``bipace_v`` | ``bipace_q`` (``VERL_AGENT_ESTIMATORS``).
* ``hidden`` (bs, D): the actor's hidden state at the last prompt token of each row (bigpo and BiPACE).
* ``action_key`` (bs,): any hashable per row; rows with equal keys took the same action (BiPACE). From response
  texts, ``action_keys_from_responses`` gives this repo's key (the first ``<action>`` body, normalised).
* ``step_index`` (bs,): the row's step inside its trajectory. The greedy clustering visits rows in (trajectory,
  step) order; without it the rows' order inside each trajectory is taken as the step order, which holds in
  verl-agent's batch before ``_balance_batch`` reorders it (``step_indices_from_order`` records it there).
* ``cluster_epsilon`` and the other clustering / PACE switches: those of ``estimators.EstimatorConfig``
  (``epsilon`` there; renamed here because verl-agent's ``epsilon`` is the std's 1e-6).

The statistics are this repo's estimators' own (``estimators.ops``, ``estimators.cluster``, ``estimators.pace``),
fed with verl-agent's S_i and R_i instead of recomputing them from per-step rewards, so verl-agent's duplicated rows
(``adjust_batch`` copies random rows to fill the last micro-batch) count as often as they appear, as in its GiGPO.
Tests: ``tests/estimators/test_verl_agent.py`` (GiGPO against verl-agent's own outputs; BiPACE against
``compute_advantages`` on the same rows).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from .algorithms import pace_metrics
from .cluster import center_by_group, greedy_cosine_clusters
from .config import CENTROIDS, CLUSTER_BACKENDS, NORM_MODES, PACE_FALLBACKS, PACE_NORMS
from .grouping import anchor_groups
from .ops import INVALID_KEY, STD_EPS, action_tag, dense_ids, factorize, group_normalize
from .pace import pace_step_advantages
from .registry import EstimatorResult

__all__ = ["VERL_AGENT_ESTIMATORS", "compute_bipace_outcome_advantage", "row_advantages",
           "action_keys_from_responses", "step_indices_from_order"]

VERL_AGENT_ESTIMATORS = ("gigpo", "bigpo", "bipace_v", "bipace_q")
_NEEDS_HIDDEN = ("bigpo", "bipace_v", "bipace_q")


def action_keys_from_responses(responses: Sequence[str]) -> list[str]:
    """This repo's PACE key per response text (``pace_key: action_tag``): the first ``<action>...</action>`` body,
    lower-cased, whitespace collapsed; ``<invalid>`` when none parses. verl-agent's prompts ask for the same tag."""
    return [action_tag(r) for r in responses]


def step_indices_from_order(traj_index: Sequence[Hashable]) -> np.ndarray:
    """int64 (bs,): each row's position among the rows of its trajectory, in batch order (0, 1, ...)."""
    seen: dict = {}
    out = np.empty(len(traj_index), dtype=np.int64)
    for i, t in enumerate(_hashables(traj_index)):
        out[i] = seen.get(t, 0)
        seen[t] = out[i] + 1
    return out


def _hashable(x):
    if isinstance(x, np.ndarray):
        return tuple(x.ravel().tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(e) for e in x)
    return x


def _hashables(values) -> list:
    return [_hashable(v) for v in (values.tolist() if isinstance(values, np.ndarray) and values.dtype != object
                                   else values)]


def _canonical_codes(values, name: str, n: int, device) -> torch.Tensor:
    """LongTensor (bs,): dense codes ordered by the values' text, so that the clustering's visiting order does not
    depend on the order of the rows (verl-agent's ids are uuid strings)."""
    vals = _hashables(values)
    if len(vals) != n:
        raise ValueError(f"{name} has {len(vals)} entries but token_level_rewards has {n} rows")
    table = {v: k for k, v in enumerate(sorted(set(vals), key=lambda v: (type(v).__name__, str(v))))}
    return torch.tensor([table[v] for v in vals], dtype=torch.long, device=device)


def row_advantages(token_level_rewards: torch.Tensor, step_rewards: torch.Tensor, anchor_obs, index, traj_index,
                   step_advantage_w: float = 1.0, mode: str = "mean_norm", *, estimator: str = "bipace_q",
                   hidden: torch.Tensor | None = None, action_key=None, step_index=None, cluster_epsilon: float = 0.05,
                   centroid: str = "mean", center_states: bool = False, cluster_backend: str = "torch",
                   pace_fallback: str = "either", pace_norm: str = "none") -> EstimatorResult:
    """One advantage per row (``EstimatorResult``: advantages, episode, step, cluster_id, metrics; float32 (bs,)).
    The arguments are those of ``compute_bipace_outcome_advantage`` (module docstring)."""
    if estimator not in VERL_AGENT_ESTIMATORS:
        raise ValueError(f"estimator={estimator!r} is not one of {list(VERL_AGENT_ESTIMATORS)}")
    if mode not in NORM_MODES:
        raise ValueError(f"mode={mode!r} is not one of {list(NORM_MODES)} (verl-agent's algorithm.gigpo.mode)")
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.ndim != 2:
        raise ValueError("token_level_rewards must be a (bs, response_length) tensor")
    n = token_level_rewards.shape[0]
    if n == 0:
        raise ValueError("token_level_rewards has 0 rows: a batch needs at least one step row")
    device = token_level_rewards.device
    step_rewards = torch.as_tensor(step_rewards, device=device)
    if step_rewards.shape != (n,):
        raise ValueError(f"step_rewards must have shape ({n},), got {tuple(step_rewards.shape)}")
    for name, t in (("token_level_rewards", token_level_rewards), ("step_rewards", step_rewards)):
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} holds NaN/Inf at rows "
                             f"{torch.nonzero(~torch.isfinite(t.reshape(n, -1)).all(1)).flatten()[:5].tolist()}")
    for name, value, allowed in (("centroid", centroid, CENTROIDS), ("cluster_backend", cluster_backend,
                                 CLUSTER_BACKENDS), ("pace_fallback", pace_fallback, PACE_FALLBACKS),
                                 ("pace_norm", pace_norm, PACE_NORMS)):
        if value not in allowed:
            raise ValueError(f"{name}={value!r} is not one of {list(allowed)}")
    group = _canonical_codes(index, "index", n, device)
    scores = token_level_rewards.double().sum(dim=-1)                                   # S_i
    episode = group_normalize(scores, group, mode, unbiased=True, singleton="identity")
    returns = step_rewards.double()                                                       # R_i
    metrics: dict[str, float] = {}
    if estimator == "gigpo":
        obs = _hashables(anchor_obs)
        if len(obs) != n:
            raise ValueError(f"anchor_obs has {len(obs)} entries but token_level_rewards has {n} rows")
        cluster = anchor_groups(group, obs)
        step = group_normalize(returns, cluster, mode, unbiased=True, singleton="zero")
    else:
        if hidden is None:
            raise ValueError(f"estimator={estimator!r} clusters hidden states: pass hidden (bs, D), the actor's state "
                             "at the last prompt token of each row (docs/verl-agent.md)")
        hidden = torch.as_tensor(hidden, device=device)
        if hidden.ndim != 2 or hidden.shape[0] != n or not hidden.dtype.is_floating_point:
            raise ValueError(f"hidden must be a float (bs={n}, D) tensor, got {tuple(hidden.shape)} {hidden.dtype}")
        if not torch.isfinite(hidden).all():
            bad = torch.nonzero(~torch.isfinite(hidden).all(dim=1)).flatten()[:5].tolist()
            raise ValueError(f"hidden holds NaN/Inf at rows {bad}: check the actor's forward pass")
        if not (isinstance(cluster_epsilon, (int, float)) and 0.0 <= cluster_epsilon <= 2.0):
            raise ValueError(f"cluster_epsilon={cluster_epsilon!r} must be a cosine distance in [0, 2] "
                             "(the paper: 0.05 for 1.5B models, 0.10 for 7B)")
        traj = dense_ids(group, _canonical_codes(traj_index, "traj_index", n, device))
        if step_index is None:
            step_index = step_indices_from_order(traj_index)
        steps = np.asarray(step_index)
        if steps.dtype == object:  # verl-agent's collate_fn turns every non-tensor column into an object array
            steps = steps.astype(np.int64)
        steps = torch.as_tensor(steps, dtype=torch.long, device=device)
        if steps.shape != (n,) or bool((steps < 0).any()):
            raise ValueError(f"step_index must hold {n} non-negative step numbers")
        h = center_by_group(hidden, group) if center_states else hidden
        cluster = greedy_cosine_clusters(h, group, traj, steps, float(cluster_epsilon), centroid,
                                         cluster_backend).cluster_id
        if estimator == "bigpo":
            step = group_normalize(returns, cluster, mode, unbiased=True, singleton="zero")
        else:
            if action_key is None:
                raise ValueError(f"estimator={estimator!r} needs action_key (bs,): equal keys = the same action "
                                 "(action_keys_from_responses turns response texts into this repo's key)")
            keys_list = _hashables(action_key)
            if len(keys_list) != n:
                raise ValueError(f"action_key has {len(keys_list)} entries but token_level_rewards has {n} rows")
            keys = factorize(keys_list, device=device)
            pace = pace_step_advantages(returns, cluster, keys, "q" if estimator == "bipace_q" else "diff_peer",
                                        pace_fallback, pace_norm)
            step = pace.step
            parsed = torch.tensor([k != INVALID_KEY for k in keys_list], dtype=torch.bool, device=device)
            metrics = pace_metrics(pace, cluster, parsed)
    adv = episode + float(step_advantage_w) * step
    dtype = token_level_rewards.dtype if token_level_rewards.dtype.is_floating_point else torch.float32
    return EstimatorResult(advantages=adv.to(dtype), episode=episode.to(dtype), step=step.to(dtype),
                           cluster_id=cluster, metrics=metrics)


def compute_bipace_outcome_advantage(token_level_rewards: torch.Tensor, step_rewards: torch.Tensor,
                                     response_mask: torch.Tensor, anchor_obs, index, traj_index,
                                     epsilon: float = 1e-6, step_advantage_w: float = 1.0, mode: str = "mean_norm",
                                     enable_similarity: bool = False, similarity_thresh: float = 0.95, *,
                                     estimator: str = "bipace_q", hidden: torch.Tensor | None = None,
                                     action_key=None, step_index=None, cluster_epsilon: float = 0.05,
                                     centroid: str = "mean", center_states: bool = False,
                                     cluster_backend: str = "torch", pace_fallback: str = "either",
                                     pace_norm: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """verl-agent's ``compute_gigpo_outcome_advantage`` signature (its ``enable_similarity`` and
    ``similarity_thresh`` included, so its dispatch can call this unchanged) plus BiPACE's inputs; returns
    ``(advantages, returns)``, (bs, L) each, the same tensor twice. See the module docstring."""
    if epsilon != STD_EPS:
        raise ValueError(f"epsilon={epsilon!r}: this adapter normalises with verl-agent's default std epsilon "
                         f"{STD_EPS} (its dispatch passes no other); BiPACE's clustering threshold is cluster_epsilon")
    if enable_similarity:
        raise ValueError("enable_similarity=True (verl-agent's similarity-based anchors) is not implemented here: "
                         "set algorithm.gigpo.enable_similarity=False, or use estimator='bigpo' for grouping by "
                         "similar states")
    if not isinstance(response_mask, torch.Tensor) or response_mask.shape != token_level_rewards.shape:
        raise ValueError(f"response_mask must be a tensor shaped like token_level_rewards "
                         f"{tuple(token_level_rewards.shape)}")
    res = row_advantages(token_level_rewards, step_rewards, anchor_obs, index, traj_index, step_advantage_w, mode,
                         estimator=estimator, hidden=hidden, action_key=action_key, step_index=step_index,
                         cluster_epsilon=cluster_epsilon, centroid=centroid, center_states=center_states,
                         cluster_backend=cluster_backend, pace_fallback=pace_fallback, pace_norm=pace_norm)
    scores = res.advantages.unsqueeze(-1) * response_mask.to(res.advantages.dtype)
    return scores, scores
