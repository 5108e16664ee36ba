"""Diagnostics every run logs (docs/method.md, "Diagnostics"), computed on every batch whatever the estimator.

Metric names (all floats; the x-axis is the training iteration):

State groupings (``group/``), exact anchors and hidden-state clusters side by side:
    group/rows                          N, step rows in the batch
    group/singleton_rate_anchor         fraction of rows alone in their exact-anchor group
    group/num_anchor_groups             number of anchor groups
    group/anchor_size_mean, _p90        mean and 90th percentile of anchor-group sizes (over groups)
    group/singleton_rate_cluster        fraction of rows alone in their hidden-state cluster   (*)
    group/num_clusters                  number of clusters                                     (*)
    group/cluster_size_mean, _p90       mean and 90th percentile of cluster sizes (over clusters) (*)
PACE row mix (*):
    group/pace_frac_pace                fraction of rows whose A^S uses the PACE formula
    group/pace_frac_fallback            fraction in the leave-one-out fallback
    group/pace_frac_singleton           fraction in singleton clusters (A^S = 0)
    group/pace_multikey_cluster_frac    fraction of multi-member clusters with >= 2 action keys
    group/pace_keys_per_cluster         mean distinct keys per multi-member cluster
    group/action_parse_rate             fraction of responses with a parsable action key
Cluster purity against the true state, when the batch has ``state_key`` (pairs inside a prompt group):
    group/purity_precision_{anchor,cluster}   same-group pairs that are truly the same state
    group/purity_recall_{anchor,cluster}      truly-same pairs that share a group
Advantages (``adv/``), per term t in {total, episode, step}:
    adv/{t}_mean, adv/{t}_std, adv/{t}_zero_frac (fraction with |A| <= 1e-9), adv/{t}_absmax

(*) only when the batch carries hidden states; clusters use the config's epsilon, centroid and backend,
and are reused from the estimator when it clustered already.
"""
from __future__ import annotations

import torch

from .algorithms import clusters_for, pace_metrics, step_returns
from .batch import StepBatch
from .grouping import anchor_groups
from .ops import action_keys, dense_ids, factorize
from .pace import pace_step_advantages
from .registry import ESTIMATORS

__all__ = ["batch_diagnostics", "grouping_stats", "pair_count", "pair_purity", "ZERO_TOL"]

#: |A| at or below this counts as a zero advantage (a rounding residue of a sum is ~1e-16 times the values)
ZERO_TOL = 1e-9


def grouping_stats(gid: torch.Tensor, kind: str) -> dict[str, float]:
    """Singleton rate, count and size statistics of a grouping (``kind`` = anchor | cluster)."""
    counts = torch.bincount(gid)
    sizes = counts[counts > 0].double()  # (K,) members per group
    count_name = "group/num_anchor_groups" if kind == "anchor" else "group/num_clusters"
    return {
        f"group/singleton_rate_{kind}": float((counts[gid] == 1).double().mean()),
        count_name: float(sizes.numel()),
        f"group/{kind}_size_mean": float(sizes.mean()),
        f"group/{kind}_size_p90": float(torch.quantile(sizes, 0.9)),
    }


def pair_count(ids: torch.Tensor) -> float:
    """Number of unordered pairs of rows that share an id (ids: LongTensor (N,) dense)."""
    c = torch.bincount(ids).double()
    return float((c * (c - 1) / 2).sum())


def pair_purity(group_of_row: torch.Tensor, state_of_row: torch.Tensor) -> tuple[float, float] | None:
    """(precision, recall) of a grouping against true states, over pairs of rows.

    group_of_row, state_of_row : LongTensor (N,) dense ids; state ids must already be local to a prompt
    group. precision = share of same-group pairs that are the same state; recall = share of same-state
    pairs in the same group. None when either pair count is 0.
    """

    same_group = pair_count(group_of_row)
    same_state = pair_count(state_of_row)
    both = pair_count(dense_ids(group_of_row, state_of_row))
    if same_group == 0 or same_state == 0:
        return None
    return both / same_group, both / same_state


def _adv_stats(name: str, x: torch.Tensor) -> dict[str, float]:
    x = x.double()
    return {
        f"adv/{name}_mean": float(x.mean()),
        f"adv/{name}_std": float(x.std(unbiased=False)),
        f"adv/{name}_zero_frac": float((x.abs() <= ZERO_TOL).double().mean()),
        f"adv/{name}_absmax": float(x.abs().max()),
    }


def batch_diagnostics(batch: StepBatch, cfg, result) -> dict[str, float]:
    """All diagnostics of docs/method.md for one batch (see the module docstring for the names)."""
    m: dict[str, float] = {"group/rows": float(len(batch))}
    anchors = anchor_groups(batch.group_id, batch.anchor_obs)
    m.update(grouping_stats(anchors, "anchor"))
    clusters = None
    if batch.hidden is not None:
        if ESTIMATORS[cfg.name].needs_hidden and result.cluster_id is not None:
            clusters = result.cluster_id
        else:
            clusters = clusters_for(batch, cfg)
        m.update(grouping_stats(clusters, "cluster"))
        if not any(k.startswith("group/pace_") for k in result.metrics):
            ids_ok = batch.response_ids is not None or cfg.pace_key == "action_tag"
            key_name = cfg.pace_key if ids_ok else "action_tag"
            keys, parsed = action_keys(
                batch.response_text, batch.response_ids, batch.response_mask, key_name, cfg.pace_key_tokens,
                batch.device
            )
            pace = pace_step_advantages(step_returns(batch, cfg), clusters, keys, "q", cfg.pace_fallback, "none")
            m.update(pace_metrics(pace, clusters, parsed))
    if batch.state_key is not None:
        states = dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key], device=batch.device))
        for name, gid in (("anchor", anchors), ("cluster", clusters)):
            if gid is None:
                continue
            pur = pair_purity(gid, states)
            if pur is not None:
                m[f"group/purity_precision_{name}"], m[f"group/purity_recall_{name}"] = pur
    m.update(_adv_stats("total", result.advantages))
    m.update(_adv_stats("episode", result.episode))
    m.update(_adv_stats("step", result.step))
    return m
