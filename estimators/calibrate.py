"""Epsilon calibration [paper: a one-time scan on the first training step, then frozen].

The paper chose epsilon (0.05 for Qwen2.5-1.5B, 0.10 for 7B) with a scan whose criterion is unpublished.
``scan_epsilon`` lists, for a batch with hidden states, the singleton rate, cluster count and mean/P90 cluster
size of the greedy clustering for each epsilon of a grid, beside the exact-anchor figures (GiGPO's grouping), the
share of same-anchor pairs the clusters keep together (``anchor_recall``) and, where the batch has
``state_key``, pair precision/recall against the true state.

``choose_epsilon`` is what ``estimator.epsilon: auto`` runs on the first training batch (the trainer freezes the
result for the run and saves the scan as ``epsilon.json`` in the run folder). Rules (``epsilon_criterion``):

* ``anchor_recall``: the smallest epsilon of ``AUTO_GRID`` whose clusters keep at least
  ``epsilon_target`` (0.9) of the pairs of rows with the same exact observation in one cluster. Rows that
  GiGPO already groups stay grouped, and clusters grow no further than that needs: a scale-free rule, because the
  distances of the same-observation pairs set it (on the tiny TextCraft model it lands at 1e-5).
* ``anchor_f1`` (default): the smallest epsilon whose clusters agree best with the exact anchors, by pair F1 (precision:
  the share of same-cluster pairs that share an observation; recall: ``anchor_recall``). It never merges more
  than the anchors' own pairs justify, so it stays precise where the observations are (ALFWorld's repeated
  "Nothing happens." makes them imprecise, and ``anchor_recall`` then merges too much).
* ``singleton_match``: the smallest epsilon whose cluster singleton rate is at most the anchors'.
* ``return_loo``: the epsilon whose clusters best predict the step returns of rows of *other* trajectories, by
  leave-one-trajectory-out cross-validation (the ``return_loo`` column: the mean squared error of predicting each
  row's step return R_i by the mean R of the rows of its cluster that belong to other trajectories, over the same
  error with the prompt group's other trajectories as the prediction; a row whose cluster holds no other trajectory
  is predicted by its prompt group). It reads neither the anchors nor the true state: it asks of a grouping what
  the step baseline needs from it, a mean return that carries over to rows it was not computed from. Over-splitting
  leaves rows to the coarse prediction, over-merging mixes states of different values; the trajectory is the unit
  left out because the rows of one trajectory share their future rewards. Ties: the smallest epsilon. Why it was
  added and how it scores: ``results/epsilon/README.md``.
* ``state_f1`` (an oracle, for worlds that know their states): the smallest epsilon whose clusters agree best, by
  pair F1, with the true state (``state_key``: the finite worlds of ``envs/finite/``). It says what a calibration
  could reach; a batch without ``state_key`` is refused.

Without two rows of one observation in any prompt group (every anchor a singleton) neither rule has a reference:
both fall back to the smallest epsilon whose singleton rate is at most ``FALLBACK_SINGLETON_RATE`` (0.2, about
the rates the paper reports for its clusters). Why anchor_f1 is the default, measured on first batches of three
environments and two models: ``results/epsilon/README.md``.

    python -m estimators.calibrate --batch first_batch.pt            # a StepBatch file (StepBatch.save)
    python -m estimators.calibrate --synthetic --hidden-size 1536    # a synthetic demo batch
    python -m estimators.calibrate --synthetic --auto                # and the epsilon each rule picks
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from .batch import StepBatch
from .cluster import center_by_group, greedy_cosine_clusters
from .config import EstimatorConfig
from .diagnostics import grouping_stats, pair_count, pair_purity
from .grouping import anchor_groups
from .ops import dense_ids, discounted_returns, factorize

__all__ = ["DEFAULT_GRID", "AUTO_GRID", "CRITERIA", "FALLBACK_SINGLETON_RATE", "Calibration", "scan_epsilon",
           "choose_epsilon",
           "pick_from_scan", "format_scan"]

DEFAULT_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.30)
#: epsilon: auto scans 0 and 10 log-spaced values per decade from 1e-5 to 0.5 (1e-5, 1.26e-5, ..., 0.398, 0.5)
AUTO_GRID = (0.0,) + tuple(float(f"{10 ** (-5 + k / 10):.3g}") for k in range(47)) + (0.5,)
#: the rules of ``estimator.epsilon_criterion`` (the module docstring)
CRITERIA = ("anchor_recall", "anchor_f1", "singleton_match", "return_loo", "state_f1")
#: the singleton rate the fallback rule aims at (the paper's clusters leave ~17-22% of rows alone)
FALLBACK_SINGLETON_RATE = 0.2


def return_loo_scorer(returns: torch.Tensor, group: torch.Tensor, traj: torch.Tensor):
    """``gid -> return_loo(returns, gid, group, traj)``, with the prompt group's prediction computed once (a scan
    scores ~50 groupings of one batch)."""
    r = returns.double()

    def loo(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = int(ids.max()) + 1
        n = torch.bincount(ids, minlength=k).double()
        tot = torch.zeros(k, dtype=torch.float64, device=r.device).index_add(0, ids, r)
        pair = dense_ids(ids, traj)  # (grouping, trajectory) cells
        m = int(pair.max()) + 1
        n_own = torch.bincount(pair, minlength=m).double()[pair]
        s_own = torch.zeros(m, dtype=torch.float64, device=r.device).index_add(0, pair, r)[pair]
        n_other = n[ids] - n_own
        return (tot[ids] - s_own) / n_other.clamp_min(1), n_other > 0

    pred_g, ok_g = loo(dense_ids(group))
    err_g = ((r - pred_g)[ok_g] ** 2).mean() if bool(ok_g.any()) else None

    def score(gid: torch.Tensor) -> float:
        if err_g is None:
            return float("nan")
        pred_c, ok_c = loo(gid)
        err_c = ((r - torch.where(ok_c, pred_c, pred_g))[ok_g] ** 2).mean()
        if float(err_g) == 0.0:
            return 1.0 if float(err_c) == 0.0 else float("inf")
        return float(err_c / err_g)

    return score


def return_loo(returns: torch.Tensor, gid: torch.Tensor, group: torch.Tensor, traj: torch.Tensor) -> float:
    """Leave-one-trajectory-out error of a grouping as a return predictor (the ``return_loo`` rule).

    returns: float (N,) step returns; gid: dense grouping ids (N,), each inside one prompt group; group: dense
    prompt-group ids (N,); traj: dense trajectory ids (N,). Row i is predicted by the mean return of the rows of
    its group from other trajectories, or, where its group holds none, by its prompt group's rows from other
    trajectories. Returns MSE(grouping) / MSE(prompt group alone): below 1 when the grouping predicts returns better
    than the prompt group's mean; NaN when no row has another trajectory in its prompt group."""
    return return_loo_scorer(returns, group, traj)(gid)


