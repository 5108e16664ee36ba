"""``python -m experiments.plan_memory``: parameter counts from shapes, the paper presets' per-rank and per-node
figures against hand arithmetic, the ZeRO stages' order, and exit status 2 on bad input."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments import plan_memory as pm
from trainer.config import load_config

REPO = Path(__file__).resolve().parents[2]
P7 = REPO / "configs" / "paper" / "alfworld_qwen2.5-7b.yaml"
P15 = REPO / "configs" / "paper" / "alfworld_qwen2.5-1.5b.yaml"

# by hand from the config.json shapes: per layer q (h*h + h), k and v (h*kv + kv each), o (h*h), MLP 3*h*I,
# two norms 2h; plus the embedding V*h (twice when untied) and the final norm h
N15 = 28 * ((1536 * 1536 + 1536) + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536) \
    + 151936 * 1536 + 1536
N7 = 28 * ((3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584) \
    + 2 * 152064 * 3584 + 3584


def _plan(preset, gpus, *overrides):
    cfg = load_config(preset, list(overrides))
    return pm.plan_memory(pm.resolve_shape(cfg.model.path), pm.setup_from_config(cfg, gpus))


def _row(plan, prefix):
    (c,) = [c for c in plan.components if c.name.startswith(prefix)]
    return c


def test_parameter_counts_of_the_two_shapes():
    assert N15 == 1_543_714_304 and N7 == 7_615_616_512
    assert pm.param_count(pm.known_shape("models/Qwen2.5-1.5B-Instruct")) == N15
    assert pm.param_count(pm.known_shape("/x/Qwen2.5-7B-Instruct")) == N7
    assert pm.known_shape("smollm2") is None


def test_a_config_json_gives_the_shape(tmp_path):
    from agents.models.shapes import QWEN25_7B

    (tmp_path / "config.json").write_text(json.dumps({**QWEN25_7B, "model_type": "qwen2"}))
    assert pm.param_count(pm.resolve_shape(str(tmp_path))) == N7  # model.path folder
    assert pm.param_count(pm.resolve_shape("smollm2", str(tmp_path / "config.json"))) == N7  # --model-config
    with pytest.raises(ValueError, match="--model-config"):
        pm.resolve_shape("smollm2")


def test_7b_preset_on_4_gpus():
    p = _plan(P7, 4)
    assert p.params == N7
    # ZeRO-3 with optimizer offload: master + Adam 12 P / W bytes on the host, nothing on the GPU
    master = _row(p, "fp32 master")
    assert master.host == 12 * N7 / 4 and master.gpu == 0
    assert _row(p, "gradients").host == 4 * N7 / 4
    assert _row(p, "actor weights").host == _row(p, "reference weights").host == 2 * N7 / 4
    assert _row(p, "vLLM weights asleep").host == 2 * N7
    t = p.totals
    assert t["gpu_resident"] == 0
    assert t["gpu_rollout"] == 0.6 * pm.DEFAULT_GPU_GB * pm.GB
    # the earlier estimate: 91 + 30 + 30 + 61 = ~213 GB per node = 28 P
    assert t["host_steady_node"] == pytest.approx(28 * N7) and round(t["host_steady_node"] / 1e9) == 213
    assert t["host_checkpoint_node"] == pytest.approx(28 * N7 + 12 * N7)  # every rank's optimizer-state copy


def test_15b_preset_on_2_gpus():
    p = _plan(P15, 2)
    # ZeRO-3 without offload: everything partitioned over 2 ranks on the GPU
    assert _row(p, "fp32 master").gpu == 12 * N15 / 2
    assert _row(p, "gradients").gpu == 4 * N15 / 2
    resident = (2 + 2 + 4 + 12) * N15 / 2  # actor, reference, gradients, master + Adam
    assert p.totals["gpu_resident"] == pytest.approx(resident)
    assert p.totals["gpu_rollout"] == pytest.approx(resident + 0.6 * pm.DEFAULT_GPU_GB * pm.GB)
    assert p.totals["host_steady_node"] == pytest.approx(2 * 2 * N15)  # the two vLLM sleep copies
    # checkpoint: both optimizer-state copies (9.3 GB each) beat rank 0's 3.1 GB export shard
    assert p.totals["host_checkpoint_node"] == pytest.approx(4 * N15 + 2 * 12 * N15 / 2)


def test_activation_estimates_follow_the_stated_formula():
    s = pm.known_shape("Qwen2.5-7B-Instruct")
    st = pm.Setup(world=4, micro_batch_rows=8, logprob_batch_rows=16, tokens=2560, chunk_tokens=1024)
    tokens = 8 * 2560
    want = (28 * tokens * 3584 * 2 + tokens * (7 * 3584 + 2 * 512 + 4 * 18944) * 2 + 3 * 1024 * 152064 * 4)
    assert pm.update_activation_bytes(s, st) == want
    assert pm.update_activation_bytes(s, replace(st, gradient_checkpointing=False)) > 5 * want


def test_zero_stages_move_gpu_memory_as_expected():
    def params_grads(stage):
        p = _plan(P15, 2, f"trainer.zero_stage={stage}")
        return sum(c.gpu for c in p.components if c.name.startswith(("actor weights", "gradients")))

    assert params_grads(3) < params_grads(2) < params_grads(1)
    assert params_grads(1) == params_grads(0)
    opt = {z: _row(_plan(P15, 2, f"trainer.zero_stage={z}"), "fp32 master").gpu for z in (0, 1, 2, 3)}
    assert opt[0] == 12 * N15 and opt[1] == opt[2] == opt[3] == 12 * N15 / 2
    # offloading the optimizer moves master + Adam and the fp32 gradient partition to the host
    off = _plan(P15, 2, "trainer.offload_optimizer=true")
    assert _row(off, "fp32 master").gpu == 0 and _row(off, "fp32 master").host == 12 * N15 / 2
    assert off.totals["gpu_resident"] == pytest.approx(2 * N15)  # actor + reference partitions


def test_checkpoint_peak_of_an_export_on_every_rank_exceeds_the_streamed_one_on_8_ranks():
    p = _plan(P7, 8)
    assert p.totals["host_checkpoint_node_export_every_rank"] > p.totals["host_checkpoint_node"]
    assert p.totals["host_checkpoint_node_export_every_rank"] == pytest.approx(p.totals["host_steady_node"]
                                                                               + 8 * 2 * N7)


def test_cli_table_and_json(capsys):
    assert pm.main([str(P7), "--gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert "| fp32 master + AdamW m, v" in out and "steady 213.2 GB" in out and "streamed on rank 0" in out
    assert pm.main([str(P15), "--gpus", "2", "--json", "trainer.zero_stage=2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params"] == N15 and d["setup"]["zero_stage"] == 2
    assert d["totals_gb"]["host_steady_node"] == round(4 * N15 / 1e9, 1)


@pytest.mark.parametrize("args, message", [
    (["configs/paper/nope.yaml", "--gpus", "4"], "no such preset"),
    ([str(P7), "--gpus", "0"], "must be at least 1"),
    ([str(P7), "--gpus", "3"], "env.groups=16 is not divisible"),
    ([str(P7), "--gpus", "4", "trainer.zero_stagee=2"], "config error"),
    ([str(P7), "--gpus", "4", "model.path=smollm2"], "--model-config"),
])
def test_bad_input_exits_2_with_a_message(args, message, capsys):
    assert pm.main(args) == 2
    assert message in capsys.readouterr().err


def test_disk_and_host_of_the_7b_preset_by_hand():
    """A 7B checkpoint: the bf16 HF export (2 B x P) + the 4 ranks' fp32 master + AdamW (12 B x P in all); a run
    writes its newest checkpoint before pruning, so keep_last 2 peaks at 3; the documented 7B sweeps are 21 runs."""
    p = _plan(P7, 4)
    t = p.totals
    assert t["disk_checkpoint"] == 14 * N7 and round(t["disk_checkpoint"] / 1e9) == 107
    assert t["disk_run_peak"] == 3 * 14 * N7 and round(t["disk_run_peak"] / 1e9) == 320
    assert t["disk_run_kept"] == 2 * 14 * N7
    sweep = _plan(P7, 4)  # one run; 21 runs one at a time: 20 finished runs' kept folders + one at its peak
    cfg = load_config(P7, [])
    many = pm.plan_memory(pm.resolve_shape(cfg.model.path), pm.setup_from_config(cfg, 4, runs=21))
    assert many.totals["disk_sweep"] == 20 * 28 * N7 + 42 * N7 and 4.5e12 < many.totals["disk_sweep"] < 4.6e12
    dropped = _plan(P7, 4, "trainer.drop_optimizer_at_end=true").totals
    assert dropped["disk_run_kept"] == 2 * 2 * N7 and dropped["disk_run_peak"] == t["disk_run_peak"]
    assert sweep.totals["disk_sweep"] == t["disk_run_peak"]
    # deepspeed.initialize while vLLM is awake: the whole bf16 model on the GPU before ZeRO-3 partitions it
    assert t["gpu_initialize"] == pytest.approx(0.6 * pm.DEFAULT_GPU_GB * pm.GB + 2 * N7)
    assert round(t["gpu_initialize"] / 1e9, 1) == 66.5
    # vLLM asleep keeps its estimate on the GPU through the training phases
    assert t["gpu_update"] - _row(p, "activations, update").gpu - _row(p, "DeepSpeed buffers").gpu == pytest.approx(
        pm.DEFAULT_VLLM_ASLEEP_GB * pm.GB)
    # host: 4 ranks' processes (5 GB each + 4 env workers x 0.5 GB) on top of the checkpoint peak of 40 P
    assert t["host_processes_node"] == pytest.approx(4 * 7e9)
    assert t["host_peak_node"] == pytest.approx(40 * N7 + 28e9) and 305e9 < t["host_peak_node"] < 335e9


def test_disk_of_a_checkpoint_matches_the_files_written(tmp_path):
    """The planner's checkpoint size against the bytes ``save_checkpoint`` writes for a tiny fp32 model at ZeRO-0
    (export 4 B x P, AdamW m and v 8 B x P): equal up to the files' headers and the small RNG/state files."""
    import torch

    from tests.trainer.helpers import make_rollout_batch, tiny_qwen2
    from trainer.checkpoint import save_checkpoint
    from trainer.config import ModelConfig, TrainerConfig
    from trainer.ppo_actor import PPOActor

    eng = PPOActor(tiny_qwen2(layers=2), TrainerConfig(zero_stage=0, precision="fp32", mini_batch_rows=4,
                                                       micro_batch_rows=2, logprob_batch_rows=4, use_kl_loss=False),
                   model_cfg=ModelConfig(path="tiny:test", hidden_layer=-1))
    b = make_rollout_batch(n=4, seed=1)  # one step, so that AdamW's m and v exist
    old = eng.compute_logprobs(b.prompt_ids, b.response_ids, hidden=False)
    eng.update(b.prompt_ids, b.response_ids, torch.ones(4), old.logprobs)
    ck = save_checkpoint(tmp_path, 1, eng, keep_last=1)
    shape = pm.resolve_shape(str(ck / "model"))
    st = pm.Setup(world=1, zero_stage=0, bf16=False, use_kl_loss=False, vllm=False, keep_last=1)
    plan = pm.plan_memory(shape, st)
    on_disk = sum(f.stat().st_size for f in ck.rglob("*") if f.is_file())
    assert plan.params == sum(p.numel() for p in eng.lm.parameters())
    assert plan.totals["disk_checkpoint"] == 12 * plan.params
    assert 0 <= on_disk - plan.totals["disk_checkpoint"] < 0.02 * on_disk + 64_000
