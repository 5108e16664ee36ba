"""SFT warm start: loss masking, learning, prompt equality with the rollout, DAgger labels, the cache."""
from __future__ import annotations

import math

import pytest
import torch

import envs
from agents.prompts import Transcript, get_prompt_builder
from agents.rollout import INVALID_ACTION_TEXT, prompt_config_for
from envs.pool import Task
from warmstart import sft

ENV_KW = {"show_inventory": True}


@pytest.fixture(scope="module")
def expert_rows():
    tasks = [Task("train", k, 100 + k) for k in range(0, 40, 4)]
    return sft.collect_expert_rows("TextCraft-v0", tasks, env_kwargs=ENV_KW)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, expert_rows):
    """A 2-layer, hidden-64 Qwen2 whose tokenizer is trained on the rendered expert rows."""
    from agents.models import load_tokenizer
    from agents.models.tiny import TinyModelConfig, build_tiny_model

    out = build_tiny_model(tmp_path_factory.mktemp("sft") / "tiny", TinyModelConfig(layers=2, hidden=64, heads=2),
                           corpus=list(sft.rows_corpus(expert_rows, "textcraft")))
    return out, load_tokenizer(out)


# ------------------------------------------------------------------------------------------------ the loss
def test_sft_loss_hand_computed():
    # rows: [-1, -2, (pad)] and [-3, (pad), (pad)]: token-mean NLL = (1 + 2 + 3) / 3 = 2
    logp = torch.tensor([[-1.0, -2.0, -7.0], [-3.0, -5.0, -9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert sft.sft_loss(logp, mask).item() == pytest.approx(2.0)
    # a micro-batch of a larger mini-batch divides by the mini-batch's token count
    assert sft.sft_loss(logp, mask, total_tokens=6).item() == pytest.approx(1.0)


def test_loss_masks_prompt_tokens(tiny):
    """Through the actor's forward: a model with a zero LM head predicts uniformly, so the loss is exactly
    log V whatever the prompt; with random weights it equals cross-entropy over response positions only."""
    from agents.models import load_model
    from trainer.forward import pack_rows, policy_forward

    path, tok = tiny
    model = load_model(path, dtype="float32")
    prompts = [torch.tensor([5, 6, 7, 8, 9]), torch.tensor([11, 12])]
    responses = [torch.tensor([20, 21]), torch.tensor([22, 23, 24])]
    packed = pack_rows(prompts, responses, pad_id=int(tok.pad_token_id))
    out = policy_forward(model, packed, compute_entropy=False)
    assert int(out.mask.sum()) == 5  # 2 + 3 response tokens are scored, no prompt token
    loss = sft.sft_loss(out.logprobs, out.mask)
    # manual: HF-style labels, -100 on prompt and padding positions
    logits = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask).logits
    labels = torch.full_like(packed.input_ids, -100)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        labels[i, len(p): len(p) + len(r)] = r
    manual = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                               labels[:, 1:].reshape(-1), ignore_index=-100)
    assert loss.item() == pytest.approx(manual.item(), rel=1e-5)
    everything = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                   packed.input_ids[:, 1:].reshape(-1))
    assert abs(everything.item() - loss.item()) > 1e-3  # counting prompt tokens would give another number
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()  # tied: embeddings too -> uniform next-token distribution
    out0 = policy_forward(model, packed, compute_entropy=False)
    vocab = model.get_output_embeddings().weight.shape[0]
    assert sft.sft_loss(out0.logprobs, out0.mask).item() == pytest.approx(math.log(vocab), rel=1e-6)


# ---------------------------------------------------------------------------------------------- learning
@pytest.mark.slow
def test_sft_steps_lower_loss_on_expert_data(tiny, expert_rows):
    from agents.models import load_model
    from trainer.forward import pack_rows, policy_forward

    path, tok = tiny
    data = sft.encode_rows(expert_rows[:24], tok, "textcraft")

    def mean_loss(model) -> float:
        with torch.no_grad():
            packed = pack_rows(data.prompt_ids, data.response_ids, int(tok.pad_token_id))
            out = policy_forward(model, packed, compute_entropy=False)
            return sft.sft_loss(out.logprobs, out.mask).item()

    model = load_model(path, dtype="float32")
    before = mean_loss(model)
    learner = sft.SFTLearner(model, sft.sft_trainer_config(lr=3e-3, batch_rows=8, micro_batch_rows=4, warmup_steps=0,
                                                           zero_stage=2), schedule="constant")
    metrics = sft.train_sft(learner, data, sft.SFTSchedule(epochs=4, batch_rows=8), pad_id=int(tok.pad_token_id))
    after = mean_loss(learner.lm)
    assert metrics["perf/steps"] == 12
    assert after < before - 1.0, (before, after)


