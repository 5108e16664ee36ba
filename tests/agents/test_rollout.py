"""The multi-turn group rollout (agents.rollout): rows every estimator accepts on all three envs, seeds,
live-only prompting, malformed generations, env errors, the expert replayed through the rollout, prompt
cuts, evaluation metrics, and the trainer's hidden-state capture over the rollout's rows."""
from __future__ import annotations

import pytest
import torch

from agents.engines import SamplingConfig, make_engine
from agents.projection import NOOP_ACTION
from agents.prompts import PromptConfig
from agents.rollout import (
    INVALID_ACTION_TEXT,
    PROMPT_CUT_MARKER,
    Agent,
    RolloutTrace,
    collect,
    encode_prompt,
    evaluate,
    prompt_config_for,
    sample_seed,
)
from envs.pool import EnvPool, Task, TaskSampler, eval_tasks
from tests.agents.rollout_helpers import ExpertEngine, ScriptedEngine, tagged
from tests.envs.conftest import alfworld_data  # noqa: F401  (session fixture: a small generated game set)
from tests.envs.webshop_helpers import small_catalogue

COUNTER = "tests.envs.helpers:CounterEnv"
SHORT = SamplingConfig(temperature=1.0, max_tokens=12)


@pytest.fixture(scope="module")
def hf_engine(tiny_dir):
    return make_engine("hf", tiny_dir, dtype="float32")


@pytest.fixture(scope="module")
def tok(hf_engine):
    return hf_engine.tokenizer


@pytest.fixture(scope="module")
def webshop_dir(tmp_path_factory):
    return small_catalogue(tmp_path_factory)


def env_pool(env: str, n: int, request, max_steps: int | None = None, mode: str = "inline", num_workers=None,
             **extra) -> EnvPool:
    """A pool of ``n`` envs; ``extra`` goes to the env constructor."""
    kwargs = dict(extra)
    pool_kw = {"mode": mode, "num_workers": num_workers}
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if env == "alfworld":
        kwargs.setdefault("data_path", str(request.getfixturevalue("alfworld_data")))
        return EnvPool("ALFWorld-v0", n, env_kwargs=kwargs, **pool_kw)
    if env == "webshop":
        kwargs.update(data_dir=str(request.getfixturevalue("webshop_dir")), num_test_goals=50,
                      reward={"noun_extractor": "heuristic"})
        return EnvPool("WebShop-v0", n, env_kwargs=kwargs, **pool_kw)
    if env == "textcraft":
        return EnvPool("TextCraft-v0", n, env_kwargs=kwargs, **pool_kw)
    return EnvPool(COUNTER, n, env_kwargs=kwargs, **pool_kw)


def check_row_structure(batch, n_groups, group_size):
    """Rows sorted by (group, trajectory, step); each trajectory: steps 0..L-1, done exactly on its last row,
    one won/family/task value."""
    assert len(batch) > 0
    keys = list(zip(batch.group_id.tolist(), batch.traj_id.tolist(), batch.step.tolist()))
    assert keys == sorted(keys)
    trajs = {}
    for i, (g, c, _t) in enumerate(keys):
        trajs.setdefault((g, c), []).append(i)
    assert set(trajs) == {(g, c) for g in range(n_groups) for c in range(group_size)}
    for rows in trajs.values():
        assert batch.step[rows].tolist() == list(range(len(rows)))
        assert batch.done[rows].tolist() == [False] * (len(rows) - 1) + [True]
        assert len({bool(batch.won[i]) for i in rows}) == 1
        assert len({batch.task_family[i] for i in rows}) == 1 and len({batch.task_id[i] for i in rows}) == 1
    return trajs


