"""``benchmarks.rollout_speed.GenerateForFinished``: the reference stack's rollout (every env prompted every turn,
finished envs' generations discarded) rebuilt around the live-only ``agents.rollout.collect``: the same rows, and
exactly the prompts and seeds the reference stack would have generated for the finished envs."""
from __future__ import annotations

import pytest
import torch

from agents.engines import make_engine
from agents.rollout import Agent, RolloutTrace, collect, sample_seed
from benchmarks.rollout_speed import GenerateForFinished
from envs.pool import Task
from tests.agents.conftest import tiny_dir  # noqa: F401  (session fixture: the tiny model)
from tests.agents.rollout_helpers import ScriptedEngine
from tests.agents.test_rollout import SHORT, _counter_script, env_pool


@pytest.fixture(scope="module")
def tok(request):
    return make_engine("hf", request.getfixturevalue("tiny_dir"), dtype="float32").tokenizer


def test_generate_for_finished_prompts_every_env_and_changes_no_row(tok, request):
    P, G = 3, 3
    tasks = [Task("train", k, 100 + k) for k in (0, 2, 4)]  # counter targets 2, 4, 6
    runs = {}
    for wasteful in (False, True):
        engine = ScriptedEngine(tok, _counter_script)
        trace = RolloutTrace()
        with env_pool("counter", P * G, request, max_steps=6) as pool:
            outer = GenerateForFinished(engine, pool, tasks, G, seed=3) if wasteful else engine
            agent = Agent(pool=pool, engine=outer, tokenizer=tok, max_prompt_tokens=1024, env_name="counter")
            batch, metrics = collect(agent, tasks, group_size=G, sampling=SHORT, seed=3, trace=trace)
        runs[wasteful] = (batch, metrics, trace, engine, outer)
    batch, metrics, trace, engine, _ = runs[False]
    wb, wm, wtrace, wengine, wrapper = runs[True]
    avoided = metrics["rollout/generations_avoided"]
    assert avoided > 0 and wm["rollout/generations_avoided"] == avoided
    # every env is prompted at every turn, in slot order; the live ones with the rollout's own prompts and seeds
    assert [len(c) for c in wengine.calls] == [P * G] * len(engine.calls)
    for t, (live, prompts, seeds) in enumerate(zip(trace.prompts_per_turn, wengine.calls, wengine.seeds)):
        assert [prompts[s] for s in live] == engine.calls[t] and [seeds[s] for s in live] == engine.seeds[t]
        for s in set(range(P * G)) - set(live):  # finished: its last prompt again, with this turn's seed
            task, copy = tasks[s // G], s % G
            last = max(i for i in range(len(batch)) if int(batch.group_id[i]) * G + int(batch.traj_id[i]) == s)
            assert prompts[s] == batch.prompt_ids[last].tolist()
            assert seeds[s] == sample_seed(3, task.split, task.index, task.seed, copy, t)
    assert wrapper.wasted_prompts == avoided and wrapper.wasted_tokens > 0
    assert wb.response_text == batch.response_text and torch.equal(wb.reward, batch.reward)
    assert all(torch.equal(x, y) for x, y in zip(wb.prompt_ids, batch.prompt_ids))
    assert wtrace.prompts_per_turn == trace.prompts_per_turn
