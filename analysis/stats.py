"""Statistics across seeds, written after rliable (Agarwal et al., 2021): interquartile mean, stratified
bootstrap confidence intervals, probability of improvement, and sample efficiency. ``iqm`` and
``probability_of_improvement`` equal rliable's on the same matrices, and ``stratified_bootstrap_ci`` /
``poi_ci`` resample as rliable's ``StratifiedBootstrap`` does (runs within each task, percentile interval), so
their intervals agree with rliable's up to Monte Carlo noise (tests/analysis/test_stats.py compares them;
rliable is a test dependency, not a runtime one: its ``arch`` dependency needs ``pandas < 3``).

Score matrices are (runs x tasks): one row per seed, one column per task (an evaluation split or a task
family). The stratified bootstrap resamples runs with replacement independently inside each task.

Where a study has several observations per seed (iterations, or the runs of one seed), the seeds are the
independent unit: ``hierarchical_bootstrap_ci`` resamples seeds, then observations within each drawn seed;
``sign_flip_p`` tests a per-seed mean difference against 0; ``holm`` corrects a family of such tests. With one
value per seed and few seeds (5), a percentile bootstrap over the seed values is too narrow (it cannot reach past
the values drawn and ignores the t distribution's heavier tails); ``t_ci`` gives the Student-t interval instead.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "iqm",
    "mean_ci",
    "t_ci",
    "format_ci",
    "stratified_bootstrap_ci",
    "within_slope_ci",
    "probability_of_improvement",
    "poi_ci",
    "steps_to_threshold",
    "interp_curves",
    "curve_band",
    "aggregate_intervals",
    "aggregate_markdown",
    "hierarchical_bootstrap_ci",
    "sign_flip_p",
    "holm",
]


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all entries, as rliable defines it (``rliable.metrics.aggregate_iqm`` =
    ``scipy.stats.trim_mean(scores, 0.25, axis=None)``): ``floor(n / 4)`` entries cut from each end of the sorted
    values, then the mean. With 3 runs nothing is cut (the plain mean); with 9 entries the middle 5 remain.
    ``tests/analysis/test_stats.py`` checks it equal to rliable on the run counts we use."""
    x = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    n = x.size
    if n == 0:
        raise ValueError("iqm of an empty score matrix")
    k = int(0.25 * n)
    return float(x[k:n - k].mean())


