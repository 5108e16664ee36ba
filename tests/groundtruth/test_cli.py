"""The benchmark's command line, run as a user would (tiny settings)."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_estimator_bench_quick_writes_the_report(tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "benchmarks.estimator_accuracy", "--quick", "--out", str(out), "--seeds", "2",
           "--learn-seeds", "2", "--iterations", "2", "--horizon", "8", "--epsilons", "0,0.05"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("summary.md", "bench_summary.csv", "bench_rows.csv.gz", "geometry.csv", "learning_aggregate.csv",
                 "learning_poi.csv", "learning_thresholds.csv", "learning_curves.png", "pearson_vs_eps_craft.png",
                 "grad_cos_vs_eps_rooms.png", "config.json"):
        assert (out / name).exists(), name
    rows = list(csv.DictReader(open(out / "bench_summary.csv")))
    methods = {r["method"] for r in rows}
    assert {"grpo", "gigpo", "hgpo", "rloo", "bigpo", "bipace_v", "bipace_q", "oracle"} <= methods
    assert all(r["seeds"] == "2" for r in rows)
    text = (out / "summary.md").read_text()
    assert "## 1. Advantage quality" in text and "## 2. Learning comparison" in text


def test_estimator_bench_rejects_bad_settings(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.estimator_accuracy", "--quick", "--out", str(tmp_path),
                           "--epsilons", "0,x"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "comma-separated numbers" in proc.stderr


def test_build_configs_applies_only_the_given_overrides():
    from argparse import Namespace

    from benchmarks.estimator_accuracy import build_configs

    base = dict(quick=False, lm=False, seeds=None, families=None, horizon=None, epsilons=None, lm_seeds=None,
                lm_groups=None, lm_trajectories=None, learn_seeds=None, iterations=None, learn_epsilon=None)
    b0, l0, _ = build_configs(Namespace(**base))
    b, lc, _ = build_configs(Namespace(**{**base, "seeds": 3, "families": "craft", "horizon": 9, "epsilons": (0.1,),
                                          "learn_seeds": 4, "iterations": 5, "learn_epsilon": 0.02}))
    assert (b.seeds, b.families, b.horizon, b.epsilons) == (3, ("craft",), 9, (0.1,))
    assert (lc.seeds, lc.families, lc.horizon, lc.iterations, lc.epsilon) == (4, ("craft",), 9, 5, 0.02)
    assert (b.lm_seeds, b.lm_groups) == (b0.lm_seeds, b0.lm_groups) and l0.iterations != 5
