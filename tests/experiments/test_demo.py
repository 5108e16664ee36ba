"""The demo's comparison with the committed reference (equal / within the reference's seed spread / outside) and
the numerical code paths it pins before torch loads."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from analysis.runs import Run
from experiments import demo
from tests.experiments.helpers import REPO

SPLIT = "eval/textcraft/eval_depth2/success_rate"


def run(method, seed, succ, final, tmp_path):
    metrics = [{"iteration": i, "rollout/success_rate": s} for i, s in enumerate(succ, 1)]
    evals = [{"iteration": len(succ), SPLIT: final}]
    return Run("textcraft", "tiny", method, seed, tmp_path, metrics, evals, {})


def test_comparison_reads_equal_within_and_outside_the_reference_seed_spread(tmp_path):
    ref = [run("grpo", 0, [0.5, 0.25], 0.25, tmp_path), run("grpo", 1, [0.75, 0.5], 0.5, tmp_path),
           run("grpo", 2, [0.25, 0.25], 1 / 3, tmp_path),
           run("gigpo", 0, [0.5, 0.5], 0.25, tmp_path), run("gigpo", 1, [0.5, 0.75], 0.5, tmp_path)]
    yours = [run("grpo", 0, [0.5, 0.25], 0.25, tmp_path),       # the reference's seed 0 exactly
             run("gigpo", 0, [0.5, 0.625], 0.5, tmp_path),      # differs, inside [min, max] of both seeds
             run("rloo", 0, [1.0, 1.0], 1.0, tmp_path)]         # no counterpart: left out
    table, rows = demo.comparison(yours, ref)
    verdicts = {r["method"]: r["verdict"] for r in rows}
    assert verdicts == {"grpo": "equal", "gigpo": "within spread"}
    line = next(x for x in table.splitlines() if x.startswith("| gigpo"))
    assert "56.2 / 50.0 [50.0–62.5]" in line and "50.0 / 25.0 [25.0–50.0]" in line
    # a number outside the range: a final evaluation above every reference seed's
    _, rows = demo.comparison([run("gigpo", 0, [0.5, 0.625], 0.75, tmp_path)], ref)
    assert rows[0]["verdict"] == "outside spread"
    # one reference seed gives no range: a difference cannot be placed
    _, rows = demo.comparison([run("gigpo", 0, [0.5, 0.625], 0.5, tmp_path)], ref[3:4])
    assert rows[0]["verdict"] == "differs"
    # different iteration counts are never equal, nor within the spread
    _, rows = demo.comparison([run("grpo", 0, [0.5, 0.25, 0.25], 0.25, tmp_path)], ref)
    assert rows[0]["verdict"] == "outside spread"
    assert demo.comparison(yours, []) == ("", [])
    assert "All 1 runs equal the reference's" in demo.verdict_line([{"verdict": "equal", "reference_seeds": [0]}])
    said = demo.verdict_line([{"verdict": "equal", "reference_seeds": [0, 1]},
                              {"verdict": "within spread", "reference_seeds": [0, 1]}])
    assert "equal 1, within spread 1" in said


def _edit_final_eval(run_dir, key, value):
    lines = (run_dir / "eval.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    last[key] = value
    lines[-1] = json.dumps(last)
    (run_dir / "eval.jsonl").write_text("\n".join(lines) + "\n")


def test_the_committed_reference_compared_with_its_own_seed_0_runs(tmp_path):
    """The committed reference's seed-0 runs, copied as a user's runs, read equal; a changed final evaluation reads
    within the spread when the value is one another reference seed reached, outside when no seed reached it."""
    ref = REPO / "results" / "demo"
    out = tmp_path / "demo"
    runs = sorted(ref.glob("runs/*/*/*/seed_0"))
    assert len(runs) == 4, "results/demo holds one seed-0 run per method"
    assert len(list(ref.glob("runs/*/*/*/seed_*"))) >= 8, "results/demo holds at least 2 seeds per method (the spread)"
    for src in runs:
        shutil.copytree(src, out / "runs" / src.relative_to(ref / "runs"))
    (out / "summary.md").write_text("# Demo\n")
    table = demo.add_comparison_section(out, ref)
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# Demo\n") and "## Your runs beside the committed reference" in summary
    assert "All 4 runs equal the reference's" in summary and demo.MEANING in summary
    assert table.count("| equal |") == 4 and "| eval_depth2 |" in table.splitlines()[0]

    from analysis.runs import find_runs

    key = "eval/textcraft/eval_depth2/success_rate"
    by_seed = {r.seed: r for r in find_runs(ref / "runs") if r.method == "gigpo"}
    finals = {s: r.evals[-1][key] for s, r in by_seed.items()}
    gigpo = next(p for p in (out / "runs").glob("*/*/gigpo/seed_0"))
    other = [v for s, v in finals.items() if s != 0 and v != finals[0]]
    if other:  # a value another seed reached: inside the range
        _edit_final_eval(gigpo, key, other[0])
        _, rows = demo.comparison(find_runs(out / "runs"), find_runs(ref / "runs"))
        assert {r["method"]: r["verdict"] for r in rows}["gigpo"] == "within spread"
    _edit_final_eval(gigpo, key, max(finals.values()) + 1 / 12)  # one goal more than any seed won
    _, rows = demo.comparison(find_runs(out / "runs"), find_runs(ref / "runs"))
    verdicts = {r["method"]: r["verdict"] for r in rows}
    assert verdicts["gigpo"] == "outside spread"
    assert sorted(verdicts.values()).count("equal") == 3


def test_pin_numerics_sets_defaults_and_keeps_the_users_values():
    env = {"MKL_CBWR": "COMPATIBLE"}
    got = demo.pin_numerics(env)
    assert got["MKL_CBWR"] == "COMPATIBLE" and got["ATEN_CPU_CAPABILITY"] == "avx2"
    assert set(got) == set(demo.NUMERICS)


def test_the_pinned_aten_code_path_is_what_torch_runs():
    """In a fresh process, the demo's pin reaches torch: ATen dispatches to its AVX2 kernels (on a CPU without AVX2
    ATen falls back to its default build, which is then what it reports)."""
    code = ("import experiments.demo as d; d.pin_numerics(); import torch; "
            "print(torch.backends.cpu.get_cpu_capability())")
    env = {k: v for k, v in os.environ.items() if k not in demo.NUMERICS}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " avx2" in flags:
        assert out.stdout.strip() == "AVX2"
    base = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=True)
    if " avx512f" in flags:
        assert base.stdout.strip().startswith("AVX512")  # without the pin this CPU runs another build


def test_learning_note_follows_the_gates_committed_verdict(tmp_path):
    # no verdict file: undecided; a failing and a passing verdict as analysis.gate writes them
    assert "is not decided yet" in demo.learning_note(tmp_path)
    report = tmp_path / demo.GATE_REPORT
    report.parent.mkdir(parents=True)
    report.write_text("...\n**The gate does not pass**: no arm meets the rule.\n")
    note = demo.learning_note(tmp_path)
    assert note.startswith("No CPU recipe has yet passed the learning gate") and "results/gate-textcraft" in note
    report.write_text("...\n**The gate passes** (gigpo).\n")
    assert demo.learning_note(tmp_path).startswith("A CPU recipe has passed the learning gate")
    # the repo's own committed verdict gives one of the three sentences
    assert any(s in demo.learning_note() for s in ("not decided yet", "No CPU recipe", "A CPU recipe"))
