"""The cached SFT warm start: expert data -> (tokenizer + tiny model) -> SFT -> DAgger rounds -> evaluation.

``warm_start(WarmStartConfig(...))`` returns the folder of the final model (a Hugging Face folder with its
tokenizer) and trains it only when the cache does not hold it yet. Command line: ``python -m
experiments.warmstart --env textcraft``.

Cache layout (``envs.paths.cache_dir("warmstart", <env>-<model>-<key>)``, key = hash of every setting that
changes the result)::

    config.json            the resolved settings (what the key hashes)
    data/expert.jsonl      expert rows (``warmstart.sft.SFTRow``) of phase 0
    data/dagger_<k>.jsonl  expert-labelled states the model reached in DAgger round k
    init/                  the untrained model (tiny: tokenizer trained on rendered expert episodes)
    round_<k>/model/       the model after round k (0 = expert data only), round_<k>/metrics.json
    final/                 the result (a copy of the last round's model), final/warmstart.json
    DONE                   written last: its presence is the cache hit

Every phase writes its output atomically and is skipped when its output exists, so an interrupted run resumes
at the phase it was in (``round_<k>`` checkpoints between rounds) [choice].
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

# the settings and the cache key live in warmstart.config (the run config's sft.warmstart section reads them)
from .config import ENV_PRESETS, WarmStartConfig, cache_folder, cache_key

__all__ = ["WarmStartConfig", "ENV_PRESETS", "warm_start", "cache_folder", "cache_key", "load_result"]


def load_result(folder: str | Path) -> dict:
    """``final/warmstart.json`` of a finished cache entry (held-out success, timings, settings)."""
    p = Path(folder) / "final" / "warmstart.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist: the warm start in {folder} has not finished; run "
                                "`python -m experiments.warmstart` to finish it")
    return json.loads(p.read_text())


# ==================================================================================================== phases
def _atomic_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


def cli_parser(prog: str = "python -m experiments.warmstart", description: str | None = None):
    """The command line of the warm start: one option per ``WarmStartConfig`` field (``common.dataclass_cli``: its
    docstring and default as the help), plus ``--force`` and ``--print-path``."""
    import argparse

    from common.dataclass_cli import add_dataclass_arguments

    ap = argparse.ArgumentParser(prog=prog, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_arguments(ap, WarmStartConfig, extra_help={"env_kwargs": "e.g. '{\"show_inventory\": true}'"})
    ap.add_argument("--force", action="store_true", help="delete this setting's cache entry and build it again")
    ap.add_argument("--print-path", action="store_true", help="print the cache folder of these settings and exit")
    return ap


def config_from_args(args) -> WarmStartConfig:
    """The ``WarmStartConfig`` of parsed ``cli_parser`` options (``ValueError`` naming a bad field)."""
    from common.dataclass_cli import dataclass_from_args

    return dataclass_from_args(WarmStartConfig, args)


def _log(msg: str, cfg: WarmStartConfig) -> None:
    if cfg.progress:
        print(f"[warmstart] {msg}", flush=True)


def _tasks(cfg: WarmStartConfig, split: str, n: int, salt: int):
    """``n`` tasks cycling through ``split`` in a seeded order, each with its own env seed."""
    import numpy as np

    from envs.pool import Task
    from warmstart.sft import episode_seed

    env = _make(cfg)
    try:
        n_tasks = env.unwrapped.num_tasks(split)
    finally:
        env.close()
    if cfg.train_tasks and split == (cfg.train_split or env.unwrapped.splits[0]):
        n_tasks = min(n_tasks, cfg.train_tasks)
    out, k = [], 0
    while len(out) < n:
        order = np.random.default_rng([cfg.seed, salt, k]).permutation(n_tasks).tolist()
        out.extend(Task(split, int(i), episode_seed(cfg.seed, salt, k, int(i))) for i in order)
        k += 1
    return out[:n]


def _make(cfg: WarmStartConfig):
    from envs.pool import make_env

    return make_env(cfg.env_id, cfg.resolved_env_kwargs)


def _splits(cfg: WarmStartConfig) -> tuple[str, str]:
    env = _make(cfg)
    try:
        inner = env.unwrapped
        train = cfg.train_split or inner.splits[0]
        ev = cfg.eval_split or (inner.eval_splits[0] if inner.eval_splits else inner.splits[0])
        inner.check_split(train)
        inner.check_split(ev)
    finally:
        env.close()
    return train, ev


def _save_model_folder(learner, tokenizer, out: Path) -> Path:
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    learner.export(tmp, tokenizer=tokenizer)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _copy_folder(src: Path, out: Path) -> Path:
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def warm_start(cfg: WarmStartConfig | None = None, *, force: bool = False) -> Path:
    """Run (or find in the cache) the warm start of ``cfg``; returns the final model folder.

    A finished entry (its ``DONE`` marker) returns at once. ``force`` deletes the entry and starts again.
    """
    cfg = cfg or WarmStartConfig()
    folder = cache_folder(cfg)
    if force and folder.exists():
        shutil.rmtree(folder)
    if (folder / "DONE").is_file():
        _log(f"cache hit: {folder / 'final'}", cfg)
        return folder / "final"
    from trainer.threads import configure_threads, contention_warning, free_cores

    threads = configure_threads(cfg.threads)  # 0: the cores free now (trainer/threads.py), else exactly cfg.threads
    if cfg.threads > 1 and (warning := contention_warning(cfg.threads, free_cores())):
        print(f"[warmstart] note: {warning}", file=sys.stderr, flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_json(folder / "config.json", {"key": cache_key(cfg), "settings": cfg.key_dict()})
    _log(f"building {folder} ({threads} torch thread(s), OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')})",
         cfg)
    t_start, c_start = time.time(), time.process_time()
    timings: dict[str, float] = _read_json(folder / "timings.json") or {}

    def timed(name: str, t0: float, c0: float) -> None:
        timings[f"{name}/wall_s"] = round(time.time() - t0, 1)
        timings[f"{name}/cpu_s"] = round(time.process_time() - c0, 1)
        _atomic_json(folder / "timings.json", timings)

    from warmstart import sft

    train_split, eval_split = _splits(cfg)
    env_name = cfg.env_short
    ek = cfg.resolved_env_kwargs

    # phase 0a: expert rows
    expert_path = folder / "data" / "expert.jsonl"
    if not expert_path.is_file():
        t0, c0 = time.time(), time.process_time()
        rows = sft.collect_expert_rows(cfg.env_id, _tasks(cfg, train_split, cfg.expert_episodes, salt=1),
                                       env_kwargs=ek, style=cfg.rationale, progress=cfg.progress)
        if not rows:
            raise RuntimeError(f"the {cfg.env_id} expert won none of {cfg.expert_episodes} episodes: nothing to learn")
        sft.save_rows(rows, expert_path)
        timed("expert_data", t0, c0)
    expert_rows = sft.load_rows(expert_path)
    renamed_rows = sft.rename_rows(expert_rows, env_name, cfg.rename_copies, seed=cfg.seed)

    # phase 0b: the untrained model
    init = folder / "init"
    if cfg.model == "tiny":
        if not (init / "config.json").is_file():
            from agents.models.tiny import TinyModelConfig, build_tiny_model

            t0, c0 = time.time(), time.process_time()
            half = cfg.tokenizer_rows // 2 if renamed_rows else cfg.tokenizer_rows
            corpus = list(sft.rows_corpus(expert_rows[:half] + renamed_rows[: cfg.tokenizer_rows - half], env_name))
            build_tiny_model(init, TinyModelConfig(layers=cfg.tiny_layers, hidden=cfg.tiny_hidden,
                                                   heads=cfg.tiny_heads, vocab_size=cfg.tiny_vocab, seed=cfg.seed),
                             corpus=corpus, force=True)
            timed("build_model", t0, c0)
        start_model = init
    else:
        from agents.models import check_model_dir

        start_model = check_model_dir(cfg.model)

    from agents.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(start_model)
    from agents.rollout import prompt_config_for

    pcfg = prompt_config_for(tokenizer, cfg.max_prompt_tokens, cfg.history_length)

    # rounds: 0 = expert rows; k >= 1 = DAgger
    prev = start_model
    history: list[dict] = []
    for k in range(cfg.dagger_rounds + 1):
        out = folder / f"round_{k}"
        if (out / "metrics.json").is_file() and (out / "model" / "config.json").is_file():
            history.append(json.loads((out / "metrics.json").read_text()))
            prev = out / "model"
            continue
        metrics: dict[str, Any] = {"round": k}
        if k == 0:
            train_rows = expert_rows + renamed_rows
            epochs, lr = cfg.epochs, cfg.lr
        else:
            dpath = folder / "data" / f"dagger_{k}.jsonl"
            if not dpath.is_file():
                t0, c0 = time.time(), time.process_time()
                model = load_model(prev, dtype="float32")
                options = sft.PlayOptions(label_style=cfg.rationale, expert_mix=cfg.expert_mix, source=f"dagger{k}",
                                          conventions="episode",  # the seeds every cached warm start was built with
                                          progress=cfg.progress, desc=f"dagger round {k}")
                with sft.acting(model, tokenizer, cfg.env_id, env_kwargs=ek, prompt_config=pcfg) as agent:
                    res = sft.play(agent, _tasks(cfg, train_split, cfg.dagger_episodes, 100 + k),
                                   sampling=sft.play_sampling(cfg.dagger_temperature, cfg.max_response_tokens),
                                   seed=cfg.seed * 1000 + k, options=options)
                sft.save_rows(res.rows, dpath)
                _atomic_json(folder / "data" / f"dagger_{k}.json", res.summary())
                timed(f"dagger{k}_rollout", t0, c0)
                del model
            new_rows = sft.load_rows(dpath)
            import random

            replay = random.Random(cfg.seed * 7919 + k).sample(expert_rows, min(len(expert_rows), len(new_rows)))
            train_rows = new_rows + replay
            metrics["dagger_rows"] = len(new_rows)
            metrics["dagger_rollout"] = json.loads((folder / "data" / f"dagger_{k}.json").read_text())
            epochs, lr = cfg.dagger_epochs, cfg.dagger_lr
        t0, c0 = time.time(), time.process_time()
        data = sft.encode_rows(train_rows, tokenizer, env_name, pcfg, progress=cfg.progress)
        model = load_model(prev, dtype="float32")
        steps = int(max(1, round(epochs * len(data) / cfg.batch_rows)))
        learner = sft.SFTLearner(model, sft.sft_trainer_config(lr=lr, batch_rows=cfg.batch_rows,
                                                               micro_batch_rows=cfg.batch_rows,
                                                               warmup_steps=cfg.warmup_steps,
                                                               zero_stage=cfg.zero_stage),
                                 total_steps=steps, prompt_weight=cfg.prompt_weight,
                                 share_prompt_loss=cfg.share_prefixes)
        budget = cfg.train_budget_s if (k == 0 and cfg.train_budget_s > 0) else None
        schedule = sft.SFTSchedule(epochs=epochs, batch_rows=cfg.batch_rows, seed=cfg.seed * 1000 + k,
                                   batch_by=cfg.batch_by, time_budget_s=budget, budget_clock=cfg.train_budget_clock)
        tm = sft.train_sft(learner, data, schedule, pad_id=int(tokenizer.pad_token_id), progress=cfg.progress,
                           desc=f"sft round {k}")
        metrics.update({"rows": len(data), "tokens": data.num_tokens, **tm})
        _save_model_folder(learner, tokenizer, out / "model")
        timed(f"round{k}_train", t0, c0)
        del learner, model
        _atomic_json(out / "metrics.json", metrics)
        history.append(metrics)
        prev = out / "model"

    # held-out evaluation of the final model, sampled as evaluation does and greedy
    final = folder / "final"
    t0, c0 = time.time(), time.process_time()
    model = load_model(prev, dtype="float32")
    evals = {}
    modes = (("greedy", 0.0),) + ((("sampled", cfg.eval_temperature),) if cfg.eval_sampled else ())
    with sft.acting(model, tokenizer, cfg.env_id, env_kwargs=ek, prompt_config=pcfg) as agent:
        for name, temp in modes:
            desc = f"eval {eval_split} " + (f"T={temp:g}" if temp else "greedy")
            res = sft.evaluate(agent, eval_split, sampling=sft.play_sampling(temp, cfg.max_response_tokens),
                               seed=cfg.eval_seed, max_tasks=cfg.eval_max_tasks,
                               options=sft.PlayOptions(progress=cfg.progress, desc=desc))
            evals[name] = {"temperature": temp, **res.summary(), "by_family": res.by_family()}
        if cfg.eval_train_tasks:
            # in-distribution check: train goals (seen in SFT) with env seeds no SFT episode used
            res = sft.play(agent, _tasks(cfg, train_split, cfg.eval_train_tasks, salt=999),
                           sampling=sft.play_sampling(0.0, cfg.max_response_tokens), seed=cfg.eval_seed,
                           options=sft.PlayOptions(progress=cfg.progress,
                                                   desc=f"eval {train_split} (fresh seeds) greedy"))
            evals["train_greedy"] = {"temperature": 0.0, "split": train_split, **res.summary()}
    timed("eval", t0, c0)
    _copy_folder(prev, final)
    result = {
        "env": cfg.env_id, "env_kwargs": ek, "eval_split": eval_split, "eval": evals, "rounds": history,
        "timings": timings, "key": cache_key(cfg), "settings": cfg.key_dict(),
        "this_call": {"wall_s": round(time.time() - t_start, 1), "cpu_s": round(time.process_time() - c_start, 1),
                      "load_avg_1m": os.getloadavg()[0]},
    }
    _atomic_json(final / "warmstart.json", result)
    (folder / "DONE").write_text(time.strftime("%Y-%m-%d %H:%M:%S") + "\n")
    _log(f"done: {final}; held-out {eval_split} success " + ", ".join(
        f"{v['success']:.3f} ({k})" for k, v in evals.items()), cfg)
    return final


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
