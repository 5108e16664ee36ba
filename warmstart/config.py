"""The settings of an SFT warm start (``WarmStartConfig``), the cache key they make, and the check of a run
config's ``sft.warmstart`` section (``from_run_config``).

Kept apart from ``warmstart.recipe`` (the pipeline) so that the commands that check a run config need not import
the pipeline. ``warmstart.recipe`` re-exports the settings and the key.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from common.config_checks import check_choices, check_number, fail
from envs.rationale import RationaleStyle

__all__ = ["ENV_PRESETS", "WarmStartConfig", "cache_key", "cache_folder", "env_short_name", "SECTION_EXCLUDED",
           "from_run_config"]

#: short env names -> (gymnasium id, constructor kwargs the warm start and later RL must share)
ENV_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # show_inventory: the expert's choice depends on what is held; the option puts it in every observation
    # max_steps: the horizon of the warm start's own evaluation (RL keeps its preset's env.max_steps)
    "textcraft": ("TextCraft-v0", {"show_inventory": True, "max_steps": 15}),
    "alfworld": ("ALFWorld-v0", {}),
    "webshop": ("WebShop-v0", {}),
    # the finite worlds of envs/finite/ (exact advantages: groundtruth/); max_steps is also the MDP's horizon, so the
    # warm
    # start and RL must share it: the expert needs 8 steps in this rooms world, 7-12 in the default craft world
    "finiterooms": ("FiniteRooms-v0", {"surface": "high", "alias": 0.0, "n_locations": 4, "n_objects": 1,
                                       "n_tasks": 2, "max_steps": 10}),
    "finitecraft": ("FiniteCraft-v0", {"surface": "high", "alias": 0.0, "max_steps": 12}),
}


#: how ``warmstart.sft.train_sft`` forms mini-batches: "row" = shuffled rows, similar lengths together; "episode" =
#: the rows of shuffled episodes in turn (a batch holds one or two episodes' rows, which share most of their prompt).
#: Defined here, not in warmstart.sft, which imports it: the other way round closes an import cycle.
BatchBy = Literal["row", "episode"]
BATCH_BY = get_args(BatchBy)


@dataclass
class WarmStartConfig:
    """Settings of one warm start. Every field except ``progress``/``cache_root`` enters the key (``threads`` only
    when not 1).

    The defaults are the best measured TextCraft setting (``results/warmstart/README.md``, row 15): a 4-layer tiny
    model, recipe-trace targets, next-token prediction on prompt tokens at weight 0.3, 3 passes over 800 expert
    episodes, then one DAgger round; ~22 minutes on 2 idle cores, 31.6% held-out success at T = 0.4.
    """

    env: str = "textcraft"
    """Environment: a short name of ``ENV_PRESETS`` (textcraft | alfworld | webshop | finiterooms | finitecraft) or
    a gymnasium id."""
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
    rationale: RationaleStyle = "trace"
    """Think-tag content of the targets: trace (recipe chain with counts) | goal | none (``warmstart.sft``)."""
    train_split: str | None = None
    """Split of the expert and DAgger tasks; null = the env's train split."""
    train_tasks: int = 0
    """Use only the first N goals of the train split for expert data, DAgger and the train-goal evaluation
    (0 = all): an easier, memorisable task mix [choice]; the held-out split is unchanged."""
    rename_copies: int = 0
    """Renamed copies of every expert row added to round 0's data (``warmstart.sft.rename_rows``: a random
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
    (``warmstart.sft.train_sft``); with a budget, set ``epochs`` high enough that the budget, not the data, ends
    training. A wall-clock budget makes the result depend on the machine's speed and load."""
    train_budget_clock: Literal["wall", "cpu"] = "wall"
    """What ``train_budget_s`` counts: ``wall`` seconds, or ``cpu`` seconds of this process (all threads), which
    buy the same training on a shared, busy machine as on an idle one."""
    prompt_weight: float = 0.3
    """Weight of next-token prediction on prompt tokens (0 = response tokens only; ``warmstart.sft.SFTLearner``)."""
    batch_rows: int = 8
    """Step rows per optimizer step."""
    batch_by: BatchBy = "row"
    """How the rows form mini-batches (``BATCH_BY``): ``row`` (shuffled rows, similar lengths together)
    or ``episode`` (the rows of shuffled episodes in turn, so that a batch's rows share most of their prompt, which
    ``share_prefixes`` then computes once) [choice]."""
    share_prefixes: bool = False
    """Rows of a batch that share a prompt prefix compute it once, its tokens' loss counted once per row
    (``warmstart.sft.SFTLearner``'s ``share_prompt_loss``): the same loss and gradients to float tolerance, in less time
    (``results/benchmarks/sft.md``)."""
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
    start use the same (``warmstart.cache.warmstart_overrides``)."""
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
    """DeepSpeed ZeRO stage of the SFT learner (``warmstart.sft.SFTLearner``)."""
    progress: bool = field(default=True, metadata={"key": False})
    """Progress bars (not part of the cache key)."""
    threads: int = 1
    """torch intra-op threads [choice: 1]. More threads change the order of floating-point sums and, over a warm
    start's thousands of steps, the weights, and with them the warm start's success (results/warmstart/README.md). So
    the count is fixed by default and part of the cache key when not 1 (entries built before keep their keys); one
    thread is also immune to another busy process (results/benchmarks/threads.md). 0 = the cores free when the build
    starts (``trainer/threads.py``): faster on an idle machine, but the result then depends on the load."""
    cache_root: str | None = field(default=None, metadata={"key": False})
    """Parent folder of the cache entries; null = ``envs.paths.cache_dir("warmstart")``."""

    def __post_init__(self) -> None:
        s = "WarmStartConfig"

        def positive(name, integer=True, zero_ok=False):
            check_number(s, name, getattr(self, name), lo=0, lo_open=not zero_ok, integer=integer)

        check_choices(self, s)
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
        if not isinstance(self.share_prefixes, bool):
            fail(f"WarmStartConfig.share_prefixes={self.share_prefixes!r} must be true or false")
        check_number(s, "prompt_weight", self.prompt_weight, lo=0, hi=1)
        positive("dagger_temperature", integer=False, zero_ok=True)
        positive("eval_temperature", integer=False, zero_ok=True)
        check_number(s, "expert_mix", self.expert_mix, lo=0, hi=1)
        if self.env not in ENV_PRESETS and "-v" not in self.env:
            fail(f"WarmStartConfig.env={self.env!r}: use one of {sorted(ENV_PRESETS)} or a gymnasium id such as "
                 "'TextCraft-v0'")
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
        if self.batch_by == "row":  # added later: the batches every earlier entry was built with
            d.pop("batch_by")
        if not self.share_prefixes:  # added later: the unshared pass every earlier entry was built with
            d.pop("share_prefixes")
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


#: WarmStartConfig fields a run config's ``sft.warmstart`` section does not hold: the env is the run's, progress and
#: the cache folder are how it is built, not what
SECTION_EXCLUDED = ("env", "progress", "cache_root")


def env_short_name(env_id: str) -> str:
    """``ENV_PRESETS`` name of a gymnasium id (``TextCraft-v0`` -> ``textcraft``); the id itself when none matches."""
    for name, (gid, _kw) in ENV_PRESETS.items():
        if gid == env_id:
            return name
    return env_id


def from_run_config(run_cfg) -> WarmStartConfig:
    """The ``WarmStartConfig`` of a run config's warm start: its ``sft.warmstart`` section on the run's environment.

    The run config holds the section as a plain mapping (the trainer does not know these settings); this is where
    it is checked: ``trainer.config.ConfigError`` names a key that is no warm-start setting, or a bad value."""
    from trainer.config import ConfigError

    names = {f.name for f in dataclasses.fields(WarmStartConfig)} - set(SECTION_EXCLUDED)
    for k in run_cfg.sft.warmstart:
        if k not in names:
            close = difflib.get_close_matches(str(k), sorted(names), n=1, cutoff=0.6)
            raise ConfigError(f"sft.warmstart.{k} is not a warm-start setting" + (f"; did you mean {close[0]!r}?" if
                              close else "") + f" (valid: {sorted(names)})")
    try:
        return WarmStartConfig(env=env_short_name(run_cfg.env.id), **run_cfg.sft.warmstart)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"sft.warmstart: {e}") from e
