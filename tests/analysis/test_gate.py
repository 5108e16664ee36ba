"""The learning gate's rule on hand-made runs with known verdicts, and its power figures against
closed forms and simulation."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.gate import WARMSTART_FILE, detectable_difference, false_pass_probability, gate_report, gate_rows, verdict
from analysis.runs import find_runs

KEY = "eval/textcraft/eval_depth2/success_rate"


def _run(root: Path, method: str, seed: int, final_wins: int, *, episodes: int = 232, iterations: int = 20,
         last_eval: int = 20, status: str = "finished") -> None:
    d = root / "runs" / "textcraft" / "tiny" / method / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method, "seed": seed,
                                            "status": status, "iterations_total": iterations}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(
        {"iteration": i, "rollout/success_rate": 0.3 + 0.01 * i, "loss/kl": 0.001 * i, "loss/entropy": 1.0,
         "rollout/episode_length": 10.0, "loss/grad_norm": 2.0 if i % 2 else 0.5}) + "\n" for i in range(1, 21)))
    k = "eval/textcraft/eval_depth2/"
    (d / "eval.jsonl").write_text("".join(json.dumps(
        {"iteration": it, k + "success_rate": n / episodes, k + "num_episodes": float(episodes)}) + "\n"
        for it, n in ((0, 50), (last_eval, final_wins))))


def _warm(root: Path, success: float, episodes: int = 928) -> None:
    (root / WARMSTART_FILE).write_text(json.dumps({"splits": {"eval_depth2": {"success": success,
                                                                               "episodes": episodes}}}))


def test_verdict_rule():
    assert verdict([0.05, 0.04, 0.03]) == "PASS"  # mean exactly 4 points, all above
    assert verdict([0.12, 0.01, 0.0]) == "FAIL"  # mean 4.3 points but one seed not above
    assert verdict([0.03, 0.03, 0.03]) == "FAIL"  # all above, mean below 4
    assert verdict([0.10, 0.10]) == "INCOMPLETE"  # 2 seeds of 3
    assert verdict([0.10, 0.0]) == "FAIL"  # 2 seeds of 3, one not above: no third seed can make it pass
    assert verdict([0.05, 0.05, 0.05, -0.01]) == "FAIL"  # a 4th seed below: not every seed gains


def test_gate_rows_and_report_on_hand_made_runs(tmp_path):
    # warm start 50/232-equivalent rate 0.2; arm a gains 12, 14, 16 wins of 232 (+5.2, +6.0, +6.9 points): PASS;
    # arm b gains in 2 seeds and loses in one: FAIL; arm c has a seed whose last evaluation is not the last
    # iteration (interrupted) and counts as unfinished
    _warm(tmp_path, 0.2)
    base = round(0.2 * 232)  # 46
    for s, extra in enumerate((12, 14, 16)):
        _run(tmp_path, "a", s, base + extra)
    for s, extra in enumerate((20, 20, -3)):
        _run(tmp_path, "b", s, base + extra)
    _run(tmp_path, "c", 0, base + 30)
    _run(tmp_path, "c", 1, base + 30, last_eval=10, status="running")
    rows = {a["arm"]: a for a in gate_rows(find_runs(tmp_path / "runs"), 0.2, KEY)}
    assert [rows["a"]["per_seed"][s]["gain"] for s in range(3)] == pytest.approx(
        [(base + e) / 232 - 0.2 for e in (12, 14, 16)])
    assert rows["a"]["verdict"] == "PASS" and rows["a"]["above"] == 3
    assert rows["b"]["verdict"] == "FAIL" and rows["b"]["above"] == 2
    assert rows["c"]["verdict"] == "INCOMPLETE" and rows["c"]["unfinished"] == [1] and rows["c"]["seeds"] == 1
    md = gate_report(tmp_path)
    assert "Warm start on `eval_depth2`: **20.0%** over 928 episodes" in md
    assert "| a | 3 | 0: 25.0, 1: 25.9, 2: 26.7 | 0: +5.0, 1: +5.9, 2: +6.7 | +5.9 | 3/3 | **PASS** |" in md
    assert "**FAIL**" in md and "(unfinished: seeds [1])" in md
    assert "**The gate passes** (a)." in md
    # the diagnostics table: training success first 5 -> last 5, grad norm above the default clip of 1.0 in half
    assert "| training success, first half → second half of the iterations |" in md and "|" + "---|" * 8 in md
    # and by halves of the iterations (1-10: 0.355, 11-20: 0.455)
    assert "| a seed 0 | 0: 21.6, 20: 25.0 | 0.330 → 0.480 | 0.355 → 0.455 |" in md and "| 0.50 |" in md
    assert "Protocol check: the runs' own iteration-0 evaluation" in md


def test_gate_without_warm_start_or_runs(tmp_path):
    assert "No warm-start evaluation yet" in gate_report(tmp_path)
    _warm(tmp_path, 0.25)
    assert "No runs with a held-out evaluation yet." in gate_report(tmp_path)


def test_gate_not_decided_while_an_arm_is_incomplete(tmp_path):
    _warm(tmp_path, 0.2)
    for s in range(2):
        _run(tmp_path, "a", s, 80)
    md = gate_report(tmp_path)
    assert "**INCOMPLETE**" in md and "The gate is not decided yet" in md
    # a failed arm beside an incomplete one: the gate has not passed so far, and says which arm is still open
    for s, w in enumerate((40, 41, 42)):
        _run(tmp_path, "b", s, w)
    md = gate_report(tmp_path)
    assert "**The gate does not pass** so far: no finished arm meets the rule; still incomplete: a." in md


def test_detectable_difference_closed_form():
    per_seed, mean = detectable_difference(0.2, 232, 928, 3)
    z = 1.959963984540054 + 0.8416212335729143
    assert per_seed == pytest.approx(z * math.sqrt(0.16 / 232 + 0.16 / 928))
    assert mean == pytest.approx(z * math.sqrt(0.16 / (3 * 232) + 0.16 / 928))
    assert mean < per_seed
    # more episodes, smaller detectable difference
    assert detectable_difference(0.2, 464, 928, 3)[1] < mean


def test_false_pass_probability_matches_an_independent_simulation():
    # an independent loop: no true change, p = 0.2, 232 episodes per run, 928 for the warm start, 3 seeds
    rng = np.random.default_rng(123)
    hits, reps = 0, 40_000
    for _ in range(reps):
        w = rng.binomial(928, 0.2) / 928
        g = rng.binomial(232, 0.2, size=3) / 232 - w
        hits += bool(g.mean() >= 0.04 and (g > 0).all())
    want = hits / reps
    got = false_pass_probability(0.2, 232, 928, 3)
    assert got == pytest.approx(want, abs=0.004)
    assert 0.0 < got < 0.05  # the rule is strict enough that chance rarely passes it


def test_an_arm_with_its_own_warm_start_is_read_against_it(tmp_path):
    # the study's warm start at 20%; arm "deep" starts from another warm start (30%), measured into
    # warmstart_eval.deep.json: the same final wins that pass against 20% fail against 30%
    _warm(tmp_path, 0.2)
    (tmp_path / "warmstart_eval.deep.json").write_text(json.dumps(
        {"splits": {"eval_depth2": {"success": 0.3, "episodes": 928}}}))
    for s in range(3):
        _run(tmp_path, "shallow", s, 60)  # 25.9%: +5.9 over 20%
        _run(tmp_path, "deep", s, 60)  # 25.9%: -4.1 under 30%
    rows = {a["arm"]: a for a in gate_rows(find_runs(tmp_path / "runs"), 0.2, KEY, {"deep": 0.3})}
    assert rows["shallow"]["verdict"] == "PASS" and rows["deep"]["verdict"] == "FAIL"
    assert rows["deep"]["warm"] == 0.3 and rows["deep"]["per_seed"][0]["gain"] == pytest.approx(60 / 232 - 0.3)
    md = gate_report(tmp_path)
    assert "Arm `deep` starts from a warm start of its own: **30.0%** over 928 episodes" in md
    assert "| deep | 3 | 0: 25.9, 1: 25.9, 2: 25.9 | 0: -4.1, 1: -4.1, 2: -4.1 | -4.1 | 0/3 | **FAIL** |" in md
    assert "**The gate passes** (shallow)." in md
    assert md.count("Protocol check:") == 2 and "from `warmstart_eval.deep.json`" in md
    # without its own file, the arm falls back to the study's warm start
    (tmp_path / "warmstart_eval.deep.json").unlink()
    assert "**The gate passes** (deep, shallow)." in gate_report(tmp_path)