# ---------------------------------------------------------------------------------------------- tiny model
@pytest.mark.parametrize("env", ["textcraft", "alfworld", "webshop"])
def test_tiny_model_rollout_feeds_every_estimator(env, request, hf_engine, tok):
    from estimators import ESTIMATORS, EstimatorConfig, compute_advantages
    from trainer.forward import pack_rows, policy_forward

    P, G = 2, 2
    with env_pool(env, P * G, request, max_steps=3, **({"expert": False} if env == "alfworld" else {})) as pool:
        split = pool.splits[0]
        tasks = TaskSampler(split, pool.num_tasks(split), seed=1).sample(P)
        cfg = prompt_config_for(tok, 2048)
        batch, metrics = collect(Agent(pool=pool, engine=hf_engine, tokenizer=tok, prompt_config=cfg,
                                       max_prompt_tokens=2048), tasks, group_size=G, sampling=SHORT, seed=0)
        families = [pool.call([g * G], "task_family_of", t.split, t.index)[0] for g, t in enumerate(tasks)]
    trajs = check_row_structure(batch, P, G)
    assert len(batch) == P * G * 3  # random weights never win: every episode runs to the horizon
    assert batch.task_family == [families[g] for g in batch.group_id.tolist()]
    assert batch.task_id == [tasks[g].task_id for g in batch.group_id.tolist()]
    # what the model saw: the chat template and the env's prompt wording; step 0 shows the task
    first = tok.decode(batch.prompt_ids[0])
    assert first.startswith("<|im_start|>user\nYou are") and first.endswith("<|im_start|>assistant\n")
    # random weights: (almost) everything is invalid, and invalid rows sent the no-op
    assert metrics["rollout/valid_action_rate"] == pytest.approx(batch.valid.float().mean().item())
    assert metrics["rollout/valid_action_rate"] < 0.5
    for i in range(len(batch)):
        if not batch.valid[i]:
            assert batch.action[i] == NOOP_ACTION
        assert len(batch.response_ids[i]) == len(batch.rollout_logprobs[i]) <= SHORT.max_tokens
        assert batch.response_truncated[i] == (len(batch.response_ids[i]) == SHORT.max_tokens
                                               and tok.eos_token_id not in batch.response_ids[i].tolist()
                                               and not batch.response_text[i].endswith("</action>"))
    assert batch.reward.eq(0).all() and not batch.won.any()
    # rows of a group start in the same state (same task and env seed)
    for g in range(P):
        assert batch.anchor_obs[trajs[(g, 0)][0]] == batch.anchor_obs[trajs[(g, 1)][0]]
        assert batch.state_key[trajs[(g, 0)][0]] == batch.state_key[trajs[(g, 1)][0]]
    # metrics
    assert metrics["rollout/success_rate"] == 0.0 and metrics["rollout/episode_length"] == 3.0
    assert metrics["rollout/num_rows"] == len(batch) and metrics["rollout/generations_avoided"] == 0
    assert metrics["rollout/gen_tokens"] == sum(len(r) for r in batch.response_ids)
    assert metrics["rollout/prompt_truncated_frac"] == 0.0
    for f in set(families):
        assert metrics[f"rollout/family/{f}/success_rate"] == 0.0
    for key in ("perf/gen_tokens_per_s", "perf/env_steps_per_s", "perf/rollout_generate_s", "perf/rollout_env_s",
                "perf/rollout_prompt_s", "perf/rollout_s"):
        assert metrics[key] > 0
    # the trainer's old-log-prob pass gives the hidden states; every registered estimator takes the rows
    with torch.no_grad():
        out = policy_forward(hf_engine.model, pack_rows(batch.prompt_ids, batch.response_ids),
                            hidden_layer=-2, compute_entropy=False)
    # the sampler's log-probs are those of the actor's forward (temperature 1, same weights)
    for i in range(len(batch)):
        n = len(batch.response_ids[i])
        torch.testing.assert_close(out.logprobs[i, :n], batch.rollout_logprobs[i], atol=1e-4, rtol=1e-4)
    step_batch = batch.to_step_batch(hidden=out.hidden)
    for name in ESTIMATORS:
        res = compute_advantages(step_batch, EstimatorConfig(name=name))
        assert res.advantages.shape == (len(batch),) and torch.isfinite(res.advantages).all(), name