def _row(label: str, gid: torch.Tensor, kind: str, states: torch.Tensor | None, anchors: torch.Tensor,
         loo=None) -> dict:
    st = grouping_stats(gid, kind)
    prefix = "anchor" if kind == "anchor" else "cluster"
    row = {
        "grouping": label,
        "singleton_rate": st[f"group/singleton_rate_{prefix}"],
        "groups": st["group/num_anchor_groups" if kind == "anchor" else "group/num_clusters"],
        "size_mean": st[f"group/{prefix}_size_mean"],
        "size_p90": st[f"group/{prefix}_size_p90"],
    }
    same_anchor, same_group = pair_count(anchors), pair_count(gid)
    both = pair_count(dense_ids(gid, anchors))
    row["anchor_recall"] = both / same_anchor if same_anchor else float("nan")
    row["anchor_precision"] = both / same_group if same_group else float("nan")
    ap, ar = row["anchor_precision"], row["anchor_recall"]
    row["anchor_f1"] = 2 * ap * ar / (ap + ar) if ap + ar > 0 else float("nan")  # NaN in, NaN out
    if loo is not None:
        row["return_loo"] = loo(gid)
    if states is not None:
        pur = pair_purity(gid, states)
        row["precision"], row["recall"] = pur if pur is not None else (float("nan"), float("nan"))
        p, r = row["precision"], row["recall"]
        row["f1"] = 2 * p * r / (p + r) if p + r > 0 else float("nan")
    return row


