"""Metrics on fixtures with known answers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from groundtruth.metrics import batch_metrics, mean_ci, pair_stats, singleton_rate


def test_pair_stats_and_singletons_on_known_clusters():
    group = np.array([0, 0, 0, 0, 1, 1, 1])
    state = np.array([5, 5, 6, 6, 5, 5, 7])  # state ids are local to the group
    cluster = np.array([0, 0, 0, 1, 2, 2, 3])
    # same-cluster pairs: g0 {0,1,2}: 3 pairs (one pure: 0-1); g1 {4,5}: 1 pure pair -> 2 of 4
    # same-state pairs: g0 (0,1), (2,3); g1 (4,5) -> 3, of which 0-1 and 4-5 share a cluster
    prec, rec = pair_stats(group, cluster, state)
    assert prec == pytest.approx(2 / 4) and rec == pytest.approx(2 / 3)
    assert singleton_rate(group, cluster) == pytest.approx(2 / 7)
    # exact state partition: perfect precision and recall
    assert pair_stats(group, state, state) == (1.0, 1.0)
    # clusters never span groups even when ids repeat across groups
    assert singleton_rate(group, np.zeros(7, dtype=int)) == 0.0
    assert math.isnan(pair_stats(np.array([0, 1]), np.array([0, 0]), np.array([1, 2]))[0])


def _ctx(n=50, seed=0):
    rng = np.random.default_rng(seed)
    S, A = 6, 3
    pi = rng.dirichlet(np.ones(A), size=S)
    ctx = dict(group=np.repeat([0, 1], n // 2), state=rng.integers(S, size=n), action=rng.integers(A, size=n), pi=pi,
               g_target=rng.standard_normal((S, A)), g_objective=rng.standard_normal((S, A)))
    return ctx, rng.standard_normal(n)


def test_batch_metrics_oracle_and_constant():
    ctx, true = _ctx()
    m = batch_metrics(true, true, ctx["state"], true, **ctx)
    assert m["pearson"] == pytest.approx(1.0) and m["spearman"] == pytest.approx(1.0)
    assert m["sign_agree"] == 1.0 and m["zero_step"] == 0.0 and m["pair_precision"] == 1.0
    flipped = batch_metrics(-true, None, None, true, **ctx)
    assert flipped["pearson"] == pytest.approx(-1.0) and flipped["sign_agree"] == 0.0
    assert math.isnan(flipped["zero_step"]) and math.isnan(flipped["singleton"])
    const = batch_metrics(np.zeros_like(true), np.zeros_like(true), None, true, **ctx)
    assert const["pearson"] == 0.0 and const["sign_agree"] == 0.0 and const["zero_step"] == 1.0
    assert const["grad_cos"] == 0.0
    # monotone transform: Spearman stays 1, Pearson drops below 1
    m3 = batch_metrics(true**3, None, None, true, **ctx)
    assert m3["spearman"] == pytest.approx(1.0) and m3["pearson"] < 0.99


def test_mean_ci():
    m, lo, hi, n = mean_ci([1.0, 2.0, 3.0, float("nan")])
    assert n == 3 and m == 2.0
    assert hi - m == pytest.approx(4.302652729911275 * 1.0 / math.sqrt(3))  # t_{0.975, 2} * sd / sqrt(n)
    assert mean_ci([])[3] == 0 and math.isnan(mean_ci([1.0])[1])
