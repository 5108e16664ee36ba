"""The report's ground-truth section (analysis/truth.py) on run folders written here with known metrics."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.runs import find_runs
from analysis.truth import epsilon_label, paired_table, train_aggregate_table, truth_estimators, truth_table
from experiments.report import main as report_main

ESTS = ("grpo", "gigpo", "bipace_q")


def write_run(root: Path, method: str, seed: int, pearson: dict[str, list[float]], success: list[float],
              epsilon=None, criterion: str = "anchor_f1") -> Path:
    """A run folder whose iteration k logs ``groundtruth/<e>/pearson = pearson[e][k]`` (and a step term 0.1 lower)."""
    d = root / "finiterooms" / "tiny" / method / f"seed_{seed}"
    d.mkdir(parents=True)
    rows = []
    for k, s in enumerate(success):
        row = {"iteration": k + 1, "rollout/success_rate": s, "rollout/return_mean": 10 * s}
        for e, vals in pearson.items():
            row[f"groundtruth/{e}/pearson"] = vals[k]
            row[f"groundtruth/{e}/pearson_step"] = vals[k] - 0.1
        if epsilon is None:
            row["group/epsilon"] = 0.001  # calibrated (epsilon: auto)
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "config.yaml").write_text(f"estimator:\n  name: {method.split('-')[0]}\n  epsilon: {epsilon or 'auto'}\n"
                                   f"  epsilon_criterion: {criterion}\n")
    (d / "run.json").write_text(json.dumps({"env": "finiterooms", "model": "tiny", "method": method, "seed": seed}))
    return d


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    # three runs at epsilon auto: gigpo and bipace_q trained on seed 0 (bipace_q's advantages track the truth better by
    # 0.2 and 0.1), gigpo on seed 1 (by 0.4)
    write_run(root, "gigpo", 0, {"grpo": [0.1, 0.1], "gigpo": [0.2, 0.4], "bipace_q": [0.4, 0.6]}, [0.2, 0.4])
    write_run(root, "bipace_q", 0, {"grpo": [0.1, 0.1], "gigpo": [0.3, 0.3], "bipace_q": [0.4, 0.4]}, [0.5, 0.7])
    write_run(root, "gigpo", 1, {"grpo": [0.1, 0.1], "gigpo": [0.1, 0.1], "bipace_q": [0.5, 0.5]}, [0.2, 0.2])
    # one run at the paper's epsilon: bipace_q worse than gigpo there
    write_run(root, "bipace_q-eps0.05", 0, {"grpo": [0.1, 0.1], "gigpo": [0.3, 0.3], "bipace_q": [0.0, 0.2]},
              [0.1, 0.1], epsilon=0.05)
    # one calibrated by the oracle rule: its own pool
    write_run(root, "bipace_q-oracle", 0, {"grpo": [0.1, 0.1], "gigpo": [0.3, 0.3], "bipace_q": [0.6, 0.6]},
              [0.3, 0.3], criterion="state_f1")
    return root


def test_estimators_and_epsilon_labels(runs):
    rs = find_runs(runs)
    assert truth_estimators(rs) == ["grpo", "gigpo", "bipace_q"]  # method order, not alphabetical
    assert {r.method: epsilon_label(r) for r in rs} == {"gigpo": "auto", "bipace_q": "auto", "bipace_q-eps0.05": "0.05",
                                                       "bipace_q-oracle": "auto-state_f1"}


def test_truth_table_averages_iterations_then_the_runs_of_a_seed_then_seeds(runs):
    rs = [r for r in find_runs(runs) if epsilon_label(r) == "auto"]
    t = truth_table(rs, list(ESTS), ("pearson",))
    row = {line.split(" | ")[0].strip("| "): line for line in t.splitlines()[2:]}
    assert row["gigpo"].startswith("| gigpo | 2 | 0.200 [")  # seed 0: (0.3 + 0.3) / 2, seed 1: 0.1
    assert row["bipace_q"].startswith("| bipace_q | 2 | 0.475 [")  # seed 0: (0.5 + 0.4) / 2, seed 1: 0.5
    assert truth_table(rs, list(ESTS), ("no_such_metric",)) == ""


def test_paired_differences_are_per_batch_against_the_baseline(runs):
    rs = [r for r in find_runs(runs) if epsilon_label(r) == "auto"]
    p = paired_table(rs, list(ESTS), "gigpo", metrics=("pearson", "pearson_step"))
    line = next(x for x in p.splitlines() if x.startswith("| bipace_q"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # seed 0: (0.2 + 0.1) / 2 = 0.15, seed 1: 0.4; over seeds 0.275
    assert cells[1] == "2" and cells[2].startswith("0.275") and cells[3] == "2/2"
    assert cells[4].startswith("0.275") and cells[5] == "2/2"  # the step term: the same shift
    assert not any(x.startswith("| gigpo") for x in p.splitlines())  # no row for the baseline itself
    grpo = next(x for x in p.splitlines() if x.startswith("| grpo"))
    assert "0/2" in grpo


def test_training_aggregate_scores_the_last_iterations(runs):
    by_method = {}
    for r in find_runs(runs):
        by_method.setdefault(r.method, []).append(r)
    t = train_aggregate_table(by_method, last=1)
    line = next(x for x in t.splitlines() if x.startswith("| bipace_q |"))
    assert "| 70.0 [70.0, 70.0] |" in line and line.endswith("| 1.00 [1.00, 1.00] |")  # 0.7 > gigpo's 0.4
    assert train_aggregate_table(by_method, key="rollout/no_such_key") == ""


def test_report_has_the_truth_section_per_epsilon(runs, tmp_path):
    out = tmp_path / "report"
    assert report_main(["--runs", str(runs), "--out", str(out), "--title", "t"]) == 0
    md = (out / "summary.md").read_text()
    assert "### Agreement with the exact advantage" in md
    assert "#### 3 runs with epsilon calibrated on" in md and "#### 1 runs with epsilon = 0.05" in md
    assert "#### 1 runs with epsilon calibrated by the rule `state_f1`" in md
    assert "### Aggregate over training rollouts" in md  # no evaluation split: the rollouts are the scores
    for f in ("truth_finiterooms_tiny_pearson_eps-auto.png", "truth_finiterooms_tiny_pearson_step_eps-0.05.png",
              "curves_finiterooms_tiny_return.png"):
        assert (out / f).is_file() and f in md


def test_runs_without_truth_metrics_get_no_section(tmp_path):
    root = tmp_path / "runs"
    d = write_run(root, "gigpo", 0, {}, [0.2, 0.3])
    assert np.isclose(json.loads((d / "metrics.jsonl").read_text().splitlines()[0])["rollout/success_rate"], 0.2)
    out = tmp_path / "report"
    assert report_main(["--runs", str(root), "--out", str(out)]) == 0
    assert "Agreement with the exact advantage" not in (out / "summary.md").read_text()


def test_overview_sets_the_scenarios_side_by_side(tmp_path):
    from experiments.reanalyse import main as reanalyse_main

    root = tmp_path / "gt"
    write_run(root / "undersplit" / "runs", "gigpo", 0, {"gigpo": [0.2, 0.2], "bipace_q": [0.1, 0.1]}, [0.2, 0.4])
    write_run(root / "exact" / "runs", "gigpo", 0, {"gigpo": [0.3, 0.3], "bipace_q": [0.5, 0.5]}, [0.5, 0.5])
    write_run(root / "exact" / "runs", "bipace_q-eps0.05", 0, {"gigpo": [0.0, 0.0], "bipace_q": [0.9, 0.9]},
              [0.5, 0.5], epsilon=0.05)  # not at epsilon auto: left out of the correlation tables
    assert reanalyse_main(["--overview", str(root)]) == 0
    md = (root / "overview.md").read_text()
    assert "| estimator | exact | undersplit |" in md  # the default order, not alphabetical by accident
    step = md.split("#### Step term: paired difference")[1].split("####")[0]
    # (0.5 - 0.1) - (0.3 - 0.1), and ... - 0.2
    assert "| bipace_q | 0.200 (seeds > 0: 1/1) | -0.100 (seeds > 0: 0/1) |" in step
    # the whole advantage comes first (the primary view), its paired table before the step term's
    assert md.index("#### Primary: whole advantage") < md.index("#### Secondary: step term")
    whole = md.split("#### Whole advantage: paired difference")[1].split("####")[0]
    assert "| bipace_q | 0.200 (seeds > 0: 1/1) | -0.100 (seeds > 0: 0/1) |" in whole
    assert "runs > 0" not in md  # counts are per seed
    assert "| bipace_q-eps0.05 | 50.000 (n=1)" not in md and "| bipace_q-eps0.05 | 0.500 (n=1) | – |" in md
    assert reanalyse_main(["--overview", str(tmp_path / "nothing")]) == 2