def scan_epsilon(batch: StepBatch, grid: Sequence[float] = DEFAULT_GRID,
                 cfg: EstimatorConfig | None = None) -> list[dict]:
    """One dict per grouping: the exact anchors first (``epsilon`` None), then each epsilon of ``grid``.

    ``cfg``: the run's ``EstimatorConfig``, read whole (None: its defaults): the clustering's ``centroid``,
    ``cluster_backend`` and ``center_states`` (cluster the states minus their prompt group's mean,
    ``center_by_group``), and ``gamma`` and ``invalid_penalty`` for the ``return_loo`` column's step returns.

    Keys: grouping, epsilon, singleton_rate, groups, size_mean, size_p90, anchor_recall (share of same-anchor
    pairs in one group; NaN without such pairs), anchor_precision, anchor_f1, return_loo (``return_loo``: the
    grouping's leave-one-trajectory-out error as a predictor of the step return, with the step returns as the
    estimators compute them) and, with ``state_key``, precision, recall, f1 against the true state."""
    cfg = EstimatorConfig() if cfg is None else cfg
    batch.validate(need_hidden=True)
    if any(e < 0 for e in grid):
        raise ValueError(f"epsilon grid {list(grid)} holds a negative value")
    states = None
    if batch.state_key is not None:
        states = dense_ids(batch.group_id, factorize([repr(s) for s in batch.state_key], device=batch.device))
    anchors = anchor_groups(batch.group_id, batch.anchor_obs)
    traj = dense_ids(batch.group_id, batch.traj_id)
    ret = return_loo_scorer(discounted_returns(batch.reward, traj, batch.step, batch.valid, cfg.gamma,
                                               cfg.invalid_penalty),
                            dense_ids(batch.group_id), traj)
    rows = [{**_row("exact anchor obs", anchors, "anchor", states, anchors, ret), "epsilon": None}]
    hidden = center_by_group(batch.hidden, batch.group_id) if cfg.center_states else batch.hidden
    for eps in grid:
        cl = greedy_cosine_clusters(hidden, batch.group_id, batch.traj_id, batch.step, eps, cfg.centroid,
                                    cfg.cluster_backend)
        rows.append({**_row(f"hidden eps={eps:g}", cl.cluster_id, "cluster", states, anchors, ret),
                     "epsilon": float(eps)})
    return rows


@dataclass
class Calibration:
    """What ``choose_epsilon`` found: the epsilon, the rule that picked it, why, and the scan behind it."""

    epsilon: float
    criterion: str
    rule: str
    reason: str
    scan: list[dict]
    center: bool = False

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "criterion": self.criterion, "rule": self.rule, "reason": self.reason,
                "center_states": self.center, "grid": [r["epsilon"] for r in self.scan[1:]], "scan": self.scan}


def _smallest(rows: list[dict], ok) -> dict | None:
    for r in rows:
        if ok(r):
            return r
    return None


