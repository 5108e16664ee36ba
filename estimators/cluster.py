"""Greedy cosine clustering of the actor's hidden states inside each prompt group (BiGPO) [paper].

Per prompt group, rows are visited once in (trajectory, step) order [choice]. With
``phi_i = h_i / ||h_i||`` and ``d(i, c) = 1 - phi_i . c``, a row joins the nearest existing centroid if
``d <= epsilon`` (plus 1e-6 for rounding, so epsilon = 0 groups exactly-equal vectors only), else it seeds
a new cluster. Centroid [choice, switch ``centroid``]: ``mean`` = normalised mean of the members,
updated at each join; ``seed`` = the row that opened the cluster.

Speed. With ``s_k = sum_{j in C_k} phi_j`` the mean centroid is ``s_k / ||s_k||``, so

    phi_i . c_k = (sum_{j in C_k} M_ij) / sqrt(sum_{j,l in C_k} M_jl),   M = Phi Phi^T  (Gram matrix)

and one matmul per group (torch, on the batch's device) or FAISS's exact inner products serve the
whole pass. The sequential greedy pass then runs on the host in lock-step over all groups at once:
iteration j handles the j-th row of every group with a handful of NumPy operations on (P, n) arrays,
so its Python loop has n_max = max rows per group iterations, not N. A zero hidden vector has phi = 0, similarity 0 to
everything and never produces NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .ops import canonical_order, dense_ids

__all__ = ["ClusterResult", "greedy_cosine_clusters", "gram_blocks", "center_by_group"]

JOIN_TOL = 1e-6


@dataclass
class ClusterResult:
    """cluster_id : LongTensor (N,) dense global cluster ids (clusters never span prompt groups)
    sizes      : LongTensor (K,) members per cluster"""

    cluster_id: torch.Tensor
    sizes: torch.Tensor


def center_by_group(hidden: torch.Tensor, group_id: torch.Tensor) -> torch.Tensor:
    """(N, D) float32: each row minus the mean hidden state of its prompt group (``center_states``).

    The last-token states of a small model share one dominant direction (every pair of a group lies within cosine
    distance ~0.01-0.03); subtracting the group's mean removes it, so the cosine compares what differs between
    rows. A row equal to its group's mean (e.g. every row of a group of identical states, or a one-row group) would
    become the zero vector, which clusters with nothing: it is given the group's mean instead, so such rows still
    cluster with each other (the centred rows sum to 0, so the mean lies at cosine ~0 from them on average)."""
    gid = dense_ids(group_id)
    h = hidden.double()
    k = int(gid.max()) + 1
    sums = torch.zeros(k, h.shape[1], dtype=torch.float64, device=h.device).index_add_(0, gid, h)
    counts = torch.bincount(gid, minlength=k).double().clamp_min(1)
    mean = (sums / counts[:, None])[gid]  # (N, D)
    out = h - mean
    at_mean = torch.linalg.vector_norm(out, dim=1) <= 1e-6 * torch.linalg.vector_norm(h, dim=1)
    out[at_mean] = mean[at_mean]
    return out.float()


def _inverse_norms(hidden: torch.Tensor) -> torch.Tensor:
    """FloatTensor (N,) 1/||h_i||, 0 for a zero vector (so phi = 0 and no NaN)."""
    norms = torch.linalg.vector_norm(hidden.float(), dim=1)
    return torch.where(norms > 0, 1.0 / norms.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(norms))


def gram_blocks(
    hidden: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor, backend: str = "torch"
) -> torch.Tensor:
    """Cosine similarities phi_i . phi_l for l < i (strictly lower triangle) of every group, padded:
    float64 (P, n_max, n_max).

    hidden  : (N, D) raw hidden states.
    rows    : LongTensor (P, n_max) row index of the j-th member of group p (in greedy order), -1 = pad.
    lengths : LongTensor (P,) members per group.
    The torch backend computes only block rows of the lower triangle (about 5/8 of a full Gram matrix);
    entries on or above the diagonal may hold similarities too, and callers read only l < i.
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
    return out


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
    gram = gram_blocks(hidden, rows, lengths, backend)  # (P, n, n) float64 on the batch's device
    inv = _inverse_norms(hidden)
    valid_rows = rows >= 0
    diag_t = torch.zeros(p, n_max, dtype=torch.float64, device=device)  # M_ii: 1, or 0 for a zero vector
    diag_t[valid_rows] = (inv[rows[valid_rows]] > 0).double()
    # The sequential pass runs on the host in NumPy (a few microseconds per step, whatever the device);
    # the Gram matrices, the heavy part, were computed on the batch's device.
    lower = np.pad(gram.cpu().numpy(), ((0, 0), (0, 0), (0, 1)))  # (P, n, n + 1): column n_max is 0
    diag = diag_t.cpu().numpy()
    lens = lengths.cpu().numpy()
    assign, count = _greedy_pass(lower, diag, lens, float(epsilon), centroid)  # (P, n_max) local ids; (P,)
    count = torch.from_numpy(count).to(device)
    assign_t = torch.from_numpy(assign).to(device)
    # global ids: offset each group's local ids by the clusters of the groups before it
    offsets = torch.cumsum(count, 0) - count  # (P,)
    cluster_id = torch.empty(hidden.shape[0], dtype=torch.long, device=device)
    cluster_id[rows[valid_rows]] = (assign_t + offsets[:, None])[valid_rows]
    sizes = torch.bincount(cluster_id, minlength=int(count.sum()))
    return ClusterResult(cluster_id=cluster_id, sizes=sizes)