def test_hidden_states_of_trainer_pass_over_rollout_rows_equal_separate_forward(hf_engine, tok, request):
    """The trainer's hook captures, for each of these rows, the layer-L state at the last prompt token: equal to a
    separate ``output_hidden_states=True`` forward over the prompt alone."""
    from trainer.forward import pack_rows, policy_forward

    with env_pool("textcraft", 4, request, max_steps=2) as pool:
        tasks = TaskSampler("train", pool.num_tasks("train"), seed=5).sample(2)
        batch, _ = collect(Agent(pool=pool, engine=hf_engine, tokenizer=tok,
                                 prompt_config=prompt_config_for(tok, 2048), max_prompt_tokens=2048), tasks,
                           group_size=2, sampling=SHORT, seed=1)
    model = hf_engine.model
    packed = pack_rows(batch.prompt_ids, batch.response_ids, pad_id=hf_engine.pad_id)
    for layer in (-1, -2, -3):
        with torch.no_grad():
            captured = policy_forward(model, packed, hidden_layer=layer, compute_entropy=False).hidden
            separate = torch.stack([model(p[None], output_hidden_states=True).hidden_states[layer][0, -1]
                                    for p in batch.prompt_ids])
        assert captured.shape == (len(batch), model.config.hidden_size)
        torch.testing.assert_close(captured, separate.float(), atol=1e-5, rtol=1e-5)


def test_identical_seeds_give_identical_rollouts(hf_engine, tok, request):
    def run(seed, tasks):
        with env_pool("textcraft", 4, request, max_steps=2) as pool:
            return collect(Agent(pool=pool, engine=hf_engine, tokenizer=tok,
                                 prompt_config=prompt_config_for(tok, 2048), max_prompt_tokens=2048), tasks,
                           group_size=2, sampling=SamplingConfig(max_tokens=8), seed=seed)[0]

    tasks = [Task("train", 3, 11), Task("train", 8, 12)]
    a, b, c = run(7, tasks), run(7, tasks), run(8, tasks)
    assert a.response_text == b.response_text and a.anchor_obs == b.anchor_obs
    assert all(torch.equal(x, y) for x, y in zip(a.prompt_ids + a.response_ids, b.prompt_ids + b.response_ids))
    assert all(torch.equal(x, y) for x, y in zip(a.rollout_logprobs, b.rollout_logprobs))
    assert torch.equal(a.reward, b.reward) and torch.equal(a.valid, b.valid)
    assert a.response_text != c.response_text
    # copies of a group sample with different seeds
    assert a.response_text[0] != a.response_text[3]
    # a group's rows do not depend on the other groups of the batch (seeds come from the task, not the slot)
    d = run(7, tasks[1:] + tasks[:1])
    assert sorted(a.response_text) == sorted(d.response_text)


def test_sample_seed_is_a_function_of_run_task_copy_turn():
    base = sample_seed(0, "train", 3, 11, 0, 0)
    assert base == sample_seed(0, "train", 3, 11, 0, 0)
    others = {sample_seed(*k) for k in [(1, "train", 3, 11, 0, 0), (0, "eval", 3, 11, 0, 0), (0, "train", 4, 11, 0, 0),
                                       (0, "train", 3, 12, 0, 0), (0, "train", 3, 11, 1, 0), (0, "train", 3, 11, 0, 1)]}
    assert base not in others and len(others) == 6
    assert 0 <= base < 2**31 - 1


# ---------------------------------------------------------------------------------------------- live envs only
def _counter_script(call, j, prompt, seed):
    """'inc' for two thirds of the seeds, a tagless reply otherwise: episode lengths differ within groups."""
    return tagged("inc") if seed % 3 else "let me think"


def test_finished_episodes_never_generate_again(tok, request):
    P, G = 3, 3
    tasks = [Task("train", k, 100 + k) for k in (0, 2, 4)]  # counter targets 2, 4, 6
    engine = ScriptedEngine(tok, _counter_script)
    trace = RolloutTrace()
    with env_pool("counter", P * G, request, max_steps=6) as pool:
        agent = Agent(pool=pool, engine=engine, tokenizer=tok, max_prompt_tokens=1024, env_name="counter")
        batch, metrics = collect(agent, tasks, group_size=G, sampling=SHORT, seed=3, trace=trace)
    trajs = check_row_structure(batch, P, G)
    lengths = {k: len(v) for k, v in trajs.items()}
    assert len(set(lengths.values())) >= 3  # episodes end at different turns: the test has teeth
    assert batch.won.any() and not batch.won.all()
    # every prompt of turn t belongs to a row of step t, in slot order, and no env is prompted after its last row
    assert len(engine.calls) == max(lengths.values()) == len(trace.prompts_per_turn)
    for t, (prompts, slots) in enumerate(zip(engine.calls, trace.prompts_per_turn)):
        rows = [i for i in range(len(batch)) if batch.step[i] == t]
        assert slots == sorted(slots) == [int(batch.group_id[i]) * G + int(batch.traj_id[i]) for i in rows]
        assert prompts == [batch.prompt_ids[i].tolist() for i in rows]
    for (g, c), n in lengths.items():
        assert all(g * G + c not in slots for slots in trace.prompts_per_turn[n:])
    assert sum(map(len, engine.calls)) == len(batch)
    avoided = sum(P * G - len(s) for s in trace.prompts_per_turn)
    assert metrics["rollout/generations_avoided"] == avoided > 0


