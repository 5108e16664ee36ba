"""The statistics of the re-analysis (seeds as the unit, Holm, sign flipping, leave one batch out) on hand-made
inputs with known answers, and the command on hand-made run folders."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.reanalysis import control_gaps, fisher_exact_p, leave_one_batch_out, pairwise, parse_f1_table
from analysis.runs import find_runs
from analysis.stats import hierarchical_bootstrap_ci, holm, sign_flip_p, stratified_bootstrap_ci


def test_hierarchical_bootstrap_two_constant_seeds():
    # within-seed values constant: a replicate is the mean of 2 seeds drawn from {0, 1}: 0, 0.5 or 1 with
    # probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5% quantiles are 0 and 1
    p, lo, hi = hierarchical_bootstrap_ci([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], reps=4000)
    assert (p, lo, hi) == (0.5, 0.0, 1.0)


def test_hierarchical_bootstrap_one_seed_is_the_inner_bootstrap():
    # one seed [0, 1]: the mean of 2 draws is 0, 0.5, 1 with 1/4, 1/2, 1/4
    assert hierarchical_bootstrap_ci([[0.0, 1.0]], reps=4000) == (0.5, 0.0, 1.0)
    # identical values everywhere: no spread at all
    assert hierarchical_bootstrap_ci([[2.0] * 5, [2.0] * 3, [2.0]]) == (2.0, 2.0, 2.0)
    # empty groups are dropped; nothing left is NaN
    assert hierarchical_bootstrap_ci([[], [3.0, 3.0]]) == (3.0, 3.0, 3.0)
    assert all(np.isnan(hierarchical_bootstrap_ci([[], []])))


def test_hierarchical_bootstrap_point_is_the_mean_of_seed_means():
    # unequal group sizes: the mean of means (1 and 4), not of the pooled values (1, 1, 1, 4 -> 1.75)
    p, lo, hi = hierarchical_bootstrap_ci([[1.0, 1.0, 1.0], [4.0]])
    assert p == pytest.approx(2.5)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(4.0)


def test_hierarchical_interval_covers_the_seed_spread_an_iteration_bootstrap_misses():
    # 3 seeds with tight iterations around far-apart levels: resampling iterations within seeds (today's control
    # tables) gives a narrow interval; resampling seeds first spans the levels
    rng = np.random.default_rng(1)
    groups = [lvl + 0.01 * rng.standard_normal(30) for lvl in (0.0, 0.3, 0.6)]
    _, slo, shi = stratified_bootstrap_ci(np.array(groups).T, lambda a: float(a.mean()))
    _, hlo, hhi = hierarchical_bootstrap_ci(groups)
    assert shi - slo < 0.02
    assert hhi - hlo > 0.3
    assert hlo < 0.15 and hhi > 0.45


def test_hierarchical_bootstrap_variance_matches_theory():
    # K seeds of n iterations: a two-level replicate's variance is (var(seed means) + mean within-seed var / n) / K
    # (population variances: the first level draws seeds, the second draws each seed's iterations); checked on the
    # 95% width, which for a near-normal replicate distribution is 2 x 1.96 sd
    rng = np.random.default_rng(2)
    k, n = 20, 20
    groups = [rng.normal(m, 1.0, n) for m in rng.normal(0, 1.0, k)]
    means = np.array([g.mean() for g in groups])
    within = np.mean([g.var() for g in groups])
    sd = np.sqrt((means.var() + within / n) / k)
    _, lo, hi = hierarchical_bootstrap_ci(groups, reps=3000)
    assert (hi - lo) == pytest.approx(2 * 1.96 * sd, rel=0.1)


def test_sign_flip_exact_values():
    assert sign_flip_p(np.arange(1, 11)) == pytest.approx(2 / 1024)  # all 10 positive, distinct
    assert sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)  # 3 seeds: 2 / 8 is the floor
    assert sign_flip_p([1.0, -1.0]) == 1.0
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # by enumeration for an uneven sample
    x = np.array([0.3, -0.1, 0.5, 0.2, -0.4])
    obs = abs(x.mean())
    hits = sum(abs(np.mean(np.array(s) * x)) >= obs - 1e-12 for s in itertools.product([1, -1], repeat=5))
    assert sign_flip_p(x) == pytest.approx(hits / 32)
    assert np.isnan(sign_flip_p([]))


def test_holm_textbook():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5]
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 0.8 x 2 capped at 1; 0.9 x 1 raised to stay monotone
    assert holm([0.04, 0.3]) == pytest.approx([0.08, 0.3])
    assert holm([0.6, 0.6, 0.6]) == pytest.approx([1.0, 1.0, 1.0])
    out = holm([0.01, float("nan"), 0.02])  # NaN does not count in m
    assert out[0] == pytest.approx(0.02) and np.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_fisher_learning_heldout():
    # learning: GRPO 8/36 held-out depth-2 wins against the control's 12/36
    assert fisher_exact_p(8, 36, 12, 36) == pytest.approx(0.4304, abs=1e-4)
    assert fisher_exact_p(5, 10, 5, 10) == pytest.approx(1.0)


def test_leave_one_batch_out_by_hand():
    # rule a is best on average but bad on batch 2; holding batch 2 out, a is still chosen (mean 0 on 0, 1) and
    # scores 0.9 there; holding batch 0 or 1 out, a's mean on the rest is 0.45 against b's 0.1
    gaps = {"a": [0.0, 0.0, 0.9], "b": [0.1, 0.1, 0.1]}
    assert leave_one_batch_out(gaps) == [("b", 0.1), ("b", 0.1), ("a", 0.9)]
    assert leave_one_batch_out({"x": [0.2, 0.2], "y": [0.2, 0.2]}) == [("x", 0.2), ("x", 0.2)]  # ties: first


def test_parse_f1_table():
    text = ("Each cell: ...\n\n| batch | rows | exact anchors | anchor_f1 | best F1 (oracle) | paper 0.05 |\n"
            "|---|---|---|---|---|---|\n"
            "| A | 10 | 0.10 / 1.00 / 0.50 / 0.67 | 0: 0.56 / 1.00 / 0.53 / 0.70 | 0: 0.5 / 1 / 0.5 / 0.70 | "
            "0.0501: 0.00 / 0.06 / 1.00 / 0.10 |\n"
            "| B | 12 | 0.00 / 0.52 / 0.52 / 0.52 | 0.008: 0.00 / 0.34 / 0.79 / 0.48 | 0.01: 0 / 0.3 / 0.9 / 0.50 | "
            "0.0501: 0.00 / 0.27 / 1.00 / 0.43 |\n\nF1 against ...\n")
    batches, rules, oracle, oracle_c = parse_f1_table(text)
    assert batches == ["A", "B"]
    assert rules == {"exact anchors": [0.67, 0.52], "anchor_f1": [0.70, 0.48], "paper 0.05": [0.10, 0.43]}
    assert oracle == [0.70, 0.50] and oracle_c == []


def _run(root: Path, method: str, seed: int, success: list[float]):
    d = root / "runs" / "textcraft" / "tiny" / method / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method, "seed": seed}))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i + 1, "rollout/success_rate": v}) + "\n"
                                             for i, v in enumerate(success)))


def test_control_gaps_and_pairs_on_hand_made_runs(tmp_path):
    for s, (c, a, b) in enumerate([(0.2, 0.5, 0.4), (0.3, 0.3, 0.6), (0.1, 0.4, 0.5)]):
        _run(tmp_path, "no-update", s, [c] * 4)
        _run(tmp_path, "grpo", s, [a] * 4)
        _run(tmp_path, "bipace_q", s, [b] * 4)
    runs = find_runs(tmp_path / "runs")
    by = {}
    for r in runs:
        by.setdefault(r.method, []).append(r)
    gaps = {g["method"]: g for g in control_gaps(by)}
    assert gaps["grpo"]["per_seed"] == pytest.approx([0.3, 0.0, 0.3])
    assert gaps["grpo"]["gap"][0] == pytest.approx(0.2)
    assert gaps["grpo"]["at_bar"] == 2  # seeds 0 and 2 end >= 25 points above
    assert gaps["bipace_q"]["p"] == pytest.approx(0.25)  # 3 seeds all above: the sign-flip floor
    (pw,) = pairwise(by)
    assert (pw["a"], pw["b"]) == ("bipace_q", "grpo")
    assert pw["per_seed"] == pytest.approx([-0.1, 0.3, 0.1])
    assert pw["above"] == 2 and pw["p_holm"] == pytest.approx(pw["p"])


def test_truth_rows_pair_on_the_same_batches(tmp_path):
    # 3 seeds x 2 runs x 2 iterations; hgpo is gigpo + 0.1 on every batch, grpo gigpo - 0.05 except in seed 2
    for seed in range(3):
        for method in ("gigpo", "grpo"):
            d = tmp_path / "finiterooms" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            rows = []
            for it in (1, 2):
                g = 0.3 + 0.01 * seed + 0.001 * it
                rows.append({"iteration": it, "group/epsilon": 0.001, "groundtruth/gigpo/pearson": g,
                             "groundtruth/hgpo/pearson": g + 0.1,
                             "groundtruth/grpo/pearson": g + (0.05 if seed == 2 else -0.05)})
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from analysis.reanalysis import truth_rows

    rows = {r["estimator"]: r for r in truth_rows(find_runs(tmp_path), "pearson")}
    assert rows["hgpo"]["diff"] == pytest.approx((0.1, 0.1, 0.1))
    assert rows["hgpo"]["above"] == 3 and rows["hgpo"]["p"] == pytest.approx(0.25)
    assert rows["grpo"]["per_seed"] == pytest.approx([-0.05, -0.05, 0.05])
    assert rows["grpo"]["above"] == 1
    # Holm over the 2 comparisons: hgpo 0.25 x 2 = 0.5; grpo's p is 1 (every sign pattern is as far from 0)
    assert rows["hgpo"]["p_holm"] == pytest.approx(0.5)
    assert "p" not in rows["gigpo"]


def test_reanalyse_command(tmp_path, capsys, monkeypatch):
    from analysis.reanalysis import STUDIES
    from experiments.reanalyse import main

    study = tmp_path / "cpu-study"
    for s in range(2):
        _run(study, "no-update", s, [0.2, 0.2])
        _run(study, "grpo", s, [0.5, 0.3])
    assert main(["cpu-study", "--results", str(tmp_path)]) == 0
    text = (study / "reanalysis.md").read_text()
    assert "python -m experiments.reanalyse cpu-study" in text and "| grpo | 2 | +20.0" in text
    assert main(["nope", "--results", str(tmp_path)]) == 2
    assert main(["epsilon", "--results", str(tmp_path)]) == 2  # no such folder there
    assert "no folder" in capsys.readouterr().err
    # a study planned or under way (its folder holds a README, no runs yet): a message, not a traceback; --all skips it
    (tmp_path / "cpu-hgpo-rule").mkdir()
    assert main(["cpu-hgpo-rule", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cpu-hgpo-rule: no runs under" in err and "README.md says how to run the study" in err
    monkeypatch.setattr("experiments.reanalyse.STUDIES", {k: STUDIES[k] for k in ("cpu-study", "cpu-hgpo-rule")})
    (study / "reanalysis.md").unlink()
    assert main(["--all", "--results", str(tmp_path)]) == 0
    assert (study / "reanalysis.md").exists() and not (tmp_path / "cpu-hgpo-rule" / "reanalysis.md").exists()
    assert "cpu-hgpo-rule: skipped, no runs under" in capsys.readouterr().err


def test_halves_tables_on_hand_made_runs(tmp_path):
    # 3 seeds; every run scores gigpo / bigpo / pace_anchor / bipace_q on its batches: bigpo = gigpo + 0.02,
    # pace_anchor = gigpo - 0.01, bipace_q = gigpo + 0.1; the cluster_std arm's runs, logged as before 2026-12-06,
    # score bipace_q with their own pace_norm, at gigpo + 0.2 (and pace_anchor at gigpo + 0.3)
    from analysis.reanalysis import halves

    for seed in range(3):
        for method in ("gigpo", "bigpo", "pace_anchor", "bipace_q", "bipace_q-cluster_std"):
            d = tmp_path / "runs" / "finiterooms" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            rows = []
            variant = method.endswith("cluster_std")
            for it in (1, 2):
                g = 0.2 + 0.01 * seed
                q = g + (0.2 if variant else 0.1)
                rows.append({"iteration": it, "group/epsilon": 0.002, "rollout/success_rate": 0.1 * seed,
                             "groundtruth/gigpo/pearson": g, "groundtruth/bigpo/pearson": g + 0.02,
                             "groundtruth/pace_anchor/pearson": g + (0.3 if variant else -0.01),
                             "groundtruth/bipace_q/pearson": q,
                             "group/pace_frac_pace": 0.5, "group/pace_frac_fallback": 0.3,
                             "group/pace_frac_singleton": 0.2, "adv/step_std": 1.0, "adv/total_std": 2.0,
                             "loss/grad_norm": 0.5 * it + (1.0 if variant else 0.0),
                             "loss/approx_kl": (0.002 if it == 1 else -0.001),
                             "groundtruth/gigpo/pearson_step": g,
                             "groundtruth/bipace_q/pearson_step": g + (0.07 if variant else 0.05)})
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = halves(tmp_path)
    assert "15 runs" in md and "seeds 0–2 (3)" in md
    same = md.split("### 1. ")[1].split("### 1b")[0]
    assert "on the 12 runs of the plain arms" in same and "on its own 3 runs' batches" in same
    # the variant's runs are left out of the plain rows: bipace_q +0.1 (pooled with them it would read +0.12),
    # pace_anchor -0.01; the variant has its own row, against GiGPO on its own batches; Holm over 4
    assert "| bipace_q | 3 | " in same and "+0.100 [+0.100, +0.100] | 3/3 | 0.250 | 1.000 |" in same
    assert "-0.010 [-0.010, -0.010] | 0/3 |" in same.split("| pace_anchor |")[1]
    assert "| bigpo | 3 | " in same and "+0.020 [+0.020, +0.020] | 3/3 | 0.250 | 1.000 |" in same
    assert "| bipace_q-cluster_std | 3 | " in same and "+0.200 [+0.200, +0.200] | 3/3 |" in same
    assert "Holm p (k = 4)" in same
    same_step = md.split("### 1b. ")[1].split("### 2.")[0]
    assert "| bipace_q | 3 | " in same_step and "+0.050 [+0.050, +0.050]" in same_step
    assert "| bipace_q-cluster_std | 3 | " in same_step and "+0.070 [+0.070, +0.070]" in same_step
    own = md.split("### 2. ")[1].split("### 2b.")[0]
    assert "| bipace_q-cluster_std | 3 | " in own and "+0.200 [+0.200, +0.200] | 3/3 |" in own
    assert "| bipace_q | 3 | " in own and "+0.100 [+0.100, +0.100] | 3/3 |" in own
    assert "Holm p (k = 4)" in own
    own_step = md.split("### 2b. ")[1].split("### 3.")[0]  # only the arms whose runs log a step term
    assert "| bipace_q-cluster_std | 3 | " in own_step and "+0.070 [+0.070, +0.070] | 3/3 |" in own_step
    assert "| bipace_q | 3 | " in own_step and "Holm p (k = 2)" in own_step and "| bigpo |" not in own_step
    mix = md.split("### 4. ")[1].split("### 4b.")[0]
    assert "| pace_anchor | action half only | 0.002 (median) | 0.50 | 0.30 | 0.20 | – | 1.000 | 2.000 |" in mix
    # no config.yaml: the clip is the default 1.0; gradient norms 0.5 and 1.0 (plain arms) are not above it,
    # 1.5 and 2.0 (the variant) are; approx KL +0.5e-3 on average, its absolute value 1.5e-3
    update = md.split("### 4b. ")[1].split("### 5.")[0]
    gigpo = update.split("| gigpo | ")[1].split("\n")[0]
    assert gigpo.startswith("2.00 | 0.75 (0.50) | 0/6 | +0.50 [") and "| 1.50 [" in gigpo
    assert "| bipace_q-cluster_std | 2.00 | 1.75 (1.50) | 6/6 | " in update


def test_a_variant_scored_under_its_own_name_is_read_there(tmp_path):
    # runs logged after 2026-12-06: a variant's run scores the plain bipace_q (gigpo + 0.1) and itself under its
    # own name (gigpo + 0.3); table 2 and the variant's row of table 1 read the latter
    from analysis.reanalysis import halves

    for seed in range(3):
        for method in ("gigpo", "bipace_q-cluster_std"):
            d = tmp_path / "runs" / "finiterooms" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            g = 0.2 + 0.01 * seed
            extra = {"groundtruth/bipace_q-cluster_std/pearson": g + 0.3} if method != "gigpo" else {}
            rows = [{"iteration": it, "groundtruth/gigpo/pearson": g, "groundtruth/bipace_q/pearson": g + 0.1,
                     **extra} for it in (1, 2)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = halves(tmp_path)
    same = md.split("### 1. ")[1].split("### 1b")[0]
    assert "+0.300 [+0.300, +0.300] | 3/3 |" in same.split("| bipace_q-cluster_std |")[1]
    assert "+0.100 [+0.100, +0.100] | 3/3 |" in same.split("| bipace_q |")[1]  # the plain arms' runs only
    own = md.split("### 2. ")[1].split("### 2b.")[0]
    assert "+0.300 [+0.300, +0.300] | 3/3 |" in own.split("| bipace_q-cluster_std |")[1]


def test_halves_heldout_pairs_final_evaluations_by_seed(tmp_path):
    # 4 seeds, 58 goals; gigpo wins 10 + seed at the last evaluation, bigpo 2 more in every seed, pace_anchor
    # 1 fewer except in seed 3 (1 more); iteration 0 is the warm start, 12 wins everywhere
    from analysis.reanalysis import halves_heldout, heldout_rows

    wins = {"gigpo": lambda s: 10 + s, "bigpo": lambda s: 12 + s,
            "pace_anchor": lambda s: 10 + s + (1 if s == 3 else -1)}
    for seed in range(4):
        for method, w in wins.items():
            d = tmp_path / "runs" / "textcraft" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method,
                                                    "seed": seed}))
            # as a real run logs it: the evaluation at iteration 0 is the first metrics row (no ε in it)
            (d / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "eval/textcraft/eval_depth2/success_rate":
                                                         12 / 58}) + "\n" + "".join(json.dumps(
                {"iteration": i, "rollout/success_rate": 0.3, "group/epsilon": 0.001, "group/pace_frac_pace": 0.2,
                 "group/pace_frac_fallback": 0.3, "group/pace_frac_singleton": 0.5, "adv/episode_std": 0.5,
                 "adv/step_std": 1.0,
                 "adv/total_std": 1.5}) + "\n" for i in (1, 2)))
            k = "eval/textcraft/eval_depth2/"
            (d / "eval.jsonl").write_text("".join(json.dumps(
                {"iteration": it, k + "success_rate": n / 58, k + "num_episodes": 58.0}) + "\n"
                for it, n in ((0, 12), (20, w(seed)))))
    rows = {r["arm"]: r for r in heldout_rows(find_runs(tmp_path / "runs"), "eval/textcraft/eval_depth2/success_rate")}
    assert rows["gigpo"]["wins"] == 46 and rows["gigpo"]["episodes"] == 232 and "p" not in rows["gigpo"]
    assert rows["bigpo"]["per_seed"] == pytest.approx([2 / 58] * 4)
    assert rows["bigpo"]["above"] == 4 and rows["bigpo"]["p"] == pytest.approx(0.125)  # 2 / 2^4
    assert rows["pace_anchor"]["above"] == 1 and rows["pace_anchor"]["below"] == 3
    # the interval is Student-t's over the per-seed differences (-1, -1, -1, +1 goals: mean -0.5, s = 1,
    # t_{0.975, 3} = 3.1824463), not a percentile bootstrap over the 4 values (which stays inside [-1, +1])
    h = 3.1824463053 * 1 / 2
    assert rows["pace_anchor"]["diff"] == pytest.approx(((-0.5) / 58, (-0.5 - h) / 58, (-0.5 + h) / 58))
    assert rows["bigpo"]["p_holm"] == pytest.approx(0.25)  # Holm over 2 arms: the smaller p doubled
    md = halves_heldout(tmp_path)
    assert "12 runs" in md and "smallest possible with 4 seeds: 0.125" in md
    assert "iteration 20; the warm start, iteration 0: 20.7% over the 12 runs" in md
    assert "| bigpo | state half only | 4 | 54/232 | " in md and "+3.4 [+3.4, +3.4] | 4 / 0 | 0.125 | 0.250 |" in md
    assert "-0.9 [-3.6, +1.9] | 1 / 3 |" in md and "95% Student-t intervals" in md
    assert "### 2. Training success against GiGPO" in md
    assert "| bigpo | state half only | 0.001 (median) | 0.20 | 0.30 | 0.50 | 0.500 | 1.000 | 1.500 |" in md


def test_truth_correction_puts_both_truths_side_by_side(tmp_path):
    # 3 seeds; gigpo reads g under the every-cell truth and g - 0.01 under the uniform fill; bipace_q g + 0.1 and
    # g + 0.05: bipace_q's new - old is +0.05, its gap to gigpo +0.1 (new) and +0.06 (old)
    from analysis.reanalysis import truth_correction_md

    for seed in range(3):
        d = tmp_path / "runs" / "finiterooms" / "tiny" / "gigpo" / f"seed_{seed}"
        d.mkdir(parents=True)
        g = 0.2 + 0.01 * seed
        rows = [{"iteration": it, "groundtruth/gigpo/pearson": g, "groundtruth/visited_only/gigpo/pearson": g - 0.01,
                 "groundtruth/bipace_q/pearson": g + 0.1, "groundtruth/visited_only/bipace_q/pearson": g + 0.05,
                 "groundtruth/visited_only_pearson": 0.9, "groundtruth/ceiling/pearson_step": 0.4,
                 "groundtruth/canonical_pearson": 0.8, "groundtruth/visited_cells": 50.0 + seed,
                 "groundtruth/reachable_cells": 700.0}
                for it in (1, 2)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = "\n".join(truth_correction_md(find_runs(tmp_path / "runs"), "gigpo", "### 5."))
    whole = md.split("**Whole advantage**")[1].split("**Step term alone**")[0]
    assert "| bipace_q | 0.310 [0.300, 0.320] | 0.260 [0.250, 0.270] | +0.050 [+0.050, +0.050] | " \
           "+0.100 [+0.100, +0.100] | +0.060 [+0.060, +0.060] |" in whole
    assert "| gigpo | 0.210 [0.200, 0.220] | 0.200 [0.190, 0.210] | +0.010 [+0.010, +0.010] | – | – |" in whole
    assert "(`groundtruth/visited_only_pearson`): 0.900 [0.900, 0.900]" in md
    assert "(`groundtruth/canonical_pearson`): 0.800 [0.800, 0.800]" in md
    assert "(`groundtruth/visited_cells`): 51 [50, 52] of 700 [700, 700] reachable" in md
    assert "| bipace_q | – | – | – | – | – |" in md.split("**Step term alone**")[1]  # no step keys logged
    assert truth_correction_md([], "gigpo", "### 5.") == []


def test_rescored_sets_new_readings_beside_the_committed_ones(tmp_path):
    # committed exact scenario: gigpo- and grpo-trained runs, bigpo = gigpo + 0.01 on gigpo's batches and + 0.03 on
    # grpo's; rescored: gigpo-trained runs only, bigpo = gigpo + 0.05; no over-split or under-split runs
    from analysis.reanalysis import rescored

    def write(folder, method, seed, gap):
        d = folder / "runs" / "finiterooms" / "tiny" / method / f"seed_{seed}"
        d.mkdir(parents=True)
        g = 0.2 + 0.01 * seed
        rows = [{"iteration": it, "group/epsilon": 0.002, "groundtruth/gigpo/pearson": g,
                 "groundtruth/bigpo/pearson": g + gap} for it in (1, 2)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    for seed in range(3):
        write(tmp_path / "llm-groundtruth" / "exact", "gigpo", seed, 0.01)
        write(tmp_path / "llm-groundtruth" / "exact", "grpo", seed, 0.03)
        write(tmp_path / "llm-gt-rescored" / "exact", "gigpo", seed, 0.05)
    md = rescored(tmp_path / "llm-gt-rescored")
    exact = md.split("## exact: 3 GiGPO runs, 3 seeds")[1].split("## oversplit")[0]
    assert "| bigpo | +0.020 | 0.220, +0.010 | 0.260 [0.250, 0.270] | +0.050 [+0.050, +0.050] | 3/3 | 0.250 |" in exact
    assert "Holm p (k = 1)" in exact and "### exact: the fill isolated" not in exact  # no uniform-fill keys logged
    assert "## oversplit: no runs yet" in md and "## undersplit: no runs yet" in md


def _gt_runs(folder: Path, hgpo_gap: float, gigpo_shift: float = 0.0, seeds=range(3)) -> None:
    # gigpo-trained runs, 2 iterations: gigpo g, bigpo g + 0.05, hgpo g + hgpo_gap, a wall time that moves
    for seed in seeds:
        d = folder / "runs" / "finiterooms" / "tiny" / "gigpo" / f"seed_{seed}"
        d.mkdir(parents=True)
        g = 0.2 + 0.01 * seed
        rows = [{"iteration": it, "groundtruth/gigpo/pearson": g + gigpo_shift, "groundtruth/bigpo/pearson": g + 0.05,
                 "groundtruth/hgpo/pearson": g + hgpo_gap + 0.001 * it,
                 "groundtruth/visited_only/hgpo/pearson": 0.5 + hgpo_gap,
                 "groundtruth/cell_seconds": 1.0 + hgpo_gap + seed} for it in (1, 2)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_same_batch_check_skips_hgpo_and_wall_times_and_names_the_first_value_off(tmp_path):
    from analysis.reanalysis import same_batch_check

    _gt_runs(tmp_path / "old", 0.02)
    _gt_runs(tmp_path / "new", -0.03)
    _gt_runs(tmp_path / "moved", -0.03, gigpo_shift=1e-6)
    _gt_runs(tmp_path / "short", -0.03, seeds=range(2))
    old = find_runs(tmp_path / "old")
    ok = same_batch_check(old, find_runs(tmp_path / "new"))
    assert ok == {"seeds": 3, "values": 12, "equal": 12, "max_diff": 0.0, "missing": 0, "unrun": 0, "mismatch": None,
                  "same": True, "unfinished": False}
    off = same_batch_check(old, find_runs(tmp_path / "moved"))
    assert off["equal"] == 6 and off["max_diff"] == pytest.approx(1e-6) and not off["same"]
    assert off["mismatch"].startswith("seed 0, iteration 1: groundtruth/gigpo/pearson")
    # a re-run with a seed fewer compares what it has; a seed of its own that the committed study lacks is missing
    assert same_batch_check(old, find_runs(tmp_path / "short"))["seeds"] == 2
    lacking = same_batch_check(find_runs(tmp_path / "short"), find_runs(tmp_path / "new"))
    assert lacking["missing"] == 1 and not lacking["same"]
    assert not same_batch_check(old, [])["same"]  # nothing compared is no verdict of sameness
    # a re-run under way (seed 1 has logged iteration 1 only) is unfinished, not another sample; a gap in the middle
    # of a run, or a value off, is not
    _gt_runs(tmp_path / "running", -0.03)
    f = tmp_path / "running" / "runs" / "finiterooms" / "tiny" / "gigpo" / "seed_1" / "metrics.jsonl"
    f.write_text(f.read_text().splitlines()[0] + "\n")
    running = same_batch_check(old, find_runs(tmp_path / "running"))
    assert running["unfinished"] and not running["same"] and running["unrun"] == 1 and running["equal"] == 10
    f.write_text(f.read_text().replace('"iteration": 1', '"iteration": 2'))  # iteration 1 missing, 2 logged
    assert not same_batch_check(old, find_runs(tmp_path / "running"))["unfinished"]
    _gt_runs(tmp_path / "moved_running", -0.03, gigpo_shift=1e-6)
    f = tmp_path / "moved_running" / "runs" / "finiterooms" / "tiny" / "gigpo" / "seed_1" / "metrics.jsonl"
    f.write_text(f.read_text().splitlines()[0] + "\n")
    assert not same_batch_check(old, find_runs(tmp_path / "moved_running"))["unfinished"]


def test_rescored_adds_hgpo_under_both_rules_and_flags_a_changed_reading(tmp_path):
    # committed exact runs: hgpo = gigpo + 0.02 (+0.001 per iteration) on every batch; the re-run under the published
    # rule: gigpo - 0.03. Same batches otherwise, so the rule table is read: the gap crosses 0, the reading changes
    from analysis.reanalysis import rescored

    _gt_runs(tmp_path / "llm-gt-rescored" / "exact", 0.02)
    _gt_runs(tmp_path / "llm-gt-rescored" / "hgpo" / "exact", -0.03)
    md = rescored(tmp_path / "llm-gt-rescored")
    rule = md.split("### exact: HGPO's rule")[1]
    assert "Same batches: 12 of 12 non-HGPO `groundtruth/` values over 3 seeds equal within 1e-9" in rule
    # means 0.2315 and 0.1815 (seeds 0.20-0.22 plus the gap and 0.0015), gaps +0.0215 and -0.0285; Holm over bigpo
    # and hgpo (3 of 3 seeds on one side: p 0.25 each, x 2); ranks among gigpo 0.21, bigpo 0.26 and hgpo
    assert "| start_marker | 0.232 [0.222, 0.241] | +0.021 [+0.021, +0.022] | 3/3 | 0.500 | 2 of 3 |" in rule
    assert "| verl_agent | 0.181 [0.172, 0.191] | -0.028 [-0.029, -0.028] | 0/3 | 0.500 | 3 of 3 |" in rule
    assert "differs between the rules in 6 of 6 run-iterations (largest 0.0500); paired change (verl_agent − " \
           "start_marker, per seed then iteration): -0.0500 [-0.0500, -0.0500]" in rule
    assert "**The reading changes**: HGPO − GiGPO's interval moves across 0." in rule
    # a re-run whose other estimators moved is a new sample: no rule table, and it says so
    _gt_runs(tmp_path / "b" / "llm-gt-rescored" / "exact", 0.02)
    _gt_runs(tmp_path / "b" / "llm-gt-rescored" / "hgpo" / "exact", -0.03, gigpo_shift=0.01)
    md = rescored(tmp_path / "b" / "llm-gt-rescored")
    assert "**Not the same batches** (seed 0, iteration 1: groundtruth/gigpo/pearson" in md
    assert "| verl_agent |" not in md
    # a re-run still under way says so, and reads nothing
    _gt_runs(tmp_path / "c" / "llm-gt-rescored" / "exact", 0.02)
    _gt_runs(tmp_path / "c" / "llm-gt-rescored" / "hgpo" / "exact", -0.03)
    f = tmp_path / "c" / "llm-gt-rescored" / "hgpo" / "exact" / "runs" / "finiterooms" / "tiny" / "gigpo" / "seed_2"
    (f / "metrics.jsonl").write_text((f / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    md = rescored(tmp_path / "c" / "llm-gt-rescored")
    assert ("**The re-run is not finished** (1 of the committed runs' iterations not run yet; every value it has "
            "logged, 10, equal): no reading is stated until it completes.") in md
    assert "| verl_agent |" not in md and "Not the same batches" not in md


def _hgpo_trained_runs(folder: Path, verl: float, start: float, first_shift: float = 0.0, seeds=range(3),
                       success: float = 0.6) -> None:
    # hgpo-trained runs, 2 iterations: iteration 1 is the gigpo arm's first batch (_gt_runs: gigpo g, bigpo g + 0.05)
    # unless first_shift moves it; iteration 2 another batch; hgpo g + verl under the published rule, g + start
    # under the earlier one; uniform-fill scores 0.5 + the same gaps; training success success + 0.1 * seed
    for seed in seeds:
        d = folder / "runs" / "finiterooms" / "tiny" / "hgpo" / f"seed_{seed}"
        d.mkdir(parents=True)
        g = 0.2 + 0.01 * seed
        rows = []
        for it in (1, 2):
            gi = g + (first_shift if it == 1 else 0.1)
            rows.append({"iteration": it, "rollout/success_rate": success + 0.1 * seed,
                         "groundtruth/gigpo/pearson": gi, "groundtruth/bigpo/pearson": gi + 0.05,
                         "groundtruth/hgpo/pearson": gi + verl, "groundtruth/hgpo@start_marker/pearson": gi + start,
                         "groundtruth/visited_only/gigpo/pearson": 0.5,
                         "groundtruth/visited_only/hgpo/pearson": 0.5 + verl,
                         "groundtruth/visited_only/hgpo@start_marker/pearson": 0.5 + start + 0.001 * seed,
                         "groundtruth/cell_seconds": 9.0})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rescored_reads_hgpo_as_the_trained_arm_under_both_rules(tmp_path):
    # gigpo arm: _gt_runs (training success 0.5 per seed); hgpo arm: the published rule 0.02 above gigpo, the earlier
    # one 0.03 below, on HGPO's own batches, whose first batch is the gigpo arm's
    from analysis.reanalysis import rescored

    def gigpo_arm(root: Path, sc: str = "exact") -> None:  # _gt_runs, training success 0.5, GiGPO on the uniform fill
        _gt_runs(root / sc, 0.02)
        for seed in range(3):
            f = root / sc / "runs" / "finiterooms" / "tiny" / "gigpo" / f"seed_{seed}" / "metrics.jsonl"
            rows = [{**json.loads(x), "rollout/success_rate": 0.5, "groundtruth/visited_only/gigpo/pearson": 0.5}
                    for x in f.read_text().splitlines()]
            f.write_text("".join(json.dumps(r) + "\n" for r in rows))

    root = tmp_path / "llm-gt-rescored"
    gigpo_arm(root)
    _hgpo_trained_runs(root / "hgpo-trained" / "exact", 0.02, -0.03)
    md = rescored(root)
    sec = md.split("### exact: HGPO as the trained arm (3 runs, 3 seeds)")[1]
    assert ("9 of 9 non-HGPO `groundtruth/` values over 3 seeds equal within 1e-9 (largest difference 0.0e+00; values "
            "on one side only: 0).") in sec
    primary = sec.split("**Every-cell truth (primary)**")[1].split("**Uniform fill")[0]
    # means over seeds (0.2, 0.21, 0.22) and iterations (+0, +0.1): gigpo 0.26; Holm over bigpo and one HGPO row
    assert "| verl_agent | 0.280 [0.240, 0.320] | +0.020 [+0.020, +0.020] | 3/3 | 0.500 | 2 of 3 |" in primary
    assert "| start_marker | 0.230 [0.190, 0.270] | -0.030 [-0.030, -0.030] | 0/3 | 0.500 | 3 of 3 |" in primary
    assert "differs between the rules in 6 of 6 run-iterations (largest 0.0500); paired change (verl_agent − " \
           "start_marker, per seed then iteration): +0.0500 [+0.0500, +0.0500]" in primary
    assert "interval moves across 0" in primary
    uniform = sec.split("**Uniform fill")[1].split("**Training success**")[0]
    assert "| start_marker | 0.471 [0.470, 0.472] | -0.029 [-0.030, -0.028] | 0/3 | 0.250 | 2 of 2 |" in uniform
    assert "**The reading changes** (every-cell truth): HGPO − gigpo's interval moves across 0." in sec
    # reading 2 over the scenarios, exact alone: hgpo 0.6-0.8 against gigpo 0.5 in every seed (Mann-Whitney's
    # normal approximation: the ties); its P interval excludes 0.5
    over = md.split("## HGPO as the trained arm: training success over the 1 scenarios")[1]
    assert "| exact | 3 | 1.00 [1.00, 1.00] | 0.064 | 0.064 | +0.200 | 3/3 | 0.250 | 0.250 |" in over
    assert "**The training reading changes**: exact's P interval excludes 0.5." in over
    # with under-split beside it (HGPO 0.4, 0.5, 0.6 against 0.5: P 0.5): Holm over 2 (0.0637 x 2);
    # exact still excludes 0.5
    gigpo_arm(root, "undersplit")
    _hgpo_trained_runs(root / "hgpo-trained" / "undersplit", 0.02, -0.03, success=0.4)
    over = rescored(root).split("## HGPO as the trained arm: training success over the 2 scenarios")[1]
    assert "| exact | 3 | 1.00 [1.00, 1.00] | 0.064 | 0.127 | +0.200 | 3/3 | 0.250 | 0.500 |" in over
    assert "| undersplit | 3 | 0.50 [" in over and "| +0.000 | 1/3 |" in over
    assert "**The training reading changes**: exact's P interval excludes 0.5." in over
    # a first batch that is not the gigpo arm's: said, with the first value off
    root2 = tmp_path / "b" / "llm-gt-rescored"
    _gt_runs(root2 / "exact", 0.02)
    _hgpo_trained_runs(root2 / "hgpo-trained" / "exact", 0.02, 0.021, first_shift=1e-3)
    md2 = rescored(root2)
    sec = md2.split("HGPO as the trained arm")[1]
    assert "**not the same warm start or first batch** (seed 0, iteration 1: groundtruth/bigpo/pearson" in sec
    assert "**No same-batch reading changes** against the every-cell truth." in sec
    assert "training success over" not in md2  # the gigpo arm logged no training success
    # first batches one unit apart in the 5th significant digit (a run logs 5): the same batches to that precision
    root3 = tmp_path / "c" / "llm-gt-rescored"
    gigpo_arm(root3)
    _hgpo_trained_runs(root3 / "hgpo-trained" / "exact", 0.02, 0.021, first_shift=1e-5)
    sec = rescored(root3).split("HGPO as the trained arm")[1]
    assert ("3 of 9 non-HGPO `groundtruth/` values over 3 seeds equal within 1e-9 (largest difference 1.0e-05; values "
            "on one side only: 0), 9 within one unit of the 5th significant digit (the precision these runs log): the "
            "same batches up to the last logged digit.") in sec
    # scores apart beyond the logged digits but the same sampled batch (every rollout/ value equal): float rounding
    root4 = tmp_path / "d" / "llm-gt-rescored"
    gigpo_arm(root4)
    _hgpo_trained_runs(root4 / "hgpo-trained" / "exact", 0.02, 0.021, first_shift=1e-3, seeds=[0], success=0.5)
    sec = rescored(root4).split("HGPO as the trained arm")[1]
    assert ("; the sampled batches are the same (1 of 1 `rollout/` values and visited-cell counts over 1 seeds equal, "
            "the log-prob difference aside): the scores differ by float rounding of the warm start (seed 0, iteration "
            "1: groundtruth/bigpo/pearson") in sec
    assert "not the same warm start" not in sec
    # a seed one arm lacks is not float rounding, whatever the seeds both have sampled
    _hgpo_trained_runs(root4 / "hgpo-trained" / "exact", 0.02, 0.021, first_shift=1e-3, seeds=[7], success=-0.2)
    sec = rescored(root4).split("HGPO as the trained arm")[1]
    assert "**not the same warm start or first batch**" in sec and "the sampled batches are the same" not in sec


def test_sampled_batch_check_compares_what_was_sampled_not_the_weights_floats(tmp_path):
    from analysis.reanalysis import sampled_batch_check

    def runs(folder: Path, success: float, logprob: float, cells: int):
        for seed in (0, 1):
            d = folder / "runs" / "finiterooms" / "tiny" / "gigpo" / f"seed_{seed}"
            d.mkdir(parents=True)
            rows = [{"iteration": it, "rollout/success_rate": success + it, "rollout/logprob_abs_diff": logprob,
                     "groundtruth/visited_cells": cells + seed, "groundtruth/gigpo/pearson": 0.1 * it}
                    for it in (1, 2)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return find_runs(folder / "runs")

    a = runs(tmp_path / "a", 0.25, 1e-3, 40)
    same = sampled_batch_check(a, runs(tmp_path / "b", 0.25, 2e-3, 40))  # only the log-prob float differs
    assert same == {"seeds": 2, "values": 4, "equal": 4, "mismatch": None}
    moved = sampled_batch_check(a, runs(tmp_path / "c", 0.25, 1e-3, 41))
    assert moved["equal"] == 2 and moved["mismatch"] == "seed 0: groundtruth/visited_cells 40 vs 41"


def test_reanalyse_on_a_damaged_packed_file_is_an_exit_2_message_naming_the_fix(tmp_path, capsys):
    from experiments.reanalyse import main

    study = tmp_path / "learning"
    study.mkdir()
    (study / "runs.jsonl.xz").write_bytes(b"not xz at all")
    assert main(["learning", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "runs.jsonl.xz" in err and "git checkout -- " in err and "Traceback" not in err


def _halves_runs(folder: Path, methods, hgpo_gap: float, shift: float = 0.0, seeds=range(3)) -> None:
    # plain-arm runs, 2 iterations: gigpo g, bigpo g + 0.05, hgpo g + hgpo_gap (whole and step term, both truths;
    # the uniform fill 0.01 lower), a wall time that moves
    for method in methods:
        for seed in seeds:
            d = folder / "finiterooms" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            g = 0.2 + 0.01 * seed + (0.002 if method == "bigpo" else 0.0)
            vals = {"gigpo": g + shift, "bigpo": g + 0.05, "hgpo": g + hgpo_gap}
            rows = []
            for it in (1, 2):
                row = {"iteration": it, "groundtruth/cell_seconds": 1.0 + hgpo_gap}
                for e, v in vals.items():
                    for m in ("pearson", "pearson_step"):
                        row[f"groundtruth/{e}/{m}"] = v + 0.001 * it
                        row[f"groundtruth/visited_only/{e}/{m}"] = v - 0.01
                rows.append(row)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_halves_reads_hgpo_under_both_rules_on_the_plain_arms_batches(tmp_path):
    # committed plain arms gigpo and bigpo: hgpo = gigpo + 0.02; re-runs with the published rule: gigpo - 0.03 (the
    # gigpo arm's re-run lives in llm-gt-rescored, the bigpo arm's in the study's hgpo/ folder)
    from analysis.reanalysis import halves

    root = tmp_path / "llm-gt-halves"
    _halves_runs(root / "runs", ("gigpo", "bigpo"), 0.02)
    assert "### 6. HGPO's rule" not in halves(root)  # no re-runs: no section
    _halves_runs(root / "hgpo" / "runs", ("bigpo",), -0.03)
    md = halves(root).split("### 6. HGPO's rule")[1]
    # each re-run holds 3 seeds x 2 iterations x (gigpo, bigpo) x 2 metrics x 2 truths = 48 non-HGPO values
    assert "| bigpo | 3 of 3 | 48 of 48 | 0.0e+00 | 6 of 6 run-iterations (largest 0.0500) | " \
           "-0.0500 [-0.0500, -0.0500] |" in md
    assert "| gigpo | 0 of 3 | – | – | – | – |" in md
    assert "Not every committed run was run again (3 of 6): no reading is stated." in md
    _halves_runs(tmp_path / "llm-gt-rescored" / "hgpo" / "oversplit" / "runs", ("gigpo",), -0.03)
    md = halves(root).split("### 6. HGPO's rule")[1]
    # hgpo - gigpo: +0.020 under start_marker, -0.030 under verl_agent, under both truths and both terms; hgpo ranks
    # 2nd of 3 (gigpo g, bigpo g + 0.05) under start_marker, 3rd under verl_agent
    assert "| start_marker | whole advantage | " in md and "| +0.020 [+0.020, +0.020] | +0.020 [+0.020, +0.020] | " \
           "2 of 3 |" in md
    assert "| -0.030 [-0.030, -0.030] | -0.030 [-0.030, -0.030] | 3 of 3 |" in md
    assert "| verl_agent | step term | " in md
    assert "**The reading changes**: the whole advantage's gap to gigpo under the every-cell truth moves across 0" in md
    assert "the step term's gap to gigpo under the uniform-fill truth moves across 0." in md
    # a re-run whose other estimators moved is a new sample, and no reading is stated
    root2 = tmp_path / "b" / "llm-gt-halves"
    _halves_runs(root2 / "runs", ("gigpo", "bigpo"), 0.02)
    _halves_runs(root2 / "hgpo" / "runs", ("gigpo", "bigpo"), -0.03, shift=0.01)
    md = halves(root2).split("### 6. HGPO's rule")[1]
    assert "(seed 0, iteration 1: groundtruth/gigpo/pearson" in md and "**Not the same batches**" in md
    assert "| verl_agent |" not in md and "reading changes" not in md
    # a re-run under way (bigpo's seed 2 has logged one of its 2 iterations) says so
    root3 = tmp_path / "c" / "llm-gt-halves"
    _halves_runs(root3 / "runs", ("gigpo", "bigpo"), 0.02)
    _halves_runs(root3 / "hgpo" / "runs", ("gigpo", "bigpo"), -0.03)
    f = root3 / "hgpo" / "runs" / "finiterooms" / "tiny" / "bigpo" / "seed_2" / "metrics.jsonl"
    f.write_text(f.read_text().splitlines()[0] + "\n")
    md = halves(root3).split("### 6. HGPO's rule")[1]
    assert "| bigpo | 3 of 3 | 40 of 40 (1 iterations not run yet) |" in md
    assert "**The re-runs are not finished** in the bigpo arm (every value logged so far equal)" in md
    assert "| verl_agent |" not in md and "Not the same batches" not in md


def _variant_runs(folder: Path, hgpo_gap: float, today: bool, own_shift: float = 0.0, seeds=range(3)) -> None:
    # bipace_q-cluster_std runs, 2 iterations. Logged before 2026-12-06 (today=False) the variant's reading is
    # `bipace_q` (g + 0.1) and its siblings `pace_anchor` (g + 0.03) read its setting; today's code scores those two
    # plain (other values) and the variant as `bipace_q-cluster_std`
    for seed in seeds:
        d = folder / "finiterooms" / "tiny" / "bipace_q-cluster_std" / f"seed_{seed}"
        d.mkdir(parents=True)
        g = 0.2 + 0.01 * seed
        vals = {"gigpo": g, "hgpo": g + hgpo_gap}
        vals.update({"bipace_q": g + 0.2, "pace_anchor": g + 0.04, "bipace_q-cluster_std": g + 0.1 + own_shift}
                    if today else {"bipace_q": g + 0.1, "pace_anchor": g + 0.03})
        rows = []
        for it in (1, 2):
            row = {"iteration": it}
            for e, v in vals.items():
                for m in ("pearson", "pearson_step"):
                    row[f"groundtruth/{e}/{m}"] = v + 0.001 * it
                    row[f"groundtruth/visited_only/{e}/{m}"] = v - 0.01
            row["groundtruth/pace_anchor@eps0.05/pearson"] = vals["pace_anchor"]
            rows.append(row)
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_halves_reads_a_variant_arm_rescored_under_its_own_name(tmp_path):
    # the plain arms (gigpo, bigpo) and the cluster_std arm committed with hgpo = gigpo + 0.02, all re-run with the
    # published rule (gigpo - 0.03); the variant's re-runs logged by today's code, which renames its reading
    from analysis.reanalysis import halves, same_batch_check

    root = tmp_path / "llm-gt-halves"
    _halves_runs(root / "runs", ("gigpo", "bigpo"), 0.02)
    _variant_runs(root / "runs", 0.02, today=False)
    _halves_runs(tmp_path / "llm-gt-rescored" / "hgpo" / "oversplit" / "runs", ("gigpo",), -0.03)
    _halves_runs(root / "hgpo" / "runs", ("bigpo",), -0.03)
    md = halves(root).split("### 6. HGPO's rule")[1]
    assert "| bipace_q-cluster_std | 0 of 3 | – | – | – | – |" in md
    assert "**No reading changes**" not in md and "**The reading changes**" in md  # table 5's pooling is complete
    assert "Not every committed run was run again (6 of 9): no reading is stated." in md  # the every-run pooling is not
    _variant_runs(root / "hgpo" / "runs", -0.03, today=True)
    md = halves(root).split("### 6. HGPO's rule")[1]
    # compared per run-iteration: gigpo and the variant (committed `bipace_q`, re-run `bipace_q-cluster_std`), each
    # 2 metrics x 2 truths = 8 values; the plain `bipace_q` and `pace_anchor` (and pace_anchor@eps0.05) left out
    assert "| bipace_q-cluster_std | 3 of 3 | 48 of 48 | 0.0e+00 | 6 of 6 run-iterations (largest 0.0500) | " \
           "-0.0500 [-0.0500, -0.0500] |" in md
    pooled = md.split("HGPO's rows over every run of the study")[1]
    assert "(gigpo, bigpo, bipace_q-cluster_std) (9 runs, 3 seeds;" in pooled
    # hgpo's rank among the committed others (gigpo g, bigpo g + 0.052, bipace_q g + 0.1, pace_anchor g + 0.03):
    # 4th of 5 at g + 0.02, 5th at g - 0.03 (one place: no rank change), but each gap moves across 0
    assert "| +0.020 [+0.020, +0.020] | +0.020 [+0.020, +0.020] | 4 of 5 |" in pooled
    assert "| -0.030 [-0.030, -0.030] | -0.030 [-0.030, -0.030] | 5 of 5 |" in pooled
    assert "**The reading changes**: the whole advantage's gap to gigpo under the every-cell truth moves" in pooled
    assert "rank moves" not in pooled
    # without the renaming the variant's runs would not be the same batches; with it, a moved own value is caught
    old_v = [r for r in find_runs(root / "runs") if r.method == "bipace_q-cluster_std"]
    new_v = [r for r in find_runs(root / "hgpo" / "runs") if r.method == "bipace_q-cluster_std"]
    assert not same_batch_check(old_v, new_v)["same"]
    root2 = tmp_path / "b" / "llm-gt-halves"
    _variant_runs(root2 / "runs", 0.02, today=False)
    _variant_runs(root2 / "hgpo" / "runs", -0.03, today=True, own_shift=1e-6)
    md = halves(root2).split("### 6. HGPO's rule")[1]
    assert "24 of 48 (seed 0, iteration 1: groundtruth/bipace_q-cluster_std/pearson 0.301" in md
    assert "**Not the same batches** in the bipace_q-cluster_std arm" in md and "| verl_agent |" not in md
