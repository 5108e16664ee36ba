"""The cached SFT warm start: expert data -> (tokenizer + tiny model) -> SFT -> DAgger rounds -> evaluation.

``warm_start(WarmStartConfig(...))`` returns the folder of the final model (a Hugging Face folder with its
tokenizer) and trains it only when the cache does not hold it yet. Command line: ``python -m
experiments.warmstart --env textcraft``.

Cache layout (``envs.paths.cache_dir("warmstart", <env>-<model>-<key>)``, key = hash of every setting that
changes the result)::

    config.json            the resolved settings (what the key hashes)
    data/expert.jsonl      expert rows (``trainer.sft.SFTRow``) of phase 0
    data/dagger_<k>.jsonl  expert-labelled states the model reached in DAgger round k
    init/                  the untrained model (tiny: tokenizer trained on rendered expert episodes)
    round_<k>/model/       the model after round k (0 = expert data only), round_<k>/metrics.json
    final/                 the result (a copy of the last round's model), final/warmstart.json
    DONE                   written last: its presence is the cache hit

Every phase writes its output atomically and is skipped when its output exists, so an interrupted run resumes
at the phase it was in (``round_<k>`` checkpoints between rounds) [choice].
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["WarmStartConfig", "ENV_PRESETS", "warm_start", "cache_folder", "cache_key", "load_result"]

#: short env names -> (gymnasium id, constructor kwargs the warm start and later RL must share)
ENV_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # show_inventory: the expert's choice depends on what is held; the option puts it in every observation
    # max_steps: the horizon of the warm start's own evaluation (RL keeps its preset's env.max_steps)
    "textcraft": ("TextCraft-v0", {"show_inventory": True, "max_steps": 15}),
    "alfworld": ("ALFWorld-v0", {}),
    "webshop": ("WebShop-v0", {}),
}


@dataclass
class WarmStartConfig:
    """Settings of one warm start. Every field except ``progress``/``cache_root`` enters the key (``threads`` only
    when not 1).

    The defaults are the best measured TextCraft setting (``results/warmstart/README.md``, row 15): a 4-layer tiny
    model, recipe-trace targets, next-token prediction on prompt tokens at weight 0.3, 3 passes over 800 expert
    episodes, then one DAgger round; ~22 minutes on 2 idle cores, 31.6% held-out success at T = 0.4.
    """

    env: str = "textcraft"
    """Environment: a short name of ``ENV_PRESETS`` (textcraft | alfworld | webshop) or a gymnasium id."""
    env_kwargs: dict[str, Any] | None = None
    """Constructor arguments of the env; null = the preset's (TextCraft: ``show_inventory=True``)."""
    model: str = "tiny"
    """``tiny`` (a Qwen2 built here, tokenizer trained on rendered expert episodes) or a local model folder /
    name that ``agents.models`` resolves (e.g. ``smollm2-135m-instruct``) to warm-start as it is."""
    tiny_layers: int = 4
    """tiny model: transformer layers."""
    tiny_hidden: int = 128
    """tiny model: hidden size D (head dim = hidden / heads >= 32 for vLLM's CPU build)."""
    tiny_heads: int = 4
    """tiny model: attention heads."""
    tiny_vocab: int = 2048
    """tiny model: BPE vocabulary bound (TextCraft's text saturates near 1.4k)."""
    tokenizer_rows: int = 4000
    """Expert rows whose rendered prompts and responses train the tiny model's tokenizer."""
    rationale: str = "trace"
    """Think-tag content of the targets: trace (recipe chain with counts) | goal | none (``trainer.sft``)."""
    train_split: str | None = None
    """Split of the expert and DAgger tasks; null = the env's train split."""
    train_tasks: int = 0
    """Use only the first N goals of the train split for expert data, DAgger and the train-goal evaluation
    (0 = all): an easier, memorisable task mix [choice]; the held-out split is unchanged."""
    rename_copies: int = 0
    """Renamed copies of every expert row added to round 0's data (``trainer.sft.rename_rows``: a random
    permutation of item-name words per copy, so goals' names stop predicting their recipes and the model must
    read the recipe lines) [choice]; 0 = off. TextCraft only."""
    expert_episodes: int = 800
    """Expert episodes of phase 0 (tasks cycle through the train split, each with a new env seed)."""
    epochs: float = 3.0
    """Passes over the expert rows in round 0 (an upper bound when ``train_budget_s`` ends training first). The
    default is about what row 13 of results/warmstart/README.md trained in its 25-minute budget (1,671 steps of 8
    rows, 3.1 passes) [measured]; fixed passes make the result independent of the machine's speed."""
    lr: float = 1e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10% within each round) [choice]."""
    train_budget_s: float = 0.0
    """Budget of round 0's training in seconds of ``train_budget_clock`` (0 = none, the default: ``epochs`` ends
    training): training stops when it runs out and the learning-rate decay is fitted to the steps it allows
    (``trainer.sft.train_sft``); with a budget, set ``epochs`` high enough that the budget, not the data, ends
    training. A wall-clock budget makes the result depend on the machine's speed and load."""
    train_budget_clock: str = "wall"
    """What ``train_budget_s`` counts: ``wall`` seconds, or ``cpu`` seconds of this process (all threads), which
    buy the same training on a shared, busy machine as on an idle one."""
    prompt_weight: float = 0.3
    """Weight of next-token prediction on prompt tokens (0 = response tokens only; ``trainer.sft.SFTEngine``)."""
    batch_rows: int = 8
    """Step rows per optimizer step."""
    warmup_steps: int = 20
    """Warm-up optimizer steps of each round."""
    dagger_rounds: int = 1
    """DAgger rounds after round 0: roll the model out, label reached states with the expert, retrain (one round
    lifts held-out TextCraft success from 18.4% to 24.7%: results/warmstart/README.md row 14) [measured]."""
    dagger_episodes: int = 200
    """Episodes rolled out per DAgger round."""
    dagger_temperature: float = 1.0
    """Sampling temperature of DAgger rollouts (RL's rollout temperature) [choice]."""
    dagger_epochs: float = 1.0
    """Passes per DAgger round over (new DAgger rows + an equal number of replayed expert rows) [choice]."""
    dagger_lr: float = 1e-3
    """Peak learning rate of DAgger rounds."""
    expert_mix: float = 0.0
    """beta: probability of executing the expert's action instead of the model's during DAgger rollouts."""
    max_response_tokens: int = 128
    """Generation cap per step in rollouts and evaluation (the expert's longest response is ~80 tokens)."""
    max_prompt_tokens: int = 2048
    """Prompt bound in tokens [GiGPO: 2048 TextCraft/ALFWorld]."""
    history_length: int = 0
    """(observation, action) pairs shown in each prompt [GiGPO: 2; choice: 0 here, with the inventory shown the
    expert's choice depends on the current prompt alone, and prompts are 24% shorter]; RL runs started from the warm
    start use the same (``lab.study.warmstart_overrides``)."""
    eval_split: str | None = None
    """Held-out split reported at the end; null = the env's first eval split (TextCraft: eval_depth2)."""
    eval_max_tasks: int | None = 20
    """Tasks of the held-out evaluation (a fixed seeded subset); null = the whole split."""
    eval_train_tasks: int = 20
    """Also evaluate (greedy) on this many train-split goals with fresh env seeds (the goals RL trains on; 0 = skip)."""
    eval_sampled: bool = False
    """Also evaluate sampled at ``eval_temperature`` (greedy is always reported)."""
    eval_temperature: float = 0.4
    """Sampling temperature of the held-out evaluation [GiGPO validation: 0.4]; greedy is reported too."""
    eval_seed: int = 12345
    """Seed of the evaluation tasks and samplers (``EvalConfig.seed``)."""
    seed: int = 0
    """Seeds the model init, the expert task seeds, the shuffles and the DAgger samplers."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage of the SFT engine."""
    progress: bool = field(default=True, metadata={"key": False})
    """Progress bars (not part of the cache key)."""
    threads: int = 1
    """torch intra-op threads [choice: 1]. More threads change the order of floating-point sums and, over a warm
    start's thousands of steps, the weights: on 2026-12-01 the default TextCraft warm start built with 2 threads won
    3/20 held-out goals greedily, built with 1 thread 5/20, with different weights (results/LOG.md). So the count is
    fixed by default and part of the cache key when not 1 (entries built before keep their keys); one thread is
    also immune to another busy process (results/benchmarks/threads.md). 0 = the cores free when the build starts
    (``trainer/threads.py``): faster on an idle machine, but the result then depends on the load."""
    cache_root: str | None = field(default=None, metadata={"key": False})
    """Parent folder of the cache entries; null = ``envs.paths.cache_dir("warmstart")``."""

    def __post_init__(self) -> None:
        from envs.rationale import RATIONALE_STYLES

        def positive(name, integer=True, zero_ok=False):
            v = getattr(self, name)
            kind = int if integer else (int, float)
            if isinstance(v, bool) or not isinstance(v, kind) or (v < 0 if zero_ok else v <= 0):
                raise ValueError(f"WarmStartConfig.{name}={v!r} must be a {'non-negative' if zero_ok else 'positive'} "
                                 f"{'integer' if integer else 'number'}")

        for n in ("tiny_layers", "tiny_hidden", "tiny_heads", "tiny_vocab", "tokenizer_rows", "expert_episodes",
                  "batch_rows", "dagger_episodes", "max_response_tokens", "max_prompt_tokens"):
            positive(n)
        for n in ("rename_copies", "warmup_steps", "dagger_rounds", "history_length", "seed", "threads"):
            positive(n, zero_ok=True)
        for n in ("epochs", "lr", "dagger_epochs", "dagger_lr"):
            positive(n, integer=False)
        positive("train_budget_s", integer=False, zero_ok=True)
        positive("eval_train_tasks", zero_ok=True)
        positive("train_tasks", zero_ok=True)
        if self.train_budget_clock not in ("wall", "cpu"):
            raise ValueError(f"WarmStartConfig.train_budget_clock={self.train_budget_clock!r} must be 'wall' or 'cpu'")
        if not 0.0 <= float(self.prompt_weight) <= 1.0:
            raise ValueError(f"WarmStartConfig.prompt_weight={self.prompt_weight!r} must lie in [0, 1]")
        positive("dagger_temperature", integer=False, zero_ok=True)
        positive("eval_temperature", integer=False, zero_ok=True)
        if not 0.0 <= float(self.expert_mix) <= 1.0:
            raise ValueError(f"WarmStartConfig.expert_mix={self.expert_mix!r} must lie in [0, 1]")
        if self.rationale not in RATIONALE_STYLES:
            raise ValueError(f"WarmStartConfig.rationale={self.rationale!r} must be one of {RATIONALE_STYLES}")
        if self.env not in ENV_PRESETS and "-v" not in self.env:
            raise ValueError(f"WarmStartConfig.env={self.env!r}: use one of {sorted(ENV_PRESETS)} or a gymnasium id "
                             "such as 'TextCraft-v0'")
        if self.eval_max_tasks is not None:
            positive("eval_max_tasks")

    # ------------------------------------------------------------------ derived
    @property
    def env_id(self) -> str:
        return ENV_PRESETS[self.env][0] if self.env in ENV_PRESETS else self.env

    @property
    def resolved_env_kwargs(self) -> dict[str, Any]:
        if self.env_kwargs is not None:
            return dict(self.env_kwargs)
        return dict(ENV_PRESETS[self.env][1]) if self.env in ENV_PRESETS else {}

    @property
    def env_short(self) -> str:
        return self.env_id.split("-")[0].lower()

    def key_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("key", True)}
        for f in dataclasses.fields(self):  # epochs=20 and epochs=20.0 are one setting, one key
            if f.name in d and f.type in (float, "float") and type(d[f.name]) is int:
                d[f.name] = float(d[f.name])
        d["env"] = self.env_id
        d["env_kwargs"] = self.resolved_env_kwargs
        if self.model != "tiny":  # a model folder: its identity is its path and its weights' size and date
            d["model"] = _model_identity(self.model)
            for k in ("tiny_layers", "tiny_hidden", "tiny_heads", "tiny_vocab", "tokenizer_rows"):
                d.pop(k)
        if not self.rename_copies:  # added later: off keeps the keys of entries built before it existed
            d.pop("rename_copies")
        if self.threads == 1:  # added later: the default keeps the keys of entries built before (with 1 thread)
            d.pop("threads")
        data = self.data_from_environment()
        if data is not None:  # added later: absent for the generated default, so earlier entries keep their keys
            d["data"] = data
        d["format"] = 1
        return d

    def data_from_environment(self) -> str | None:
        """The data folder the env will read that its kwargs do not name: ``$ALFWORLD_DATA`` (or downloaded
        games) for ALFWorld, ``$WEBSHOP_DATA`` for WebShop; None for the generated default sets. Part of the cache
        key, so that pointing ALFWORLD_DATA at a bigger set trains a new warm start instead of finding the old one."""
        kw = self.resolved_env_kwargs
        if self.env_short == "alfworld" and not kw.get("data_path"):
            from envs.alfworld.data import chosen_data_root

            root = chosen_data_root()
            return str(root) if root is not None else None
        if self.env_short == "webshop" and not kw.get("data_dir") and os.environ.get("WEBSHOP_DATA"):
            return str(Path(os.environ["WEBSHOP_DATA"]).expanduser().resolve())
        return None


