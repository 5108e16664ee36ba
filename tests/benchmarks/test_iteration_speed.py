"""``benchmarks.iteration_speed``: per-method means from run folders and the study-time arithmetic, on a fixture
of hand-written ``metrics.jsonl`` files (the timed runs themselves are what the benchmark does, not a test)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.iteration_speed import estimate_minutes, summarise


def _run(root: Path, method: str, iters: list[dict], evals: list[float]) -> None:
    d = root / "textcraft" / "tiny" / method / "seed_0"
    d.mkdir(parents=True)
    rows = [{"iteration": 0, "perf/time_eval": evals[0]}] if evals else []
    for i, r in enumerate(iters, start=1):
        rows.append({"iteration": i, **r})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summarise_and_estimate(tmp_path):
    _run(tmp_path, "grpo", [{"perf/time_iteration": 10.0, "perf/time_rollout": 6.0, "rollout/num_rows": 100},
                            {"perf/time_iteration": 20.0, "perf/time_rollout": 8.0, "rollout/num_rows": 300,
                             "perf/time_eval": 30.0}], [])
    _run(tmp_path, "bipace_q", [{"perf/time_iteration": 40.0, "perf/time_rollout": 10.0}], [50.0])
    timings = {"textcraft/tiny/grpo/seed_0": {"wall_s": 100.0, "cpu_s": 90.0},
               "textcraft/tiny/bipace_q/seed_0": {"wall_s": 95.0, "cpu_s": 80.0}}
    s = summarise(tmp_path, timings)
    g, b = s["grpo"], s["bipace_q"]
    assert g["iterations"] == 2 and g["s_per_iteration"] == 15.0 and g["phases"]["rollout"] == 7.0
    assert g["rows"] == 200 and g["evals"] == 1 and g["s_per_eval"] == 30.0
    assert g["startup_s"] == 100.0 - 30.0 - 30.0 and b["startup_s"] == 95.0 - 40.0 - 50.0
    # per run: startup + iterations x s/it + evals x scale x s/eval; longest first onto the emptier lane
    grpo_run = 40.0 + 10 * 15.0 + 2 * 0.5 * 30.0   # 220 s
    bq_run = 5.0 + 10 * 40.0 + 2 * 0.5 * 50.0      # 455 s
    assert estimate_minutes(s, 10, 2, 0.5, jobs=2) == pytest.approx(bq_run / 60)
    assert estimate_minutes(s, 10, 2, 0.5, jobs=1) == pytest.approx((grpo_run + bq_run) / 60)
    # 3 seeds on 2 lanes: runs queued longest first, each onto the lane that frees up first
    lanes = [0.0, 0.0]
    for r in sorted([bq_run] * 3 + [grpo_run] * 3, reverse=True):
        lanes[lanes.index(min(lanes))] += r
    assert estimate_minutes(s, 10, 2, 0.5, jobs=2, seeds=3) == pytest.approx(max(lanes) / 60)
    # with a core per run: each run scaled by its CPU / wall seconds (grpo 0.9, bipace_q 80/95)
    assert estimate_minutes(s, 10, 2, 0.5, jobs=1, idle=True) == pytest.approx((0.9 * grpo_run + 80 / 95 * bq_run) / 60)
    # a stopped run: its wall time holds unlogged work, so it takes the other runs' start-up (and evaluation) time
    timings["textcraft/tiny/bipace_q/seed_0"].update(last_exit=130, attempts=1)
    _run(tmp_path, "gigpo", [{"perf/time_iteration": 12.0}], [])
    timings["textcraft/tiny/gigpo/seed_0"] = {"wall_s": 99.0, "cpu_s": 50.0, "last_exit": 130, "attempts": 1}
    s = summarise(tmp_path, timings)
    assert s["bipace_q"]["startup_s"] is None and s["gigpo"]["startup_s"] is None and s["gigpo"]["evals"] == 0
    only_gigpo = {"gigpo": s["gigpo"], "grpo": s["grpo"]}
    gigpo_run = 40.0 + 10 * 12.0 + 2 * 0.5 * 30.0
    assert estimate_minutes(only_gigpo, 10, 2, 0.5, jobs=1) == pytest.approx((grpo_run + gigpo_run) / 60)