def _column_best(rows: list[dict], column: str, higher: bool = True) -> tuple[float, dict] | None:
    """(best value, the smallest epsilon reaching it) of a scan column, NaN rows left out; None when every row is
    NaN. A scan without the column was saved before its rule existed: ValueError."""
    if any(column not in r for r in rows):
        raise ValueError(f"this scan has no {column} column (it was saved before the rule existed); scan the batch "
                         "again with estimators.calibrate.scan_epsilon")
    scored = [r for r in rows if r[column] == r[column]]
    if not scored:
        return None
    best = max(r[column] for r in scored) if higher else min(r[column] for r in scored)
    hit = _smallest(scored, lambda r: r[column] >= best - 1e-12 if higher else r[column] <= best + 1e-12)
    return best, hit


def choose_epsilon(batch: StepBatch, cfg: EstimatorConfig | None = None,
                   grid: Sequence[float] = AUTO_GRID) -> Calibration:
    """The epsilon ``estimator.epsilon: auto`` freezes for a run (rules: the module docstring). ``cfg``: the run's
    ``EstimatorConfig``, read whole (None: its defaults): the rule (``epsilon_criterion``, ``epsilon_target``) and
    the scan's settings (``scan_epsilon``)."""
    cfg = EstimatorConfig() if cfg is None else cfg
    scan = scan_epsilon(batch, sorted(float(e) for e in grid), cfg)
    return pick_from_scan(scan, cfg.epsilon_criterion, cfg.epsilon_target, cfg.center_states)


def pick_from_scan(scan: list[dict], criterion: str = "anchor_f1", target: float = 0.9,
                   center: bool = False) -> Calibration:
    """Apply a rule to a scan (``scan_epsilon``'s rows, anchors first, epsilons ascending), e.g. one read back from a
    run's ``epsilon.json``: how ``experiments.epsilon_criteria`` compares the rules on saved first batches."""
    anchor, rows = scan[0], sorted(scan[1:], key=lambda r: r["epsilon"])
    if criterion == "state_f1":
        scored = [r for r in rows if "f1" in r and r["f1"] == r["f1"]]
        if not scored:
            raise ValueError("epsilon_criterion=state_f1 needs the batch's true states (state_key, as the finite "
                             "worlds FiniteRooms-v0 / FiniteCraft-v0 give) and two rows of one state in a prompt "
                             "group; use anchor_f1 elsewhere")
        best = max(r["f1"] for r in scored)
        hit = _smallest(scored, lambda r: r["f1"] >= best - 1e-12)
        return Calibration(hit["epsilon"], criterion, "state_f1",
                           f"smallest epsilon whose clusters agree best with the true state (pair F1 {best:.3f}: "
                           f"precision {hit['precision']:.3f}, recall {hit['recall']:.3f}; the anchors' F1 "
                           f"{anchor.get('f1', float('nan')):.3f})", scan, center)
    if criterion == "return_loo" and (found := _column_best(rows, "return_loo", higher=False)) is not None:
        best, hit = found
        return Calibration(hit["epsilon"], criterion, "return_loo",
                           f"epsilon whose clusters best predict the step returns of other trajectories "
                           f"(leave-one-trajectory-out error {best:.3f} of the prompt group's; the anchors' "
                           f"{anchor.get('return_loo', float('nan')):.3f}; singleton rate "
                           f"{hit['singleton_rate']:.3f} vs the anchors' {anchor['singleton_rate']:.3f})", scan, center)
    has_pairs = anchor["anchor_recall"] == anchor["anchor_recall"]  # not NaN: two rows share an observation
    if has_pairs and criterion == "anchor_recall":
        hit = _smallest(rows, lambda r: r["anchor_recall"] >= target - 1e-12)
        if hit is not None:
            return Calibration(hit["epsilon"], criterion, "anchor_recall",
                               f"smallest epsilon keeping >= {target:g} of the same-observation pairs together "
                               f"({hit['anchor_recall']:.3f}; singleton rate {hit['singleton_rate']:.3f} vs the "
                               f"anchors' {anchor['singleton_rate']:.3f})", scan, center)
        best = max(r["anchor_recall"] for r in rows)
        hit = _smallest(rows, lambda r: r["anchor_recall"] >= best - 1e-12)
        return Calibration(hit["epsilon"], criterion, "anchor_recall_max",
                           f"no epsilon of the grid keeps {target:g} of the same-observation pairs together; the "
                           f"smallest with the most ({best:.3f})", scan, center)
    if has_pairs and criterion == "anchor_f1" and (found := _column_best(rows, "anchor_f1")) is not None:
        best, hit = found
        return Calibration(hit["epsilon"], criterion, "anchor_f1",
                           f"smallest epsilon whose clusters agree best with the exact anchors (pair F1 "
                           f"{best:.3f}: precision {hit['anchor_precision']:.3f}, recall "
                           f"{hit['anchor_recall']:.3f}; singleton rate {hit['singleton_rate']:.3f} vs the "
                           f"anchors' {anchor['singleton_rate']:.3f})", scan, center)
    if has_pairs and criterion == "singleton_match":
        hit = _smallest(rows, lambda r: r["singleton_rate"] <= anchor["singleton_rate"] + 1e-12)
        if hit is not None:
            return Calibration(hit["epsilon"], criterion, "singleton_match",
                               f"smallest epsilon whose singleton rate ({hit['singleton_rate']:.3f}) is at most the "
                               f"anchors' ({anchor['singleton_rate']:.3f})", scan, center)
    hit = _smallest(rows, lambda r: r["singleton_rate"] <= FALLBACK_SINGLETON_RATE + 1e-12) or rows[-1]
    why = ("no prompt group holds two trajectories" if criterion == "return_loo" else
           "no two rows of a prompt group share an observation" if not has_pairs else "no epsilon matches the anchors")
    return Calibration(hit["epsilon"], criterion, "fallback_singleton_rate",
                       f"{why}: smallest epsilon whose singleton rate ({hit['singleton_rate']:.3f}) is at most "
                       f"{FALLBACK_SINGLETON_RATE:g}", scan, center)


