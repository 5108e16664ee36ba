"""Plan the memory of a training run: GPU memory per rank and host (CPU) memory per node, before renting the GPUs;
and its time per iteration, per phase (``experiments.plan_time``: a model with every input stated).

    python -m experiments.plan_memory configs/paper/alfworld_qwen2.5-7b.yaml --gpus 4
    python -m experiments.plan_memory configs/paper/alfworld_qwen2.5-1.5b.yaml --gpus 2 trainer.zero_stage=2
    python -m experiments.plan_memory configs/paper/webshop_qwen2.5-7b.yaml --gpus 8 --json

The preset is loaded by the trainer's own loader (``trainer.config.load_config``), so ``key=value`` overrides work
as for ``experiments.train``. Nothing is computed on a GPU and no weights are read: the parameter count comes from the
model's shapes, read from ``model.path/config.json`` when that folder exists, from ``--model-config`` when given,
else from the built-in shapes of Qwen2.5-1.5B/7B-Instruct (``agents.models.shapes``, copied from their public
config.json files) picked by the name in ``model.path``. Exit status 2 on a bad preset, override or ``--gpus``.

Symbols: P model parameters, W ranks (= GPUs, one process each), T = rollout.max_prompt_tokens +
rollout.max_response_tokens (the longest step row), L layers, h hidden size, I MLP size, V vocabulary.

What is counted, per rank, following the code (``trainer/ppo_actor.py``, ``trainer/loop.py``, DeepSpeed 0.19):

* actor weights, bf16, 2 B/param: whole on every rank at ZeRO 0-2, P/W at ZeRO-3; on the host with
  ``trainer.offload_params`` (ZeRO-3 only);
* reference weights (``trainer.use_kl_loss``, no LoRA): a frozen bf16 copy of the actor; under ZeRO-3 a second
  DeepSpeed engine partitions it like the actor (parameter offload included), otherwise a whole copy per rank;
* gradients, fp32, 4 B/param: whole at ZeRO 0-1, P/W at ZeRO 2-3; on the host with ``trainer.offload_optimizer``
  (the fp32 partition DeepSpeed's CPU Adam reads; ZeRO-1 then still accumulates the whole gradient on the GPU in
  bf16, 2 B/param). Without offload DeepSpeed keeps bf16 gradient partitions and converts them to fp32 at the
  step, so 4 B is the step-time peak;
* fp32 master weights and AdamW m, v: 12 B/param, P/W at ZeRO >= 1, whole at ZeRO-0 (DeepSpeed's bf16 wrapper keeps
  whole fp32 copies; in fp32 without ZeRO the optimizer updates the weights themselves: 8 B/param); on the host
  with ``trainer.offload_optimizer``;
* DeepSpeed buffers (estimate): one gradient reduce bucket (``reduce_bucket_size`` 5e8 elements, bf16); under
  ZeRO-3 also the gathered parameters, estimated as the largest module (embedding or LM head V x h, or one decoder
  layer) plus the prefetch bucket (5e7 elements); DeepSpeed's defaults, which ``build_ds_config`` does not change;
* activations (ESTIMATES, upper bounds: every row padded to T tokens, no prefix sharing): the update with
  gradient checkpointing keeps each layer's input, L x rows x T x h x 2 B, recomputes one layer at a time in the
  backward (~ rows x T x (7h + 2 x KV width + 4I) x 2 B), and holds ~3 fp32 (logprob_chunk_tokens x V) tensors
  of the chunked LM head; without checkpointing every layer keeps that per-layer amount. The log-prob pass (no
  gradient) holds one layer's working set, ~ logprob_batch_rows x T x (4h + 3I) x 2 B, plus the LM-head chunk;
* vLLM (``rollout.engine=vllm``): awake, it takes ``vllm_gpu_memory_utilization`` x the GPU's memory (its weights
  plus the KV cache), asleep it takes ~0 GPU memory; the trainer builds it with sleep mode on GPU, level 1, which
  moves its bf16 weights (2P / ``vllm_tensor_parallel``) to host memory between rollouts;
* checkpoints (``trainer/checkpoint.py``): every rank writes its optimizer state (fp32 master + Adam partitions,
  ``PPOActor.optimizer_state(copy=False)``: no clone of host-resident state), and safetensors serialises the
  whole file to bytes before writing it, which is one host copy of that state per rank; the HF export
  (``PPOActor.export_hf``) gathers each parameter on every rank but only rank 0 keeps it, one safetensors shard
  (5 GiB) at a time. ``export_every_rank`` below gives, for comparison, the peak of an export that built the whole
  bf16 state dict on every rank (+2P per rank), as the code did before.

* ``deepspeed.initialize`` (ZeRO-3): the model reaches it whole (loaded on the host) and sits on the GPU in bf16,
  2P, until ZeRO-3 partitions it; the trainer builds vLLM first, awake, so this phase holds vLLM's share as well;
* vLLM asleep keeps some GPU memory through the log-prob and update phases (its CUDA graphs' pool and buffers that
  level-1 sleep does not release): ``--vllm-asleep-gb``, an ESTIMATE;
* processes (ESTIMATES): each rank's Python processes besides the counted tensors (``--process-gb``) and its
  ``env.num_workers`` environment workers (``--env-worker-gb`` each), added to the host peak per node;
* disk (``disk_plan``): a checkpoint is the HF export (2P in bf16) + every rank's optimizer file (12P in all at
  ZeRO >= 1) + the LoRA adapter; a run peaks at ``trainer.keep_last`` + 1 checkpoints (the new one is written
  before the oldest is pruned) and keeps ``keep_last`` (HF exports only with ``trainer.drop_optimizer_at_end``,
  which ``experiments.sweep`` sets); a sweep of ``--runs`` runs, ``--jobs`` at a time, keeps the finished runs'
  folders plus the running ones at their peak.

GPU peak = the resident state (weights, gradients, optimizer state kept on the GPU) plus the largest phase:
rollout (vLLM awake), log-prob pass or update (buffers + activations), ``deepspeed.initialize`` (ZeRO-3). Host per
node = the ranks on the node (min(W, --gpus-per-node)) times the per-rank host memory; the host peak adds the
processes' estimate. GB = 1e9 bytes. Not counted: the CUDA context and
allocator fragmentation (~1-3 GB per GPU), vLLM's own activations inside its share, the page cache, and the
start-up copies (every
rank loads the model in bf16 on the host and deep-copies it as the reference: 4P per rank until DeepSpeed takes
them over).

Reconciliation with the earlier estimate for 7B on 4 ranks (steady host ~213 GB per node: fp32 master + Adam 91,
fp32 gradients 30, offloaded bf16 actor + reference 30, vLLM sleep copies 61): the same four terms, 12P + 4P + 4P
+ 8P = 28P = 213.2 GB per node with P = 7,615,616,512, so the figures agree; this planner adds the checkpoint-time
peak (the optimizer-state copies: +12P per node; rank 0's export shard overlaps with them; see
``checkpoint_extra``) and the GPU side. With the paper's 7B setting on 4 ranks the optimizer-state copies (22.8 GB
per rank) outweigh even a whole-model export on every rank (15.2 GB per rank), so both exports peak at 304.6 GB per
node; the streamed export matters when the per-rank export is larger than the optimizer partition (e.g. 8 ranks per
node).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agents.models.shapes import (  # noqa: F401  (known_shape: re-exported for callers of this module)
    ModelShape,
    known_shape,
    param_count,
    resolve_shape,
    shape_from_hf_config,
)

__all__ = ["ModelShape", "Plan", "Component", "Setup", "param_count", "plan_memory", "shape_from_hf_config",
           "setup_from_config", "render", "main"]

PROG = "python -m experiments.plan_memory"
GB = 1e9
#: DeepSpeed's defaults for the buckets the trainer's ds_config leaves alone (deepspeed/runtime/zero/config.py)
REDUCE_BUCKET = 500_000_000
PREFETCH_BUCKET = 50_000_000
MAX_LIVE_PARAMETERS = 1_000_000_000
#: ``PPOActor.export_hf``'s shard size
EXPORT_SHARD_BYTES = 5 * 2**30
#: fp32 (chunk x V) tensors alive at once in the chunked LM head (logits, softmax, a product or gradient)
LM_HEAD_FP32_COPIES = 3
#: an H100 80 GB as CUDA reports it (81,559 MiB), the presets' GPU
DEFAULT_GPU_GB = 85.5
#: ESTIMATES of what the model does not derive from parameter counts (each a command-line input):
#: resident host memory of one rank's Python processes besides the tensors counted (torch, CUDA and NCCL
#: libraries, DeepSpeed, vLLM's engine, tokenizer), of one environment worker process, and the GPU memory vLLM keeps
#: while asleep at level 1 (its CUDA graphs' pool and buffers that sleep mode does not release)
DEFAULT_PROCESS_GB = 5.0
DEFAULT_ENV_WORKER_GB = 0.5
DEFAULT_VLLM_ASLEEP_GB = 2.0


def lora_param_count(s: ModelShape, rank: int, targets) -> int:
    """LoRA adapter parameters: r x (in + out) per targeted linear layer per decoder layer."""
    q = s.heads * s.head_dim
    dims = {"q_proj": (s.hidden, q), "k_proj": (s.hidden, s.kv_width), "v_proj": (s.hidden, s.kv_width),
            "o_proj": (q, s.hidden), "gate_proj": (s.hidden, s.intermediate), "up_proj": (s.hidden, s.intermediate),
            "down_proj": (s.intermediate, s.hidden)}
    return s.layers * sum(rank * sum(dims[t]) for t in targets if t in dims)


@dataclass(frozen=True)
class Setup:
    """What the plan depends on, from the config and the command line."""

    world: int
    gpus_per_node: int = 8
    gpu_bytes: float = DEFAULT_GPU_GB * GB
    zero_stage: int = 3
    offload_params: bool = False
    offload_optimizer: bool = False
    bf16: bool = True
    use_kl_loss: bool = True
    lora_rank: int = 0
    lora_targets: tuple = ()
    vllm: bool = True
    vllm_util: float = 0.6
    vllm_tp: int = 1
    vllm_sleep: bool = True
    gradient_checkpointing: bool = True
    micro_batch_rows: int = 8
    logprob_batch_rows: int = 16
    tokens: int = 2560
    chunk_tokens: int = 1024
    keep_last: int = 2
    drop_optimizer: bool = False
    runs: int = 1
    jobs: int = 1
    process_host: float = DEFAULT_PROCESS_GB * GB
    env_workers: int = 0
    env_worker_host: float = DEFAULT_ENV_WORKER_GB * GB
    vllm_asleep_gpu: float = DEFAULT_VLLM_ASLEEP_GB * GB

    @property
    def ranks_per_node(self) -> int:
        return min(self.world, self.gpus_per_node)


@dataclass
class Component:
    """One line of the plan: bytes per rank on the GPU and on the host, and when they are held."""

    name: str
    gpu: float
    host: float
    when: str  # always | rollout | log-prob | update | train (log-prob and update) | asleep | checkpoint
    how: str
    rank0_only: bool = False


@dataclass
class Plan:
    model: str
    params: int
    trainable: int
    setup: Setup
    components: list[Component]
    totals: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _lm_head_bytes(s: ModelShape, st: Setup) -> float:
    return LM_HEAD_FP32_COPIES * st.chunk_tokens * s.vocab * 4


def update_activation_bytes(s: ModelShape, st: Setup) -> float:
    """Estimate of the update's activations on one rank (one micro-batch of padded rows)."""
    tokens = st.micro_batch_rows * st.tokens
    per_layer = tokens * (7 * s.hidden + 2 * s.kv_width + 4 * s.intermediate) * 2
    if st.gradient_checkpointing:
        body = s.layers * tokens * s.hidden * 2 + per_layer
    else:
        body = s.layers * per_layer
    return body + _lm_head_bytes(s, st)


