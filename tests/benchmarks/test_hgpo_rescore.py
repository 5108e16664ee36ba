"""``benchmarks.hgpo_rescore``: HGPO's benchmark rows and learning curves rebuilt alone equal what the whole benchmark
gives, under the rule it runs with, and the rule is the one asked for."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import hgpo_rescore as hr
from common.tables import read_csv, write_csv
from groundtruth.bench import BenchConfig, Scenario, run_bench
from groundtruth.learning import LearnConfig, run_learning
from groundtruth.metrics import METRIC_NAMES

PLAIN = Scenario("plain", "none", 0.0)
ALIASED = Scenario("aliased", "none", 1.0)


@pytest.fixture(scope="module")
def small():
    return BenchConfig(families=("rooms",), scenarios=(PLAIN, ALIASED), seeds=2, horizon=20, proxy_noise=(0.2,),
                       epsilons=(0.05,))


def test_bench_rows_equal_the_benchmarks_hgpo_rows(small, tmp_path):
    whole = [r for r in run_bench(small, log=lambda *_: None)["rows"] if r["method"] == "hgpo"]
    rows = hr.bench_rows(small, log=lambda *_: None)
    assert len(rows) == 2 * len(whole)
    by = {(r["scenario"], r["seed"], r["hgpo_rule"]): r for r in rows}
    for w in whole:  # the benchmark scores HGPO under the default rule, verl_agent
        got = by[(w["scenario"], w["seed"], "verl_agent")]
        for m in METRIC_NAMES:
            assert got[m] == w[m] or (math.isnan(got[m]) and math.isnan(w[m])), m
    # the two rules differ on these batches (rows before step 2, the level weights), and the check sees it
    assert any(by[(s, k, "start_marker")]["pearson"] != by[(s, k, "verl_agent")]["pearson"]
               for s in ("plain", "aliased") for k in range(2))
    write_csv(tmp_path / "rows.csv.gz", rows, digits=4)
    committed = [{**r, "method": "hgpo"} for r in read_csv(tmp_path / "rows.csv.gz")
                 if r["hgpo_rule"] == "start_marker"]
    assert hr.check_rows(rows, committed) == (4, [])
    swapped = [{**r, "method": "hgpo"} for r in read_csv(tmp_path / "rows.csv.gz")
               if r["hgpo_rule"] == "verl_agent"]
    n, bad = hr.check_rows(rows, swapped)
    assert n == 4 and bad


def test_learning_curves_equal_the_comparisons_hgpo_runs():
    cfg = LearnConfig(methods=("hgpo",), families=("rooms",), scenarios=(PLAIN,), seeds=2, iterations=4, horizon=20)
    whole = run_learning(cfg, log=lambda *_: None)["curves"]["rooms/plain"]["hgpo"]
    new = hr.learning_curves(cfg, log=lambda *_: None)
    np.testing.assert_array_equal(new["rooms/plain"]["verl_agent"], whole)
    n, bad, worst = hr.check_curves(new, {"rooms/plain": {"hgpo": new["rooms/plain"]["start_marker"]}})
    assert (n, bad, worst) == (2, [], 0.0)


def test_configs_read_the_committed_study():
    bench, learn = hr.configs(hr.STUDY / "config.json")
    assert bench.seeds == 20 and bench.lm and [s.name for s in bench.scenarios][-1] == "varied+aliased"
    assert learn.iterations == 24 and "hgpo" in learn.methods
