"""PACE: action-conditioned step baselines inside each state cluster [paper].

For a cluster C and a row i in C with step return R_i and action key k_i (docs/method.md,
"PACE: action-conditioned baselines"):

* |C| = 1 (singleton):                         A^S_i = 0
* Q-style (``pace: q``) [paper]:                A^S_i = Q(k_i) - V,  V = mean_{j in C} R_j,
                                                Q(k) = mean_{j in C, k_j = k} R_j   (row i in both means)
* diff-peer (``pace: diff_peer``) [choice]:     A^S_i = R_i - mean_{j in C, k_j != k_i} R_j
* leave-one-out fallback [paper; trigger is a choice, ``pace_fallback``]:
                                                A^S_i = R_i - mean_{j in C, j != i} R_j
  triggered by ``either`` (default): row i has no same-key peer OR C holds a single key;
  ``unique_key``: no same-key peer only; ``single_key``: single key only; ``none``: never.
  Where no fallback fires and the diff-peer mean is empty (a single-key cluster with ``none`` or
  ``unique_key``), A^S_i = 0 [choice].
* ``pace_norm = cluster_std`` divides every non-singleton row's A^S by (std_C(R) + 1e-6), unbiased std [choice].

Under exact bisimulation (epsilon = 0) the Q-style term is an unbiased estimate of A^pi(s, a) [paper].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .ops import STD_EPS, dense_ids

__all__ = ["PaceResult", "pace_step_advantages"]


@dataclass
class PaceResult:
    """step      : float64 (N,) A^S
    branch    : LongTensor (N,) 0 = PACE formula, 1 = leave-one-out fallback, 2 = singleton
    keys_per_cluster : LongTensor (K,) distinct action keys per cluster"""

    step: torch.Tensor
    branch: torch.Tensor
    keys_per_cluster: torch.Tensor


BRANCH_PACE, BRANCH_FALLBACK, BRANCH_SINGLETON = 0, 1, 2


def pace_step_advantages(
    returns: torch.Tensor, cluster: torch.Tensor, key: torch.Tensor, variant: str, fallback: str, norm: str
) -> PaceResult:
    """returns : (N,) step returns R; cluster : LongTensor (N,) dense cluster ids; key : LongTensor (N,)
    action key ids. ``variant`` in {q, diff_peer}. All vectorised with scatter sums."""
    r = returns.double()
    k = int(cluster.max()) + 1
    zeros_k = torch.zeros(k, dtype=torch.float64, device=r.device)
    n_c = torch.bincount(cluster, minlength=k).double()  # (K,) |C|
    sum_c = zeros_k.index_add(0, cluster, r)  # (K,)
    pair = dense_ids(cluster, key)  # (N,) id of (cluster, key)
    m = int(pair.max()) + 1
    n_ck = torch.bincount(pair, minlength=m).double()  # (M,) rows with that key in that cluster
    sum_ck = torch.zeros(m, dtype=torch.float64, device=r.device).index_add(0, pair, r)
    # distinct keys per cluster: count pairs per cluster
    pair_cluster = torch.zeros(m, dtype=torch.long, device=r.device).scatter(0, pair, cluster)  # (M,)
    keys_per_cluster = torch.bincount(pair_cluster, minlength=k)  # (K,)

    size_i = n_c[cluster]  # (N,)
    same_i = n_ck[pair]  # (N,) rows sharing i's key (i included)
    nkeys_i = keys_per_cluster[cluster]  # (N,)
    singleton = size_i == 1
    no_peer = same_i == 1
    single_key = nkeys_i == 1
    if fallback == "either":
        use_fb = no_peer | single_key
    elif fallback == "unique_key":
        use_fb = no_peer
    elif fallback == "single_key":
        use_fb = single_key
    elif fallback == "none":
        use_fb = torch.zeros_like(no_peer)
    else:
        raise ValueError(f"pace_fallback={fallback!r} is not one of ['either', 'unique_key', 'single_key', 'none']")

    v = sum_c[cluster] / size_i  # V = cluster mean
    if variant == "q":
        main = sum_ck[pair] / same_i - v  # Q(k_i) - V
    elif variant == "diff_peer":
        other_n = size_i - same_i
        other_mean = (sum_c[cluster] - sum_ck[pair]) / other_n.clamp_min(1)
        main = torch.where(other_n > 0, r - other_mean, torch.zeros_like(r))
    else:
        raise ValueError(f"PACE variant={variant!r} is not one of ['q', 'diff_peer']")
    loo = r - (sum_c[cluster] - r) / (size_i - 1).clamp_min(1)  # R_i - mean of the others
    step = torch.where(use_fb, loo, main)
    if norm == "cluster_std":
        mean_c = sum_c / n_c
        dev = r - mean_c[cluster]
        ss = zeros_k.index_add(0, cluster, dev * dev)
        std_c = (ss / (n_c - 1).clamp_min(1)).sqrt()
        step = step / (std_c[cluster] + STD_EPS)
    elif norm != "none":
        raise ValueError(f"pace_norm={norm!r} is not one of ['none', 'cluster_std']")
    step = torch.where(singleton, torch.zeros_like(step), step)
    branch = torch.full_like(cluster, BRANCH_PACE)
    branch = torch.where(use_fb, torch.full_like(branch, BRANCH_FALLBACK), branch)
    branch = torch.where(singleton, torch.full_like(branch, BRANCH_SINGLETON), branch)
    return PaceResult(step=step, branch=branch, keys_per_cluster=keys_per_cluster)