def logprob_activation_bytes(s: ModelShape, st: Setup) -> float:
    """Estimate of a no-gradient log-prob forward's working set on one rank."""
    tokens = st.logprob_batch_rows * st.tokens
    return tokens * (4 * s.hidden + 3 * s.intermediate) * 2 + _lm_head_bytes(s, st)


def checkpoint_extra(opt_copy: float, export_rank0: float, export_other: float, ranks: int) -> float:
    """Host bytes a checkpoint adds on the node of rank 0, the largest of its three moments: every rank holds its
    export copy (rank 0 ``export_rank0``, the others ``export_other``); rank 0 still writes its export while the
    others hold their optimizer-state copies (``opt_copy`` each); every rank holds its optimizer-state copy.
    Streamed export (the code's): ``export_rank0`` = one shard, ``export_other`` = 0; an export on every rank: both
    the whole model."""
    return max(export_rank0 + (ranks - 1) * export_other, export_rank0 + (ranks - 1) * opt_copy, ranks * opt_copy)


def disk_plan(P: int, T: int, W: int, pb: int, opt_rank: float, lora: bool, st: Setup) -> dict:
    """Bytes on disk (``trainer/checkpoint.py``'s layout): one checkpoint = the HF export (``model/``, the weights as
    the model holds them, ``pb`` B x P; LoRA merged) + the LoRA adapter (``pb`` B x trainable) + every rank's
    optimizer file (``opt_rank`` each: fp32 master + AdamW); RNG, state and manifest files are a few kB. A save
    writes the new checkpoint before pruning the oldest, so a run peaks at keep_last + 1 checkpoints and keeps
    keep_last (without the optimizer files once finished with ``trainer.drop_optimizer_at_end``). A sweep of
    ``runs`` runs, ``jobs`` at a time: the finished runs' kept folders plus ``jobs`` runs at their peak."""
    export = pb * P
    adapter = pb * T if lora else 0
    optimizer = opt_rank * W
    ckpt = export + adapter + optimizer
    kept = st.keep_last * (ckpt - optimizer if st.drop_optimizer else ckpt)
    peak = (st.keep_last + 1) * ckpt
    jobs = min(st.jobs, st.runs)
    return {"disk_export": export, "disk_optimizer": optimizer, "disk_checkpoint": ckpt, "disk_run_peak": peak,
            "disk_run_kept": kept, "disk_sweep": (st.runs - jobs) * kept + jobs * peak}


