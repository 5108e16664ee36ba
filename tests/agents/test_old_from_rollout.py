"""``trainer.old_logprobs: rollout``: the old pass's log-probs and BiGPO hidden states taken from the rollout.

On real rollout rows (TextCraft, the tiny model, G copies per goal, several turns) the sampler's log-probs and the
prompt forward's hidden state (``SamplingConfig.hidden_layer``) equal what the trainer's own pass over
[prompt | response] computes, with the engine's prompt prefixes shared or not and either decode step; capturing
the hidden state changes no sampled token; bad input is named."""
from __future__ import annotations

import pytest
import torch

from agents.engines import SamplingConfig
from agents.engines.hf import HFEngine
from agents.rollout import Agent, collect, prompt_config_for
from envs.pool import EnvPool, TaskSampler
from trainer.loop import TrainingFailed, old_from_rollout

LAYER = -2


def _rollout(engine, hidden_layer, seed=2):
    tok = engine.tokenizer
    with EnvPool("TextCraft-v0", 8, env_kwargs={"max_steps": 4}, mode="inline") as pool:
        tasks = TaskSampler("train", pool.num_tasks("train"), seed=3).sample(2)
        batch, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                 prompt_config=prompt_config_for(tok, 2048), max_prompt_tokens=2048), tasks,
                           group_size=4,
                           sampling=SamplingConfig(temperature=1.0, max_tokens=16, hidden_layer=hidden_layer),
                           seed=seed)
    return batch


@pytest.fixture(scope="module")
def trainer_engine(tiny_dir):
    from agents.models import load_model
    from trainer.config import ModelConfig, TrainerConfig
    from trainer.ppo_actor import PPOActor, shutdown_distributed

    cfg = TrainerConfig(zero_stage=0, logprob_batch_rows=8, use_kl_loss=False)
    eng = PPOActor(load_model(tiny_dir, dtype="float32", device="cpu"), cfg,
                   model_cfg=ModelConfig(path="tiny", hidden_layer=LAYER), temperature=1.0, device="cpu")
    yield eng
    shutdown_distributed()


@pytest.mark.parametrize("decode, share", [("lean", True), ("hf", False)])
def test_rollout_logprobs_and_hidden_equal_the_trainer_pass(tiny_dir, trainer_engine, decode, share):
    engine = HFEngine(tiny_dir, dtype="float32", decode=decode, share_prefixes=share)  # the trainer's weights
    assert engine.decode == decode
    batch = _rollout(engine, LAYER)
    assert len(batch) >= 16 and batch.rollout_hidden is not None
    assert batch.rollout_hidden.shape == (len(batch), engine.model.config.hidden_size)
    got = old_from_rollout(batch)
    want = trainer_engine.compute_logprobs(batch.prompt_ids, batch.response_ids, pad_id=engine.pad_id)
    assert torch.equal(got.mask, want.mask)
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.hidden, want.hidden, atol=1e-5, rtol=1e-5)
    assert got.nonfinite_rows.numel() == 0
    # a wrong layer would not pass: the last layer's state differs from layer -2's by far more than the tolerance
    other = _rollout(engine, -1)
    assert float((other.rollout_hidden - want.hidden).abs().max()) > 1e-2


def test_capturing_the_hidden_state_changes_no_token(tiny_dir):
    engine = HFEngine(tiny_dir, dtype="float32")
    a, b = _rollout(engine, None, seed=5), _rollout(engine, LAYER, seed=5)
    assert a.rollout_hidden is None and b.rollout_hidden is not None
    assert [r.tolist() for r in a.response_ids] == [r.tolist() for r in b.response_ids]
    assert [r.tolist() for r in a.rollout_logprobs] == [r.tolist() for r in b.rollout_logprobs]
    sub = b.select([3, 0])  # the hidden state travels with its row
    assert torch.equal(sub.rollout_hidden, b.rollout_hidden[[3, 0]])


def test_bad_input_is_named(tiny_dir):
    engine = HFEngine(tiny_dir, dtype="float32")
    prompt = engine.tokenizer("Goal: craft stick.").input_ids
    with pytest.raises(ValueError, match="hidden_layer=5 is out of range.*3 entries"):
        engine.generate([prompt], SamplingConfig(max_tokens=2, hidden_layer=5), seeds=[0])
    batch = _rollout(engine, LAYER)
    no_lp = batch.select(range(len(batch)))
    no_lp.rollout_logprobs = None
    with pytest.raises(TrainingFailed, match="no sampler log-probs"):
        old_from_rollout(no_lp)
    short = batch.select(range(len(batch)))
    short.rollout_logprobs = [lp[:-1] if i == 2 else lp for i, lp in enumerate(short.rollout_logprobs)]
    with pytest.raises(TrainingFailed, match="row 2 has"):
        old_from_rollout(short)
    bad = batch.select(range(len(batch)))
    bad.rollout_hidden = bad.rollout_hidden.clone()
    bad.rollout_hidden[4, 0] = float("nan")
    bad.rollout_logprobs = [lp.clone() for lp in bad.rollout_logprobs]
    bad.rollout_logprobs[1][0] = float("inf")
    assert old_from_rollout(bad).nonfinite_rows.tolist() == [1, 4]