def test_time_budget_stops_training_and_fits_the_decay(tiny, expert_rows):
    """A spent budget stops after the step in progress; a budget that never runs out re-fits the decay's end to
    the planned steps (4 one-row batches per epoch x 3 epochs = 12 < the learner's 1000)."""
    from agents.models import load_model

    path, tok = tiny
    data = sft.encode_rows(expert_rows[:4], tok, "textcraft")
    cfg = sft.sft_trainer_config(lr=1e-3, batch_rows=1, micro_batch_rows=1, warmup_steps=0, zero_stage=0)
    eng = sft.SFTLearner(load_model(path, dtype="float32"), cfg, total_steps=1000)
    m = sft.train_sft(eng, data, sft.SFTSchedule(epochs=3, batch_rows=1, time_budget_s=0.0, budget_clock="cpu"),
                      pad_id=int(tok.pad_token_id))
    assert m["perf/steps"] == 1 and m["perf/planned_steps"] == 12
    eng = sft.SFTLearner(load_model(path, dtype="float32"), cfg, total_steps=1000)
    m = sft.train_sft(eng, data, sft.SFTSchedule(epochs=3, batch_rows=1, time_budget_s=1e9),
                      pad_id=int(tok.pad_token_id))
    assert m["perf/steps"] == 12 and eng.total_steps == 12
    assert eng.lr_at(12) == pytest.approx(1e-3 * eng.min_lr_ratio)  # 1000 planned steps would give ~1e-3
    with pytest.raises(ValueError, match="budget_clock"):
        sft.SFTSchedule(budget_clock="gpu")


def test_lr_schedule_warmup_then_cosine(tiny):
    from agents.models import load_model

    path, _ = tiny
    eng = sft.SFTLearner(load_model(path), sft.sft_trainer_config(lr=1e-3, warmup_steps=10), schedule="cosine",
                         total_steps=110, min_lr_ratio=0.1)
    assert eng.lr_at(0) == pytest.approx(1e-4)
    assert eng.lr_at(9) == pytest.approx(1e-3)
    assert eng.lr_at(60) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert eng.lr_at(110) == pytest.approx(1e-4)
    assert eng.actor.lr_at(60) == eng.lr_at(60)  # the actor's optimizer steps use this schedule


# ------------------------------------------------------------------------------ data equals the rollout
def test_expert_rows_render_the_rollout_prompt(tiny):
    """Replay an expert episode by hand as a rollout would (Transcript, builder, chat template with the
    generation prompt) and compare token ids with the SFT rows."""
    path, tok = tiny
    task = Task("train", 7, 4242)
    rows = sft.collect_expert_rows("TextCraft-v0", [task], env_kwargs=ENV_KW)
    pcfg = prompt_config_for(tok, 2048)
    enc = sft.encode_rows(rows, tok, "textcraft", pcfg)
    env = envs.make("TextCraft-v0", **ENV_KW)
    obs, info = env.reset(**task.reset_kwargs())
    tr = Transcript.start(obs, info)
    builder = get_prompt_builder("TextCraft-v0")
    for k, row in enumerate(rows):
        messages = builder.messages(tr, pcfg)
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert enc.prompt_ids[k].tolist() == list(ids), f"step {k}"
        assert tok.decode(enc.prompt_ids[k]).endswith("<|im_start|>assistant\n")
        action = envs.expert_action(env)
        assert row.action == action
        assert row.response.endswith(f"<action>{action}</action>") and row.response.startswith("<think>")
        assert tok.decode(enc.response_ids[k], skip_special_tokens=True) == row.response
        assert enc.response_ids[k][-1].item() == tok.eos_token_id
        obs, _r, term, trunc, info = env.step(action)
        tr.record(action, obs, info)
    assert term and info["won"]


