"""Greedy cosine clustering of the actor's hidden states inside each prompt group (BiGPO) [paper].

Per prompt group, rows are visited once in (trajectory, step) order [choice]. With
``phi_i = h_i / ||h_i||`` and ``d(i, c) = 1 - phi_i . c``, a row joins the nearest existing centroid if
``d <= epsilon`` (plus 1e-6 for rounding, so epsilon = 0 groups exactly-equal vectors only), else it seeds
a new cluster. Centroid [choice, switch ``centroid``]: ``mean`` = normalised mean of the members,
updated at each join; ``seed`` = the row that opened the cluster.

Speed. With ``s_k = sum_{j in C_k} phi_j`` the mean centroid is ``s_k / ||s_k||``, so

    phi_i . c_k = (sum_{j in C_k} M_ij) / sqrt(sum_{j,l in C_k} M_jl),   M = Phi Phi^T  (Gram matrix)

and one matmul per group (torch) or one exact k-NN search (FAISS ``IndexFlatIP``) serves the whole pass.
The sequential greedy pass then runs in lock-step over all groups at once: iteration j handles the
j-th row of every group with a handful of (P, n) tensor operations, so its Python loop has
n_max = max rows per group iterations, not N. A zero hidden vector has phi = 0, similarity 0 to
everything and never produces NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .ops import canonical_order, dense_ids

__all__ = ["ClusterResult", "greedy_cosine_clusters", "gram_blocks"]

JOIN_TOL = 1e-6


@dataclass
class ClusterResult:
    """cluster_id : LongTensor (N,) dense global cluster ids (clusters never span prompt groups)
    sizes      : LongTensor (K,) members per cluster"""

    cluster_id: torch.Tensor
    sizes: torch.Tensor


def _inverse_norms(hidden: torch.Tensor) -> torch.Tensor:
    """FloatTensor (N,) 1/||h_i||, 0 for a zero vector (so phi = 0 and no NaN)."""
    norms = torch.linalg.vector_norm(hidden.float(), dim=1)
    return torch.where(norms > 0, 1.0 / norms.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(norms))


def gram_blocks(
    hidden: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor, backend: str = "torch"
) -> torch.Tensor:
    """Cosine similarities phi_i . phi_l for l < i (strictly lower triangle) of every group, padded:
    float64 (P, n_max, n_max); the diagonal and upper triangle are 0 (the greedy pass never reads them).

    hidden  : (N, D) raw hidden states.
    rows    : LongTensor (P, n_max) row index of the j-th member of group p (in greedy order), -1 = pad.
    lengths : LongTensor (P,) members per group.
    The torch backend computes only block rows of the lower triangle (about 5/8 of a full Gram matrix).
    """
    p, n_max = rows.shape
    inv = _inverse_norms(hidden)  # (N,)
    out = torch.zeros(p, n_max, n_max, dtype=torch.float64, device=hidden.device)
    if backend == "faiss":
        _faiss_gram(hidden, inv, rows, lengths, out)
    elif backend == "torch":
        for g in range(p):  # a loop over prompt groups (<= P), never over rows
            n = int(lengths[g])
            idx = rows[g, :n]
            phi = hidden[idx].float() * inv[idx, None]  # (n, D) unit rows (zero rows stay 0)
            blocks = 4 if n >= 64 else 1
            edges = [round(n * b / blocks) for b in range(blocks + 1)]
            for lo, hi in zip(edges[:-1], edges[1:]):  # block row [lo, hi) against columns [0, hi)
                out[g, lo:hi, :hi] = (phi[lo:hi] @ phi[:hi].T).double()  # (hi-lo, hi)
    else:
        raise ValueError(f"cluster_backend={backend!r} is not one of ['torch', 'faiss']")
    return torch.tril(out, diagonal=-1)


def _faiss_gram(hidden, inv, rows, lengths, out) -> None:
    """Fill ``out`` with the cosine Gram blocks computed by FAISS: ``faiss.pairwise_distances`` with the
    inner-product metric on CPU (faiss-cpu), an exact ``IndexFlatIP`` search over all members on GPU
    (faiss-gpu, when the tensors are on CUDA; GPU search supports up to 2048 neighbours per query)."""
    import faiss
    import numpy as np

    use_gpu = hidden.is_cuda and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    res = faiss.StandardGpuResources() if use_gpu else None
    phi_all = (hidden.float() * inv[:, None]).cpu().numpy()
    dim = phi_all.shape[1]
    for g in range(rows.shape[0]):
        n = int(lengths[g])
        phi = np.ascontiguousarray(phi_all[rows[g, :n].cpu().numpy()], dtype=np.float32)  # (n, D)
        if use_gpu and n <= 2048:
            index = faiss.index_cpu_to_gpu(res, 0, faiss.IndexFlatIP(dim))
            index.add(phi)
            sims, nbr = index.search(phi, n)  # (n, n) similarities sorted per query, with member ids
            block = np.zeros((n, n), dtype=np.float64)
            np.put_along_axis(block, nbr.astype(np.int64), sims.astype(np.float64), axis=1)
        else:
            block = faiss.pairwise_distances(phi, phi, faiss.METRIC_INNER_PRODUCT).astype(np.float64)
        out[g, :n, :n] = torch.from_numpy(block).to(out.device)


def _group_layout(group_id: torch.Tensor, traj_id: torch.Tensor, step: torch.Tensor):
    """rows (P, n_max) in (trajectory, step) order per group, -1 padded; lengths (P,)."""
    order = canonical_order(group_id, traj_id, step)  # (N,) sorted by (group, traj, step)
    gid = dense_ids(group_id)[order]  # (N,) sorted dense group ids
    lengths = torch.bincount(gid)  # (P,)
    starts = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(order.numel(), device=order.device) - starts[gid]  # position inside its group
    n_max = int(lengths.max())
    rows = torch.full((lengths.numel(), n_max), -1, dtype=torch.long, device=order.device)
    rows[gid, pos] = order
    return rows, lengths


def greedy_cosine_clusters(
    hidden: torch.Tensor,
    group_id: torch.Tensor,
    traj_id: torch.Tensor,
    step: torch.Tensor,
    epsilon: float,
    centroid: str = "mean",
    backend: str = "torch",
) -> ClusterResult:
    """Greedy single-pass clustering per prompt group (see module docstring).

    hidden : (N, D); group_id, traj_id, step : LongTensor (N,). Returns dense cluster ids (N,).
    Deterministic: the visiting order is (group, trajectory, step), so the result does not depend on the
    order of the rows in the batch.
    """
    if centroid not in ("mean", "seed"):
        raise ValueError(f"centroid={centroid!r} is not one of ['mean', 'seed']")
    device = hidden.device
    rows, lengths = _group_layout(group_id, traj_id, step)
    p, n_max = rows.shape
    lower = gram_blocks(hidden, rows, lengths, backend)  # (P, n, n) float64, M_il for l < i
    sink = n_max  # cluster slot n_max absorbs padding rows; never open
    lower = torch.nn.functional.pad(lower, (0, 1))  # (P, n, n + 1): column n_max is 0
    inv = _inverse_norms(hidden)
    diag = torch.zeros(p, n_max, dtype=torch.float64, device=device)  # M_ii: 1, or 0 for a zero vector
    diag[rows >= 0] = (inv[rows[rows >= 0]] > 0).double()
    slots = torch.arange(n_max + 1, device=device)
    sq = torch.zeros(p, n_max + 1, dtype=torch.float64, device=device)  # ||s_k||^2 of cluster sums
    inv_norm = torch.zeros(p, n_max + 1, dtype=torch.float64, device=device)  # 1 / ||s_k||
    seed_col = torch.full((p, n_max + 1), sink, dtype=torch.long, device=device)  # seed row of cluster k
    count = torch.zeros(p, dtype=torch.long, device=device)  # clusters opened per group
    assign = torch.full((p, n_max), sink, dtype=torch.long, device=device)
    threshold = 1.0 - float(epsilon) - JOIN_TOL  # join iff cos >= 1 - eps - tol  <=>  d <= eps + tol
    for j in range(n_max):  # lock-step over all groups: row j of every group
        live = j < lengths  # (P,)
        if centroid == "mean":
            # phi_j . s_k = sum of M_jl over the members l of cluster k (all earlier rows)
            dots = torch.zeros(p, n_max + 1, dtype=torch.float64, device=device)
            dots.scatter_add_(1, assign[:, :j], lower[:, j, :j])
            cos = dots * inv_norm
        else:
            cos = lower[:, j, :].gather(1, seed_col)  # phi_j . phi_seed(k)
        cos = cos.masked_fill(slots[None, :] >= count[:, None], float("-inf"))  # only open clusters
        best_cos, best_k = cos.max(dim=1)  # (P,)
        join = best_cos >= threshold
        opened = live & ~join
        target = torch.where(live, torch.where(join, best_k, count), torch.full_like(count, sink))
        assign[:, j] = target
        t1 = target[:, None]
        if centroid == "mean":
            # ||s_k + phi_j||^2 = ||s_k||^2 + 2 phi_j . s_k + ||phi_j||^2
            sq.scatter_add_(1, t1, 2.0 * dots.gather(1, t1) + diag[:, j : j + 1])
            s_t = sq.gather(1, t1)
            inv_norm.scatter_(1, t1, torch.where(s_t > 0, s_t.clamp_min(1e-300).rsqrt(), torch.zeros_like(s_t)))
        else:
            seed_col.scatter_(1, t1, torch.where(opened, j, seed_col.gather(1, t1).squeeze(1))[:, None])
        count = count + opened.long()
    # global ids: offset each group's local ids by the clusters of the groups before it
    offsets = torch.cumsum(count, 0) - count  # (P,)
    mask = rows >= 0
    cluster_id = torch.empty(hidden.shape[0], dtype=torch.long, device=device)
    cluster_id[rows[mask]] = (assign + offsets[:, None])[mask]
    sizes = torch.bincount(cluster_id, minlength=int(count.sum()))
    return ClusterResult(cluster_id=cluster_id, sizes=sizes)
