"""Per-batch quality of estimated advantages against the exact ones, and their summary over seeds.

For one batch of N step rows with estimated advantages Â (N,), step terms Â^S (N,), state groups c (N,)
and true advantages A_i = A^π_{t(i)}(s_i, a_i):

===================  ==========================================================================
pearson, spearman    correlation of Â and A over all rows of the batch (0 when Â is constant [choice])
pearson_step         correlation of the step term Â^S and A (NaN for estimators without one)
sign_agree           share of rows with A ≠ 0 where sign(Â) = sign(A) (Â = 0 counts as a miss)
zero_step            share of rows whose step term is exactly 0 (NaN without a step term)
singleton            share of rows alone in their state group inside their prompt group
pair_precision       share of same-group row pairs that are truly the same state (aliasing → < 1)
pair_recall          share of truly-same-state row pairs (same prompt group) put in one group
grad_cos             cosine of ĝ = Σ_i Â_i ∇log π(a_i|s_i) with the exact g* (``policy.exact_gradient``)
grad_cos_obj         cosine of ĝ with the exact objective gradient ∇J (γ^t-weighted)
===================  ==========================================================================

Summaries: mean and a 95% Student-t interval over seeds (one value per seed and setting).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from .policy import cosine, score_gradient

__all__ = ["batch_metrics", "pair_stats", "singleton_rate", "mean_ci", "METRIC_NAMES"]

METRIC_NAMES = ("pearson", "spearman", "pearson_step", "sign_agree", "zero_step", "singleton", "pair_precision",
                "pair_recall", "grad_cos", "grad_cos_obj")


def _dense(*cols: np.ndarray) -> np.ndarray:
    """One dense int id per distinct tuple of the given (N,) columns."""
    stacked = np.stack([np.asarray(c, dtype=np.int64) for c in cols], axis=1)
    return np.unique(stacked, axis=0, return_inverse=True)[1].reshape(-1)


def _pairs(ids: np.ndarray) -> float:
    counts = np.bincount(ids).astype(np.float64)
    return float((counts * (counts - 1) / 2).sum())


def pair_stats(group: np.ndarray, cluster: np.ndarray, state: np.ndarray) -> tuple[float, float]:
    """(precision, recall) of the partition ``(group, cluster)`` against ``(group, state)`` over row pairs.

    precision = #pairs same cluster and same state / #pairs same cluster (NaN if no such pair);
    recall    = #pairs same cluster and same state / #pairs same state   (NaN if no such pair).
    """
    gc = _dense(group, cluster)
    gs = _dense(group, state)
    both = _pairs(_dense(group, cluster, state))
    pc, ps = _pairs(gc), _pairs(gs)
    return (both / pc if pc > 0 else math.nan), (both / ps if ps > 0 else math.nan)


def singleton_rate(group: np.ndarray, cluster: np.ndarray) -> float:
    """Share of rows whose (group, cluster) has one member."""
    ids = _dense(group, cluster)
    return float((np.bincount(ids)[ids] == 1).mean())


def _corr(x: np.ndarray, y: np.ndarray, kind: str) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    if kind == "pearson":
        return float(np.corrcoef(x, y)[0, 1])
    return float(sps.spearmanr(x, y).statistic)


def advantage_metrics(adv: np.ndarray, true_adv: np.ndarray, group: np.ndarray, state: np.ndarray,
                      cluster: np.ndarray | None, step: np.ndarray | None = None) -> dict[str, float]:
    """Agreement of one estimator's advantages with the truth on one batch (the metrics a training run logs,
    ``groundtruth.live``). With ``step`` (the estimator's step term A^S alone, zeros where it has none), also
    ``pearson_step``, ``spearman_step``, ``sign_agree_step`` and ``zero_step`` (rows whose step term is exactly 0):
    the step term is what state grouping changes, while the episode term is the same for every group-based
    estimator."""
    adv = np.asarray(adv, dtype=np.float64)
    true_adv = np.asarray(true_adv, dtype=np.float64)
    nz = np.abs(true_adv) > 1e-9
    out = {
        "pearson": _corr(adv, true_adv, "pearson"),
        "spearman": _corr(adv, true_adv, "spearman"),
        "sign_agree": float((np.sign(adv[nz]) == np.sign(true_adv[nz])).mean()) if nz.any() else math.nan,
        "zero_signal": float((np.abs(adv) <= 1e-9).mean()),
    }
    if cluster is None:
        out["singleton"] = out["pair_precision"] = out["pair_recall"] = math.nan
    else:
        out["singleton"] = singleton_rate(group, cluster)
        out["pair_precision"], out["pair_recall"] = pair_stats(group, cluster, state)
    if step is not None:
        step = np.asarray(step, dtype=np.float64)
        out["pearson_step"] = _corr(step, true_adv, "pearson")
        out["spearman_step"] = _corr(step, true_adv, "spearman")
        out["sign_agree_step"] = (float((np.sign(step[nz]) == np.sign(true_adv[nz])).mean()) if nz.any()
                                  else math.nan)
        out["zero_step"] = float((step == 0).mean())
    return out


def batch_metrics(adv: np.ndarray, step: np.ndarray | None, cluster: np.ndarray | None, true_adv: np.ndarray,
                  group: np.ndarray, state: np.ndarray, action: np.ndarray, pi: np.ndarray,
                  g_target: np.ndarray, g_objective: np.ndarray) -> dict[str, float]:
    """All metrics of the module docstring for one batch (arrays (N,); pi, g_* (S, A))."""
    adv = np.asarray(adv, dtype=np.float64)
    out = advantage_metrics(adv, true_adv, group, state, cluster, step=step)
    for k in ("zero_signal", "spearman_step", "sign_agree_step"):
        out.pop(k, None)
    if step is None:
        out["pearson_step"] = out["zero_step"] = math.nan
    g_hat = score_gradient(pi, state, action, adv)
    out["grad_cos"] = cosine(g_hat, g_target)
    out["grad_cos_obj"] = cosine(g_hat, g_objective)
    return out


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, lower, upper, n) with a Student-t interval over the finite values (NaN when none)."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(x.mean())
    if n == 1:
        return m, math.nan, math.nan, 1
    half = float(sps.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return m, m - half, m + half, n
