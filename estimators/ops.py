"""Vectorised building blocks shared by the estimators: ids, returns, group statistics.

All functions work on CPU and CUDA tensors alike and never loop over rows in Python (string keys are
hashed once per row by a dict comprehension, the minimum for text). Statistics are computed in float64
so that a group of equal values gets an advantage of exactly 0 rather than rounding noise divided by
``std + 1e-6``.
"""
from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

import torch

STD_EPS = 1e-6  # (x - mean) / (std + STD_EPS) [GiGPO]
INVALID_KEY = "<invalid>"  # reserved PACE key of a response without a parsable action tag [choice]

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)


# --------------------------------------------------------------------------- ids
def factorize(values: Sequence[Hashable], device: torch.device | str | None = None) -> torch.Tensor:
    """LongTensor (N,): dense codes 0..K-1 in order of first appearance (equal values, equal codes)."""
    table: dict = {}
    codes = [table.setdefault(v, len(table)) for v in values]
    return torch.tensor(codes, dtype=torch.long, device=device)


def dense_ids(*columns: torch.Tensor) -> torch.Tensor:
    """LongTensor (N,): one dense id per distinct tuple of the integer columns (each LongTensor (N,))."""
    if len(columns) == 1:
        return torch.unique(columns[0], return_inverse=True)[1]
    key = torch.zeros_like(columns[0])
    for col in columns:
        col = col - col.min()
        span = int(col.max()) + 1
        key = key * span + col
        # re-densify to keep the composite key small (no int64 overflow for many columns)
        key = torch.unique(key, return_inverse=True)[1]
    return key


