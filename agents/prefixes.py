"""Which prompt prefixes a batch of rows should compute once (shared by the rollout engine's prefill and the
trainer's forwards, ``trainer.forward.pack_rows_shared``).

Rows sorted by prompt; ``c_j`` = the common prefix of sorted neighbours j and j+1, capped so that every row keeps
at least one prompt token of its own (the token whose state starts its generation and gives the BiGPO hidden
state). For a threshold tau, the maximal runs of neighbours with ``c_j >= tau`` share the run's common prefix; a
row outside every run carries up to L tokens of its own prompt as its prefix (filling the prefix batch's padding).
The cost of a plan is the token positions the two forwards compute, padding included: ``K * L + N * S`` for K
prefixes of width L and N suffixes of width S, against ``N * T`` unshared. The cheapest tau wins, and the plan is
used when it computes at least ``min_saving`` fewer positions.
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["plan_shared_prefixes", "prefix_tensors", "plan_length_buckets"]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_shared_prefixes(prompts: Sequence[list[int]], extra: Sequence[int] | None = None, *,
                         min_saving: float = 0.1) -> tuple[list[list[int]], list[int]] | None:
    """(the K prefixes, the prefix index of each row) or None when sharing saves less than ``min_saving``.

    prompts : token ids per row; extra : tokens each row adds after its prompt (its response; 0 in a prefill).
    Every prefix is a proper prefix of the prompts of its rows, and every row keeps >= 1 prompt token after it.
    """
    n = len(prompts)
    if n < 2:
        return None
    extra = [0] * n if extra is None else [int(e) for e in extra]
    p_len = [len(p) for p in prompts]
    total = [p_len[i] + extra[i] for i in range(n)]
    if min(p_len) < 2:  # a one-token prompt has nothing to share
        return None
    order = sorted(range(n), key=lambda i: prompts[i])
    adj = [min(_common_prefix(prompts[a], prompts[b]), p_len[a] - 1, p_len[b] - 1) for a, b in zip(order, order[1:])]

    def plan(tau: int) -> tuple[int, list[int], list[int]]:
        shared_len, run_of = [0] * n, [-1] * n
        run_id, j = 0, 0
        while j < n - 1:
            if adj[j] < tau:
                j += 1
                continue
            k, low = j, adj[j]
            while k < n - 1 and adj[k] >= tau:
                low = min(low, adj[k])
                k += 1
            for r in order[j: k + 1]:
                shared_len[r], run_of[r] = low, run_id
            run_id, j = run_id + 1, k + 1
        width = max(shared_len)
        for r in range(n):
            if run_of[r] < 0:
                shared_len[r] = min(p_len[r] - 1, width)
        k_prefixes = run_id + sum(1 for r in range(n) if run_of[r] < 0)
        suffix = max(total[r] - shared_len[r] for r in range(n))
        return k_prefixes * width + n * suffix, shared_len, run_of

    best = None
    for tau in sorted({c for c in adj if c > 0}):
        cand = plan(tau)
        if best is None or cand[0] < best[0]:
            best = cand
    if best is None or best[0] > (1.0 - min_saving) * n * max(total):
        return None
    _, shared_len, run_of = best
    prefixes: list[list[int]] = []
    row_prefix = [0] * n
    first_of_run: dict[int, int] = {}
    for r in range(n):
        if run_of[r] >= 0 and run_of[r] in first_of_run:
            row_prefix[r] = first_of_run[run_of[r]]
            continue
        if run_of[r] >= 0:
            first_of_run[run_of[r]] = len(prefixes)
        row_prefix[r] = len(prefixes)
        prefixes.append(list(prompts[r][: shared_len[r]]))
    return prefixes, row_prefix


def prefix_tensors(prefixes: Sequence[list[int]], pad_id: int = 0):
    """The prefixes as (ids (K, L), mask (K, L)) LongTensors, right-padded with ``pad_id``."""
    import torch

    width = max(len(p) for p in prefixes)
    ids = torch.full((len(prefixes), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prefixes), width), dtype=torch.long)
    for k, p in enumerate(prefixes):
        ids[k, : len(p)] = torch.tensor(p, dtype=torch.long)
        mask[k, : len(p)] = 1
    return ids, mask



def plan_length_buckets(lengths: Sequence[int], max_buckets: int, *, overhead: int = 64) -> list[int]:
    """The bucket of each row when rows of these (suffix) lengths run as up to ``max_buckets`` right-padded forwards
    instead of one: contiguous runs of the lengths sorted longest first, chosen by dynamic programming to minimise
    the token positions computed, ``sum_b rows_b * width_b``, plus ``overhead`` positions per extra forward (its
    fixed cost). Bucket 0 holds the longest rows; one bucket (all 0) when splitting saves nothing.
    """
    import numpy as np

    n = len(lengths)
    if max_buckets < 1:
        raise ValueError(f"plan_length_buckets: max_buckets={max_buckets} must be >= 1")
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: (-int(lengths[i]), i))
    s = np.asarray([int(lengths[i]) for i in order], dtype=np.float64)  # descending
    b_max = min(max_buckets, n)
    inf = float("inf")
    # cost[b][i]: the first i sorted rows in b buckets; a bucket of rows j..i-1 costs (i - j) * s[j] + overhead
    cost = np.full((b_max + 1, n + 1), inf)
    cost[0, 0] = 0.0
    cut = np.zeros((b_max + 1, n + 1), dtype=np.int64)
    j = np.arange(n)
    for b in range(1, b_max + 1):
        for i in range(1, n + 1):
            cand = cost[b - 1, :i] + (i - j[:i]) * s[:i] + overhead
            k = int(np.argmin(cand))
            cost[b, i], cut[b, i] = cand[k], k
    best_b = int(np.argmin(cost[1:, n])) + 1
    bucket_sorted = [0] * n
    i, b = n, best_b
    while b > 0:
        k = int(cut[b, i])
        for r in range(k, i):
            bucket_sorted[r] = b - 1
        i, b = k, b - 1
    out = [0] * n
    for pos, row in enumerate(order):
        out[row] = bucket_sorted[pos]
    return out