def test_max_turns_ends_the_rollout_with_done_rows(tok, request):
    engine = ScriptedEngine(tok, lambda *a: tagged("inc"))
    with env_pool("counter", 4, request) as pool:
        batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                       max_prompt_tokens=1024, max_turns=3),
                                 [Task("train", 0, 0), Task("train", 4, 0)], group_size=2, sampling=SHORT, seed=0)
    trajs = check_row_structure(batch, 2, 2)
    assert [len(trajs[(g, c)]) for g in range(2) for c in range(2)] == [2, 2, 3, 3]  # targets 2 and 6
    assert batch.won.tolist() == [True] * 4 + [False] * 6 and len(engine.calls) == 3


# ---------------------------------------------------------------------------------------------- bad generations
BAD = [
    ("", "stop", False),                                                    # empty
    ("\x00\x01\x7f garbage ### ]]] <<", "stop", False),                     # control characters, no tags
    ("<action>inc</action>", "stop", False),                                # no think tags
    ("<think>x</think><action>inc", "stop", False),                         # unclosed action
    ("<think>ok</think><action>inc</action>", "length", False),            # cut at max tokens: truncated
    ("<think>" + "blah " * 4000 + "</think>", "length", False),            # huge (20 kB)
    ("<think>é中文</think><action>走 inc ✓</action>", "stop", True),         # non-ASCII but well formed
    ("<THINK>x</THINK><ACTION>INC</ACTION>", "stop", True),                 # upper case counts
]


def test_malformed_generations_become_invalid_actions(tok, request):
    def script(call, j, prompt, seed):
        return BAD[(call * 2 + j) % len(BAD)][:2]

    engine = ScriptedEngine(tok, script)
    with env_pool("counter", 2, request, max_steps=len(BAD)) as pool:
        batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                       max_prompt_tokens=4096, env_name="counter"), [Task("train", 4, 0)],
                                 group_size=2, sampling=SHORT, seed=0)
    assert len(batch) > 0
    for i in range(len(batch)):
        text, finish, valid = BAD[(int(batch.step[i]) * 2 + int(batch.traj_id[i])) % len(BAD)]
        assert batch.response_text[i] == text
        assert bool(batch.valid[i]) == valid
        assert bool(batch.response_truncated[i]) == (finish == "length")
        if not valid:
            assert batch.action[i] == NOOP_ACTION
    assert batch.action[batch.valid.nonzero()[0, 0]] in ("走 inc ✓", "inc")
    assert metrics["rollout/response_truncated_frac"] == pytest.approx(batch.response_truncated.float().mean().item())
    assert 0 < metrics["rollout/valid_action_rate"] < 1
    # the truncated rows count as invalid for the estimators too
    assert not batch.to_step_batch().valid[batch.response_truncated].any()


def test_history_shows_only_executed_actions(tok, request):
    """Reasoning never enters the history; an invalid reply shows as INVALID_ACTION_TEXT."""
    replies = [tagged("inc").replace("I follow the plan.", "SECRET REASONING"), "no tags at all", tagged("inc")]
    engine = ScriptedEngine(tok, lambda call, j, p, s: replies[call % 3])
    with env_pool("counter", 1, request, max_steps=3) as pool:
        batch, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                 prompt_config=PromptConfig(history_length=2), max_prompt_tokens=4096,
                                 env_name="counter"), [Task("train", 4, 0)], group_size=1, sampling=SHORT, seed=0)
    last = tok.decode(batch.prompt_ids[2])
    assert "SECRET" not in last and "You did: inc" in last and f"You did: {INVALID_ACTION_TEXT}" in last


