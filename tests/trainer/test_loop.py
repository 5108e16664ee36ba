"""The training loop's pieces: schedules and seeds, model sources, the run folder, and NaN handling end to end.

The loop itself runs end to end for every estimator in ``tests/experiments/test_train_cli.py``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.config import ConfigError, RunConfig, load_config
from trainer.loop import _is_due, eval_task_list, iteration_seed
from trainer.run_folder import RunFolder, config_differences

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "configs" / "cpu" / "textcraft_tiny.yaml"


def test_schedules_include_the_last_iteration():
    assert [k for k in range(1, 8) if _is_due(k, 3, 7)] == [3, 6, 7]
    assert [k for k in range(1, 5) if _is_due(k, 0, 4)] == []  # 0 = never
    assert [k for k in range(1, 5) if _is_due(k, 1, 4)] == [1, 2, 3, 4]


def test_iteration_seed_depends_on_seed_and_iteration_only():
    seeds = {(s, k): iteration_seed(s, k) for s in (0, 1, 2) for k in (1, 2, 3)}
    assert len(set(seeds.values())) == len(seeds)
    assert iteration_seed(1, 2) == seeds[(1, 2)]
    assert all(0 <= v < 2**31 - 1 for v in seeds.values())


def test_eval_lists_are_fixed_and_shared_by_every_run():
    a = eval_task_list("eval_depth2", 58, 5, seed=12345)
    assert a == eval_task_list("eval_depth2", 58, 5, seed=12345)
    assert len(a) == 5 and len({t.index for t in a}) == 5
    assert len(eval_task_list("eval_depth2", 58, None, seed=12345)) == 58


def test_preset_loads_and_names_its_folder():
    cfg = load_config(PRESET)
    assert cfg.env.id == "TextCraft-v0" and cfg.model.path.startswith("tiny:")
    assert cfg.run_dir() == Path("results/runs/textcraft/tiny-layers-2-hidden-64-heads-2/bipace_q/seed_0")
    v = load_config(PRESET, ["variant=bipace_q_eps0.10", "estimator.epsilon=0.1", "seed=2"])
    assert v.method == "bipace_q_eps0.10" and v.run_name == "bipace_q_eps0.10__seed2"
    assert v.run_dir().parts[-2:] == ("bipace_q_eps0.10", "seed_2")
    with pytest.raises(ConfigError, match="variant='x y'"):
        load_config(PRESET, ["variant=x y"])


def test_tiny_spec_is_checked_at_load_time():
    from trainer.models import parse_tiny_spec, tiny_folder

    assert parse_tiny_spec("tiny:layers=3,hidden=64,heads=2,tie_embeddings=false").layers == 3
    assert parse_tiny_spec("tiny:").layers == parse_tiny_spec("tiny:default").layers
    assert tiny_folder("tiny:hidden=64,heads=2,layers=2").name == "layers2_hidden64_heads2"  # canonical order
    for bad, needle in [("tiny:depth=3", "unknown"), ("tiny:layers", "key=value"), ("tiny:hidden=48,heads=2", "32"),
                        ("tiny:layers=x", "layers='x'")]:
        with pytest.raises(ConfigError, match="model.path") as e:
            load_config(PRESET, [f"model.path={bad}"])
        assert needle in str(e.value)


def test_run_folder_status_and_config_compatibility(tmp_path):
    cfg = load_config(PRESET, [f"output_dir={tmp_path / 'run'}", "trainer.iterations=3"])
    folder = RunFolder(cfg)
    assert not folder.is_finished() and folder.status().status is None
    folder.write_config()
    folder.write_info("running", 1)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (info["env"], info["model"], info["method"], info["seed"], info["status"]) == (
        "textcraft", "tiny-layers-2-hidden-64-heads-2", "bipace_q", 0, "running")
    assert "git_commit" in info and info["iterations_total"] == 3
    folder.write_info("finished", 3)
    assert folder.is_finished()
    longer = RunFolder(load_config(PRESET, [f"output_dir={tmp_path / 'run'}", "trainer.iterations=5"]))
    assert not longer.is_finished()  # extending a finished run continues it
    longer.check_compatible()  # the length of a run may change ...
    other = RunFolder(load_config(PRESET, [f"output_dir={tmp_path / 'run'}", "estimator.epsilon=0.2"]))
    with pytest.raises(ConfigError, match=r"estimator.epsilon: 0.05 -> 0.2"):
        other.check_compatible()  # ... the experiment may not
    fresh = RunFolder(load_config(PRESET, [f"output_dir={tmp_path / 'run'}", "estimator.epsilon=0.2",
                                           "trainer.resume=false"]))
    fresh.check_compatible()
    kept = fresh.start_fresh()
    assert not (tmp_path / "run" / "run.json").exists()
    assert kept.name.startswith("restarted_") and (kept / "run.json").exists()  # moved, not deleted


def test_config_differences_ignore_only_resumable_keys():
    a = RunConfig().to_dict()
    b = RunConfig().to_dict()
    b["trainer"]["iterations"] = 9
    b["logging"]["wandb"] = True
    b["env"]["num_workers"] = 2
    assert config_differences(a, b) == []
    b["trainer"]["lr"] = 1.0
    b["env"]["kwargs"] = {"data_path": "/x"}
    assert config_differences(a, b) == ["env.kwargs: {} -> {'data_path': '/x'}", "trainer.lr: 1e-06 -> 1.0"]
    # a run saved before a setting existed: the setting at its default is no difference, another value is
    old = RunConfig().to_dict()
    del old["env"]["train_pool"], old["estimator"]["center_states"]
    assert config_differences(old, RunConfig().to_dict()) == []
    newer = RunConfig().to_dict()
    newer["env"]["train_pool"] = [3, 23]
    assert config_differences(old, newer) == ["env.train_pool: None -> [3, 23]"]


def test_nonfinite_hidden_states_stop_the_run_with_a_clear_error(tmp_path, monkeypatch, capsys):
    """NaN hidden states in every iteration: each optimizer step is skipped (counted and logged with the rows);
    the third in a row ends the run with exit status 3 and a failed run.json."""
    from experiments.train import main
    from trainer.ppo_actor import PPOActor

    original = PPOActor.compute_logprobs

    def poisoned(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if out.hidden is not None:
            out.hidden[0] = float("nan")
        return out

    monkeypatch.setattr(PPOActor, "compute_logprobs", poisoned)
    torch.set_num_threads(1)
    out = tmp_path / "run"
    rc = main(["--config", str(PRESET), "env.groups=2", "env.group_size=2", "env.max_steps=2",
               "rollout.max_response_tokens=8", "trainer.iterations=5", "trainer.mini_batch_rows=64", "eval.every=0",
               "logging.progress_bar=false", "logging.tensorboard=false", f"output_dir={out}"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "3 optimizer steps in a row were skipped for NaN/Inf" in err and "traj" in err
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "NaN/Inf" in info["error"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [1, 2]
    assert all(r["loss/skipped_steps"] == 1 and r["loss/optimizer_steps"] == 0 for r in lines)
    log = (out / "train.log").read_text()
    assert "non-finite hidden states in rows [0]" in log and "optimizer step skipped" in log


def test_tied_weights_are_refreshed_under_every_name():
    from tests.trainer.helpers import tiny_qwen2
    from trainer.loop import _with_aliases, tied_aliases

    aliases = tied_aliases(tiny_qwen2(tie=True))
    assert aliases == {"model.embed_tokens.weight": ["lm_head.weight"]}
    assert tied_aliases(tiny_qwen2(tie=False)) == {}
    t = torch.zeros(1)
    assert [n for n, _ in _with_aliases([("model.embed_tokens.weight", t), ("x", t)], aliases)] == [
        "model.embed_tokens.weight", "lm_head.weight", "x"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", [pytest.param(["rollout.engine=vllm"], marks=pytest.mark.vllm, id="vllm"),
                                    pytest.param(["rollout.hf_pack_weights=on"], id="hf-packed")])
def test_rollout_engine_follows_the_actor(tmp_path, engine):
    """A training iteration runs (rollout, DeepSpeed update, refresh); then, with the actor's parameters (the tied
    embedding included) moved far from the initial model's, a refresh makes the rollout engine's greedy output
    equal Hugging Face generation with the actor's weights and differ from the initial model's.
    vLLM: without the tied alias ``lm_head.weight`` in the refresh, vLLM keeps its old LM head and this fails. The HF
    engine on packed weights (``rollout.hf_pack_weights=on``): without the refresh dropping the packed copy it would
    decode with the old weights. The move is explicit because one update of a random-weight model barely moves it:
    every episode fails, so every advantage is 0 and only the entropy bonus, ~0 at a near-uniform policy, has a
    gradient."""
    import copy

    from agents.engines import SamplingConfig, make_engine
    from agents.engines.lean import packing_available
    from trainer.loop import Trainer
    from trainer.run_folder import RunFolder

    if engine == ["rollout.hf_pack_weights=on"] and not packing_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    cfg = load_config(PRESET, [*engine, "env.groups=2", "env.group_size=2", "env.max_steps=2",
                               "rollout.max_response_tokens=8", "trainer.iterations=1", "trainer.lr=0.05",
                               "eval.every=0", "logging.progress_bar=false", "logging.tensorboard=false",
                               f"output_dir={tmp_path / 'run'}"])
    with Trainer(cfg, RunFolder(cfg)) as t:
        t.run()
        assert t.tied_aliases  # the preset's tiny model ties its LM head to the embedding
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():  # every parameter, the tied embedding included, far from where it started
            for p in t.ppo_actor.lm.parameters():
                scale = max(float(p.std()) if p.numel() > 1 else 0.0, 0.1)
                p.add_(torch.randn(p.shape, generator=gen) * scale * 2)
        t.sync_weights()
        tok = t.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
                   for c in ("Goal: craft stick.", "get 1 oak log", "inventory")]
        greedy = SamplingConfig(temperature=0, max_tokens=12, stop=())
        got = [g.token_ids for g in t.rollout_engine.generate(prompts, greedy)]
        if cfg.rollout.engine == "hf":
            assert t.rollout_engine.lean_weights().packed
        actor = copy.deepcopy(t.ppo_actor.lm).eval()
        actor.config.use_cache = True
        want = [g.token_ids for g in make_engine("hf", actor, tokenizer=tok, pack_weights="off").generate(prompts,
                                                                                                         greedy)]
        before = [g.token_ids for g in make_engine("hf", t.model_dir, dtype="float32").generate(prompts, greedy)]
    assert got == want
    assert want != before


def test_worker_restarts_are_logged_and_a_nan_reward_stops_with_status_3_naming_the_task(tmp_path, monkeypatch,
                                                                                         capsys):
    """Iteration 1: an env worker restart (as the pool records one) is a console warning and
    ``rollout/worker_restarts`` 1 in metrics.jsonl. Iteration 2: the env returns a NaN reward, and the run stops with
    exit status 3 and a message naming the row, the task and the environment (not a traceback)."""
    from envs.pool import EnvPool, StepResult
    from experiments.train import main

    resets = []
    reset, step = EnvPool.reset, EnvPool.step

    def counted_reset(self, *args, **kwargs):
        resets.append(1)
        return reset(self, *args, **kwargs)

    def faulty_step(self, indices, actions):
        out = step(self, indices, actions)
        if len(resets) == 1 and not self.restart_log:
            self.restarts += 1
            self.restart_log.append("env worker 0 (pid 1) died (exit code -9; EOFError), exit code -9: restart 1")
        if len(resets) == 2:
            out[0] = StepResult(out[0].obs, float("nan"), *out[0][2:])
        return out

    monkeypatch.setattr(EnvPool, "reset", counted_reset)
    monkeypatch.setattr(EnvPool, "step", faulty_step)
    torch.set_num_threads(1)
    out = tmp_path / "run"
    rc = main(["--config", str(PRESET), "env.groups=2", "env.group_size=2", "env.max_steps=2", "env.num_workers=0",
               "rollout.max_response_tokens=8", "trainer.iterations=3", "trainer.mini_batch_rows=64", "eval.every=0",
               "logging.progress_bar=false", "logging.tensorboard=false", f"output_dir={out}"])
    captured = capsys.readouterr()
    assert rc == 3, captured.err
    assert "warning: iteration 1: env worker 0 (pid 1) died" in captured.out
    assert "textcraft environment returned reward nan for row 0 (task Task(split='train'" in captured.err
    assert "Traceback" not in captured.err
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["rollout/worker_restarts"]) for r in lines] == [(1, 1.0)]


def test_an_output_dir_that_cannot_be_created_is_an_exit_2_message(capsys):
    from experiments.train import main

    rc = main(["--config", str(PRESET), "output_dir=/proc/nope", "logging.tensorboard=false"])
    err = capsys.readouterr().err
    assert rc == 2 and "/proc/nope" in err and "output_dir" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("engine", [pytest.param("vllm", marks=pytest.mark.vllm), "hf"])
def test_a_skipped_weight_refresh_stops_the_run(tmp_path, engine):
    """``rollout.max_logprob_diff``: the rollout engine returns its sampled tokens' log-probs (vLLM too), the loop
    logs their difference to the actor's, and when the actor has moved but the refresh was skipped, the next
    iteration stops with a message naming the check. The move is explicit: one update of a random-weight model
    barely moves it (every episode fails, so every advantage is 0)."""
    from trainer.loop import Trainer, TrainingFailed

    cfg = load_config(PRESET, [f"rollout.engine={engine}", "env.groups=2", "env.group_size=2", "env.max_steps=2",
                               "rollout.max_response_tokens=8", "trainer.iterations=3", "eval.every=0",
                               "logging.progress_bar=false", "logging.tensorboard=false",
                               f"output_dir={tmp_path / 'run'}"])
    with Trainer(cfg, RunFolder(cfg)) as t:
        t.setup()
        first = t.train_iteration(1)
        assert first["rollout/logprob_abs_diff"] < 1e-4  # the engine samples with the actor's weights
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():  # the actor moves (as updates would), the engine is not told
            for p in t.ppo_actor.lm.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * max(float(p.std()) if p.numel() > 1 else 0.0, 0.1))
        t.rollout_engine.update_weights = lambda named: 0  # the refresh that does not take
        t.sync_weights()
        with pytest.raises(TrainingFailed, match=r"rollout\.max_logprob_diff=0\.1: the engine samples with other "
                                                 r"weights than the actor's"):
            t.train_iteration(2)


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_loops_refilling_evaluation_gives_the_chunked_metrics(tmp_path, world_size):
    """``Trainer.evaluate`` with ``eval.refill``: one refilling pass over both eval splits (this rank's share) gives
    the chunked evaluation's metrics and episode counts in fewer generate calls (the scripted engine's answers
    depend on the sampling seed only, so the batch composition cannot change them)."""
    from types import MethodType, SimpleNamespace

    from transformers import AutoTokenizer

    from agents.engines import SamplingConfig
    from agents.models.tiny import TinyModelConfig, build_tiny_model
    from agents.rollout import Agent
    from envs.pool import EnvPool, eval_tasks
    from tests.agents.rollout_helpers import ScriptedEngine, tagged
    from trainer.config.sections import EvalConfig
    from trainer.loop import Trainer

    tok = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny", TinyModelConfig(layers=1))))
    seen = {}
    for refill in (False, True):
        counts: dict = {}
        engine = ScriptedEngine(tok, lambda call, j, prompt, seed: tagged("inc") if seed % 3 else "no tags")
        engine.wake = engine.sleep = lambda: None
        with EnvPool("tests.envs.helpers:CounterEnv", 3, mode="inline", env_kwargs={"max_steps": 6}) as pool:
            t = SimpleNamespace(
                cfg=SimpleNamespace(eval=EvalConfig(refill=refill, seed=3)), rank=world_size - 1,
                world_size=1, rollout_engine=engine, eval_sampling=SamplingConfig(temperature=1.0, max_tokens=8),
                agent=Agent(pool=pool, engine=engine, tokenizer=tok, max_prompt_tokens=1024, env_name="counter"),
                eval_tasks={"train": eval_tasks("train", 5, seed=3), "eval": eval_tasks("eval", 3, seed=3)},
                evals_done=[], pool=pool, _family_cache={})
            t.world_size = world_size
            t._eval_count = MethodType(Trainer._eval_count, t)
            t._family = MethodType(Trainer._family, t)
            t._reduce_weighted = lambda values, weights, counts=counts: counts.update(weights) or values
            out = Trainer.evaluate(t, 0)
        seen[refill] = (out, counts if world_size > 1 else None, len(engine.calls))
    assert seen[True][:2] == seen[False][:2] and seen[True][2] < seen[False][2]
    assert set(seen[True][0]) >= {"eval/counter/train/success_rate", "eval/counter/eval/num_episodes"}



def test_the_engine_sleeps_once_per_iteration_and_is_asleep_whenever_the_trainer_needs_the_memory(tmp_path,
                                                                                                   monkeypatch):
    """Sleep and wake of the rollout engine over a run of 4 iterations (evaluation at 0, 2 and 4; checkpoints at 3
    and 4): awake for every generate call and every weight refresh, asleep for every log-prob pass, update and
    checkpoint, and one wake per iteration that neither evaluates nor saves (the refresh leaves the engine awake
    for the next rollout instead of a sleep and a wake in between). The events are recorded on the real HF engine,
    whose sleep is a no-op on CPU."""
    import trainer.checkpoint as checkpoint_mod
    from trainer.loop import Trainer

    cfg = load_config(PRESET, ["env.groups=2", "env.group_size=2", "env.max_steps=2", "env.num_workers=0",
                               "rollout.max_response_tokens=8", "trainer.iterations=4", "trainer.save_every=3",
                               "eval.every=2", "eval.max_tasks_per_split=2", "logging.progress_bar=false",
                               "logging.tensorboard=false", f"output_dir={tmp_path / 'run'}"])
    torch.set_num_threads(1)
    events: list[str] = []
    awake = [True]  # an engine is built awake

    def record(name, fn, need):
        def wrapped(*args, **kwargs):
            assert awake[0] is need, f"{name} with the engine {'asleep' if need else 'awake'}: {events}"
            events.append(name)
            return fn(*args, **kwargs)
        return wrapped

    def switch(to, fn):
        def wrapped():
            if awake[0] is not to:
                events.append("wake" if to else "sleep")
            awake[0] = to
            fn()
        return wrapped

    monkeypatch.setattr(checkpoint_mod, "save_checkpoint",
                        record("checkpoint", checkpoint_mod.save_checkpoint, need=False))
    with Trainer(cfg, RunFolder(cfg)) as t:
        t.setup()
        e, a = t.rollout_engine, t.ppo_actor
        e.wake, e.sleep = switch(True, e.wake), switch(False, e.sleep)
        e.generate = record("generate", e.generate, need=True)
        e.update_weights = record("refresh", e.update_weights, need=True)
        a.compute_logprobs = record("logprobs", a.compute_logprobs, need=False)
        a.update = record("update", a.update, need=False)
        t.run()
    after_update: list[list[str]] = []  # what the engine did between update k and update k+1 (or the end)
    for ev in events:
        if ev == "update":
            after_update.append([])
        elif after_update and ev in ("wake", "sleep", "checkpoint"):
            after_update[-1].append(ev)
    assert events.count("checkpoint") == 2 and len(after_update) == 4
    # after iteration 1 (no evaluation, no checkpoint): the refresh's wake, then the next rollout's sleep; before,
    # the refresh slept and the rollout woke it again: wake, sleep, wake, sleep
    assert after_update[0] == ["wake", "sleep"]
    assert after_update[1] == ["wake", "sleep"]  # the evaluation at 2 and the next rollout run awake in between
    assert after_update[2] == ["wake", "sleep", "checkpoint", "wake", "sleep"]  # asleep for the save
    assert after_update[3] == ["wake", "sleep", "checkpoint"]  # evaluation at 4, then asleep for the save


def test_one_iteration_builds_one_step_batch_and_checks_each_thing_once(tmp_path, monkeypatch):
    """Per iteration: the rollout batch is validated once (where it is built), one ``StepBatch`` is built and handed
    to the estimator, the grouping scan and the batch probe alike, and the estimator config is checked only when a
    config is built (``epsilon: auto``: once, when the calibrated value is frozen), never per batch."""
    import groundtruth.live
    from agents.batch import RolloutBatch
    from estimators import EstimatorConfig, StepBatch
    from experiments.train import main
    from trainer.loop import Trainer

    counts = {"rollout_checks": 0, "step_batches": 0, "config_checks": 0}

    def counting(cls, name, key):
        real = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            counts[key] += 1
            return real(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, wrapped)

    counting(RolloutBatch, "validate", "rollout_checks")
    counting(StepBatch, "__init__", "step_batches")
    counting(EstimatorConfig, "validate", "config_checks")
    per_iteration = []
    real_iteration = Trainer.train_iteration

    def iteration(self, it):
        before = dict(counts)
        out = real_iteration(self, it)
        per_iteration.append({k: counts[k] - before[k] for k in counts})
        return out
    monkeypatch.setattr(Trainer, "train_iteration", iteration)
    seen = []

    def probe(trainer, batch, step_batch):
        seen.append(step_batch)
        return {}
    monkeypatch.setattr(groundtruth.live, "probe_for", lambda cfg: probe)
    torch.set_num_threads(1)
    out = tmp_path / "run"
    rc = main(["--config", str(PRESET), "env.groups=2", "env.group_size=2", "env.max_steps=2",
               "rollout.max_response_tokens=8", "trainer.iterations=2", "trainer.mini_batch_rows=64", "eval.every=0",
               "eval.at_start=false", "estimator.epsilon=auto", "logging.grouping_scan=true",
               "logging.progress_bar=false", "logging.tensorboard=false", f"output_dir={out}"])
    assert rc == 0
    assert per_iteration == [{"rollout_checks": 1, "step_batches": 1, "config_checks": 1},
                             {"rollout_checks": 1, "step_batches": 1, "config_checks": 0}]
    assert [type(b) for b in seen] == [StepBatch, StepBatch] and all(b.hidden is not None for b in seen)
    assert len((out / "grouping_scan.jsonl").read_text().splitlines()) == 2