def canonical_order(group_id: torch.Tensor, traj_id: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """LongTensor (N,): row permutation sorting by (group, trajectory, step)."""
    traj = dense_ids(group_id, traj_id)  # dense ids are sorted by (group, traj)
    span = int(step.max()) + 1
    return torch.argsort(traj * span + step, stable=True)


# --------------------------------------------------------------------------- returns
def episode_scores(reward: torch.Tensor, traj: torch.Tensor, valid: torch.Tensor, penalty: float) -> torch.Tensor:
    """S_i = sum_{j in tau(i)} r_j - lambda (1 - v_i)  [GiGPO].  All (N,); returns float64 (N,)."""
    r = reward.double()
    totals = torch.zeros(int(traj.max()) + 1, dtype=torch.float64, device=r.device).index_add_(0, traj, r)
    return totals[traj] - penalty * (~valid).double()


def discounted_returns(
    reward: torch.Tensor, traj: torch.Tensor, step: torch.Tensor, valid: torch.Tensor, gamma: float, penalty: float
) -> torch.Tensor:
    """R_t = r_t + gamma R_{t+1} inside each trajectory, then R_i -= lambda (1 - v_i)  [GiGPO].

    reward, traj (dense trajectory id), step, valid: (N,). Returns float64 (N,).
    Computed as one matmul of the (trajectories x T) reward matrix with the discount matrix
    Gamma[k, t] = gamma^(k - t) for k >= t (T = max step + 1), exact for any row order.
    """
    n_traj = int(traj.max()) + 1
    horizon = int(step.max()) + 1
    r = torch.zeros(n_traj, horizon, dtype=torch.float64, device=reward.device)  # (n_traj, T)
    r[traj, step] = reward.double()
    k = torch.arange(horizon, device=reward.device)
    expo = (k[:, None] - k[None, :]).double()  # (T, T): k - t
    disc = torch.where(expo >= 0, gamma ** expo.clamp_min(0),
                       torch.zeros((), dtype=torch.float64, device=reward.device))
    ret = r @ disc  # (n_traj, T): R[tau, t] = sum_k r[tau, k] gamma^(k-t), k >= t
    return ret[traj, step] - penalty * (~valid).double()


# --------------------------------------------------------------------------- group statistics
def group_normalize(
    x: torch.Tensor,
    gid: torch.Tensor,
    mode: str,
    unbiased: bool = True,
    singleton: str = "zero",
) -> torch.Tensor:
    """Normalise x inside groups [GiGPO].

    x : (N,) values; gid : LongTensor (N,) dense group ids.
    mode ``mean_std_norm``: (x - mean) / (std + 1e-6); ``mean_norm``: x - mean.
    ``unbiased``: std with N-1 (GiGPO, GRPO) or N (HGPO).
    ``singleton``: value for one-member groups: ``zero`` (step level) or ``identity`` (episode level:
    mean 0, std 1, i.e. x itself).
    Returns float64 (N,).
    """
    x = x.double()
    k = int(gid.max()) + 1
    count = torch.bincount(gid, minlength=k).double()  # (K,)
    mean = torch.zeros(k, dtype=torch.float64, device=x.device).index_add_(0, gid, x) / count
    dev = x - mean[gid]
    # a group of equal values deviates by exactly 0 (the summed mean can be off by an ulp, which
    # (x - mean) / (std + 1e-6) would blow up to ~1e-11 instead of 0)
    lo = torch.full((k,), float("inf"), dtype=torch.float64, device=x.device).scatter_reduce_(0, gid, x, "amin")
    hi = torch.full((k,), float("-inf"), dtype=torch.float64, device=x.device).scatter_reduce_(0, gid, x, "amax")
    dev = torch.where((lo == hi)[gid], torch.zeros_like(dev), dev)
    if mode == "mean_norm":
        out = dev
    elif mode == "mean_std_norm":
        ss = torch.zeros(k, dtype=torch.float64, device=x.device).index_add_(0, gid, dev * dev)
        denom = (count - 1).clamp_min(1) if unbiased else count
        std = (ss / denom).sqrt()
        out = dev / (std[gid] + STD_EPS)
    else:
        raise ValueError(f"norm_mode={mode!r} is not one of ['mean_std_norm', 'mean_norm']")
    single = count[gid] == 1
    if singleton == "zero":
        return torch.where(single, torch.zeros_like(out), out)
    if singleton == "identity":
        return torch.where(single, x, out)
    raise ValueError(f"singleton={singleton!r} is not one of ['zero', 'identity']")


def group_sizes(gid: torch.Tensor) -> torch.Tensor:
    """LongTensor (K,): members per dense group id."""
    return torch.bincount(gid)


# --------------------------------------------------------------------------- action keys
def action_tag(response: str) -> str:
    """PACE key ``action_tag``: body of the first <action>...</action> (case-insensitive), stripped,
    lower-cased, inner whitespace collapsed; ``<invalid>`` when no tag pair parses [choice]."""
    if not isinstance(response, str):
        return INVALID_KEY
    m = _ACTION_RE.search(response.lower())
    if m is None:
        return INVALID_KEY
    return " ".join(m.group(1).split())


def action_keys(
    response_text: Sequence[str],
    response_ids: torch.Tensor | None,
    response_mask: torch.Tensor | None,
    key: str,
    num_tokens: int,
    device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(LongTensor (N,) dense key ids, BoolTensor (N,) parsable) for PACE's ``pace_key``."""
    if key == "action_tag":
        tags = [action_tag(r) for r in response_text]
        parsed = torch.tensor([t != INVALID_KEY for t in tags], dtype=torch.bool, device=device)
        return factorize(tags, device=device), parsed
    if key == "first_tokens":
        ids = response_ids[:, :num_tokens]  # (N, min(T, k))
        mask = response_mask[:, :num_tokens]
        ids = torch.where(mask, ids, torch.full_like(ids, -1))
        if ids.shape[1] < num_tokens:
            ids = torch.nn.functional.pad(ids, (0, num_tokens - ids.shape[1]), value=-1)
        keys = dense_ids(*ids.to(device).T)  # one id per distinct token prefix (1-D uniques, no unique_dim)
        return keys, mask.any(dim=1).to(device)
    raise ValueError(f"pace_key={key!r} is not one of ['action_tag', 'first_tokens']")
