"""Epsilon calibration scan [paper: a one-time scan on the first training step, then frozen].

The paper chose epsilon (0.05 for Qwen2.5-1.5B, 0.10 for 7B) with a scan whose criterion is unpublished,
so this tool prints, for a batch with hidden states, the singleton rate, cluster count and mean/P90
cluster size of the greedy clustering for each epsilon of a grid, beside the exact-anchor figures
(GiGPO's grouping); where the batch has ``state_key``, also pair precision/recall against the true
state. The user picks epsilon; runs use a fixed epsilon by default.

    python -m estimators.calibrate --batch first_batch.pt            # a StepBatch saved by the trainer
    python -m estimators.calibrate --synthetic --hidden-size 1536    # a synthetic demo batch
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from .batch import StepBatch
from .cluster import greedy_cosine_clusters
from .diagnostics import grouping_stats, pair_purity
from .grouping import anchor_groups
from .ops import dense_ids, factorize

__all__ = ["DEFAULT_GRID", "scan_epsilon", "format_scan"]

DEFAULT_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.30)


def _row(label: str, gid: torch.Tensor, kind: str, states: torch.Tensor | None) -> dict:
    st = grouping_stats(gid, kind)
    prefix = "anchor" if kind == "anchor" else "cluster"
    row = {
        "grouping": label,
        "singleton_rate": st[f"group/singleton_rate_{prefix}"],
        "groups": st["group/num_anchor_groups" if kind == "anchor" else "group/num_clusters"],
        "size_mean": st[f"group/{prefix}_size_mean"],
        "size_p90": st[f"group/{prefix}_size_p90"],
    }
    if states is not None:
        pur = pair_purity(gid, states)
        row["precision"], row["recall"] = pur if pur is not None else (float("nan"), float("nan"))
    return row


def scan_epsilon(
    batch: StepBatch, grid: Sequence[float] = DEFAULT_GRID, centroid: str = "mean", backend: str = "torch"
) -> list[dict]:
    """One dict per grouping: the exact anchors first, then each epsilon of ``grid``."""
    batch.validate(need_hidden=True)
    if any(e < 0 for e in grid):
        raise ValueError(f"epsilon grid {list(grid)} holds a negative value")
    states = None
    if batch.state_key is not None:
        states = dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key], device=batch.device))
    rows = [_row("exact anchor obs", anchor_groups(batch.group_id, batch.anchor_obs), "anchor", states)]
    for eps in grid:
        cl = greedy_cosine_clusters(batch.hidden, batch.group_id, batch.traj_id, batch.step, eps, centroid, backend)
        rows.append(_row(f"hidden eps={eps:g}", cl.cluster_id, "cluster", states))
    return rows


def format_scan(rows: list[dict]) -> str:
    cols = [c for c in ("grouping", "singleton_rate", "groups", "size_mean", "size_p90", "precision", "recall") if c in rows[0]]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(v if isinstance(v, str) else (f"{v:.0f}" if c == "groups" else f"{v:.3f}"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m estimators.calibrate", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--batch", help="a StepBatch file written by StepBatch.save (e.g. the trainer's first batch)")
    src.add_argument("--synthetic", action="store_true", help="scan a synthetic batch (demo)")
    ap.add_argument("--grid", default=",".join(f"{e:g}" for e in DEFAULT_GRID), help="comma-separated epsilons")
    ap.add_argument("--centroid", default="mean", choices=["mean", "seed"])
    ap.add_argument("--backend", default="torch", choices=["torch", "faiss"])
    ap.add_argument("--hidden-size", type=int, default=256, help="synthetic batch only")
    ap.add_argument("--noise", type=float, default=0.3, help="synthetic batch only: hidden-state noise")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        grid = [float(x) for x in args.grid.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--grid {args.grid!r} must be comma-separated numbers, e.g. 0,0.05,0.1")
    if args.batch:
        batch = StepBatch.load(args.batch)
    else:
        from .synthetic import synthetic_batch

        batch = synthetic_batch(groups=16, group_size=8, max_steps=30, hidden_size=args.hidden_size, noise=args.noise,
                                states_per_group=20, obs_variants=3, seed=args.seed)
    print(batch.summary())
    print(format_scan(scan_epsilon(batch, grid, args.centroid, args.backend)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
