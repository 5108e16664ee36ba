"""A minimal multi-turn rollout with the ``agents.rollout`` signatures, for loop tests only.

It plays the real pool, prompts, tokenizer, engine and projection, but without the production rollout's
refinements (prompt token budgets, per-env prompt details): enough to drive the loop end to end.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from agents.batch import RolloutBatch
from agents.projection import project
from agents.prompts import Transcript, get_prompt_builder


def _seed(*keys: int) -> int:
    return int(np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in keys]).generate_state(1)[0] % (2**31 - 1))


def _play(pool, engine, tokenizer, tasks, group_size, sampling, prompt_config, seed, max_prompt_tokens, env_name):
    obs, infos = pool.reset(tasks, group_size=group_size)
    builder = get_prompt_builder(env_name or pool.env_name)
    n = len(obs)
    tr = [Transcript.start(o, i) for o, i in zip(obs, infos)]
    rows: dict[str, list] = defaultdict(list)
    won = [False] * n
    length = [0] * n
    step = [0] * n
    while pool.any_live():
        idx = pool.live_indices()
        prompts = []
        for i in idx:
            ids = tokenizer.apply_chat_template(builder.messages(tr[i], prompt_config), add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
            prompts.append(list(ids)[-max_prompt_tokens:])
        gens = engine.generate(prompts, sampling, seeds=[_seed(seed, i, step[i]) for i in idx])
        projs = [project(g.text) for g in gens]
        results = pool.step(idx, [p.action for p in projs])
        for i, p, g, pr, res in zip(idx, prompts, gens, projs, results):
            rows["slot"].append(i)
            rows["prompt_ids"].append(torch.tensor(p, dtype=torch.long))
            rows["response_ids"].append(torch.tensor(g.token_ids, dtype=torch.long))
            rows["rollout_logprobs"].append(torch.tensor(g.logprobs or [], dtype=torch.float32))
            rows["step"].append(step[i])
            rows["reward"].append(float(res.reward))
            rows["valid"].append(pr.valid)
            rows["done"].append(bool(res.terminated or res.truncated))
            rows["truncated"].append(g.truncated)
            rows["anchor_obs"].append(tr[i].observation)
            rows["response_text"].append(g.text)
            rows["action"].append(pr.action)
            rows["state_key"].append(res.info.get("state_key"))
            rows["task_family"].append(str(infos[i].get("task_family", "")))
            rows["task_id"].append(pool.tasks[i].task_id)
            tr[i].record(pr.action, res.obs, res.info)
            step[i] += 1
            length[i] = step[i]
            won[i] = won[i] or bool(res.info.get("won"))
    slot = torch.tensor(rows["slot"])
    batch = RolloutBatch(
        prompt_ids=rows["prompt_ids"], response_ids=rows["response_ids"],
        group_id=slot // group_size, traj_id=slot % group_size, step=torch.tensor(rows["step"]),
        reward=torch.tensor(rows["reward"]), valid=torch.tensor(rows["valid"]), done=torch.tensor(rows["done"]),
        won=torch.tensor([won[i] for i in rows["slot"]]), response_truncated=torch.tensor(rows["truncated"]),
        anchor_obs=rows["anchor_obs"], response_text=rows["response_text"], action=rows["action"],
        state_key=rows["state_key"], task_family=rows["task_family"], task_id=rows["task_id"],
        rollout_logprobs=rows["rollout_logprobs"] if sampling.logprobs else None,
    )
    return batch, won, length, [str(i.get("task_family", "")) for i in infos]


def collect(pool, engine, tokenizer, tasks, *, group_size, sampling, prompt_config, seed, max_prompt_tokens,
            env_name=None):
    batch, won, length, _ = _play(pool, engine, tokenizer, tasks, group_size, sampling, prompt_config, seed,
                                  max_prompt_tokens, env_name)
    metrics = {
        "rollout/success_rate": float(np.mean(won)),
        "rollout/episode_length": float(np.mean(length)),
        "rollout/valid_rate": float(batch.valid.float().mean()),
        "rollout/rows": float(len(batch)),
    }
    return batch, metrics


def evaluate(pool, engine, tokenizer, tasks, *, sampling, prompt_config, seed, max_prompt_tokens, env_name=None):
    env = env_name or pool.env_name
    wins, fams, batches = [], [], []
    for lo in range(0, len(tasks), pool.num_envs):
        b, won, _, fam = _play(pool, engine, tokenizer, tasks[lo: lo + pool.num_envs], 1, sampling, prompt_config,
                               seed + lo, max_prompt_tokens, env)
        wins += won
        fams += fam
        batches.append(b)
    split = tasks[0].split
    out = {f"eval/{env}/{split}/success_rate": float(np.mean(wins))}
    for f in sorted(set(fams)):
        out[f"eval/{env}/{split}/family/{f}/success_rate"] = float(np.mean([w for w, g in zip(wins, fams) if g == f]))
    return out, RolloutBatch.concat(batches)