# ---------------------------------------------------------------------------------------------- env errors
def test_env_error_truncates_that_episode_and_the_rollout_continues(tok, request):
    """Slot 0 raises inside the env at turn 1; slot 2's worker process dies at turn 2 (killed, restarted)."""
    trace = RolloutTrace()

    def script(call, j, prompt, seed):
        slot = trace.prompts_per_turn[call][j]
        if (slot, call) == (0, 1):
            return tagged("raise")
        if (slot, call) == (2, 2):
            return tagged("exit")
        return tagged("inc")

    engine = ScriptedEngine(tok, script)
    with env_pool("counter", 4, request, mode="process", num_workers=2) as pool:
        batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                       max_prompt_tokens=4096, env_name="counter"),
                                 [Task("train", 4, 0), Task("train", 4, 1)], group_size=2, sampling=SHORT, seed=0,
                                 trace=trace)
        assert pool.restarts == 1
    trajs = check_row_structure(batch, 2, 2)
    assert len(trajs[(0, 0)]) == 2 and len(trajs[(1, 0)]) == 3  # ended at the failing step
    assert len(trajs[(0, 1)]) == 6 and len(trajs[(1, 1)]) == 6  # the others played on to their win (target 6)
    assert batch.won[trajs[(0, 1)]].all() and not batch.won[trajs[(0, 0)]].any()
    assert metrics["rollout/env_errors"] == 2
    assert all(0 not in s for s in trace.prompts_per_turn[2:]) and all(2 not in s for s in trace.prompts_per_turn[3:])


# ---------------------------------------------------------------------------------------------- the expert
@pytest.mark.parametrize("env,split", [("textcraft", "train"), ("alfworld", "train"), ("webshop", "test")])
def test_expert_replayed_through_the_rollout_succeeds(env, split, tok, request):
    with env_pool(env, 4, request) as pool:
        tasks = [Task(split, k, 7 + k) for k in ((0, 1) if env != "webshop" else (2, 5))]
        engine = ExpertEngine(tok, pool)
        batch, metrics = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                       prompt_config=prompt_config_for(tok, 4096), max_prompt_tokens=4096), tasks,
                                 group_size=2, sampling=SHORT, seed=0)
    trajs = check_row_structure(batch, 2, 2)
    assert batch.valid.all() and not batch.response_truncated.any()
    assert batch.won.all() and metrics["rollout/success_rate"] == 1.0
    for rows in trajs.values():  # 10 on the winning (last) step only [GiGPO]
        assert batch.reward[rows].tolist() == [0.0] * (len(rows) - 1) + [10.0]
    assert metrics["rollout/return_mean"] == 10.0  # every episode's summed reward
    assert metrics["rollout/reward_mean"] == pytest.approx(10.0 * len(trajs) / len(batch))
    assert metrics["rollout/valid_action_rate"] == 1.0
    assert all(metrics[f"rollout/family/{f}/success_rate"] == 1.0 for f in set(batch.task_family))
    if env == "webshop":
        assert metrics["rollout/score"] == 1.0


# ---------------------------------------------------------------------------------------------- prompts
def test_hard_prompt_cut_keeps_header_and_generation_prompt(tok):
    content = "You are a test agent.\n" + " ".join(f"word{i}" for i in range(600)) + "\nnewest line"
    messages = [{"role": "user", "content": content}]
    full, cut = encode_prompt(tok, messages, 10_000)
    assert not cut and full == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                       return_dict=False)
    ids, cut = encode_prompt(tok, messages, 120)
    text = tok.decode(ids)
    assert cut and len(ids) <= 120 < len(full)
    assert text.startswith("<|im_start|>user\nYou are a test agent.\n" + PROMPT_CUT_MARKER)
    assert text.endswith("newest line<|im_end|>\n<|im_start|>assistant\n") and "word0 " not in text
    # a bound below the frame keeps the last tokens (the generation prompt survives)
    ids, cut = encode_prompt(tok, messages, 8)
    assert cut and ids == full[-8:]
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        encode_prompt(tok, messages, 0)


