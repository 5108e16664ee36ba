"""The estimator comparison's reading on hand-made runs with known answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.comparison import comparison_report, paired_rows
from analysis.runs import final_eval, find_runs

KEY = "eval/textcraft/eval_depth2/success_rate"


def _run(root: Path, method: str, seed: int, final: float, train: float, *, status: str = "finished",
         last_eval: int = 20) -> None:
    d = root / "runs" / "textcraft" / "tiny" / method / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method, "seed": seed,
                                            "status": status, "iterations_total": 20}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(
        {"iteration": i, "rollout/success_rate": train, "group/epsilon": 0.01, "group/pace_frac_pace": 0.5,
         "group/pace_frac_fallback": 0.3, "group/pace_frac_singleton": 0.2, "adv/step_std": 1.0,
         "adv/total_std": 2.0}) + "\n" for i in range(1, 21)))
    (d / "eval.jsonl").write_text("".join(json.dumps({"iteration": it, KEY: v}) + "\n"
                                          for it, v in ((0, 0.2), (last_eval, final))))


def test_paired_rows_and_report(tmp_path):
    # 4 seeds; arm x beats gigpo by 2, 4, 6, 8 points; arm y equals gigpo except seed 3 (-5 points); z unfinished in
    # seed 3 (its last evaluation is at iteration 10), so it pairs on 3 seeds
    for s in range(4):
        _run(tmp_path, "gigpo", s, 0.20 + 0.01 * s, 0.3)
        _run(tmp_path, "x", s, 0.20 + 0.01 * s + 0.02 * (s + 1), 0.4)
        _run(tmp_path, "y", s, 0.20 + 0.01 * s - (0.05 if s == 3 else 0.0), 0.3)
        _run(tmp_path, "z", s, 0.5, 0.3, **({"status": "running", "last_eval": 10} if s == 3 else {}))
    runs = find_runs(tmp_path / "runs")
    rows = {r["arm"]: r for r in paired_rows(runs, ["gigpo", "x", "y", "z"], "gigpo",
                                              lambda r: (final_eval(r, KEY) or (None,))[0])}
    assert "p" not in rows["gigpo"]
    assert list(rows["x"]["diffs"].values()) == pytest.approx([0.02, 0.04, 0.06, 0.08])
    assert rows["x"]["above"] == 4 and rows["x"]["p"] == pytest.approx(0.125)  # 2 / 2^4
    assert rows["y"]["above"] == 0 and rows["y"]["below"] == 1 and rows["y"]["p"] == pytest.approx(1.0)
    assert rows["z"]["n"] == 3
    assert rows["x"]["p_holm"] == pytest.approx(min(1.0, 3 * rows["x"]["p"])) or rows["x"]["p_holm"] >= rows["x"]["p"]
    md = comparison_report(tmp_path, ["gigpo", "x", "y", "z"])
    assert "16 runs" in md and "Smallest possible sign-flip p with 4 seeds: 0.1250" in md
    assert "| x | 4 | " in md and "| 4 / 0 | 0.125 |" in md
    assert "x: 0: +2.0, 1: +4.0, 2: +6.0, 3: +8.0" in md
    # training success: x is 10 points above gigpo in every seed
    assert "+10.0 [+10.0, +10.0] | 4 / 0" in md
    assert "| x | 0.01 | 0.500 | 0.300 | 0.200 | 1.000 | 2.000 |" in md


def test_comparison_without_runs(tmp_path):
    assert comparison_report(tmp_path, ["gigpo", "x"]) == "No runs yet.\n"