def test_trace_rationale_reproduces_every_expert_action():
    """The trace walks to the very action the planner takes (no fall-back) on 60 train episodes, and its
    counts agree with the action (a get fetches exactly the missing amount it states)."""
    tasks = [Task("train", k, 9 + k) for k in range(0, 233, 4)]
    rows = sft.collect_expert_rows("TextCraft-v0", tasks, env_kwargs=ENV_KW, style="trace")
    assert len(rows) > 150
    for r in rows:
        think = r.response.split("<think>")[1].split("</think>")[0]
        assert think.startswith("goal: craft "), think
        if r.action.startswith("get "):
            n, item = r.action[4:].split(" ", 1)
            last = think.rsplit("need ", 1)[1]  # "<need> <item>, have <have>. get <n> <item>."
            need, rest = last.split(" ", 1)
            have = int(rest.split(", have ")[1].split(".")[0])
            assert rest.startswith(f"{item}, have ") and int(need) - have == int(n), think
            assert think.endswith(f"{r.action}."), think
        else:
            assert think.endswith("inputs ready.") and r.action in think, think


# ------------------------------------------------------------------------------------------------ DAgger
def test_dagger_labels_model_reached_states_with_the_expert(tiny):
    """Rows of ``play(label_style=...)`` are the states the *model* reached (its own actions in the history)
    and carry the expert's action for exactly that state (checked by replaying the env)."""
    from agents.models import load_model

    path, tok = tiny
    model = load_model(path, dtype="float32")
    tasks = [Task("train", 3, 11), Task("train", 50, 12)]
    with sft.acting(model, tok, "TextCraft-v0", env_kwargs={**ENV_KW, "max_steps": 3}) as agent:
        res = sft.play(agent, tasks, sampling=sft.play_sampling(1.0, 12), seed=5,
                       options=sft.PlayOptions(label_style="trace"))
    assert len(res.episodes) == 2 and len(res.rows) == 6  # the untrained model never wins in 3 steps
    for row in res.rows:
        env = envs.make("TextCraft-v0", **ENV_KW)
        task = next(t for t in tasks if t.task_id == row.task)
        obs, info = env.reset(**task.reset_kwargs())
        for _obs, act in row.transcript["pairs"]:  # replay what the model did (an invalid step sent the no-op)
            obs, _r, _t, _tr, info = env.step("" if act == INVALID_ACTION_TEXT else act)
        assert obs == row.transcript["observation"]
        assert row.action == envs.expert_action(env)
        assert row.source == "dagger"
    # the model's own (invalid, so no-op) actions are in the history, not the expert's
    hist = [a for row in res.rows for _o, a in row.transcript["pairs"]]
    assert hist and any(a != r.action for a, r in zip(hist, res.rows))


def test_sft_evaluation_plays_the_same_episodes_as_rl_evaluation(tiny):
    """The warm start's evaluation (``warmstart.sft.evaluate``) and RL evaluation (``agents.rollout.evaluate``) of the
    same model, task list, seed and sampling play the same tokens: one acting loop."""
    from agents.engines.base import SamplingConfig
    from agents.engines.hf import HFEngine
    from agents.models import load_model
    from agents.rollout import Agent, evaluate
    from envs.pool import EnvPool, eval_tasks

    path, tok = tiny
    model = load_model(path, dtype="float32")
    kw = {**ENV_KW, "max_steps": 3}
    pcfg = prompt_config_for(tok, 2048)
    with sft.acting(model, tok, "TextCraft-v0", env_kwargs=kw, prompt_config=pcfg, batch_envs=2) as agent:
        res = sft.evaluate(agent, "eval_depth2", sampling=sft.play_sampling(1.0, 12), seed=7, max_tasks=3)
    with EnvPool("TextCraft-v0", num_envs=3, mode="inline", env_kwargs=kw) as pool:
        tasks = eval_tasks("eval_depth2", pool.num_tasks("eval_depth2"), 3, 7)
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=12, stop=("</action>",), logprobs=False)
        agent = Agent(pool=pool, engine=HFEngine(model, tok), tokenizer=tok, prompt_config=pcfg,
                      max_prompt_tokens=2048)
        metrics, batch = evaluate(agent, tasks, sampling=sampling, seed=7)
    assert [e.task for e in res.episodes] == [t.task_id for t in tasks]
    assert [r.tolist() for r in res.batch.response_ids] == [r.tolist() for r in batch.response_ids]
    assert [p.tolist() for p in res.batch.prompt_ids] == [p.tolist() for p in batch.prompt_ids]
    assert res.batch.group_id.tolist() == batch.group_id.tolist()
    assert res.success == metrics["eval/textcraft/eval_depth2/success_rate"]
    assert res.generated_tokens == sum(len(r) for r in batch.response_ids) > 0