def test_prompt_cut_is_counted_and_the_builder_bound_avoids_it(tok, request):
    """TextCraft: the second prompt (recipes twice: task block and history) is much longer than the first; a bound
    between the two hard-cuts the second prompts only, unless the builder's own bound shortens them first."""
    engine = ScriptedEngine(tok, lambda *a: "no tags")
    with env_pool("textcraft", 2, request, max_steps=2) as pool:
        tasks = [Task("train", 0, 0)]
        kw = dict(group_size=2, sampling=SHORT, seed=0)
        full, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                max_prompt_tokens=10**6), tasks, **kw)
        n0, n1 = len(full.prompt_ids[0]), len(full.prompt_ids[1])
        assert n1 > n0 + 100
        bound = (n0 + n1) // 2
        hard, m_hard = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                     max_prompt_tokens=bound), tasks, **kw)
        soft, m_soft = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                     prompt_config=prompt_config_for(tok, bound), max_prompt_tokens=bound), tasks,
                               **kw)
        # a builder bound below the prompt's fixed parts falls back to the hard cut (counted), never a crash
        low, m_low = collect(Agent(pool=pool, engine=engine, tokenizer=tok,
                                   prompt_config=prompt_config_for(tok, 100), max_prompt_tokens=bound), tasks, **kw)
    step1 = [i for i in range(len(hard)) if hard.step[i] == 1]
    assert m_hard["rollout/prompt_truncated_frac"] == 0.5 and len(step1) == 2
    for i in range(len(hard)):
        text = tok.decode(hard.prompt_ids[i])
        assert len(hard.prompt_ids[i]) <= bound and (PROMPT_CUT_MARKER in text) == (i in step1)
        assert text.startswith("<|im_start|>user\nYou are playing a text version of Minecraft crafting")
        assert text.endswith("inside <action> </action>.<|im_end|>\n<|im_start|>assistant\n")
    assert m_soft["rollout/prompt_truncated_frac"] == 0.0 and all(len(p) <= bound for p in soft.prompt_ids)
    assert "to fit the prompt length" in tok.decode(soft.prompt_ids[step1[0]])  # the builder's own, gentler cut
    assert m_low["rollout/prompt_truncated_frac"] == 0.5 and all(len(p) <= bound for p in low.prompt_ids)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        prompt_config_for(tok, 10)


# ---------------------------------------------------------------------------------------------- evaluation
def test_evaluate_metrics_per_split_and_family(tok, request, webshop_dir):
    """The expert plays the even task indices, nothing the odd ones; expected numbers come from playing the
    expert directly on fresh envs (webshop_helpers.play_expert)."""
    from tests.envs.webshop_helpers import make_env, play_expert

    tasks = eval_tasks("test", 50, max_tasks=7, seed=0) + [Task("train", 3, 99)]
    with env_pool("webshop", 3, request) as pool:  # 8 tasks in chunks of 3: chunking is exercised
        engine = ExpertEngine(tok, pool, play=lambda slot: pool.tasks[slot].index % 2 == 0)
        metrics, batch = evaluate(Agent(pool=pool, engine=engine, tokenizer=tok,
                                        prompt_config=prompt_config_for(tok, 4096), max_prompt_tokens=4096), tasks,
                                  sampling=SHORT, seed=0)
    env = make_env(webshop_dir)
    expected: dict[str, dict] = {}
    for t in tasks:
        played = t.index % 2 == 0
        score, _, info = play_expert(env, t.split, t.index) if played else (0.0, [], None)
        fam = env.task_family_of(t.split, t.index)
        e = expected.setdefault(t.split, {"won": [], "score": [], "fam": {}})
        e["won"].append(played and score == 1.0)
        e["score"].append(score)
        e["fam"].setdefault(fam, []).append(played and score == 1.0)
    assert sorted(batch.group_id.unique().tolist()) == list(range(len(tasks)))
    names = set()
    for split, e in expected.items():
        pre = f"eval/webshop/{split}"
        assert metrics[f"{pre}/success_rate"] == pytest.approx(sum(e["won"]) / len(e["won"]))
        assert metrics[f"{pre}/score"] == pytest.approx(sum(e["score"]) / len(e["score"]))
        assert metrics[f"{pre}/num_episodes"] == len(e["won"])
        for fam, won in e["fam"].items():
            assert metrics[f"{pre}/family/{fam}/success_rate"] == pytest.approx(sum(won) / len(won))
            names.add(f"{pre}/family/{fam}/success_rate")
        names |= {f"{pre}/{k}" for k in ("success_rate", "score", "num_episodes", "episode_length",
                                         "valid_action_rate")}
    assert 0 < metrics["eval/webshop/test/success_rate"] < 1
    assert set(metrics) == names | {"perf/eval_s"}
    # one episode per task; the list's rows are those of a collect with group_size 1 (seeds from the task)
    with env_pool("webshop", 8, request) as pool:
        engine = ExpertEngine(tok, pool, play=lambda slot: pool.tasks[slot].index % 2 == 0)
        one, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=prompt_config_for(tok, 4096),
                               max_prompt_tokens=4096), tasks, group_size=1, sampling=SHORT, seed=0)
    assert one.response_text == batch.response_text and torch.equal(one.group_id, batch.group_id)


