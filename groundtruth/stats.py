"""Aggregate statistics across training runs, after Agarwal et al. (2021, "Deep RL at the edge of the
statistical precipice"; the `rliable` library). Written here with NumPy/SciPy instead of adding the
dependency [choice]; conventions follow that paper:

* scores of one method: a (R runs, M tasks) matrix;
* IQM: the 25%-trimmed mean of all R·M scores (``scipy.stats.trim_mean(x, 0.25, axis=None)``);
* stratified bootstrap: resample the R runs with replacement *within each task*, recompute the statistic,
  take the 2.5% / 97.5% percentiles;
* probability of improvement P(X > Y): per task, the Mann–Whitney statistic
  mean_{i,k} (1[x_i > y_k] + ½ 1[x_i = y_k]), averaged over tasks; its interval resamples the runs of X and
  of Y independently within each task.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

__all__ = ["iqm", "stratified_bootstrap_ci", "probability_of_improvement", "poi_ci", "iterations_to_threshold"]


def _check(x: np.ndarray, name: str = "scores") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"{name} must be a (runs, tasks) matrix, got shape {x.shape}")
    return x


def iqm(x) -> float:
    """Interquartile mean of all entries of a (runs, tasks) matrix."""
    return float(sps.trim_mean(_check(x).reshape(-1), 0.25))


def stratified_bootstrap_ci(x, statistic=iqm, reps: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``statistic`` under run resampling within each task (column)."""
    x = _check(x)
    R, M = x.shape
    rng = np.random.default_rng(seed)
    vals = np.empty(reps)
    cols = np.arange(M)[None, :]
    for b in range(reps):
        idx = rng.integers(R, size=(R, M))  # run index per (row, task)
        vals[b] = statistic(x[idx, cols])
    a = (1 - level) / 2
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1 - a))


def probability_of_improvement(x, y) -> float:
    """P(X > Y) averaged over tasks; x (R_x, M), y (R_y, M)."""
    x, y = _check(x, "x"), _check(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has {x.shape[1]} tasks and y has {y.shape[1]}: score matrices must share tasks")
    per_task = []
    for j in range(x.shape[1]):
        xi, yk = x[:, j][:, None], y[:, j][None, :]
        per_task.append(float(((xi > yk) + 0.5 * (xi == yk)).mean()))
    return float(np.mean(per_task))


def poi_ci(x, y, reps: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Interval of ``probability_of_improvement`` (runs of x and y resampled independently per task)."""
    x, y = _check(x, "x"), _check(y, "y")
    rng = np.random.default_rng(seed)
    Rx, M = x.shape
    Ry = y.shape[0]
    cols = np.arange(M)[None, :]
    vals = np.empty(reps)
    for b in range(reps):
        vals[b] = probability_of_improvement(x[rng.integers(Rx, size=(Rx, M)), cols], y[rng.integers(Ry, size=(Ry, M)), cols])
    a = (1 - level) / 2
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1 - a))


def iterations_to_threshold(curve, threshold: float, iterations=None) -> float:
    """First iteration at which ``curve`` reaches ``threshold``; ``inf`` when it never does.

    ``iterations`` gives the iteration number of each curve entry (default 0, 1, 2, ...).
    """
    curve = np.asarray(curve, dtype=np.float64)
    its = np.arange(curve.size) if iterations is None else np.asarray(iterations)
    hit = np.flatnonzero(curve >= threshold)
    return float(its[hit[0]]) if hit.size else math.inf