def test_dagger_conventions(tiny):
    """``conventions="episode"`` (the warm start's DAgger rounds) keeps the seeds and the empty history entry its
    cached models were built with; the default plays as RL does (``INVALID_ACTION_TEXT`` in the history)."""
    from agents.models import load_model

    path, tok = tiny
    model = load_model(path, dtype="float32")
    tasks = [Task("train", 3, 11)]
    kw = dict(sampling=sft.play_sampling(1.0, 12), seed=5)
    with sft.acting(model, tok, "TextCraft-v0", env_kwargs={**ENV_KW, "max_steps": 3}) as agent:
        new = sft.play(agent, tasks, options=sft.PlayOptions(label_style="trace"), **kw)
        old = sft.play(agent, tasks, options=sft.PlayOptions(label_style="trace", conventions="episode"), **kw)
    hist_new = [a for r in new.rows for _o, a in r.transcript["pairs"]]
    hist_old = [a for r in old.rows for _o, a in r.transcript["pairs"]]
    assert INVALID_ACTION_TEXT in hist_new and "" in hist_old and INVALID_ACTION_TEXT not in hist_old
    assert new.batch.response_ids[0].tolist() != old.batch.response_ids[0].tolist()  # other sampling seeds
    with pytest.raises(ValueError, match="conventions"), sft.acting(model, tok, "TextCraft-v0") as agent:
        sft.play(agent, tasks, options=sft.PlayOptions(label_style="trace", conventions="legacy"), **kw)


def test_play_is_independent_of_batching(tiny):
    from agents.models import load_model

    path, tok = tiny
    model = load_model(path, dtype="float32")
    tasks = [Task("eval_depth2", k, 77 + k) for k in range(3)]
    kw = dict(env_kwargs={**ENV_KW, "max_steps": 2})
    with sft.acting(model, tok, "TextCraft-v0", batch_envs=3, **kw) as agent:
        a = sft.play(agent, tasks, sampling=sft.play_sampling(1.0, 10), seed=3)
    with sft.acting(model, tok, "TextCraft-v0", batch_envs=1, **kw) as agent:
        b = sft.play(agent, tasks, sampling=sft.play_sampling(1.0, 10), seed=3)
    assert [e.actions for e in a.episodes] == [e.actions for e in b.episodes]


# ------------------------------------------------------------------------------------------------ cache
@pytest.mark.slow
def test_warm_start_cache_hit_returns_the_same_folder(tmp_path, monkeypatch):
    from warmstart.recipe import WarmStartConfig, cache_folder, load_result, warm_start

    cfg = WarmStartConfig(tiny_layers=1, tiny_hidden=64, tiny_heads=2, expert_episodes=6, tokenizer_rows=60,
                          epochs=1.0, eval_sampled=True,
                          env_kwargs={**ENV_KW, "max_steps": 8}, zero_stage=0,
                          batch_rows=8, dagger_rounds=1, dagger_episodes=2, eval_max_tasks=2, eval_train_tasks=1,
                          max_response_tokens=16, cache_root=str(tmp_path), progress=False)
    first = warm_start(cfg)
    assert first == cache_folder(cfg) / "final"
    assert (first / "config.json").is_file() and (first / "model.safetensors").is_file()
    result = load_result(cache_folder(cfg))
    assert set(result["eval"]) == {"sampled", "greedy", "train_greedy"} and len(result["rounds"]) == 2
    assert result["eval"]["train_greedy"]["split"] == "train" and result["eval"]["greedy"]["episodes"] == 2
    stamp = (first / "warmstart.json").stat().st_mtime_ns

    def no_training(*a, **k):
        raise AssertionError("a cache hit must not train")

    monkeypatch.setattr(sft, "train_sft", no_training)
    again = warm_start(cfg)
    assert again == first and (first / "warmstart.json").stat().st_mtime_ns == stamp
    # another setting that matters -> another entry; a progress-bar change -> the same entry
    assert cache_folder(WarmStartConfig(**{**cfg.__dict__, "lr": 1e-4})) != cache_folder(cfg)
    assert cache_folder(WarmStartConfig(**{**cfg.__dict__, "progress": True})) == cache_folder(cfg)


