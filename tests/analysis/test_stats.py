"""Statistics against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.stats import (
    curve_band,
    interp_curves,
    iqm,
    mean_ci,
    poi_ci,
    probability_of_improvement,
    steps_to_threshold,
    stratified_bootstrap_ci,
    t_ci,
    within_slope_ci,
)


def test_iqm_by_hand():
    assert iqm(np.array([0, 1, 2, 3, 4, 5, 6, 7])) == pytest.approx(3.5)  # mean of 2..5
    assert iqm(np.array([[1.0, 100.0], [2.0, 3.0]])) == pytest.approx(2.5)  # middle two of {1, 2, 3, 100}
    # 5 values: floor(5 / 4) = 1 cut from each end -> mean of 1, 2, 3; 3 values: nothing cut
    assert iqm(np.arange(5.0)) == pytest.approx(2.0)
    assert iqm(np.array([0.0, 0.0, 1.0])) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        iqm(np.array([]))


def test_t_interval_by_hand():
    # 1..5: mean 3, s = sqrt(2.5), s / sqrt(5) = sqrt(0.5); t_{0.975, 4} = 2.7764451
    m, lo, hi = t_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    h = 2.7764451052 * np.sqrt(0.5)
    assert m == 3.0 and lo == pytest.approx(3 - h) and hi == pytest.approx(3 + h)
    # two values 0 and 2: s / sqrt(2) = 1, t_{0.975, 1} = 12.7062047: far wider than the values' range, which is
    # as far as a percentile bootstrap over the two values can reach
    assert t_ci([0.0, 2.0]) == pytest.approx((1.0, 1 - 12.7062047362, 1 + 12.7062047362))
    _, blo, bhi = mean_ci([0.0, 2.0])
    assert (blo, bhi) == (0.0, 2.0)
    assert t_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    m, lo, hi = t_ci([4.0])
    assert m == 4.0 and np.isnan(lo) and np.isnan(hi)


def test_probability_of_improvement_by_hand():
    x = np.array([[1.0], [3.0]])
    y = np.array([[2.0], [2.0], [3.0]])
    # pairs: 1>2 no, 1>2 no, 1>3 no, 3>2 yes, 3>2 yes, 3=3 half -> 2.5 / 6
    assert probability_of_improvement(x, y) == pytest.approx(2.5 / 6)
    assert probability_of_improvement(y, x) == pytest.approx(1 - 2.5 / 6)
    # two tasks: the mean of per-task probabilities
    x2 = np.array([[1.0, 0.0]])
    y2 = np.array([[0.0, 1.0]])
    assert probability_of_improvement(x2, y2) == pytest.approx(0.5)
    p, lo, hi = poi_ci(np.ones((3, 2)), np.zeros((3, 2)))
    assert p == lo == hi == 1.0


def test_bootstrap_ci_contains_point_and_shrinks():
    rng = np.random.default_rng(0)
    small = rng.normal(size=(5, 2))
    big = rng.normal(size=(200, 2))
    p1, l1, h1 = stratified_bootstrap_ci(small, lambda m: float(m.mean()))
    p2, l2, h2 = stratified_bootstrap_ci(big, lambda m: float(m.mean()))
    assert l1 <= p1 <= h1 and l2 <= p2 <= h2
    assert h2 - l2 < h1 - l1
    const = np.full((4, 3), 0.7)
    assert stratified_bootstrap_ci(const, iqm) == pytest.approx((0.7, 0.7, 0.7))


def test_within_slope_by_hand():
    x = [1, 2, 3]
    # seed 1: slope 1 (sxx 2, sxy 2); seed 2: dx -1,0,1 and dy -1,-1,2 (sxy 3): pooled (2 + 3) / (2 + 2)
    y = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 8.0]])
    slope, lo, hi = within_slope_ci(x, y)
    assert slope == pytest.approx(1.25) and lo <= 1.25 <= hi and hi - lo > 0.1
    # an exact line with a different offset per seed: every resample with two distinct x gives the slope
    line = 2.0 * np.array(x, dtype=float)[:, None] + np.array([[0.0, 10.0, -3.0]])
    assert within_slope_ci(x, line) == pytest.approx((2.0, 2.0, 2.0))
    # one column: the ordinary least-squares slope
    rng = np.random.default_rng(1)
    xs, ys = np.arange(8.0), rng.normal(size=8)
    assert within_slope_ci(xs, ys)[0] == pytest.approx(np.polyfit(xs, ys, 1)[0])
    assert np.isnan(within_slope_ci([4, 4], np.ones((2, 2)))[0])
    with pytest.raises(ValueError, match="3 x values for 2 rows"):
        within_slope_ci([1, 2, 3], np.ones((2, 2)))


def test_curves_and_thresholds():
    assert steps_to_threshold([0, 5, 10], [0.1, 0.5, 0.9], 0.5) == 5
    assert steps_to_threshold([0, 5], [0.1, 0.2], 0.5) is None
    its, mat = interp_curves([([0, 5, 10], [0.0, 0.5, 1.0]), ([0, 5], [0.2, 0.3])])
    assert its.tolist() == [0, 5] and mat.tolist() == [[0.0, 0.5], [0.2, 0.3]]
    mean, lo, hi = curve_band(mat)
    assert mean.tolist() == pytest.approx([0.1, 0.4])
    assert (lo <= mean + 1e-12).all() and (hi >= mean - 1e-12).all()


# ------------------------------------------------------------------------------------------- against rliable
@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (3, 1), (3, 3), (5, 1), (5, 2), (6, 3), (7, 1), (10, 4), (20, 4)])
def test_iqm_and_probability_of_improvement_equal_rliable(shape):
    """Our IQM and P(X > Y) equal rliable's on the seed x task counts we use (3, 5, 6 seeds; 1-4 tasks), ties
    included (scores on a 0.1 grid)."""
    metrics = pytest.importorskip("rliable.metrics")
    rng = np.random.default_rng(shape[0] * 31 + shape[1])
    x = np.round(rng.random(shape), 1)
    y = np.round(rng.random((shape[0] + 1, shape[1])), 1)
    assert iqm(x) == pytest.approx(float(metrics.aggregate_iqm(x)), abs=1e-12)
    assert probability_of_improvement(x, y) == pytest.approx(float(metrics.probability_of_improvement(x, y)),
                                                             abs=1e-12)


def test_bootstrap_intervals_agree_with_rliable():
    """Stratified-bootstrap percentile intervals of the IQM and of P(X > Y): ours and rliable's, 20,000
    resamples each, agree to Monte Carlo noise (a bootstrap over all entries instead of within tasks, or a
    different interval, would differ by far more than the tolerance)."""
    metrics = pytest.importorskip("rliable.metrics")
    library = pytest.importorskip("rliable.library")
    rng = np.random.default_rng(3)
    x = rng.beta(2, 5, size=(6, 3)) + np.array([0.0, 0.3, 0.1])  # tasks on different scales
    y = rng.beta(2, 4, size=(5, 3)) + np.array([0.0, 0.3, 0.1])
    reps = 20_000
    _, lo, hi = stratified_bootstrap_ci(x, iqm, reps=reps, seed=1)
    point, ci = library.get_interval_estimates({"x": x}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=reps)
    assert iqm(x) == pytest.approx(float(point["x"][0]))
    assert lo == pytest.approx(float(ci["x"][0, 0]), abs=0.005) and hi == pytest.approx(float(ci["x"][1, 0]), abs=0.005)
    _, plo, phi = poi_ci(x, y, reps=4000, seed=2)
    p_point, p_ci = library.get_interval_estimates(
        {"xy": (x, y)}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=4000)
    assert probability_of_improvement(x, y) == pytest.approx(float(p_point["xy"][0]))
    assert plo == pytest.approx(float(p_ci["xy"][0, 0]), abs=0.02) and phi == pytest.approx(float(p_ci["xy"][1, 0]),
                                                                                          abs=0.02)
