"""The time model (experiments.plan_time): one phase recomputed from its stated inputs, every phase for every paper
preset, the evaluation's turn count against the benchmark's exact chunked count, the before/after ordering."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from experiments.plan_time import PHASES, GPURates, eval_turns, paper_table, plan_time, preset_plans

REPO = Path(__file__).resolve().parents[2]
ALF7 = str(REPO / "configs/paper/alfworld_qwen2.5-7b.yaml")


def test_the_update_phase_recomputed_from_its_stated_inputs():
    plan = preset_plans(ALF7, 4)[("mid", "after")]
    w = plan.workload
    assert (w.params, w.world, w.trajectories, w.episode_len, w.prompt_tokens, w.response_tokens) == \
        (7_615_616_512, 4, 128, 22, 1300, 180)
    rows = 128 / 4 * 22                                      # 704 rows per rank
    positions = rows * (1300 + 180)                          # length order: factor 1
    compute = 8 * 7_615_616_512 * positions / (989e12 * 0.35)
    gathers = 2 * 88 * (2 * 7_615_616_512 / 4 / 25e9 + 2 * 7_615_616_512 / 300e9)   # 704 / 8 micro-batches
    adam = 11 * (7_615_616_512 / 4 / min(0.35e9 * 16, 50e9 / 30) + 6 * 7_615_616_512 / 4 / 25e9)  # 704*4/256
    assert plan.seconds["update"] == pytest.approx(compute + gathers + adam, rel=1e-12)
    assert f"{positions / 1e6:.2f}M positions" in plan.detail["update"]


def test_every_phase_of_every_paper_preset_is_in_the_table():
    table = paper_table()
    presets = sorted(p.stem for p in (REPO / "configs/paper").glob("*.yaml"))
    assert len(presets) == 6
    header = next(line for line in table.splitlines() if line.startswith("| preset"))
    assert all(f" {ph} |" in header for ph in PHASES)
    for stem in presets:
        lines = [line for line in table.splitlines() if line.startswith(f"| {stem} |")]
        assert [line.split(" | ")[2] for line in lines] == ["low", "mid", "high"]
        for line in lines:
            cells = line.strip("|").split("|")
            assert len(cells) == 3 + len(PHASES) + 2 and all(c.strip().strip("*") for c in cells)
    assert (REPO / "results/benchmarks/time_plan.md").read_text() == table  # the committed table is current


def test_the_chunked_eval_turns_equal_the_benchmarks_exact_count():
    """benchmarks/eval_refill.py on 11 slots: 12 + 12 tasks chunked take 2 chunks per split x 50 turns = 200 turns
    (measured 200); refilling, 833 steps / 11 slots + a horizon's tail = 126 bounds the measured 100."""
    w = replace(preset_plans(ALF7, 4)[("mid", "after")].workload, world=1, eval_tasks=(12, 12), eval_turns=50,
                eval_len=833 / 24)
    assert eval_turns(replace(w, eval_refill=False), 11) == 200
    assert eval_turns(w, 11) == 126 >= 100


def test_the_fixes_only_lower_the_time_and_the_gpu_rates_scale_it():
    for (sc, fixes), plan in preset_plans(ALF7, 4).items():
        if fixes == "after":
            before = preset_plans(ALF7, 4)[(sc, "before")]
            assert plan.total < before.total
            assert plan.seconds["evaluation"] < before.seconds["evaluation"]
    mid = preset_plans(ALF7, 4)[("mid", "after")]
    faster = plan_time(mid.workload, replace(GPURates(), update_util=0.70))
    assert faster.seconds["update"] < mid.seconds["update"] and faster.seconds["rollout"] == mid.seconds["rollout"]


def test_a_shared_start_evaluation_leaves_only_the_periodic_ones():
    # the 7B ALFWorld preset shares its iteration-0 evaluation (eval.share_start): the plan, of a sweep's later runs,
    # counts one evaluation per eval.every; without the sharing, iteration 0 adds one more over trainer.iterations
    plan = preset_plans(ALF7, 4)[("mid", "after")]
    w = plan.workload
    assert w.eval_start_shared and "iteration 0 shared" in plan.detail["evaluation"]
    own = plan_time(replace(w, eval_start_shared=False), GPURates())
    assert own.seconds["evaluation"] == pytest.approx(plan.seconds["evaluation"] * (1 + w.eval_every / w.iterations))
    assert f"iteration 0 over {w.iterations}" in own.detail["evaluation"]