def test_warm_start_resumes_after_an_interrupted_round(tmp_path):
    """A run stopped after round 0 (simulated by deleting the later phases) resumes from round 0's model."""
    import shutil

    from warmstart.recipe import WarmStartConfig, cache_folder, warm_start

    cfg = WarmStartConfig(tiny_layers=1, tiny_hidden=64, tiny_heads=2, expert_episodes=4, tokenizer_rows=40,
                          epochs=1.0, eval_train_tasks=0,
                          env_kwargs={**ENV_KW, "max_steps": 8}, zero_stage=0, eval_sampled=False,
                          batch_rows=8, dagger_rounds=0, eval_max_tasks=1, max_response_tokens=8,
                          cache_root=str(tmp_path), progress=False)
    final = warm_start(cfg)
    folder = cache_folder(cfg)
    round0 = (folder / "round_0" / "model" / "model.safetensors").read_bytes()
    shutil.rmtree(final)
    (folder / "DONE").unlink()
    assert warm_start(cfg) == final
    assert (folder / "round_0" / "model" / "model.safetensors").read_bytes() == round0  # not retrained
    assert (final / "model.safetensors").read_bytes() == round0


def test_config_errors_name_the_field():
    from warmstart.recipe import WarmStartConfig

    with pytest.raises(ValueError, match="rationale"):
        WarmStartConfig(rationale="long")
    with pytest.raises(ValueError, match="expert_mix"):
        WarmStartConfig(expert_mix=1.5)
    with pytest.raises(ValueError, match="env"):
        WarmStartConfig(env="minecraft")
    with pytest.raises(ValueError, match="train_budget_clock"):
        WarmStartConfig(train_budget_clock="gpu")
    with pytest.raises(ValueError, match="prompt_weight"):
        WarmStartConfig(prompt_weight=2.0)
    with pytest.raises(ValueError, match="train_tasks"):
        WarmStartConfig(train_tasks=-1)
    with pytest.raises(ValueError, match="rename_copies"):
        WarmStartConfig(rename_copies=-1)


def test_prompt_weight_scores_prompt_tokens_too(tiny, expert_rows):
    """prompt_weight w adds w * (prompt-token NLL) to the loss; w = 0 is the response-only loss."""
    from agents.models import load_model
    from trainer.forward import pack_rows, policy_forward

    path, tok = tiny
    data = sft.encode_rows(expert_rows[:3], tok, "textcraft")
    model = load_model(path, dtype="float32")
    ps = [p[:1] for p in data.prompt_ids]
    rs = [torch.cat([p[1:], r]) for p, r in zip(data.prompt_ids, data.response_ids)]
    with torch.no_grad():
        out = policy_forward(model, pack_rows(ps, rs, 0), compute_entropy=False)
    nll_prompt = sum(-out.logprobs[j, : len(p) - 1].sum() for j, p in enumerate(data.prompt_ids))
    nll_resp = sum(-out.logprobs[j, len(p) - 1: len(p) - 1 + len(r)].sum()
                   for j, (p, r) in enumerate(zip(data.prompt_ids, data.response_ids)))
    n_resp = data.num_response_tokens
    losses = {}
    for w in (0.0, 0.5):
        eng = sft.SFTLearner(load_model(path, dtype="float32"),
                             sft.sft_trainer_config(batch_rows=3, micro_batch_rows=2),
                             prompt_weight=w)
        parts = list(eng._micro_losses(data.prompt_ids, data.response_ids, 0, float(n_resp)))
        losses[w] = sum(float(loss.detach()) for _r, _b, loss, _n in parts)
        assert sum(float(n.detach()) for _r, _b, _l, n in parts) == pytest.approx(float(nll_resp), rel=1e-5)
    assert losses[0.0] == pytest.approx(float(nll_resp) / n_resp, rel=1e-5)
    assert losses[0.5] == pytest.approx(float(nll_resp + 0.5 * nll_prompt) / n_resp, rel=1e-5)


