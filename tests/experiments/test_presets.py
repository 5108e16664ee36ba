"""Every preset under configs/ loads (no compute) and carries the reference values of docs/protocol.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer.config import load_config

REPO = Path(__file__).resolve().parents[2]
PAPER = sorted((REPO / "configs" / "paper").glob("*.yaml"))
CPU = sorted((REPO / "configs" / "cpu").glob("*.yaml"))
ESTIMATORS = ("grpo", "gigpo", "bigpo", "bipace_v", "bipace_q", "hgpo", "rloo")


def test_the_expected_presets_exist():
    assert {p.stem for p in PAPER} == {f"{e}_qwen2.5-{m}" for e in ("alfworld", "webshop", "textcraft")
                                       for m in ("1.5b", "7b")}
    names = {p.stem for p in CPU}
    assert {"textcraft_tiny", "textcraft_tiny_sft", "textcraft_demo", "alfworld_tiny_sft", "webshop_tiny_sft",
            "textcraft_smollm2", "alfworld_smollm2", "webshop_smollm2"} <= names


@pytest.mark.parametrize("path", PAPER + CPU, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_preset_loads_with_every_estimator(path):
    for est in ESTIMATORS:
        cfg = load_config(path, [f"estimator.name={est}", "seed=2"])
        assert cfg.estimator.name == est and cfg.seed == 2
        assert cfg.run_dir().parts[-2:] == (est, "seed_2")


@pytest.mark.parametrize("path", PAPER + CPU, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_value_of_a_preset_is_commented_or_obvious(path):
    """Numbers in presets carry a comment naming where they come from (docs/conventions.md: sources beside values)."""
    uncommented = []
    for line in path.read_text().splitlines():
        body = line.split("#", 1)[0]
        if re.search(r":\s*[-+]?\d", body) and "#" not in line and not body.strip().startswith(("seed:",)):
            uncommented.append(line.strip())
    # a handful of self-explanatory counters may stay bare in CPU presets; paper presets comment every number
    limit = 0 if path.parent.name == "paper" else 12
    assert len(uncommented) <= limit, uncommented


# ------------------------------------------------------------------------------------------- reference values
PROTOCOL = {  # docs/protocol.md, per environment
    "alfworld": dict(env_id="ALFWorld-v0", max_steps=50, norm="mean_std_norm", prompt=2048, mini=256,
                     eval_splits=("valid_seen", "valid_unseen")),
    "webshop": dict(env_id="WebShop-v0", max_steps=15, norm="mean_norm", prompt=4096, mini=64, eval_splits=("test",)),
    "textcraft": dict(env_id="TextCraft-v0", max_steps=50, norm="mean_std_norm", prompt=2048, mini=256,
                      eval_splits=("eval_depth2", "eval_depth3")),
}
MODEL = {  # [paper] layer and epsilon; [protocol] GPUs and offload
    "1.5b": dict(name="Qwen2.5-1.5B-Instruct", layer=-12, eps=0.05, gpus=2, offload=False),
    "7b": dict(name="Qwen2.5-7B-Instruct", layer=-8, eps=0.10, gpus=4, offload=True),
}


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_preset_reference_values(path):
    env, size = re.fullmatch(r"(\w+)_qwen2\.5-([\d.]+b)", path.stem).groups()
    p, m = PROTOCOL[env], MODEL[size]
    cfg = load_config(path)
    # environment and horizon
    assert cfg.env.id == p["env_id"] and cfg.env.max_steps == p["max_steps"]
    assert (cfg.env.groups, cfg.env.group_size) == (16, 8)
    # model: a local folder named after the model; the BiGPO layer and epsilon of the paper
    assert Path(cfg.model.path).name == m["name"] and cfg.model.short_name == m["name"]
    assert cfg.model.hidden_layer == m["layer"] and cfg.estimator.epsilon == pytest.approx(m["eps"])
    assert cfg.model.lora_rank == 0
    # rollout
    r = cfg.rollout
    assert (r.engine, r.temperature, r.top_p, r.max_response_tokens, r.history_length) == ("vllm", 1.0, 1.0, 512, 2)
    assert r.max_prompt_tokens == p["prompt"] and r.vllm_gpu_memory_utilization == pytest.approx(0.6)
    # estimator terms
    e = cfg.estimator
    assert (e.gamma, e.invalid_penalty, e.step_weight, e.norm_mode) == (0.95, 0.1, 1.0, p["norm"])
    assert (e.pace_key, e.pace_fallback, e.pace_norm, e.hgpo_levels) == ("action_tag", "either", "none", 2)
    # PPO and optimiser
    t = cfg.trainer
    assert (t.iterations, t.lr, tuple(t.betas), t.weight_decay, t.grad_clip, t.warmup_steps) == \
        (150, 1e-6, (0.9, 0.999), 0.01, 1.0, 0)
    assert (t.ppo_epochs, t.mini_batch_rows, t.clip_ratio, t.dual_clip) == (1, p["mini"], 0.2, 3.0)
    assert (t.loss_agg_mode, t.entropy_coef, t.use_kl_loss, t.kl_coef, t.kl_type) == \
        ("token-mean", 0.001, True, 0.01, "low_var_kl")
    assert t.mini_batch_rows % m["gpus"] == 0  # mini-batches count rows over all ranks
    assert cfg.env.groups % m["gpus"] == 0  # each rank owns P/W groups
    # engine: ZeRO-3 (FSDP full sharding), offload for 7B only
    assert t.zero_stage == 3 and t.offload_params is m["offload"] and t.offload_optimizer is m["offload"]
    assert t.gradient_checkpointing and t.precision == "auto"
    # validation
    ev = cfg.eval
    assert (ev.every, ev.at_start, ev.temperature, ev.max_tasks_per_split) == (5, True, 0.4, None)
    assert ev.refill is True  # the pool kept full while evaluating (same episodes and seeds, fewer turns)
    assert ev.share_start is True  # a sweep's runs from one start evaluate it once
    assert cfg.env.eval_splits is None  # the env's own: p["eval_splits"]
    assert cfg.device == "cuda"
    # the header names the launch command with the reference GPU count
    text = path.read_text()
    assert f"torchrun --nproc_per_node {m['gpus']} -m experiments.train --config configs/paper/{path.name}" in text
    assert f"--nproc {m['gpus']}" in text


def test_paper_presets_of_one_model_differ_only_where_the_environments_do():
    a = load_config(REPO / "configs/paper/alfworld_qwen2.5-7b.yaml").to_dict()
    t = load_config(REPO / "configs/paper/textcraft_qwen2.5-7b.yaml").to_dict()
    diff = {f"{s}.{k}" for s in a if isinstance(a[s], dict) for k in a[s] if a[s][k] != t[s][k]}
    diff |= {k for k in a if not isinstance(a[k], dict) and a[k] != t[k]}
    # rollout.prompt_format: verl-agent's prompts where it has them (ALFWorld, WebShop), this repo's for TextCraft
    assert diff == {"env.id", "env.kwargs", "env.num_workers", "experiment", "rollout.prompt_format"}


def test_a_paper_preset_without_the_model_folder_stops_before_compute(tmp_path, capsys):
    from experiments.train import main

    rc = main(["--config", str(REPO / "configs/paper/alfworld_qwen2.5-7b.yaml"), f"output_dir={tmp_path / 'run'}",
               f"model.path={tmp_path / 'Qwen2.5-7B-Instruct'}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "model.path=" in err and "Qwen2.5-7B-Instruct" in err and "not a Hugging Face model folder" in err
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------------- CPU presets
@pytest.mark.parametrize("name", ["textcraft_tiny_sft", "textcraft_demo", "alfworld_tiny_sft", "webshop_tiny_sft"])
def test_cpu_sft_presets_start_from_a_warm_start(name):
    cfg = load_config(REPO / "configs" / "cpu" / f"{name}.yaml")
    assert cfg.device == "cpu" and cfg.rollout.engine == "hf" and cfg.trainer.zero_stage == 0
    assert cfg.sft.enabled and cfg.sft.init_from is None  # the study/demo fills it from the cached warm start
    assert cfg.model.path.startswith("tiny:")
    assert cfg.env.group_size >= 4  # step-level groups need several trajectories per task
    assert cfg.estimator.norm_mode == PROTOCOL[cfg.env_name]["norm"]
    assert (cfg.estimator.gamma, cfg.estimator.invalid_penalty, cfg.rollout.temperature, cfg.eval.temperature) == \
        (0.95, 0.1, 1.0, 0.4)
    # the demo skips the old pass (same tokens as recompute, checked on its whole runs); the study presets keep
    # recompute, the source of their committed results
    assert cfg.trainer.old_logprobs == ("rollout" if name == "textcraft_demo" else "recompute")


def test_cpu_presets_evaluate_in_chunks():
    """eval.refill stays off on CPU: the committed results (the demo's reference rows among them) were evaluated in
    chunks, and HF's batched generation can round differently in another batch composition."""
    for path in sorted((REPO / "configs" / "cpu").glob("*.yaml")):
        assert load_config(path).eval.refill is False, path.name
        assert load_config(path).eval.share_start is False, path.name  # each reference run evaluates its own start


def test_textcraft_cpu_presets_see_what_the_warm_start_saw():
    for name in ("textcraft_tiny_sft", "textcraft_demo"):
        cfg = load_config(REPO / "configs" / "cpu" / f"{name}.yaml")
        assert cfg.env.kwargs == {"show_inventory": True}
        assert cfg.env.eval_splits in (None, ["eval_depth2", "eval_depth3"], ["eval_depth2", "eval_depth3", "train"])


@pytest.mark.parametrize("env", ["textcraft", "alfworld", "webshop"])
def test_smollm2_presets(env):
    cfg = load_config(REPO / "configs" / "cpu" / f"{env}_smollm2.yaml")
    assert cfg.model.path == "smollm2" and cfg.model.short_name == "smollm2"
    assert cfg.trainer.lr == 1e-6 and not cfg.sft.enabled
    assert cfg.estimator.norm_mode == PROTOCOL[env]["norm"]
    assert cfg.rollout.max_prompt_tokens == PROTOCOL[env]["prompt"]
