"""State groupings: GiGPO's exact anchor groups and HGPO's nested history groups.

Both are local to a prompt group: rows of different prompt groups never share a state group.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .ops import dense_ids, factorize

__all__ = ["anchor_groups", "history_groups"]


def anchor_groups(group_id: torch.Tensor, anchor_obs: Sequence[str]) -> torch.Tensor:
    """LongTensor (N,): GiGPO anchor-state group = (prompt group, exact anchor observation) [GiGPO].
    Pooled across trajectories and time steps."""
    obs = factorize(anchor_obs, device=group_id.device)
    return dense_ids(group_id, obs)


def history_groups(
    group_id: torch.Tensor, traj: torch.Tensor, step: torch.Tensor, anchor_obs: Sequence[str], levels: int
) -> list[torch.Tensor]:
    """HGPO level groups [HGPO]: ``out[k]`` (LongTensor (N,)) groups rows of one prompt group whose last
    k+1 anchor observations (o_{t-k}, ..., o_t) are equal, for k = 0..levels.

    Level-counting convention: level k compares k+1 observations (level 0 = GiGPO's anchor group; HGPO's
    code calls it history length k+1); positions before the episode start (t - j < 0) hold a start marker,
    so a row at step t < k only matches rows at the same step with the same observations since the start.
    HGPO's code forms no such group (``EstimatorConfig.hgpo_rule: verl_agent`` drops them, ``start_marker``
    keeps them).
    traj: dense trajectory ids (N,); step: (N,).
    """
    obs = factorize(anchor_obs, device=group_id.device)  # (N,)
    n_traj = int(traj.max()) + 1
    horizon = int(step.max()) + 1
    table = torch.full((n_traj, horizon), -1, dtype=torch.long, device=obs.device)  # (n_traj, T), -1 = start marker
    table[traj, step] = obs
    out = []
    cols = [group_id]
    for k in range(levels + 1):
        t_k = step - k
        prev = torch.where(t_k >= 0, table[traj, t_k.clamp_min(0)], torch.full_like(obs, -1))  # o_{t-k}
        cols.append(prev)
        out.append(dense_ids(*cols))
    return out