def plan_memory(s: ModelShape, st: Setup) -> Plan:
    """Every component per rank and the totals (bytes); see the module docstring for the rules."""
    P, W, z = param_count(s), st.world, st.zero_stage
    lora = st.lora_rank > 0
    if lora and z == 3:
        raise ValueError("model.lora_rank > 0 with trainer.zero_stage=3 is not supported by the trainer")
    if st.offload_params and z != 3:
        raise ValueError("trainer.offload_params=true needs trainer.zero_stage=3")
    if st.offload_optimizer and z == 0:
        raise ValueError("trainer.offload_optimizer=true needs trainer.zero_stage >= 1")
    T = lora_param_count(s, st.lora_rank, st.lora_targets) if lora else P  # trainable parameters
    pb = 2 if st.bf16 else 4  # bytes of a weight as the model holds it
    comps: list[Component] = []

    def place(name, nbytes, on_host, when, how, **kw):
        comps.append(Component(name, 0.0 if on_host else nbytes, nbytes if on_host else 0.0, when, how, **kw))

    dt = "bf16" if st.bf16 else "fp32"
    shard = W if z == 3 else 1
    div = " / W" if z == 3 else ""
    weights = pb * P / shard + (pb * T if lora else 0)
    place(f"actor weights ({dt})", weights, st.offload_params, "always",
          f"{pb} B x P{div}" + (" + adapters" if lora else "") + (", offloaded" if st.offload_params else ""))
    if st.use_kl_loss and not lora:
        place(f"reference weights ({dt}, frozen)", pb * P / shard, st.offload_params, "always",
              f"{pb} B x P{div}" + (", offloaded" if st.offload_params else ""))
    # gradients
    g_shard = W if z >= 2 else 1
    g_div = " / W" if z >= 2 else ""
    if st.offload_optimizer:
        place("gradients (fp32 partition)", 4 * T / W, True, "always", "4 B x P / W, offloaded")
        if z == 1:
            place(f"gradients ({dt}, accumulated whole)", pb * T, False, "always", f"{pb} B x P (ZeRO-1)")
    else:
        place("gradients (fp32)", 4 * T / g_shard, False, "always", f"4 B x P{g_div}")
    # optimizer state
    opt_bytes_per_param = 8 if (z == 0 and not st.bf16) else 12
    o_shard = W if z >= 1 else 1
    opt_bytes = opt_bytes_per_param * T / o_shard
    place("fp32 master + AdamW m, v" if opt_bytes_per_param == 12 else "AdamW m, v (fp32)", opt_bytes,
          st.offload_optimizer, "always",
          f"{opt_bytes_per_param} B x P{' / W' if o_shard > 1 else ''}"
          + (", offloaded" if st.offload_optimizer else ""))
    # buffers
    buf = REDUCE_BUCKET * pb
    how = "reduce bucket 5e8 x 2 B"
    if z == 3:
        largest = max(s.vocab * s.hidden, s.layer_params())
        buf += min(MAX_LIVE_PARAMETERS, largest + PREFETCH_BUCKET) * pb
        how += " + gathered params (largest module + 5e7 prefetch)"
    comps.append(Component("DeepSpeed buffers (estimate)", buf, 0.0, "train", how))
    comps.append(Component("activations, update (estimate)", update_activation_bytes(s, st), 0.0, "update",
                           f"{st.micro_batch_rows} rows x {st.tokens} tokens"
                           + (", checkpointed" if st.gradient_checkpointing else ", not checkpointed")))
    comps.append(Component("activations, log-prob pass (estimate)", logprob_activation_bytes(s, st), 0.0, "log-prob",
                           f"{st.logprob_batch_rows} rows x {st.tokens} tokens"))
    vllm_weights = pb * P / st.vllm_tp
    if st.vllm:
        comps.append(Component("vLLM awake (weights + KV cache)", st.vllm_util * st.gpu_bytes, 0.0, "rollout",
                               f"{st.vllm_util:g} x {st.gpu_bytes / GB:.1f} GB"))
        if st.vllm_sleep:
            comps.append(Component(f"vLLM weights asleep ({dt}, level 1)", 0.0, vllm_weights, "asleep",
                                   f"{pb} B x P" + (f" / {st.vllm_tp} (TP)" if st.vllm_tp > 1 else "")))
            comps.append(Component("vLLM kept on the GPU asleep (estimate)", st.vllm_asleep_gpu, 0.0, "asleep",
                                   "CUDA graphs' pool, buffers (--vllm-asleep-gb)"))
    if z == 3:  # the module reaches deepspeed.initialize whole (loaded on the host); ZeRO-3 partitions it on the GPU
        comps.append(Component(f"deepspeed.initialize: whole model ({dt})", pb * P, 0.0, "initialize",
                               f"{pb} B x P on the GPU until ZeRO-3 partitions it" + (", vLLM awake" if st.vllm
                                                                                      else "")))
    comps.append(Component("processes (estimate)", 0.0, st.process_host + st.env_workers * st.env_worker_host,
                           "processes", f"{st.process_host / GB:g} GB + {st.env_workers} env worker(s) x "
                           f"{st.env_worker_host / GB:g} GB (--process-gb, --env-worker-gb)"))
    comps.append(Component("checkpoint: optimizer-state copy", 0.0, opt_bytes, "checkpoint",
                           "its master + Adam partition, serialised on the host"))
    comps.append(Component("checkpoint: HF export shard (rank 0)", 0.0, min(EXPORT_SHARD_BYTES, pb * P), "checkpoint",
                           "streamed: one 5 GiB shard at most", rank0_only=True))

    def gpu_sum(whens):
        return sum(c.gpu for c in comps if c.when in whens)

    resident = gpu_sum({"always"})
    phases = {"rollout": resident + gpu_sum({"rollout"}),
              "log-prob": resident + gpu_sum({"train", "log-prob", "asleep"}),
              "update": resident + gpu_sum({"train", "update", "asleep"})}
    if z == 3:  # the actor's engine is built after vLLM (trainer/loop.py), while it is awake
        phases["initialize"] = resident + gpu_sum({"initialize", "rollout"})
    host_steady = sum(c.host for c in comps if c.when in ("always", "asleep"))
    rpn = st.ranks_per_node
    opt_copy = sum(c.host for c in comps if c.when == "checkpoint" and not c.rank0_only)
    shard_b = sum(c.host for c in comps if c.rank0_only)
    export_all = pb * P  # an export that builds the whole state dict on every rank (for comparison)
    totals = {
        "gpu_resident": resident,
        **{f"gpu_{k}": v for k, v in phases.items()},
        "gpu_peak": max(phases.values()),
        "gpu_peak_phase": max(phases, key=phases.get),
        "gpu_capacity": st.gpu_bytes,
        "host_steady_rank": host_steady,
        "host_steady_node": host_steady * rpn,
        "host_checkpoint_node": host_steady * rpn + checkpoint_extra(opt_copy, shard_b, 0.0, rpn),
        "host_checkpoint_node_export_every_rank": host_steady * rpn + checkpoint_extra(opt_copy, export_all, export_all,
                                                                                       rpn),
        "ranks_per_node": rpn,
        "nodes": math.ceil(W / st.gpus_per_node),
    }
    totals["host_processes_node"] = rpn * sum(c.host for c in comps if c.when == "processes")
    totals["host_peak_node"] = totals["host_checkpoint_node"] + totals["host_processes_node"]
    totals.update(disk_plan(P, T, W, pb, opt_bytes, lora, st))
    notes = []
    if totals["gpu_peak"] > st.gpu_bytes:
        notes.append(f"WARNING: the GPU peak ({totals['gpu_peak'] / GB:.1f} GB, {totals['gpu_peak_phase']}) exceeds "
                     f"the GPU's {st.gpu_bytes / GB:.1f} GB")
    if st.vllm:
        kv_per_token = 2 * s.layers * s.kv_width * pb / st.vllm_tp
        kv = st.vllm_util * st.gpu_bytes - vllm_weights
        notes.append(f"vLLM's share minus its weights ({vllm_weights / GB:.1f} GB) leaves ~{kv / GB:.1f} GB of KV "
                     f"cache and vLLM activations: ~{max(kv, 0) / kv_per_token / 1e3:.0f}k tokens at "
                     f"{kv_per_token / 1e3:.0f} kB per token")
        if phases["rollout"] > st.gpu_bytes:
            notes.append("WARNING: vLLM's share plus the resident training state exceeds the GPU: lower "
                         "rollout.vllm_gpu_memory_utilization or offload more")
    return Plan(model=s.name, params=P, trainable=T, setup=st, components=comps, totals=totals, notes=notes)


