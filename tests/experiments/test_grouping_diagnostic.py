"""experiments.grouping_diagnostic: the per-run summary of logged grouping scans and the regime verdict."""
from __future__ import annotations

import json

import pytest

from estimators.calibrate import AUTO_GRID, pick_from_scan, scan_epsilon
from estimators.synthetic import synthetic_batch
from experiments.grouping_diagnostic import _lines, main, run_label, run_summary, verdict


def _scans(n: int = 3) -> str:
    lines = []
    for it in range(1, n + 1):
        b = synthetic_batch(groups=3, group_size=4, max_steps=5, obs_variants=2, seed=it)
        lines.append(json.dumps({"iteration": it, "rows": len(b), "scan": scan_epsilon(b, AUTO_GRID)}))
    return "\n".join(lines) + "\n"


def test_run_summary_freezes_the_rules_on_the_first_batch_and_averages_the_iterations():
    text = _scans(3)
    scans = _lines(text + text.splitlines()[1] + "\n")  # iteration 2 logged twice (a resumed run): the last wins
    assert sorted(scans) == [1, 2, 3]
    s = run_summary(scans, iterations=2)
    assert s["iterations"] == [1, 2]
    first = scans[1]["scan"]
    assert s["epsilon"]["return_loo"] == pick_from_scan(first, "return_loo").epsilon
    assert s["epsilon"]["anchor_f1"] == pick_from_scan(first, "anchor_f1").epsilon
    a1, a2 = scans[1]["scan"][0], scans[2]["scan"][0]
    assert s["anchors"]["mean"]["singleton_rate"] == pytest.approx((a1["singleton_rate"] + a2["singleton_rate"]) / 2)
    assert s["anchors"]["last"]["recall"] == a2["recall"]
    at = min(scans[2]["scan"][1:], key=lambda r: abs(r["epsilon"] - 0.05))
    assert s["paper 0.05"]["last"]["f1"] == at["f1"]
    finite = [r["f1"] for r in scans[2]["scan"][1:] if r["f1"] == r["f1"]]
    assert finite and s["oracle"]["last"]["f1"] == max(finite)
    with pytest.raises(ValueError):
        run_summary(scans, iterations=0)


def test_verdict_separates_over_splitting_from_aliasing():
    def a(p, r):
        return {"mean": {"precision": p, "recall": r}}

    assert verdict(a(1.0, 0.1)).startswith("yes")
    assert verdict(a(0.95, 0.8)).startswith("no: anchors keep")
    assert verdict(a(0.6, 0.3)) == "no: anchors alias states and split them"
    assert verdict(a(float("nan"), float("nan"))) == "no same-state pairs"


def test_a_study_without_scans_is_refused(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err


def test_run_labels_keep_two_studies_of_one_env_apart():
    assert run_label("results/grouping/alfworld", "alfworld", "gigpo", 0) == "alfworld gigpo, seed 0"
    assert run_label("results/grouping/alfworld/", "alfworld", "gigpo", 0) == "alfworld gigpo, seed 0"
    assert (run_label("results/grouping/alfworld-physical", "alfworld", "gigpo-history0", 0)
            == "alfworld [alfworld-physical] gigpo-history0, seed 0")


def test_a_run_with_fewer_iterations_than_asked_is_labelled(tmp_path, capsys):
    run = tmp_path / "webshop" / "runs" / "webshop" / "tiny" / "gigpo" / "seed_0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"env": "webshop", "model": "tiny", "method": "gigpo", "seed": 0}))
    (run / "grouping_scan.jsonl").write_text(_scans(3))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in (1, 2, 3)))
    assert main([str(tmp_path / "webshop"), "--iterations", "10"]) == 0
    assert "| webshop gigpo, seed 0 (iterations 1–3 only) |" in capsys.readouterr().out
    assert main([str(tmp_path / "webshop"), "--iterations", "3"]) == 0
    assert "| webshop gigpo, seed 0 |" in capsys.readouterr().out