def _model_identity(name: str) -> dict[str, Any]:
    from agents.models import check_model_dir

    path = check_model_dir(name)
    files = sorted(p for p in path.glob("*.safetensors"))
    return {"path": str(path), "weights": [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files]}


def cache_key(cfg: WarmStartConfig) -> str:
    blob = json.dumps(cfg.key_dict(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_folder(cfg: WarmStartConfig) -> Path:
    """The cache entry of ``cfg``: ``<cache>/warmstart/<env>-<model>-<key>`` (not created here)."""
    from envs.paths import cache_dir

    root = Path(cfg.cache_root) if cfg.cache_root else cache_dir("warmstart", create=False)
    model = "tiny" if cfg.model == "tiny" else Path(str(cfg.model)).name.replace("/", "-")
    return root / f"{cfg.env_short}-{model}-{cache_key(cfg)}"


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
    from trainer.sft import episode_seed

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


def _save_model_folder(src_engine, tokenizer, out: Path) -> Path:
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    src_engine.export(tmp, tokenizer=tokenizer)
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
    from .threads import configure_threads

    threads = configure_threads(cfg.threads)  # 0: the cores free now (trainer/threads.py), else exactly cfg.threads
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

    from trainer import sft

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
                res = sft.play(model, tokenizer, cfg.env_id, _tasks(cfg, train_split, cfg.dagger_episodes, 100 + k),
                               env_kwargs=ek, temperature=cfg.dagger_temperature,
                               max_response_tokens=cfg.max_response_tokens, prompt_config=pcfg,
                               seed=cfg.seed * 1000 + k, label_style=cfg.rationale, expert_mix=cfg.expert_mix,
                               source=f"dagger{k}", progress=cfg.progress, desc=f"dagger round {k}",
                               conventions="episode")  # the seeds every cached warm start was built with
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
        engine = sft.SFTEngine(model, sft.sft_trainer_config(lr=lr, batch_rows=cfg.batch_rows,
                                                             micro_batch_rows=cfg.batch_rows,
                                                             warmup_steps=cfg.warmup_steps,
                                                             zero_stage=cfg.zero_stage),
                               total_steps=steps, prompt_weight=cfg.prompt_weight)
        budget = cfg.train_budget_s if (k == 0 and cfg.train_budget_s > 0) else None
        tm = sft.train_sft(engine, data, epochs=epochs, batch_rows=cfg.batch_rows, seed=cfg.seed * 1000 + k,
                           pad_id=int(tokenizer.pad_token_id), progress=cfg.progress, desc=f"sft round {k}",
                           time_budget_s=budget, budget_clock=cfg.train_budget_clock)
        metrics.update({"rows": len(data), "tokens": data.num_tokens, **tm})
        _save_model_folder(engine, tokenizer, out / "model")
        timed(f"round{k}_train", t0, c0)
        del engine, model
        _atomic_json(out / "metrics.json", metrics)
        history.append(metrics)
        prev = out / "model"

    # held-out evaluation of the final model, sampled as evaluation does and greedy
    final = folder / "final"
    t0, c0 = time.time(), time.process_time()
    model = load_model(prev, dtype="float32")
    evals = {}
    modes = (("greedy", 0.0),) + ((("sampled", cfg.eval_temperature),) if cfg.eval_sampled else ())
    for name, temp in modes:
        res = sft.evaluate(model, tokenizer, cfg.env_id, eval_split, env_kwargs=ek, max_tasks=cfg.eval_max_tasks,
                           temperature=temp, seed=cfg.eval_seed, max_response_tokens=cfg.max_response_tokens,
                           prompt_config=pcfg, progress=cfg.progress,
                           desc=f"eval {eval_split} " + (f"T={temp:g}" if temp else "greedy"))
        evals[name] = {"temperature": temp, **res.summary(), "by_family": res.by_family()}
    if cfg.eval_train_tasks:
        # in-distribution check: train goals (seen in SFT) with env seeds no SFT episode used
        res = sft.play(model, tokenizer, cfg.env_id, _tasks(cfg, train_split, cfg.eval_train_tasks, salt=999),
                       env_kwargs=ek, temperature=0.0, seed=cfg.eval_seed,
                       max_response_tokens=cfg.max_response_tokens, prompt_config=pcfg, progress=cfg.progress,
                       desc=f"eval {train_split} (fresh seeds) greedy")
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