# ------------------------------------------------------------------------------------------------ the config side
def setup_from_config(cfg, gpus: int, gpus_per_node: int = 8, gpu_gb: float = DEFAULT_GPU_GB, *, runs: int = 1,
                      jobs: int = 1, process_gb: float = DEFAULT_PROCESS_GB,
                      env_worker_gb: float = DEFAULT_ENV_WORKER_GB,
                      vllm_asleep_gb: float = DEFAULT_VLLM_ASLEEP_GB) -> Setup:
    """The ``Setup`` of a loaded ``RunConfig`` on ``gpus`` ranks (a sweep of ``runs`` runs, ``jobs`` at a time)."""
    t, r = cfg.trainer, cfg.rollout
    bf16 = t.precision == "bf16" or (t.precision == "auto" and cfg.device != "cpu")
    return Setup(world=gpus, gpus_per_node=gpus_per_node, gpu_bytes=gpu_gb * GB, zero_stage=t.zero_stage,
                 offload_params=t.offload_params, offload_optimizer=t.offload_optimizer, bf16=bf16,
                 use_kl_loss=t.use_kl_loss, lora_rank=cfg.model.lora_rank,
                 lora_targets=tuple(cfg.model.lora_target_modules), vllm=r.engine == "vllm",
                 vllm_util=r.vllm_gpu_memory_utilization, vllm_tp=r.vllm_tensor_parallel,
                 vllm_sleep=cfg.device != "cpu", gradient_checkpointing=t.gradient_checkpointing,
                 micro_batch_rows=t.micro_batch_rows, logprob_batch_rows=t.logprob_batch_rows,
                 tokens=r.max_prompt_tokens + r.max_response_tokens, chunk_tokens=t.logprob_chunk_tokens,
                 keep_last=t.keep_last, drop_optimizer=t.drop_optimizer_at_end, runs=runs, jobs=jobs,
                 process_host=process_gb * GB, env_workers=cfg.env.num_workers, env_worker_host=env_worker_gb * GB,
                 vllm_asleep_gpu=vllm_asleep_gb * GB)


