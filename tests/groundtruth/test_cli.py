"""The benchmark's command line, run as a user would (tiny settings)."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_estimator_bench_quick_writes_the_report(tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "experiments.estimator_bench", "--quick", "--out", str(out), "--seeds", "2",
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
    proc = subprocess.run([sys.executable, "-m", "experiments.estimator_bench", "--quick", "--out", str(tmp_path),
                           "--epsilons", "0,x"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "comma-separated numbers" in proc.stderr