def _greedy_pass(
    lower: np.ndarray, diag: np.ndarray, lengths: np.ndarray, epsilon: float, centroid: str
) -> tuple[np.ndarray, np.ndarray]:
    """The greedy pass over all groups in lock-step.

    lower : float64 (P, n, n + 1), lower[p, i, l] = phi_i . phi_l for l < i (column n is 0).
    diag  : float64 (P, n), phi_i . phi_i (1, or 0 for a zero vector).
    Returns int64 (P, n): local cluster id of the j-th row of each group (n = sink for padding rows), and
    int64 (P,): clusters per group.
    Iteration j handles the j-th row of every group with ~15 NumPy operations on (P, n + 1) arrays.
    """
    p, n_max, k1 = lower.shape
    sink = n_max  # slot n_max absorbs padding rows and is never open
    ar = np.arange(p)
    offs = (ar * k1)[:, None]
    sq = np.zeros((p, k1))  # ||s_k||^2, s_k = sum of the members' phi
    inv_norm = np.zeros((p, k1))  # 1 / ||s_k||
    seed_col = np.full((p, k1), sink, dtype=np.int64)  # row that opened cluster k (seed centroid)
    is_open = np.zeros((p, k1), dtype=bool)
    count = np.zeros(p, dtype=np.int64)
    assign = np.full((p, n_max), sink, dtype=np.int64)
    threshold = 1.0 - epsilon - JOIN_TOL  # join iff cos >= 1 - eps - tol  <=>  d <= eps + tol
    for j in range(n_max):
        live = j < lengths  # (P,)
        if centroid == "mean":
            # phi_j . s_k = sum of phi_j . phi_l over the members l of cluster k (all rows before j)
            dots = np.bincount((assign[:, :j] + offs).ravel(), weights=lower[:, j, :j].ravel(), minlength=p * k1)
            dots = dots.reshape(p, k1)
            cos = dots * inv_norm
        else:
            cos = np.take_along_axis(lower[:, j, :], seed_col, axis=1)  # phi_j . phi_seed(k)
        cos = np.where(is_open, cos, -np.inf)
        best_k = cos.argmax(axis=1)  # (P,)
        join = cos[ar, best_k] >= threshold
        opened = live & ~join
        target = np.where(live, np.where(join, best_k, count), sink)
        assign[:, j] = target
        if centroid == "mean":
            # ||s_k + phi_j||^2 = ||s_k||^2 + 2 phi_j . s_k + ||phi_j||^2
            sq[ar, target] += 2.0 * dots[ar, target] + diag[:, j]
            s_t = sq[ar, target]
            inv_norm[ar, target] = np.where(s_t > 0, 1.0 / np.sqrt(np.maximum(s_t, 1e-300)), 0.0)
        else:
            seed_col[ar[opened], count[opened]] = j
        is_open[ar[opened], count[opened]] = True
        count += opened
    return assign, count