# ------------------------------------------------------------------------------------------------ renaming
def test_rename_rows_keeps_each_row_consistent(expert_rows):
    """Every renamed copy applies one word permutation to the whole row: the expert's craft line is still
    one of the (renamed) recipe lines, the fetched item still appears in them, the goal line and the task agree,
    template words survive, and the copies differ from the original and from each other."""
    from envs.textcraft import TextCraftWorld

    copies = sft.rename_rows(expert_rows, "textcraft", copies=2, seed=3)
    assert len(copies) == 2 * len(expert_rows)
    pool = set(TextCraftWorld.shared().name_words)
    assert "craft" not in pool and "using" not in pool and "inventory" not in pool
    changed = 0
    for i, row in enumerate(expert_rows):
        a, b = copies[2 * i], copies[2 * i + 1]
        assert a.source == "expert+rename" and (a.task, a.seed, a.step) == (row.task, row.seed, row.step)
        changed += a.response != row.response
        assert a.transcript["first_observation"] != b.transcript["first_observation"]
        lines = a.transcript["first_observation"].split("\n")
        assert lines[0] == "Crafting commands:" and any(ln.startswith("Goal: craft ") for ln in lines)
        goal = next(ln for ln in lines if ln.startswith("Goal: craft "))[len("Goal: craft "):-1]
        assert a.transcript["task"] == f"craft {goal}"
        assert a.response.endswith(f"</think><action>{a.action}</action>")
        think = a.response.split("<think>")[1].split("</think>")[0]  # the trace's goal recipe is a listed line
        assert think.startswith("goal: craft ") and think.split(". ")[0][len("goal: "):].rstrip(".") in lines
        if a.action.startswith("craft "):
            assert a.action in lines
        else:
            item = a.action.split(" ", 2)[2]
            assert any(item in ln for ln in lines[1:]), (item, lines)
    assert changed >= len(expert_rows) // 2
    again = sft.rename_rows(expert_rows[:3], "textcraft", copies=2, seed=3)
    assert [r.to_json() for r in again] == [r.to_json() for r in copies[:6]]  # seeded
    assert sft.rename_rows(expert_rows, "textcraft", copies=0) == []


def test_rename_rows_names_the_setting_for_an_env_without_a_pool(expert_rows):
    with pytest.raises(ValueError, match="rename_copies"):
        sft.rename_rows(expert_rows[:1], "alfworld", copies=1)
    with pytest.raises(ValueError, match="copies"):
        sft.rename_rows(expert_rows[:1], "textcraft", copies=-1)


def test_rename_copies_off_keeps_the_cache_keys_of_older_entries():
    from warmstart.recipe import WarmStartConfig, cache_key

    assert "rename_copies" not in WarmStartConfig().key_dict()
    # the defaults are the measured setting of results/warmstart/README.md row 15 (its cache key); row 13, the
    # previous defaults and the start of the committed CPU study, stays reachable by three options
    assert cache_key(WarmStartConfig(env="textcraft")) == "ee351835b46a"
    assert cache_key(WarmStartConfig(env="textcraft", epochs=20, train_budget_s=1500,
                                     dagger_rounds=0)) == "fd697b49a966"
    assert cache_key(WarmStartConfig(rename_copies=2)) != cache_key(WarmStartConfig())