def check_world(cfg, gpus: int, gpus_per_node: int) -> str | None:
    """Why ``gpus`` ranks cannot run ``cfg`` (the trainer's own checks), or None."""
    if gpus < 1:
        return f"--gpus {gpus} must be at least 1"
    if gpus_per_node < 1:
        return f"--gpus-per-node {gpus_per_node} must be at least 1"
    if cfg.env.groups % gpus:
        return (f"env.groups={cfg.env.groups} is not divisible by --gpus {gpus}: every rank owns env.groups / W "
                "prompt groups")
    if cfg.trainer.mini_batch_rows % gpus:
        return f"trainer.mini_batch_rows={cfg.trainer.mini_batch_rows} is not divisible by --gpus {gpus}"
    return None


# ------------------------------------------------------------------------------------------------ output
def _gb(x: float) -> str:
    return f"{x / GB:.1f}"


def render(plan: Plan, title: str = "") -> str:
    """The plan as Markdown: one row per component, the totals, the assumptions."""
    st, t = plan.setup, plan.totals
    rows = [("component", "GPU GB / rank", "host GB / rank", "held", "how")]
    for c in plan.components:
        rows.append((c.name, _gb(c.gpu) if c.gpu else "-", _gb(c.host) if c.host else "-", c.when, c.how))
    rows.append(("**GPU resident (all phases)**", _gb(t["gpu_resident"]), "", "",
                 "weights, gradients, optimizer on GPU"))
    for ph in [p for p in ("initialize", "rollout", "log-prob", "update") if f"gpu_{p}" in t]:
        rows.append((f"**GPU, {ph} phase**", _gb(t[f"gpu_{ph}"]), "", "", "resident + that phase"))
    rows.append(("**GPU peak per rank**", _gb(t["gpu_peak"]), "", t["gpu_peak_phase"],
                 f"of {_gb(t['gpu_capacity'])} GB"))
    rows.append(("**host steady per rank**", "", _gb(t["host_steady_rank"]), "", "always + asleep"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for k, r in enumerate(rows):
        lines.append("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")
        if k == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    rpn = t["ranks_per_node"]
    head = [f"## Memory plan{': ' + title if title else ''}", "",
            f"{plan.model}: P = {plan.params:,} parameters" + (f", {plan.trainable:,} trainable (LoRA)"
                                                               if plan.trainable != plan.params else "")
            + f"; W = {st.world} rank(s), {rpn} per node ({t['nodes']} node(s)); ZeRO-{st.zero_stage}, "
            f"offload params {'on' if st.offload_params else 'off'}, optimizer "
            f"{'on' if st.offload_optimizer else 'off'}; "
            f"{'bf16' if st.bf16 else 'fp32'}; KL reference {'on' if st.use_kl_loss else 'off'}; "
            f"rollout {'vLLM ' + format(st.vllm_util, 'g') if st.vllm else 'HF'}; T = {st.tokens} tokens.", ""]
    tail = ["",
            f"Host per node ({rpn} ranks): steady {_gb(t['host_steady_node'])} GB; at a checkpoint "
            f"{_gb(t['host_checkpoint_node'])} GB (every rank's optimizer-state copy, or rank 0's export shard while "
            "the "
            "others hold theirs, whichever is larger).",
            f"Host peak per node with the processes ({_gb(t['host_processes_node'])} GB, estimate): "
            f"{_gb(t['host_peak_node'])} GB.",
            f"Disk: a checkpoint is {_gb(t['disk_checkpoint'])} GB (HF export {_gb(t['disk_export'])} GB + every "
            f"rank's optimizer state {_gb(t['disk_optimizer'])} GB); a run peaks at {_gb(t['disk_run_peak'])} GB "
            f"(keep_last {st.keep_last} + the one being written) and keeps {_gb(t['disk_run_kept'])} GB when "
            f"finished ({'optimizer state dropped' if st.drop_optimizer else 'optimizer state kept'}); "
            f"{st.runs} run(s), {min(st.jobs, st.runs)} at a time: {_gb(t['disk_sweep'])} GB.",
            f"The HF export is streamed on rank 0 (PPOActor.export_hf); an export that built the whole bf16 state "
            f"dict on every rank would peak at {_gb(t['host_checkpoint_node_export_every_rank'])} GB per node.",
            *plan.notes,
            "Estimates: activations (rows padded to T, no prefix sharing), DeepSpeed buffers, the processes and what "
            "vLLM keeps asleep (inputs above); not counted: CUDA "
            "context and fragmentation (~1-3 GB per GPU), start-up copies "
            "(4P per rank on the host while loading). GB = 1e9 bytes. Rules: python -m experiments.plan_memory --help."]
    return "\n".join(head + lines + tail)


def plan_to_dict(plan: Plan) -> dict:
    return {"model": plan.model, "params": plan.params, "trainable": plan.trainable, "setup": asdict(plan.setup),
            "components": [asdict(c) for c in plan.components],
            "totals": plan.totals, "totals_gb": {k: round(v / GB, 1) for k, v in plan.totals.items()
                                                 if k.startswith(("gpu_", "host_")) and not isinstance(v, str)},
            "notes": plan.notes,
            "export": "rank-0 streamed (one shard on the host); host_checkpoint_node_export_every_rank: an export "
                      "that builds the whole state dict on every rank, for comparison"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", help="YAML preset, e.g. configs/paper/alfworld_qwen2.5-7b.yaml")
    ap.add_argument("--gpus", type=int, required=True, help="W: GPUs = ranks (one process each)")
    ap.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    ap.add_argument("--gpu-memory-gb", type=float, default=DEFAULT_GPU_GB,
                    help=f"memory of one GPU in GB (default {DEFAULT_GPU_GB}: an H100 80 GB as CUDA reports it)")
    ap.add_argument("--model-config", default=None, help="a config.json giving the model's shapes")
    ap.add_argument("--runs", type=int, default=1, help="runs of a sweep, for its disk (default 1)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time in that sweep (default 1)")
    ap.add_argument("--process-gb", type=float, default=DEFAULT_PROCESS_GB,
                    help=f"host GB of one rank's processes besides the counted tensors (estimate, default "
                         f"{DEFAULT_PROCESS_GB:g})")
    ap.add_argument("--env-worker-gb", type=float, default=DEFAULT_ENV_WORKER_GB,
                    help=f"host GB of one environment worker process (estimate, default {DEFAULT_ENV_WORKER_GB:g})")
    ap.add_argument("--vllm-asleep-gb", type=float, default=DEFAULT_VLLM_ASLEEP_GB,
                    help=f"GPU GB vLLM keeps asleep (estimate, default {DEFAULT_VLLM_ASLEEP_GB:g})")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, as for experiments.train")
    args = ap.parse_intermixed_args(argv)
    from trainer.config import ConfigError, load_config

    def fail(msg: str) -> int:
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2

    if not Path(args.preset).is_file():
        return fail(f"no such preset {args.preset!r}: pass a file such as configs/paper/alfworld_qwen2.5-7b.yaml")
    try:
        cfg = load_config(args.preset, args.overrides)
    except ConfigError as e:
        return fail(f"config error: {e}")
    problem = check_world(cfg, args.gpus, args.gpus_per_node)
    if problem:
        return fail(problem)
    if args.gpu_memory_gb <= 0:
        return fail(f"--gpu-memory-gb {args.gpu_memory_gb} must be positive")
    try:
        shape = resolve_shape(cfg.model.path, args.model_config)
        if min(args.runs, args.jobs) < 1 or min(args.process_gb, args.env_worker_gb, args.vllm_asleep_gb) < 0:
            raise ValueError("--runs and --jobs must be >= 1, the GB estimates >= 0")
        plan = plan_memory(shape, setup_from_config(cfg, args.gpus, args.gpus_per_node, args.gpu_memory_gb,
                                                    runs=args.runs, jobs=args.jobs, process_gb=args.process_gb,
                                                    env_worker_gb=args.env_worker_gb,
                                                    vllm_asleep_gb=args.vllm_asleep_gb))
    except ValueError as e:
        return fail(str(e))
    from experiments.plan_time import preset_plans, render_time

    times = preset_plans(cfg, args.gpus, plan.params)
    if args.json:
        print(json.dumps({**plan_to_dict(plan), "time_s": {f"{sc}/{fx}": {**tp.seconds, "total": tp.total}
                                                           for (sc, fx), tp in times.items()}}, indent=1))
    else:
        print(render(plan, f"{args.preset} on {args.gpus} GPU(s)"))
        print()
        print(render_time(times, f"{args.preset} on {args.gpus} GPU(s)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
