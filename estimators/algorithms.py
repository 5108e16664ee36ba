"""The registered estimators. Every one has the signature ``fn(batch, cfg) -> EstimatorResult`` and
computes ``A_i = A^ep_i + w A^S_i`` (w = ``cfg.step_weight``); the formulas are those of docs/method.md.

Common quantities [GiGPO]:
    S_i = sum_{j in tau(i)} r_j - lambda (1 - v_i)            episode score (penalty of row i only)
    R_i = sum_{k >= t(i)} gamma^{k - t(i)} r_k - lambda (1 - v_i)  step return (penalty after discounting)
"""
from __future__ import annotations

import torch

from .batch import StepBatch
from .cluster import center_by_group, greedy_cosine_clusters
from .config import EstimatorConfig
from .grouping import anchor_groups, history_groups
from .ops import action_keys, dense_ids, discounted_returns, episode_scores, group_normalize
from .pace import BRANCH_FALLBACK, BRANCH_PACE, BRANCH_SINGLETON, pace_step_advantages
from .registry import EstimatorResult, register_estimator

__all__ = ["clusters_for", "step_returns", "grpo_episode"]


def _traj(batch: StepBatch) -> torch.Tensor:
    return dense_ids(batch.group_id, batch.traj_id)


def grpo_episode(batch: StepBatch, cfg: EstimatorConfig) -> torch.Tensor:
    """A^ep = norm_{rows of the prompt group}(S) (one-row group: mean 0, std 1). float64 (N,)."""
    s = episode_scores(batch.reward, _traj(batch), batch.valid, cfg.invalid_penalty)
    return group_normalize(s, dense_ids(batch.group_id), cfg.norm_mode, unbiased=True, singleton="identity")


def step_returns(batch: StepBatch, cfg: EstimatorConfig) -> torch.Tensor:
    """R (float64 (N,)): discounted return-to-go with the row's own invalid penalty."""
    return discounted_returns(batch.reward, _traj(batch), batch.step, batch.valid, cfg.gamma, cfg.invalid_penalty)


def clusters_for(batch: StepBatch, cfg: EstimatorConfig) -> torch.Tensor:
    """LongTensor (N,): BiGPO hidden-state clusters of ``batch`` with ``cfg``'s epsilon/centroid/backend (and the
    prompt group's mean state subtracted first when ``center_states``)."""
    if cfg.epsilon_is_auto:
        raise ValueError(
            "EstimatorConfig.epsilon='auto' must be resolved to a number before clustering: the trainer does it on "
            "the first training batch (estimators.calibrate.choose_epsilon); outside the trainer give a number"
        )
    hidden = center_by_group(batch.hidden, batch.group_id) if cfg.center_states else batch.hidden
    return greedy_cosine_clusters(
        hidden, batch.group_id, batch.traj_id, batch.step, cfg.epsilon, cfg.centroid, cfg.cluster_backend
    ).cluster_id


def _result(episode: torch.Tensor, step: torch.Tensor, cfg: EstimatorConfig, cluster=None, metrics=None,
            dtype=torch.float32):
    adv = episode + cfg.step_weight * step
    return EstimatorResult(
        advantages=adv.to(dtype), episode=episode.to(dtype), step=step.to(dtype), cluster_id=cluster,
        metrics=metrics or {}
    )