def test_the_thread_count_is_fixed_by_default_and_keyed_otherwise():
    """More threads change the weights (results/LOG.md, 2026-12-01): the default is 1 and keeps the old keys; any
    other count, auto (0) included, is another cache entry."""
    from warmstart.recipe import WarmStartConfig, cache_key

    default = WarmStartConfig(env="textcraft")
    assert default.threads == 1 and "threads" not in default.key_dict()
    assert cache_key(WarmStartConfig(env="textcraft", threads=1)) == cache_key(default) == "ee351835b46a"
    keys = {cache_key(WarmStartConfig(env="textcraft", threads=n)) for n in (0, 2, 4)}
    assert len(keys) == 3 and cache_key(default) not in keys


def test_warm_start_trains_on_the_expert_rows_and_their_renamed_copies(tmp_path):
    from warmstart.recipe import WarmStartConfig, cache_folder, load_result, warm_start

    cfg = WarmStartConfig(tiny_layers=1, tiny_hidden=64, tiny_heads=2, expert_episodes=3, tokenizer_rows=40,
                          epochs=1.0, eval_train_tasks=0,
                          env_kwargs={**ENV_KW, "max_steps": 8}, zero_stage=0, eval_sampled=False, rename_copies=2,
                          batch_rows=8, dagger_rounds=0, eval_max_tasks=1, max_response_tokens=8,
                          rationale="none", cache_root=str(tmp_path), progress=False)
    warm_start(cfg)
    folder = cache_folder(cfg)
    n_expert = len(sft.load_rows(folder / "data" / "expert.jsonl"))
    assert load_result(folder)["rounds"][0]["rows"] == 3 * n_expert
    assert load_result(folder)["settings"]["rename_copies"] == 2


def test_the_warm_start_key_follows_the_data_folder_chosen_outside_the_env_options(tmp_path, monkeypatch):
    """ALFWORLD_DATA / downloaded games / WEBSHOP_DATA change what the warm start trains on, so they change its cache
    key (a bigger generated set used to find the warm start of the small default one); the generated default
    sets keep the keys of the entries built before the data folder was part of the key."""
    from envs.alfworld import data as alf_data
    from warmstart.recipe import WarmStartConfig, cache_key

    monkeypatch.setattr(alf_data, "_USER_ALFWORLD_DATA", None)
    monkeypatch.setattr(alf_data, "_ALFWORLD_DEFAULT", tmp_path / "no-download")
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    a1 = WarmStartConfig(env="alfworld", history_length=2, expert_episodes=200, dagger_episodes=100)
    assert "data" not in a1.key_dict() and cache_key(a1) == "fbcaf8988205"  # row A1, the ALFWorld study's start
    big, other = tmp_path / "gen300", tmp_path / "gen600"
    monkeypatch.setattr(alf_data, "_USER_ALFWORLD_DATA", str(big))
    assert a1.key_dict()["data"] == str(big.resolve()) and cache_key(a1) != "fbcaf8988205"
    key_big = cache_key(a1)
    monkeypatch.setattr(alf_data, "_USER_ALFWORLD_DATA", str(other))
    assert cache_key(a1) not in (key_big, "fbcaf8988205")
    # data_path in the env options is in the key already (env_kwargs) and wins over ALFWORLD_DATA
    named = WarmStartConfig(env="alfworld", env_kwargs={"data_path": str(big)})
    assert "data" not in named.key_dict() and named.key_dict()["env_kwargs"] == {"data_path": str(big)}
    # games downloaded by alfworld-download into the default folder are a choice too
    monkeypatch.setattr(alf_data, "_USER_ALFWORLD_DATA", None)
    game = tmp_path / "download" / "json_2.1.1" / "train" / "task" / "trial"
    game.mkdir(parents=True)
    (game / "game.tw-pddl").write_text("{}")
    monkeypatch.setattr(alf_data, "_ALFWORLD_DEFAULT", tmp_path / "download")
    assert a1.key_dict()["data"] == str(tmp_path / "download")
    # WebShop: $WEBSHOP_DATA; TextCraft reads no data folder
    ws = WarmStartConfig(env="webshop")
    plain = cache_key(ws)
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path / "catalogue"))
    assert ws.key_dict()["data"] == str((tmp_path / "catalogue").resolve()) and cache_key(ws) != plain
    assert cache_key(WarmStartConfig(env="textcraft")) == "ee351835b46a"