@pytest.mark.parametrize("episodes_per_task", [1, 2])
def test_a_refilling_evaluation_equals_the_chunked_one_in_fewer_calls(tok, request, episodes_per_task):
    """``evaluate(..., refill=True)`` on 3 slots: every (task, copy) played once with the chunked mode's seeds, rows
    and metrics (the scripted engine answers from the seed alone), fewer generate calls and turns (the episode
    lengths differ), every call full until the list runs out, and the same result when run again."""
    tasks = eval_tasks("train", 5, seed=0) + eval_tasks("eval", 3, seed=0)  # targets 2..6 and 2..4
    out = {}
    for refill in (False, True, True):
        engine = ScriptedEngine(tok, _counter_script)
        trace_calls = []
        with env_pool("counter", 3 if episodes_per_task == 1 else 4, request, max_steps=6) as pool:
            agent = Agent(pool=pool, engine=engine, tokenizer=tok, max_prompt_tokens=1024, env_name="counter")
            metrics, batch = evaluate(agent, tasks, sampling=SHORT, seed=5, episodes_per_task=episodes_per_task,
                                      refill=refill)
            trace_calls = [len(c) for c in engine.calls]
            n_envs = pool.num_envs
        out.setdefault(refill, []).append((metrics, batch, engine, trace_calls))
    (m0, b0, e0, c0), = out[False]
    (m1, b1, e1, c1), (m2, b2, _, c2) = out[True]
    check_row_structure(b1, len(tasks), episodes_per_task)
    assert set(m1) == set(m0) and {k: v for k, v in m1.items() if k != "perf/eval_s"} == \
        {k: v for k, v in m0.items() if k != "perf/eval_s"}
    lengths = [int(n) for n in torch.unique_consecutive(b0.group_id * 10 + b0.traj_id, return_counts=True)[1]]
    assert len(set(lengths)) >= 3  # episode lengths differ: refilling has something to gain
    for name in ("group_id", "traj_id", "step", "reward", "done", "valid", "won"):
        assert torch.equal(getattr(b1, name), getattr(b0, name)), name
    assert b1.response_text == b0.response_text and [p.tolist() for p in b1.prompt_ids] == \
        [p.tolist() for p in b0.prompt_ids]
    assert sorted(x for c in e1.seeds for x in c) == sorted(x for c in e0.seeds for x in c)  # same per-task seeds
    assert sum(c1) == sum(c0) == len(b0) and len(c1) < len(c0)
    full_until = max(i for i, n in enumerate(c1) if n == n_envs)
    assert all(n == n_envs for n in c1[:full_until + 1]) and c1[full_until:] == sorted(c1[full_until:], reverse=True)
    assert c2 == c1 and b2.response_text == b1.response_text and m2["eval/counter/eval/success_rate"] == \
        m1["eval/counter/eval/success_rate"]


def test_a_refilling_play_bounds_each_episode_by_max_turns(tok, request):
    from agents.rollout import play

    engine = ScriptedEngine(tok, lambda *a: tagged("inc"))
    tasks = [Task("train", k, 0) for k in (4, 0, 1, 3)]  # targets 6, 2, 3, 5
    with env_pool("counter", 2, request) as pool:
        batch, eps = play(Agent(pool=pool, engine=engine, tokenizer=tok, max_prompt_tokens=1024, max_turns=4),
                          tasks, sampling=SHORT, seed=0, refill=True)
    assert [len(e.rows) for e in eps] == [4, 2, 3, 4] and [e.won for e in eps] == [False, True, True, False]
    # slot 0: task 4 (turns 0-3, cut), then task 3 (turns 4-7); slot 1: task 0 (turns 0-1), then task 1 (turns 2-4)
    assert [e.key for e in eps] == [0, 1, 2, 3] and batch.done.sum() == 4 and [len(c) for c in engine.calls] == \
        [2, 2, 2, 2, 2, 1, 1, 1]
    assert [e.slot for e in eps] == [0, 1, 1, 0]


