"""The group rollout with the vLLM engine (CPU build in .venv-vllm; `make test` runs these there): rows every
estimator accepts, seed-reproducible, and the same greedy rollout as the HF engine."""
from __future__ import annotations

import pytest
import torch

from agents.engines import SamplingConfig, make_engine
from agents.rollout import Agent, collect, prompt_config_for
from envs.pool import EnvPool, Task

pytestmark = pytest.mark.vllm

TASKS = [Task("train", 3, 11), Task("train", 8, 12)]


@pytest.fixture(scope="module")
def engines(tiny_dir):
    vllm_engine = make_engine("vllm", tiny_dir, dtype="float32", max_model_len=2048)
    yield vllm_engine, make_engine("hf", tiny_dir, dtype="float32")
    vllm_engine.close()


def _collect(engine, seed, sampling):
    tok = engine.tokenizer
    with EnvPool("TextCraft-v0", 4, mode="inline", env_kwargs={"max_steps": 2}) as pool:
        return collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=prompt_config_for(tok, 1024),
                             max_prompt_tokens=1024), TASKS, group_size=2, sampling=sampling, seed=seed)


def test_vllm_collect_feeds_every_estimator_and_reproduces(engines):
    from estimators import ESTIMATORS, EstimatorConfig, compute_advantages
    from trainer.forward import pack_rows, policy_forward

    vllm_engine, hf_engine = engines
    sampling = SamplingConfig(temperature=1.0, max_tokens=10)
    batch, metrics = _collect(vllm_engine, 0, sampling)
    again, _ = _collect(vllm_engine, 0, sampling)
    other, _ = _collect(vllm_engine, 1, sampling)
    assert len(batch) == 8 and len(batch.rollout_logprobs) == 8  # the sampled tokens' log-probs
    assert all(len(lp) == len(r) for lp, r in zip(batch.rollout_logprobs, batch.response_ids))
    assert batch.step.tolist() == [0, 1] * 4 and batch.done.tolist() == [False, True] * 4
    assert batch.response_text == again.response_text
    assert all(torch.equal(a, b) for a, b in zip(batch.response_ids, again.response_ids))
    assert batch.response_text != other.response_text
    assert metrics["rollout/gen_tokens"] == sum(len(r) for r in batch.response_ids) > 0
    assert metrics["perf/gen_tokens_per_s"] > 0
    with torch.no_grad():
        out = policy_forward(hf_engine.model, pack_rows(batch.prompt_ids, batch.response_ids),
                            hidden_layer=-2, compute_entropy=False)
    step_batch = batch.to_step_batch(hidden=out.hidden)
    for name in ESTIMATORS:
        res = compute_advantages(step_batch, EstimatorConfig(name=name))
        assert torch.isfinite(res.advantages).all(), name


def test_vllm_greedy_rollout_equals_hf_greedy_rollout(engines):
    vllm_engine, hf_engine = engines
    greedy = SamplingConfig(temperature=0, max_tokens=10)
    v, _ = _collect(vllm_engine, 0, greedy)
    h, _ = _collect(hf_engine, 0, greedy)
    assert v.response_text == h.response_text
    assert all(torch.equal(a, b) for a, b in zip(v.prompt_ids, h.prompt_ids))