def format_scan(rows: list[dict]) -> str:
    cols = [c for c in ("grouping", "singleton_rate", "groups", "size_mean", "size_p90", "anchor_recall",
                        "anchor_precision", "anchor_f1", "return_loo", "precision", "recall", "f1") if c in rows[0]]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(v if isinstance(v, str) else (f"{v:.0f}" if c == "groups" else f"{v:.3f}"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    # the name it was run under: estimators.calibrate in the repo, bipace.estimators.calibrate from the wheel
    name = __spec__.name if __spec__ is not None else "estimators.calibrate"
    ap = argparse.ArgumentParser(prog=f"python -m {name}", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--batch", help="a StepBatch file written by StepBatch.save (e.g. the trainer's first batch)")
    src.add_argument("--synthetic", action="store_true", help="scan a synthetic batch (demo)")
    ap.add_argument("--grid", default=",".join(f"{e:g}" for e in DEFAULT_GRID), help="comma-separated epsilons")
    ap.add_argument("--centroid", default="mean", choices=["mean", "seed"])
    ap.add_argument("--backend", default="torch", choices=["torch", "faiss"])
    ap.add_argument("--hidden-size", type=int, default=256, help="synthetic batch only")
    ap.add_argument("--noise", type=float, default=0.3, help="synthetic batch only: hidden-state noise")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--center", action="store_true", help="subtract each prompt group's mean state first")
    ap.add_argument("--auto", action="store_true", help="also print the epsilon each epsilon: auto rule picks")
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
    cfg = EstimatorConfig(centroid=args.centroid, cluster_backend=args.backend, center_states=args.center)
    print(format_scan(scan_epsilon(batch, grid, cfg)))
    if args.auto:
        for crit in CRITERIA:
            cal = choose_epsilon(batch, replace(cfg, epsilon_criterion=crit))
            print(f"{crit}: epsilon = {cal.epsilon:g} ({cal.rule}: {cal.reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