@pytest.mark.parametrize("env,split,marks", [
    ("alfworld", "train", ("operating in the ALFRED Embodied Environment", "Below are the most recent")),
    ("webshop", "test", ("operating in the WebShop e\u2011commerce environment", "'click[search]',"))])
def test_the_rollout_renders_the_actors_prompt_format(env, split, marks, tok, request):
    """``Agent(prompt_format="verl_agent")``: every prompt the engine receives is verl-agent's, and the expert still
    wins through it (the actions it lists are the env's)."""
    with env_pool(env, 2, request) as pool:
        engine = ExpertEngine(tok, pool)
        batch, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_format="verl_agent",
                                 prompt_config=prompt_config_for(tok, 4096), max_prompt_tokens=4096),
                           [Task(split, 2, 7)], group_size=2, sampling=SHORT, seed=0)
    assert batch.won.all()
    first = [tok.decode(p) for p in engine.calls[0]]
    later = [tok.decode(p) for call in engine.calls[1:] for p in call]
    assert all(marks[0] in t and "Your admissible actions" in t for t in first + later)
    assert marks[1] in " ".join(first + later) and all("Prior to this step" in t for t in later)
    with pytest.raises(ValueError, match="prompt_format='verl-agent' must be one of bipace, verl_agent"):
        Agent(pool=pool, engine=engine, tokenizer=tok, prompt_format="verl-agent", max_prompt_tokens=64)


def test_bad_arguments_are_explained(hf_engine, tok, request):
    with env_pool("counter", 2, request) as pool:
        agent = Agent(pool=pool, engine=hf_engine, tokenizer=tok, prompt_config=None, max_prompt_tokens=64)
        kw = dict(group_size=2, sampling=SHORT, seed=0)
        with pytest.raises(ValueError, match="no tasks"):
            collect(agent, [], **kw)
        with pytest.raises(ValueError, match="num_envs >= 4"):
            collect(agent, [Task("train", 0, 0)] * 2, **kw)
        with pytest.raises(TypeError, match="SamplingConfig"):
            collect(agent, [Task("train", 0, 0)], **{**kw, "sampling": {"temperature": 1}})
        with pytest.raises(ValueError, match="episodes_per_task"):
            evaluate(agent, [Task("eval", 0, 0)], sampling=SHORT, seed=0, episodes_per_task=3)
        for bad in (0, -1, 1.5):
            with pytest.raises(ValueError, match="max_prompt_tokens"):
                Agent(pool=pool, engine=hf_engine, tokenizer=tok, max_prompt_tokens=bad)
        with pytest.raises(ValueError, match="max_turns"):
            Agent(pool=pool, engine=hf_engine, tokenizer=tok, max_prompt_tokens=64, max_turns=0)


def test_expert_share_plays_a_fixed_share_of_episodes_by_the_expert(tok, request):
    """``ExpertShare``: the chosen episodes act by the env's expert whatever the model says, so they are won and end
    early; the choice depends on task and copy only (not on the pool or the call)."""
    from agents.rollout import ExpertShare

    hook = ExpertShare(0.5)
    picks = [hook.chooses(Task("train", i, 0), c) for i in range(20) for c in range(2)]
    assert 0 < sum(picks) < len(picks) and picks == [hook.chooses(Task("train", i, 9), c)
                                                      for i in range(20) for c in range(2)]
    assert not ExpertShare(0.0).chooses(Task("train", 0, 0), 0) and ExpertShare(1.0).chooses(Task("train", 0, 0), 0)
    tasks = [Task("train", 0, 0), Task("train", 4, 0)]
    engine = ScriptedEngine(tok, lambda *a: "no tags here")  # the model never acts validly
    with env_pool("counter", 4, request, max_steps=8) as pool:
        batch, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                 max_prompt_tokens=1024, hook=ExpertShare(1.0)), tasks, group_size=2,
                           sampling=SHORT, seed=0)
        plain, _ = collect(Agent(pool=pool, engine=engine, tokenizer=tok, prompt_config=None,
                                 max_prompt_tokens=1024), tasks, group_size=2, sampling=SHORT, seed=0)
    assert bool(batch.won.all()) and len(batch) < len(plain)  # the expert wins before the horizon
    assert not bool(plain.won.any())
