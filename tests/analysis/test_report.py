"""The report command on a fixture of run folders: every file written, numbers equal to hand values."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.runs import find_runs, read_jsonl
from experiments.report import main as report_main

# final eval success per (method, seed) on two splits; curves reach 0.5 at known iterations
FINAL = {
    "gigpo": {0: (0.4, 0.2), 1: (0.6, 0.4), 2: (0.5, 0.3)},
    "bipace_q": {0: (0.8, 0.5), 1: (0.6, 0.5), 2: (0.7, 0.5)},
}


def write_run(root: Path, method: str, seed: int, final: tuple[float, float]) -> None:
    d = root / "textcraft" / "tiny" / method / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method, "seed": seed}))
    with open(d / "metrics.jsonl", "w") as f:
        for it in range(10):
            f.write(json.dumps({
                "iteration": it, "rollout/success_rate": final[0] * it / 9,
                "group/singleton_rate_anchor": 0.5, "group/singleton_rate_cluster": 0.2,
                "group/cluster_size_mean": 3.0, "group/pace_frac_pace": 0.8, "group/pace_frac_fallback": 0.15,
                "group/pace_frac_singleton": 0.05,
            }) + "\n")
        f.write('{"iteration": 10, "rollout/succ')  # a torn last line from a killed run is skipped
    with open(d / "eval.jsonl", "w") as f:
        for it, frac in ((0, 0.0), (5, 0.5), (9, 1.0)):
            f.write(json.dumps({
                "iteration": it,
                "eval/textcraft/depth2/success_rate": final[0] * frac,
                "eval/textcraft/depth3/success_rate": final[1] * frac,
                "eval/textcraft/depth2/family/depth2/success_rate": final[0] * frac,
            }) + "\n")


@pytest.fixture
def runs_root(tmp_path):
    root = tmp_path / "runs"
    for method, seeds in FINAL.items():
        for seed, final in seeds.items():
            write_run(root, method, seed, final)
    return root


def test_find_runs(runs_root):
    runs = find_runs(runs_root)
    assert [(r.method, r.seed) for r in runs] == [("bipace_q", s) for s in range(3)] + [("gigpo", s) for s in range(3)]
    assert len(runs[0].metrics) == 10  # torn line dropped


def test_an_evaluation_split_named_train_gets_its_own_curve(runs_root, tmp_path):
    """The CPU presets evaluate on training goals (split "train"); its curve must not overwrite the rollout curve."""
    for d in runs_root.glob("*/*/*/seed_*"):
        rows = read_jsonl(d / "eval.jsonl")
        with open(d / "eval.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps({**r, "eval/textcraft/train/success_rate": 0.25}) + "\n")
    out = tmp_path / "study"
    assert report_main(["--runs", str(runs_root), "--out", str(out)]) == 0
    rollouts, train_eval = out / "curves_textcraft_tiny_train.png", out / "curves_textcraft_tiny_eval_train.png"
    assert rollouts.is_file() and train_eval.is_file() and rollouts.read_bytes() != train_eval.read_bytes()
    summary = (out / "summary.md").read_text()
    assert "![training success](curves_textcraft_tiny_train.png)" in summary
    assert "![train](curves_textcraft_tiny_eval_train.png)" in summary


def test_report_files_and_numbers(runs_root, tmp_path):
    out = tmp_path / "study"
    assert report_main(["--runs", str(runs_root), "--out", str(out), "--thresholds", "0.3"]) == 0
    names = {p.name for p in out.iterdir()}
    for expected in ("summary.md", "tables.md", "curves_textcraft_tiny_train.png", "curves_textcraft_tiny_depth2.png",
                     "curves_textcraft_tiny_depth3.png", "diagnostics_textcraft_tiny.png"):
        assert expected in names, expected
    for png in out.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    summary = (out / "summary.md").read_text()
    # depth2 final: bipace_q mean 0.7 std 0.1 (best, bold); gigpo mean 0.5 std 0.1
    assert "**70.0 ± 10.0**" in summary and "| gigpo | 3 | 50.0 ± 10.0 |" in summary
    # depth3: bipace_q 0.5 ± 0; gigpo 0.3 ± 0.1
    assert "**50.0 ± 0.0**" in summary and "30.0 ± 10.0" in summary
    # P(bipace_q > gigpo): depth2 pairs (0.8,0.6,0.7) vs (0.4,0.6,0.5): 3 + 2.5 + 3 = 8.5 of 9; depth3: 1
    assert f"{(8.5 / 9 + 1) / 2:.2f} [" in summary
    # IQM of bipace_q over {0.8, 0.6, 0.7, 0.5, 0.5, 0.5} (rliable's: floor(6 / 4) = 1 cut from each end):
    # sorted: .5 .5 .5 .6 .7 .8 -> mean of .5 .5 .6 .7
    assert f"{100 * (0.5 + 0.5 + 0.6 + 0.7) / 4:.1f} [" in summary
    # sample efficiency on depth2 (seed means at iterations 0, 5, 9): bipace 0.35 at 5 -> reaches 0.3 at 5;
    # gigpo 0.25 at 5, 0.5 at 9 -> 9; speed-up 9 / 5
    assert "| bipace_q | 5 (1.80×) |" in summary
    assert "| gigpo | 9 |" in summary
    # diagnostics table uses the logged values
    assert "| 0.500 | 0.200 | 3.000 | 0.800 |" in summary


def test_report_errors(tmp_path, capsys):
    assert report_main(["--runs", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no run folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert report_main(["--runs", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2


def test_read_jsonl_rejects_corruption_in_the_middle(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"iteration": 0}\n{broken\n{"iteration": 2}\n')
    with pytest.raises(ValueError, match="m.jsonl:2"):
        read_jsonl(p)


def test_control_table_reads_each_method_against_the_no_update_run_of_its_seed(tmp_path):
    """Per-iteration differences to the control of the same seed, block means and the overall mean, by hand."""
    root = tmp_path / "runs"
    # rollout success per iteration 1..6; the control's level differs by seed (goal draws), the method sits
    # above it by +0.1 (seed 0) and +0.3 (seed 1) at every iteration
    level = {0: [0.5, 0.2, 0.4, 0.6, 0.1, 0.3], 1: [0.3, 0.3, 0.7, 0.2, 0.4, 0.5]}
    lift = {0: 0.1, 1: 0.3}
    for method in ("no-update", "gigpo"):
        for seed in (0, 1):
            d = root / "textcraft" / "tiny" / method / f"seed_{seed}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps({"env": "textcraft", "model": "tiny", "method": method,
                                                    "seed": seed}))
            with open(d / "metrics.jsonl", "w") as f:
                for it, v in enumerate(level[seed], start=1):
                    f.write(json.dumps({"iteration": it, "rollout/success_rate":
                                        v + (lift[seed] if method == "gigpo" else 0.0)}) + "\n")
    # a method whose seed 1 stopped after 3 iterations (a study still running): only iterations 1-3 count
    for seed in (0, 1):
        d = root / "textcraft" / "tiny" / "hgpo" / f"seed_{seed}"
        d.mkdir(parents=True)
        with open(d / "metrics.jsonl", "w") as f:
            for it, v in list(enumerate(level[seed], start=1))[: 6 if seed == 0 else 3]:
                f.write(json.dumps({"iteration": it, "rollout/success_rate": v - 0.05 * it}) + "\n")
    # a method with no control of its seed is left out of the table, not compared with another seed's control
    d = root / "textcraft" / "tiny" / "grpo" / "seed_7"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "rollout/success_rate": 1.0}) + "\n")
    out = tmp_path / "study"
    assert report_main(["--runs", str(root), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "against the no-update control" in summary
    png = out / "curves_textcraft_tiny_train_vs_control.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and f"]({png.name})" in summary
    # blocks of 4: iterations 1-4 and 5-6; the lift is +10 / +30 points, mean +20 in every block
    assert "| method | seeds | it 1-4 | it 5-6 | all [95% CI] | trend, 2nd half (pts / 4 its) [95% CI] |" in summary
    assert "| gigpo | 2 | +20.0 | +20.0 | +20.0 [" in summary
    # a constant lift per seed has no trend; hgpo falls 5 points per iteration below the control (-20 per block of
    # 4), fitted on the second half of its 3 common iterations (2 and 3), exactly, so its interval is a point
    assert summary.count("+0.0 [+0.0, +0.0] |") == 1
    assert "| -20.0 [-20.0, -20.0] |" in summary
    # the control's own level: mean over both seeds of iterations 1-4 and 5-6
    lv14 = 100 * (sum(level[0][:4]) + sum(level[1][:4])) / 8
    lv56 = 100 * (sum(level[0][4:]) + sum(level[1][4:])) / 4
    both = 100 * (sum(level[0]) + sum(level[1])) / 12
    assert f"| no-update (level, %) | 2 | {lv14:.1f} | {lv56:.1f} | {both:.1f} | – |" in summary
    assert f"| hgpo | 2 | {-100 * 0.05 * 2:+.1f} | – | {-100 * 0.05 * 2:+.1f} [" in summary
    assert "| grpo |" not in summary.split("against the no-update control")[1].split("###")[0]
    # the interval resamples iterations within each seed: a constant lift per seed gives an interval inside
    # [+10, +30] that contains +20
    line = next(ln for ln in summary.splitlines() if ln.startswith("| gigpo | 2 | +20.0"))
    all_cell = line.split(" | ")[4]  # method, seeds, it 1-4, it 5-6, all, trend
    lo, hi = (float(x) for x in all_cell.split("[", 1)[1].rstrip("]").split(", "))
    assert 10.0 <= lo <= 20.0 <= hi <= 30.0
    # where each run ends: the last 4 iterations of each seed against its control's same iterations, by hand
    end = summary.split("### Where each run ends against its control")[1].split("###")[0]
    c0 = 100 * sum(level[0][2:]) / 4
    assert f"| gigpo | 0 | 3-6 | {c0 + 10:.1f} | {c0:.1f} | +10.0 | no |" in end
    assert "| gigpo | 1 | 3-6 |" in end and "| +30.0 | yes |" in end
    assert "| **gigpo** | mean of 2 | | | | **+20.0** | 1 of 2 |" in end
    assert "| hgpo | 1 | 1-3 |" in end  # a seed still running ends where it is


def test_no_control_no_table(runs_root, tmp_path):
    out = tmp_path / "study"
    assert report_main(["--runs", str(runs_root), "--out", str(out)]) == 0
    assert "no-update control" not in (out / "summary.md").read_text()
    assert not list(out.glob("*_vs_control.png"))


def test_goal_table_shows_each_pool_goal_per_run(tmp_path):
    """rollout/task/<index>/success_rate: mean over the last 8 iterations that logged each goal, by hand; a goal a
    run never played is a dash, and runs without these keys add no table."""
    root = tmp_path / "runs"
    for method, seed, rates in (("no-update", 0, {3: 0.25, 23: 0.5}), ("grpo", 0, {3: 0.75, 23: 0.0}),
                                ("grpo", 1, {3: 1.0})):
        d = root / "textcraft" / "tiny" / method / f"seed_{seed}"
        d.mkdir(parents=True)
        with open(d / "metrics.jsonl", "w") as f:
            for it in range(1, 13):  # iterations 1-4 hold other values: only the last 8 (5-12) count
                row = {"iteration": it, "rollout/success_rate": 0.5}
                row.update({f"rollout/task/{g}/success_rate": (r if it > 4 else 0.0) for g, r in rates.items()})
                f.write(json.dumps(row) + "\n")
    out = tmp_path / "study"
    assert report_main(["--runs", str(root), "--out", str(out)]) == 0
    table = (out / "summary.md").read_text().split("### Success per training goal")[1].split("###")[0]
    assert "| method | seed | goal 3 | goal 23 | iterations |" in table
    assert "| no-update | 0 | 25 | 50 | 5-12 |" in table
    assert "| grpo | 0 | 75 | 0 | 5-12 |" in table and "| grpo | 1 | 100 | – | 5-12 |" in table
    assert table.index("| no-update |") < table.index("| grpo |")  # the control first


def test_no_goals_logged_no_goal_table(runs_root, tmp_path):
    out = tmp_path / "study"
    assert report_main(["--runs", str(runs_root), "--out", str(out)]) == 0
    assert "Success per training goal" not in (out / "summary.md").read_text()


def test_a_variant_shares_its_estimators_colour_but_not_its_line_style():
    from analysis.plots import method_color, method_linestyle

    assert method_color("gigpo-lr3e-5") == method_color("gigpo")
    assert method_linestyle("gigpo") == "-" and method_linestyle("no-update") == "-"
    assert method_linestyle("gigpo-lr3e-5") == "--" and method_linestyle("bipace_q@oracle") == "--"


def test_the_interval_plot_draws_the_numbers_of_the_aggregate_table(runs_root, tmp_path):
    """IQM and mean with their intervals are drawn as a figure beside the table, from one computation: each
    method's interval in the figure's data equals the table's row."""
    import matplotlib.pyplot as plt

    from analysis import plots
    from analysis.plots import method_sort_key
    from analysis.report import score_matrices
    from analysis.runs import find_runs
    from analysis.stats import aggregate_intervals, aggregate_markdown

    out = tmp_path / "study"
    assert report_main(["--runs", str(runs_root), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "![IQM and mean with 95% intervals](intervals_textcraft_tiny.png)" in summary
    by_method = {}
    for r in find_runs(runs_root):
        by_method.setdefault(r.method, []).append(r)
    keys = ["eval/textcraft/depth2/success_rate", "eval/textcraft/depth3/success_rate"]
    mats = score_matrices(by_method, keys, "final")
    iv = aggregate_intervals(mats, "gigpo", method_sort_key)
    assert list(iv) == ["gigpo", "bipace_q"] and iv["gigpo"]["poi"] is None and iv["bipace_q"]["poi"][0] > 0.9
    assert aggregate_markdown(mats, "gigpo", intervals=iv) in summary  # the table the report wrote
    drawn = {}
    real_save = plots.save_png

    def keep(fig, path, dpi):  # read what the figure holds: per axis, the (lo, hi) of each thick interval bar
        drawn[path.name] = [[tuple(ln.get_xdata()) for ln in ax.get_lines() if ln.get_linewidth() == 6]
                            for ax in fig.axes]
        real_save(fig, path, dpi)

    plots.save_png = keep
    try:
        assert plots.plot_intervals(iv, "t", tmp_path / "iv.png", "a run's final success on one split")
    finally:
        plots.save_png = real_save
    iqm_bars, mean_bars = drawn["iv.png"]
    for row, m in enumerate(iv):
        assert iqm_bars[row] == pytest.approx((100 * iv[m]["iqm"][1], 100 * iv[m]["iqm"][2]))
        assert mean_bars[row] == pytest.approx((100 * iv[m]["mean"][1], 100 * iv[m]["mean"][2]))
    assert not plots.plot_intervals({}, "t", tmp_path / "none.png", "x") and not (tmp_path / "none.png").exists()
    plt.close("all")


def test_methods_whose_means_coincide_stay_visible(tmp_path):
    """Two methods with equal curves: their markers are dodged apart, so neither hides the other."""
    from analysis import plots
    from analysis.runs import find_runs

    root = tmp_path / "runs"
    for method in ("gigpo", "grpo"):
        for seed in (0, 1):
            write_run(root, method, seed, (0.5, 0.5))
    by_method = {}
    for r in find_runs(root):
        by_method.setdefault(r.method, []).append(r)
    marks = {}
    real_save = plots.save_png

    def keep(fig, path, dpi):
        ax = fig.axes[0]
        marks.update({ln.get_color(): tuple(ln.get_xdata()) for ln in ax.get_lines() if ln.get_linestyle() == "None"})
        real_save(fig, path, dpi)

    plots.save_png = keep
    try:
        assert plots.plot_curves(by_method, "eval/textcraft/depth2/success_rate", "evals", "t", tmp_path / "c.png",
                                 "success rate")
    finally:
        plots.save_png = real_save
    xs = list(marks.values())
    assert len(xs) == 2 and all(a != b for a, b in zip(*xs))