def stratified_bootstrap_ci(
    scores: np.ndarray, stat: Callable[[np.ndarray], float], reps: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(point, low, high): ``stat`` of the (runs x tasks) matrix and its percentile CI, resampling runs
    with replacement independently per task."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    rng = np.random.default_rng(seed)
    n_runs, n_tasks = scores.shape
    point = stat(scores)
    idx = rng.integers(0, n_runs, size=(reps, n_runs, n_tasks))  # (reps, runs, tasks)
    boot = np.take_along_axis(scores[None].repeat(reps, 0), idx, axis=1)
    vals = np.array([stat(b) for b in boot])
    return point, float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def within_slope_ci(
    x: Sequence[float], y: np.ndarray, reps: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(slope, low, high): the least-squares slope of ``y`` on ``x`` with an intercept per column (the pooled
    within-seed slope), and its percentile CI resampling the (x, y) points with replacement inside each column.
    x: (points,), y: (points x seeds). A resample that draws a single x in every column has no slope and is
    dropped; with fewer than two distinct x the result is NaN."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if y.shape[0] != x.size:
        raise ValueError(f"within_slope_ci: {x.size} x values for {y.shape[0]} rows of y")

    def slope(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:  # xs, ys: (..., points, seeds)
        dx = xs - xs.mean(axis=-2, keepdims=True)
        dy = ys - ys.mean(axis=-2, keepdims=True)
        sxx = (dx * dx).sum(axis=(-2, -1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(sxx > 0, (dx * dy).sum(axis=(-2, -1)) / sxx, np.nan)

    xs = np.broadcast_to(x[:, None], y.shape)
    point = float(slope(xs, y))
    if not np.isfinite(point):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(reps, *y.shape))
    boot = slope(np.take_along_axis(np.broadcast_to(xs, idx.shape), idx, axis=1),
                 np.take_along_axis(np.broadcast_to(y, idx.shape), idx, axis=1))
    boot = boot[np.isfinite(boot)]
    return point, float(np.quantile(boot, alpha / 2)), float(np.quantile(boot, 1 - alpha / 2))


def mean_ci(values: Sequence[float], reps: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float,
                                                                                                    float]:
    """Mean over seeds with a 95% percentile bootstrap interval."""
    return stratified_bootstrap_ci(np.asarray(values, dtype=np.float64)[:, None], lambda m: float(m.mean()), reps,
                                   alpha, seed)


def t_ci(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean, lower, upper): the Student-t interval of the mean of independent values (one per seed), mean ±
    t_{1 − alpha/2, n − 1} · s / √n with s the unbiased standard deviation; NaN bounds with fewer than 2 values."""
    from scipy.stats import t as student_t

    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan")
    h = float(student_t.ppf(1 - alpha / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return m, m - h, m + h


def format_ci(point_lo_hi, digits: int = 3, scale: float = 1.0, signed: bool = True) -> str:
    """``point [lo, hi]`` of a (point, low, high) triple times ``scale``, with ``digits`` decimals and a sign when
    ``signed``; just the point when a bound is not finite; "–" when the point is not."""
    p, lo, hi = (scale * v for v in point_lo_hi)
    if not np.isfinite(p):
        return "–"
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f.format(p)
    return f"{f.format(p)} [{f.format(lo)}, {f.format(hi)}]"


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): mean over tasks of P(x_run > y_run') over all pairs of runs, ties counting 1/2
    (the Mann-Whitney U statistic divided by m n). x: (m, tasks), y: (n, tasks)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x, y = x[:, None], y[:, None]
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"score matrices cover different task counts: {x.shape[1]} vs {y.shape[1]}")
    gt = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    eq = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return float((gt + 0.5 * eq).mean())


def poi_ci(x: np.ndarray, y: np.ndarray, reps: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float,
                                                                                                        float]:
    """P(X > Y) with a stratified bootstrap interval (runs of X and of Y resampled independently per task)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x, y = x[:, None], y[:, None]
    rng = np.random.default_rng(seed)
    point = probability_of_improvement(x, y)
    vals = np.empty(reps)
    for r in range(reps):
        ix = rng.integers(0, x.shape[0], size=x.shape)
        iy = rng.integers(0, y.shape[0], size=y.shape)
        vals[r] = probability_of_improvement(np.take_along_axis(x, ix, 0), np.take_along_axis(y, iy, 0))
    return point, float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def steps_to_threshold(xs: Sequence[int], ys: Sequence[float], threshold: float) -> int | None:
    """First iteration at which the curve reaches ``threshold`` (None if it never does)."""
    for x, y in zip(xs, ys):
        if y >= threshold:
            return int(x)
    return None


def interp_curves(curves: Sequence[tuple[Sequence[int], Sequence[float]]]) -> tuple[np.ndarray, np.ndarray]:
    """Align seeds on the iterations all of them have: (iterations (K,), values (seeds, K))."""
    common = sorted(set.intersection(*[set(int(x) for x in c[0]) for c in curves])) if curves else []
    mat = np.array([[dict(zip(c[0], c[1]))[x] for x in common] for c in curves], dtype=np.float64)
    return np.array(common), mat.reshape(len(curves), len(common))


def curve_band(values: np.ndarray, reps: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[np.ndarray,
                                                                                                  np.ndarray,
                                                                                                  np.ndarray]:
    """Mean curve over seeds and its pointwise 95% bootstrap band. values: (seeds, K) -> three (K,) arrays."""
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.shape[0], size=(reps, values.shape[0]))  # (reps, seeds)
    boot = values[idx].mean(axis=1)  # (reps, K)
    return values.mean(axis=0), np.quantile(boot, alpha / 2, axis=0), np.quantile(boot, 1 - alpha / 2, axis=0)


def aggregate_intervals(mats: dict[str, np.ndarray], baseline: str, sort_key=None) -> dict[str, dict]:
    """Per method of (runs x tasks) score matrices, in ``sort_key`` order: ``runs``, ``iqm`` and ``mean`` as
    (point, low, high) with stratified-bootstrap 95% intervals (resampling runs within each task), and ``poi``, the
    probability of improvement over ``baseline`` with its interval (None for the baseline itself or when it is
    absent). One computation for the table and the interval plot, so the two cannot disagree."""
    out = {}
    for m in sorted(mats, key=sort_key):
        x = mats[m]
        out[m] = {"runs": int(x.shape[0]), "iqm": stratified_bootstrap_ci(x, iqm),
                  "mean": stratified_bootstrap_ci(x, lambda a: float(a.mean())),
                  "poi": poi_ci(x, mats[baseline]) if baseline in mats and m != baseline else None}
    return out


def aggregate_markdown(mats: dict[str, np.ndarray], baseline: str, sort_key=None, intervals=None) -> str:
    """Markdown table of (runs x tasks) score matrices per method: IQM and mean with stratified-bootstrap 95%
    intervals (in %), and the probability of improvement over ``baseline`` with its interval. ``intervals``: the
    output of ``aggregate_intervals`` when the caller has it already."""
    intervals = intervals if intervals is not None else aggregate_intervals(mats, baseline, sort_key)
    lines = [f"| method | runs | IQM [95% CI] | mean [95% CI] | P(method > {baseline}) [95% CI] |",
             "|---|---|---|---|---|"]
    for m, a in intervals.items():
        q, mu, p = a["iqm"], a["mean"], a["poi"]
        poi = f"{p[0]:.2f} [{p[1]:.2f}, {p[2]:.2f}]" if p is not None else "–"
        lines.append(f"| {m} | {a['runs']} | {100 * q[0]:.1f} [{100 * q[1]:.1f}, {100 * q[2]:.1f}] | "
                     f"{100 * mu[0]:.1f} [{100 * mu[1]:.1f}, {100 * mu[2]:.1f}] | {poi} |")
    return "\n".join(lines)


def hierarchical_bootstrap_ci(groups: Sequence[Sequence[float]], reps: int = 2000, alpha: float = 0.05,
                              seed: int = 0) -> tuple[float, float, float]:
    """(point, low, high) of the mean of group means, with a two-level percentile bootstrap: each replicate draws
    the groups (seeds) with replacement, then, inside every drawn group, its observations (e.g. iterations) with
    replacement, and takes the mean of the drawn groups' means. A group drawn twice gets two independent inner
    draws. Seeds are the independent unit, so the interval covers the seed-to-seed spread that a bootstrap over
    iterations alone (``stratified_bootstrap_ci`` with seeds as strata) leaves out. Empty groups are dropped; with
    no group left the result is NaN; with one group it is the bootstrap of that group's mean."""
    gs = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    gs = [g for g in gs if g.size]
    if not gs:
        return float("nan"), float("nan"), float("nan")
    k = len(gs)
    point = float(np.mean([g.mean() for g in gs]))
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, k, size=(reps, k))  # (reps, slots): which group fills each slot
    inner = np.empty((k, reps, k))  # inner[g, r, s]: a within-group resample mean of group g for slot s of rep r
    for i, g in enumerate(gs):
        inner[i] = g[rng.integers(0, g.size, size=(reps, k, g.size))].mean(axis=-1)
    vals = inner[pick, np.arange(reps)[:, None], np.arange(k)[None, :]].mean(axis=1)
    return point, float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def sign_flip_p(values: Sequence[float], exact_up_to: int = 16, reps: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value of the mean of ``values`` (one paired difference per seed) against 0 by sign flipping:
    under the null each seed's difference is as likely negative as positive. Exact (all 2^n sign patterns) for
    n <= ``exact_up_to``, else Monte Carlo with ``reps`` patterns. With n seeds all of one sign and distinct
    magnitudes the smallest p is 2 / 2^n (10 seeds: 0.00195). NaN for no values."""
    x = np.asarray(values, dtype=np.float64).ravel()
    n = x.size
    if n == 0:
        return float("nan")
    obs = abs(x.mean())
    if n <= exact_up_to:
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1)  # (2^n, n) of +-1
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(reps, n))
    stats = np.abs((signs * x[None, :]).mean(axis=1))
    return float(np.mean(stats >= obs - 1e-12 * max(1.0, obs)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error over the m tests given), in the input order: sorted
    ascending, the j-th smallest (j = 1..m) is multiplied by m - j + 1, capped at 1, and made non-decreasing.
    A test is rejected at level a when its adjusted p <= a. NaN entries stay NaN and do not count in m."""
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adj)
    return out.tolist()