@register_estimator("grpo")
def grpo(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """GRPO, multi-turn [GiGPO's implementation].

    A_i = norm_{j: g(j) = g(i)}(S)_i, statistics over all step rows of the prompt group (long trajectories
    weigh more) [GiGPO]; one-row group: mean 0, std 1. No step term.
    Shapes: batch of N rows -> advantages (N,).
    """
    ep = grpo_episode(batch, cfg)
    return _result(ep, torch.zeros_like(ep), cfg, dtype=batch.reward.dtype)


@register_estimator("gigpo")
def gigpo(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """GiGPO (arXiv 2505.10978).

    A_i = A^ep_i + w A^S_i,  A^ep = GRPO's,  A^S_i = norm_{anchor group of i}(R)_i, 0 for singleton groups.
    Anchor group: rows of the same prompt group with exactly equal anchor observation o, pooled across
    trajectories and steps [GiGPO]. cluster_id = anchor group.
    """
    ep = grpo_episode(batch, cfg)
    anchors = anchor_groups(batch.group_id, batch.anchor_obs)
    st = group_normalize(step_returns(batch, cfg), anchors, cfg.norm_mode, unbiased=True, singleton="zero")
    return _result(ep, st, cfg, cluster=anchors, dtype=batch.reward.dtype)


@register_estimator("bigpo", needs_hidden=True)
def bigpo(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """BiGPO, the "state-only" ablation [paper].

    GiGPO with the anchor groups replaced by greedy cosine clusters of the actor's hidden states
    (``estimators.cluster``): A^S_i = norm_{cluster of i}(R)_i, 0 for singletons; A = A^ep + w A^S.
    GiGPO is the special case epsilon = 0 with one-hot embeddings of o.
    Bias bound [paper]: if V is L-Lipschitz in the behavioural distance, clustering adds at most 2 L eps.
    """
    ep = grpo_episode(batch, cfg)
    clusters = clusters_for(batch, cfg)
    st = group_normalize(step_returns(batch, cfg), clusters, cfg.norm_mode, unbiased=True, singleton="zero")
    return _result(ep, st, cfg, cluster=clusters, dtype=batch.reward.dtype)


def _bipace(batch: StepBatch, cfg: EstimatorConfig, variant: str) -> EstimatorResult:
    ep = grpo_episode(batch, cfg)
    clusters = clusters_for(batch, cfg)
    keys, parsed = action_keys(
        batch.response_text, batch.response_ids, batch.response_mask, cfg.pace_key, cfg.pace_key_tokens, batch.device
    )
    pace = pace_step_advantages(step_returns(batch, cfg), clusters, keys, variant, cfg.pace_fallback, cfg.pace_norm)
    return _result(ep, pace.step, cfg, cluster=clusters, metrics=pace_metrics(pace, clusters, parsed),
                   dtype=batch.reward.dtype)


@register_estimator("bipace_q", needs_hidden=True, uses_action_keys=True)
def bipace_q(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """BiPACE, Q-style [paper] (the paper's main method).

    Clusters C as in BiGPO; inside C:  A^S_i = Q(k_i) - V,  V = mean_{j in C} R_j,
    Q(k) = mean_{j in C, k_j = k} R_j (row i in both means [choice]); leave-one-out fallback
    A^S_i = R_i - mean_{j in C, j != i} R_j when ``pace_fallback`` fires; 0 for singletons.
    A = A^ep + w A^S, w = 1 [choice]. Key k_i from ``pace_key`` (action_tag | first_tokens).
    See ``estimators.pace`` for every choice.
    """
    return _bipace(batch, cfg, "q")


@register_estimator("bipace_v", needs_hidden=True, uses_action_keys=True)
def bipace_v(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """BiPACE, diff-peer variant [paper names it; formula is our choice].

    Clusters C as in BiGPO; inside C:  A^S_i = R_i - mean_{j in C, k_j != k_i} R_j, with the same
    leave-one-out fallback and singleton rule as ``bipace_q``. A = A^ep + w A^S.
    """
    return _bipace(batch, cfg, "diff_peer")


@register_estimator("pace_anchor", uses_action_keys=True)
def pace_anchor(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """PACE inside GiGPO's exact anchors: BiPACE's action half without its state half [ablation, our addition].

    BiPACE_Q with the hidden-state clusters replaced by GiGPO's anchor groups (rows of one prompt group with equal
    anchor observation): inside anchor group C, A^S_i = Q(k_i) - V, with the same leave-one-out fallback,
    singleton rule and ``pace_norm`` as ``bipace_q``; A = A^ep + w A^S. It isolates what the action key adds to
    GiGPO's grouping (no hidden states needed). cluster_id = the anchor group.
    """
    ep = grpo_episode(batch, cfg)
    anchors = anchor_groups(batch.group_id, batch.anchor_obs)
    keys, parsed = action_keys(
        batch.response_text, batch.response_ids, batch.response_mask, cfg.pace_key, cfg.pace_key_tokens, batch.device
    )
    pace = pace_step_advantages(step_returns(batch, cfg), anchors, keys, "q", cfg.pace_fallback, cfg.pace_norm)
    return _result(ep, pace.step, cfg, cluster=anchors, metrics=pace_metrics(pace, anchors, parsed),
                   dtype=batch.reward.dtype)


@register_estimator("hgpo")
def hgpo(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """HGPO, hierarchical history groups (arXiv 2602.22817; "HiGPO" in the BiPACE tables).

    Level k (k = 0..K, K = ``hgpo_levels``): rows of one prompt group with equal last k+1 anchor
    observations (``estimators.grouping.history_groups`` documents the counting). Per level,
    A_k = norm_{level-k group}(R) with the biased std [HGPO's code]; a level is skipped for a row when its
    group has one member or A_k is exactly 0; the rest are combined with weights c(k)^alpha / sum_{l kept}
    c(l)^alpha. No episode term [HGPO's code]: A^ep = 0, A = w A^S. cluster_id = the level-0 group.

    ``hgpo_rule``: ``verl_agent`` (default; HGPO's published code, verl-agent ``recipe/hgpo/core_hgpo.py``):
    level k is formed only at steps t >= k and c(k) = k + 2; ``start_marker`` (this repo's earlier rule, behind
    every HGPO figure committed before 2026-12-06): levels reaching before step 0 compare a start marker, so a
    row at step t < k joins rows at the same step with the same observations since the start, and c(k) = k + 1.
    """
    traj = _traj(batch)
    r = step_returns(batch, cfg)
    levels = history_groups(batch.group_id, traj, batch.step, batch.anchor_obs, cfg.hgpo_levels)
    verl_agent = cfg.hgpo_rule == "verl_agent"
    num = torch.zeros_like(r)
    den = torch.zeros_like(r)
    for k, gid in enumerate(levels):  # K + 1 levels (3 by default), each vectorised over rows
        a_k = group_normalize(r, gid, cfg.norm_mode, unbiased=False, singleton="zero")
        keep = (torch.bincount(gid)[gid] > 1) & (a_k != 0)
        if verl_agent:  # a level-k group reaching before step 0 holds only rows at t < k: dropping it moves no mean
            keep = keep & (batch.step >= k)
        w = float(k + 2 if verl_agent else k + 1) ** cfg.hgpo_alpha
        num = num + torch.where(keep, w * a_k, torch.zeros_like(a_k))
        den = den + keep.double() * w
    st = torch.where(den > 0, num / den.clamp_min(1e-12), torch.zeros_like(num))
    return _result(torch.zeros_like(st), st, cfg, cluster=levels[0], dtype=batch.reward.dtype)


@register_estimator("rloo")
def rloo(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult:
    """RLOO over trajectories (Ahmadian et al., 2024) as an episode-level baseline [choice for multi-turn].

    A^ep_i = S_tau(i) - mean_{tau' != tau(i), same prompt group} S_tau' - lambda (1 - v_i), where
    S_tau = sum of rewards of trajectory tau: every trajectory counts once in the baseline, whatever its
    length. A prompt group with one trajectory uses baseline 0 (as GRPO's one-member rule). No step term.
    """
    traj = _traj(batch)
    n_traj = int(traj.max()) + 1
    ret = torch.zeros(n_traj, dtype=torch.float64, device=batch.device).index_add_(0, traj, batch.reward.double())
    # prompt group of each trajectory
    tgroup = torch.zeros(n_traj, dtype=torch.long, device=batch.device).scatter(0, traj, dense_ids(batch.group_id))
    n_g = torch.bincount(tgroup).double()  # trajectories per prompt group
    sum_g = torch.zeros(n_g.numel(), dtype=torch.float64, device=batch.device).index_add_(0, tgroup, ret)
    others = (n_g[tgroup] - 1).clamp_min(1)
    base = torch.where(n_g[tgroup] > 1, (sum_g[tgroup] - ret) / others, torch.zeros_like(ret))  # (n_traj,)
    ep = (ret - base)[traj] - cfg.invalid_penalty * (~batch.valid).double()
    return _result(ep, torch.zeros_like(ep), cfg, dtype=batch.reward.dtype)


def pace_metrics(pace, clusters: torch.Tensor, parsed: torch.Tensor) -> dict[str, float]:
    """PACE row mix (docs/method.md, "Diagnostics"), names under ``group/pace_*``."""
    n = float(clusters.numel())
    sizes = torch.bincount(clusters)
    multi = sizes > 1
    keys = pace.keys_per_cluster
    return {
        "group/pace_frac_pace": float((pace.branch == BRANCH_PACE).sum()) / n,
        "group/pace_frac_fallback": float((pace.branch == BRANCH_FALLBACK).sum()) / n,
        "group/pace_frac_singleton": float((pace.branch == BRANCH_SINGLETON).sum()) / n,
        "group/pace_multikey_cluster_frac": float((keys[multi] >= 2).double().mean()) if bool(multi.any()) else 0.0,
        "group/pace_keys_per_cluster": float(keys[multi].double().mean()) if bool(multi.any()) else 0.0,
        "group/action_parse_rate": float(parsed.double().mean()),
    }
