"""``python -m experiments.rehearse``: a paper preset, shrunk only in scale, on 2 CPU ranks through the launchers."""
from __future__ import annotations

from pathlib import Path

import pytest

from experiments import rehearse
from trainer.config import load_config

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "configs" / "paper"


def _over(preset: str, stage: int) -> dict[str, str]:
    return dict(o.split("=", 1) for o in rehearse.scale_overrides(load_config(PAPER / preset), stage))


def test_scale_overrides_keep_the_family_and_the_offload_the_stage_allows():
    seven, small = _over("alfworld_qwen2.5-7b.yaml", 3), _over("webshop_qwen2.5-1.5b.yaml", 3)
    assert "tie_embeddings=false" in seven["model.path"] and "layers=8" in seven["model.path"]  # 7B: untied, L = -8
    assert "tie_embeddings=true" in small["model.path"] and "layers=12" in small["model.path"]  # 1.5B: tied, L = -12
    assert (seven["trainer.offload_params"], seven["trainer.offload_optimizer"]) == ("true", "true")
    two = _over("alfworld_qwen2.5-7b.yaml", 2)  # offload_params needs stage 3; the optimizer offload stays
    assert (two["trainer.offload_params"], two["trainer.offload_optimizer"]) == ("false", "true")
    assert (small["trainer.offload_params"], small["trainer.offload_optimizer"]) == ("false", "false")
    # a horizon in which the expert wins some episodes: ALFWorld's walkthroughs take 6-46 steps
    assert (seven["env.max_steps"], small["env.max_steps"]) == ("16", "6")
    # every override is a valid config: the shrunk preset loads
    cfg = load_config(PAPER / "alfworld_qwen2.5-7b.yaml", rehearse.scale_overrides(
        load_config(PAPER / "alfworld_qwen2.5-7b.yaml"), 3))
    assert (cfg.trainer.zero_stage, cfg.device, cfg.env.groups) == (3, "cpu", 2)
    # what the rehearsal does not touch stays the preset's
    base = load_config(PAPER / "alfworld_qwen2.5-7b.yaml")
    assert (cfg.trainer.lr, cfg.trainer.kl_coef, cfg.estimator.name, cfg.rollout.max_prompt_tokens) == (
        base.trainer.lr, base.trainer.kl_coef, base.estimator.name, base.rollout.max_prompt_tokens)


def _iteration(per_rank: dict[int, dict[str, float]]) -> dict[str, float]:
    row = {"iteration": 1, "loss/policy": 0.0}
    for r, w in per_rank.items():
        row.update({f"perf/rank{r}/{k}": float(v) for k, v in w.items()})
    return row


def test_the_work_check_fails_when_the_ranks_did_the_same_work():
    same = {"episodes": 2, "won": 0, "ended_early": 0, "batch_rows": 6, "batch_tokens": 96, "forwards": 9,
            "head_chunks": 18, "pad_head_chunks": 0, "extra_forwards": 0, "dummy_micro_batches": 0}
    assert not rehearse.unequal_work_check([_iteration({0: same, 1: same})] * 2).ok
    assert not rehearse.unequal_work_check([_iteration({0: same})]).ok  # one rank: nothing compared
    short = {**same, "won": 1, "ended_early": 1, "batch_rows": 4, "batch_tokens": 64, "extra_forwards": 1,
             "dummy_micro_batches": 1, "pad_head_chunks": 2}
    check = rehearse.unequal_work_check([_iteration({0: same, 1: same}), _iteration({0: same, 1: short})])
    assert check.ok, check.detail
    assert "iteration(s) [2]" in check.detail
    work = rehearse.rank_work([_iteration({0: same, 1: short})] * 2)
    assert work[1]["batch_rows"] == 8 and work[1]["extra_forwards"] == 2 and work[0]["won"] == 0
    # unequal rollouts whose forwards never padded: the paths that keep ranks in step did not run
    nopad = {**short, "extra_forwards": 0, "dummy_micro_batches": 0, "pad_head_chunks": 0}
    assert not rehearse.unequal_work_check([_iteration({0: same, 1: nopad})]).ok


def test_the_rehearsal_plays_some_episodes_by_the_expert():
    over = _over("alfworld_qwen2.5-7b.yaml", 3)
    assert over["rollout.expert_share"] == "0.5" and over["env.kwargs.expert"] == "true"
    assert "env.kwargs.expert" not in _over("textcraft_qwen2.5-1.5b.yaml", 3)  # its expert needs no switch
    assert int(over["trainer.logprob_batch_rows"]) == int(over["trainer.micro_batch_rows"]) == 1  # a row: a forward


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert rehearse.main([str(PAPER / "alfworld_qwen2.5-7b.yaml"), "--stages", "4"]) == 2
    assert "--stages" in capsys.readouterr().err
    cpu = REPO / "configs" / "cpu" / "textcraft_tiny.yaml"  # not a paper model: nothing to shrink
    assert rehearse.main([str(cpu)]) == 2
    assert "Qwen2.5" in capsys.readouterr().err


@pytest.mark.slow
def test_a_preset_passes_at_zero3(tmp_path):
    """The whole rehearsal of one preset at ZeRO-3 (1 process, torchrun, deepspeed launcher killed and resumed)."""
    res = rehearse.rehearse(str(PAPER / "textcraft_qwen2.5-1.5b.yaml"), 3, tmp_path / "work")
    failed = [(c.name, c.detail) for c in res.checks if not c.ok]
    assert res.ok, failed
    names = {c.name for c in res.checks}
    assert {"ranks do unequal work", "weights: 2 ranks = 1 process", "resumed = uninterrupted (weights)",
            "HF export loads"} <= names
    assert len(res.work) == 2 and res.work[0] != res.work[1]
    assert res.phases["time_update"] > 0 and res.phases["time_rollout"] > 0
    assert not rehearse.pids_left(tmp_path / "work")  # the killed run left no rank behind
