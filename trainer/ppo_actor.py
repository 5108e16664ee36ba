"""The actor on DeepSpeed ZeRO: log-prob passes, the PPO update, weight export, optimizer state.

Symbols: N step rows (on this rank), T_r response tokens (padded), D hidden size, W data-parallel ranks.

One code path from this 2-core CPU to multi-node GPUs [choice]:

* CPU: ``DS_ACCELERATOR=cpu``, gloo, fp32, ``"torch_adam": true`` (no compiled Adam); a single process gets
  ``MASTER_ADDR=127.0.0.1``, a free port, ``RANK=0 WORLD_SIZE=1 LOCAL_RANK=0`` [platform];
* GPU: NCCL, bf16, launched by ``torchrun`` or ``deepspeed`` (they set RANK/WORLD_SIZE/LOCAL_RANK).

ZeRO stage 0 | 1 | 2 | 3 from ``TrainerConfig.zero_stage``; optimizer offload (stage >= 1) and parameter offload
(stage 3); gradient checkpointing; optional LoRA (``peft``), in which case the reference model is the base model
with adapters disabled. Without LoRA the reference model is a frozen copy of the initial actor, under ZeRO-3
partitioned the same way (inference only), otherwise a plain module.

PPO update [GiGPO]: the N rows of an iteration are split into ceil(N_global / mini_batch_rows) mini-batches of
near-equal size (one optimizer step each, ``ppo_epochs`` passes); each mini-batch is split into micro-batches of
at most ``micro_batch_rows`` rows whose gradients accumulate (DeepSpeed's ``managed_gradient_accumulation:
false``: every ``engine.step()`` is a boundary). Loss denominators are those of the whole mini-batch over all
ranks, so micro-batching and data parallelism leave the gradient unchanged (tested). Ranks run the same number of
micro-batches (a rank with fewer rows runs zero-weight ones), because ZeRO-2/3 communicate in every backward.

Non-finite values [choice]: rows whose log-probs, entropy, old/ref log-probs or advantages hold NaN/Inf, or a
non-finite loss or gradient, make that optimizer step be skipped on every rank (parameters and optimizer state
unchanged), counted, and logged with the offending row ids; ``max_consecutive_nonfinite`` skipped steps in a row
raise ``NonFiniteError``. Mechanism: a flagged micro-batch's loss is multiplied by NaN so that every gradient is
non-finite; ZeRO >= 1 and the bf16 optimizer then skip the step themselves (their overflow check), and stage 0
in fp32 (a plain torch optimizer, which has no such check) is skipped by this class before ``step()``.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import socket
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
import torch.nn as nn

from .config import ModelConfig, TrainerConfig
from .forward import (
    ForwardModule,
    ForwardOutput,
    causal_lm_of,
    hidden_state_module,
    length_order,
    pack_rows,
    pack_rows_shared,
    prefix_order,
)
from .loss import PPOLossSettings, ppo_loss

__all__ = [
    "PPOActor",
    "NonFiniteError",
    "BuildLockError",
    "init_distributed",
    "shutdown_distributed",
    "build_ds_config",
    "resolve_device",
    "resolve_precision",
    "split_even",
    "free_port",
    "WORK_KEYS",
]

log = logging.getLogger("trainer.ppo_actor")

#: ``PPOActor.take_work()``'s counters: rows and response tokens of the rank's own forwards (log-prob passes and
#: update micro-batches), all forwards, extra log-prob forwards and dummy update micro-batches (run so that every
#: rank makes as many calls as the busiest one), LM-head chunks run and those of them that were padding.
WORK_KEYS = ("rows", "tokens", "forwards", "extra_forwards", "dummy_micro_batches", "head_chunks", "pad_head_chunks")


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row were skipped because of NaN/Inf."""


# ------------------------------------------------------------------------------------------- process set-up
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but torch sees no CUDA device: set device=cpu or device=auto")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} must be auto | cpu | cuda")
    return device


def resolve_precision(precision: str, device: str) -> str:
    """auto -> bf16 on GPU, fp32 on CPU [platform; GiGPO trains in bf16]."""
    if precision == "auto":
        return "bf16" if device == "cuda" else "fp32"
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"trainer.precision={precision!r} must be auto | fp32 | bf16")
    return precision


def shutdown_distributed() -> None:
    """Leave a multi-rank process group cleanly: every rank waits at a barrier, then destroys the group. A rank that
    reaches interpreter exit with the group's background threads still running can abort there ("terminate called
    without an active exception", SIGABRT; seen once on ZeRO-3 with 2 CPU ranks), and torchrun then reports a
    finished run as failed. A 1-rank group is left as it is (other actors of the same process reuse it)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()


#: a JIT build of DeepSpeed's CPU op takes 40-75 s here (~2 min on a loaded machine): a build lock older than this
#: was left by a killed start, not held by a build [platform]
STALE_BUILD_LOCK_S = 300.0


class BuildLockError(RuntimeError):
    """A DeepSpeed op is locked by a build that is not running (a lock file left by a killed start) and has to be
    rebuilt; the message names the lock file to remove. Nothing was computed."""


def _op_builder(name: str):
    """DeepSpeed's builder of the op ``name`` on this accelerator (None when it has none)."""
    from deepspeed.accelerator import get_accelerator

    kinds = {"deepspeed_shm_comm": "ShareMemCommBuilder"}
    try:
        return get_accelerator().create_op_builder(kinds.get(name, name))
    except Exception:  # an accelerator without that builder: nothing to pre-load
        return None


def built_op_is_current(name: str, build_dir: Path) -> bool:
    """The op's compiled ``<name>.so`` in ``build_dir`` is up to date: the folder's ``build.ninja`` builds this
    DeepSpeed's sources, and ``ninja -n`` (a dry run, which takes no lock) finds nothing to rebuild."""
    import shutil
    import subprocess

    so, ninja_file = build_dir / f"{name}.so", build_dir / "build.ninja"
    ninja = shutil.which("ninja")
    if ninja is None or not so.is_file() or not ninja_file.is_file():
        return False
    builder = _op_builder(name)
    if builder is None:
        return False
    try:
        text = ninja_file.read_text()
        if not all(os.path.abspath(builder.deepspeed_src_path(src)) in text for src in builder.sources()):
            return False  # built from another DeepSpeed
        res = subprocess.run([ninja, "-n", "-C", str(build_dir)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and "no work to do" in res.stdout


def _load_built_op(name: str, build_dir: Path) -> bool:
    """Import the compiled op from ``build_dir`` and hand it to DeepSpeed as already loaded, so that its start never
    reaches torch's build lock. False when that is not possible (then torch builds or loads it as usual)."""
    import importlib.util

    builder = _op_builder(name)
    owner = next((c for c in type(builder).__mro__ if "_loaded_ops" in vars(c)), None) if builder else None
    if owner is None:
        return False
    if name in owner._loaded_ops:
        return True
    spec = importlib.util.spec_from_file_location(name, build_dir / f"{name}.so")
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    owner._loaded_ops[name] = module
    return True


def _build_lock_holders(build_dir: Path) -> list[str]:
    """Processes of this host working in ``build_dir`` (ninja and the compiler of a running build), as
    ``"PID (command)"``; empty when there are none or /proc cannot tell."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == build_dir:
                found.append(f"{proc.name} ({(proc / 'comm').read_text().strip()})")
        except OSError:
            continue
    return found


def wait_for_build_lock(name: str = "deepspeed_shm_comm", max_age_s: float = STALE_BUILD_LOCK_S,
                        poll_s: float = 2.0) -> None:
    """Before DeepSpeed loads its op ``name``: never wait on a build lock for an op that is already built, and wait
    a bounded time, saying so, for one that is being built.

    DeepSpeed builds its CPU communication op (``deepspeed_shm_comm``) on first use, and every process checks the
    build again at its start, under the lock file ``$TORCH_EXTENSIONS_DIR/<name>/lock`` (default
    ``~/.cache/torch_extensions``), held for milliseconds when nothing is to be built. A process killed in that
    window (torchrun stopping its sibling ranks, a ``timeout`` wrapper) leaves the lock, and torch waits on it
    forever, silently. Here, with the lock present:

    * the op's ``.so`` is current (``built_op_is_current``): it is loaded from that folder at once and the lock is
      not consulted (one warning says so);
    * otherwise one line says what is waited on (the lock, its age, the processes building if any, how to clear
      it), and the lock is waited on while it is younger than ``max_age_s`` (a build takes ~2 min); an older one
      raises ``BuildLockError`` naming the lock file to remove (that file only: the folder holds the build)."""
    import time

    from torch.utils.cpp_extension import _get_build_directory

    build_dir = Path(_get_build_directory(name, verbose=False)).resolve()
    lock = build_dir / "lock"
    said = False
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if built_op_is_current(name, build_dir) and _load_built_op(name, build_dir):
            _tell(f"DeepSpeed's op {name} is already built in {build_dir}, so its build lock {lock} ({age:.0f} s "
                  "old) is not waited on. If no DeepSpeed start is running on this machine, the lock was left by a "
                  f"killed one: remove that file only (rm {lock}); other programs wait on it.")
            return
        holders = _build_lock_holders(build_dir)
        if age > max_age_s:
            raise BuildLockError(
                f"DeepSpeed's op {name} has to be built, but its build lock {lock} is {age / 60:.1f} minutes old, "
                f"longer than a build takes ({max_age_s / 60:.0f} minutes at most): "
                + (f"the processes {', '.join(holders)} work in its folder. If they are stuck, stop them and "
                   if holders else "no process of this machine is building it, so a killed start left the lock. ")
                + f"Remove the lock file only (rm {lock}; not its folder, which holds the build) and start again: "
                "the op is then rebuilt in a minute or two.")
        if not said:
            _tell(f"waiting for DeepSpeed's op {name} to be built by another process: its build lock {lock} is "
                  f"{age:.0f} s old, "
                  + (f"held by {', '.join(holders)}" if holders else "its holder is unknown (no process of this "
                     "machine works in its folder)")
                  + f". The wait ends when the lock goes, or after it is {max_age_s / 60:.0f} minutes old; if no "
                  f"build is running, remove the lock file only (rm {lock}).")
            said = True
        time.sleep(poll_s)


def _tell(msg: str) -> None:
    """A message for the console (stderr) and the run's ``train.log``."""
    print(f"[deepspeed op] {msg}", file=sys.stderr, flush=True)
    if log.hasHandlers():  # otherwise logging would print it a second time
        log.warning(msg)


#: set by ``use_venv_extensions_dir`` to the TORCH_EXTENSIONS_DIR it chose: a child process (of another venv,
#: perhaps) that inherits that very value chooses its own; a value the user set is kept
_AUTO_EXT_FLAG = "BIPACE_TORCH_EXTENSIONS_AUTO"


def venv_extensions_dir(prefix: str | None = None) -> Path:
    """``~/.cache/torch_extensions/<venv name without its dot>-<hash of its path>``: the JIT-build folder of one Python
    environment. The path is the one Python runs from, symbolic links kept: a venv reached through a link (a second
    clone whose ``.venv`` links to the first's) compiles the op with include paths under the link, and torch rebuilds
    an op whose build flags changed, so two paths sharing one folder would rebuild it in turn at every start."""
    import hashlib

    prefix = os.path.abspath(prefix or sys.prefix)
    tag = hashlib.sha256(prefix.encode()).hexdigest()[:8]
    return Path.home() / ".cache" / "torch_extensions" / f"{Path(prefix).name.lstrip('.')}-{tag}"


def use_venv_extensions_dir() -> Path:
    """Give this Python environment its own ``TORCH_EXTENSIONS_DIR`` unless the user set one.

    Torch builds DeepSpeed's CPU op in one shared folder, and rebuilds it (~2 min) whenever a process of another venv
    loads it: ``make test`` alone alternates between ``.venv`` and ``.venv-vllm``, and two clones at two paths do too.
    Two venvs starting at once then wait on each other's build lock, and a process stopped mid-build blocks every
    other start (``wait_for_build_lock``). One folder per venv builds once per venv and shares no lock."""
    current = os.environ.get("TORCH_EXTENSIONS_DIR")
    if current is None or current == os.environ.get(_AUTO_EXT_FLAG):
        os.environ["TORCH_EXTENSIONS_DIR"] = os.environ[_AUTO_EXT_FLAG] = str(venv_extensions_dir())
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


#: minutes a collective may wait for the slowest rank before the process group gives up (``collective_timeout``)
TIMEOUT_ENV = "BIPACE_COLLECTIVE_TIMEOUT_MIN"
#: ``trainer.collective_timeout_min``'s default (its docstring gives the reasons) [choice]
DEFAULT_COLLECTIVE_TIMEOUT_MIN = 30.0


def collective_timeout(minutes: float | None = None):
    """How long a rank waits in a collective for the others: ``$BIPACE_COLLECTIVE_TIMEOUT_MIN`` minutes where set,
    else ``minutes`` (``trainer.collective_timeout_min``), else 30.

    The longest wait a healthy run has, which this must exceed [estimates for the 7B presets, not measured on a
    GPU]:

    * evaluation: the ranks play their shares of every eval split, then meet in one all-gather, so a rank whose
      share ends early waits for the slowest share: about 70 ALFWorld games per rank (274 over 4 ranks) of up to 50
      turns, about twice a training rollout's 32 environments, 5-10 minutes next to the paper's 361 s iteration;
    * a checkpoint: rank 0 hashes and fsyncs every file (about 107 GB for 7B: about 2 min at 1 GB/s, 18 min at
      100 MB/s) while the others wait at the save's last barrier;
    * the start: each rank loads the model and its vLLM engine (a cold disk, vLLM's first compile) before the
      first collective, a few minutes; a DeepSpeed op build waits for its lock outside any collective.

    DeepSpeed's default (10 minutes) is shorter than the first two; 30 leaves margin over them, and a frozen rank
    (a hung GPU, a stopped process) holds the others for 30 minutes rather than two hours.
    """
    import datetime

    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        value = DEFAULT_COLLECTIVE_TIMEOUT_MIN if minutes is None else float(minutes)
        if not value > 0:
            raise ValueError(f"trainer.collective_timeout_min={minutes!r} must be a positive number of minutes")
        return datetime.timedelta(minutes=value)
    try:
        value = float(raw)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} must be a positive number of minutes, e.g. 30") from None
    return datetime.timedelta(minutes=value)


def init_distributed(device: str, timeout_min: float | None = None) -> tuple[int, int, int]:
    """Start torch.distributed once (gloo on CPU, NCCL on GPU); returns (rank, world_size, local_rank).
    ``timeout_min``: ``trainer.collective_timeout_min`` (``collective_timeout``; the first call's value counts).

    Under ``torchrun``/``deepspeed`` the launcher's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* are used; a plain
    ``python`` process becomes rank 0 of 1 on 127.0.0.1 with a free port.
    """
    if device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        use_venv_extensions_dir()
    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator().device_name()
    if device == "cpu" and accel != "cpu":
        raise RuntimeError(
            f"DeepSpeed picked the {accel!r} accelerator but the run is on CPU: set DS_ACCELERATOR=cpu before "
            "anything imports deepspeed (or run with device=cuda)"
        )
    if not dist.is_initialized():
        if device == "cpu":
            wait_for_build_lock()
        added: list[str] = []
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:  # a plain `python` process: rank 0 of 1
            single = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "1"}
            for k, v in single.items():
                if k not in os.environ:
                    os.environ[k] = v
                    added.append(k)
        os.environ.setdefault("LOCAL_RANK", "0")  # DeepSpeed's engine reads it
        try:
            deepspeed.init_distributed(dist_backend="gloo" if device == "cpu" else "nccl", verbose=False,
                                       timeout=collective_timeout(timeout_min))
        finally:  # child processes (and a retry after a failure) must not inherit this rendezvous's address
            for k in added:
                os.environ.pop(k, None)
    _drop_stale_deepspeed_groups()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), local_rank


def optimizer_threads(setting: int, *, offload: bool, device: str, cores: int | None = None,
                      local_ranks: int | None = None) -> int | None:
    """Torch (OpenMP) threads for a rank's optimizer step (``trainer.optimizer_threads``), None = leave as is.

    Only an offloaded optimizer steps on the CPU (DeepSpeed's CPU Adam, OpenMP-parallel over the rank's shard).
    ``setting`` > 0 is taken as is; 0 (auto) gives, on GPU, ``cores`` (default: the cores this process may use)
    divided by ``local_ranks`` (default: torchrun's ``LOCAL_WORLD_SIZE``), at least 1, so that the ranks of a
    node share its cores; on CPU the run's own thread setting stays."""
    if not offload:
        return None
    if setting > 0:
        return setting
    if device != "cuda":
        return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, cores // max(1, local_ranks))


def _drop_stale_deepspeed_groups() -> None:
    """Forget DeepSpeed's cached clone of the world group when it belongs to a destroyed process group.

    DeepSpeed clones the world group once per process (``deepspeed.utils.groups._WORLD_GROUP``). When the
    default group is destroyed and created again in the same process (an in-process vLLM engine shuts down
    its distributed state, or a script trains twice), the clone is no longer registered and the next
    ``deepspeed.initialize`` fails with "Group ... is not registered". A fresh clone is made on demand.
    """
    import torch.distributed as dist
    from deepspeed.utils import groups

    cached = getattr(groups, "_WORLD_GROUP", None)
    if cached is None:
        return
    try:
        registered = cached in dist.distributed_c10d._world.pg_group_ranks
    except AttributeError:  # a torch without that table: keep DeepSpeed's own behaviour
        return
    if not registered:
        groups._WORLD_GROUP = None


def build_ds_config(cfg: TrainerConfig, device: str, precision: str, *, optimizer: bool = True) -> dict:
    """The DeepSpeed config dict for the actor (``optimizer=True``) or the reference model (inference)."""
    zero: dict = {"stage": cfg.zero_stage}
    if cfg.offload_optimizer and optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device == "cuda"}
    if cfg.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": device == "cuda"}
    if cfg.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    ds: dict = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_rows,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,  # the caller owns the boundary: every step() is one
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16", "check_grad_overflow": True},
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }
    if optimizer:
        torch_adam = cfg.torch_adam
        if torch_adam is None:
            torch_adam = not (cfg.offload_optimizer and device == "cuda")
        ds["gradient_clipping"] = float(cfg.grad_clip)
        ds["optimizer"] = {
            "type": "AdamW",
            "params": {
                "lr": float(cfg.lr),
                "betas": [float(b) for b in cfg.betas],
                "eps": float(cfg.adam_eps),
                "weight_decay": float(cfg.weight_decay),
                "torch_adam": bool(torch_adam),
            },
        }
    return ds


def split_even(items: Sequence[int], parts: int) -> list[list[int]]:
    """``items`` cut into ``parts`` contiguous pieces whose sizes differ by at most one (larger first)."""
    items = list(items)
    q, r = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        size = q + (1 if k < r else 0)
        out.append(items[start: start + size])
        start += size
    return out


def _is_finite(t: torch.Tensor | None) -> bool:
    return t is None or bool(torch.isfinite(t).all())


# ------------------------------------------------------------------------------------------------- the actor
class PPOActor:
    """The training actor (and reference model) behind a small interface.

    Construction::

        eng = PPOActor(hf_causal_lm, run_cfg.trainer, model_cfg=run_cfg.model,
                       temperature=run_cfg.rollout.temperature, device="auto")

    ``model`` is an instantiated Hugging Face causal LM (loaded by the caller, e.g. ``agents.models``); a frozen
    copy becomes the reference model when ``trainer.use_kl_loss`` is on.
    """

    def __init__(self, model: nn.Module, cfg: TrainerConfig, *, model_cfg: ModelConfig | None = None,
                 temperature: float = 1.0, device: str = "auto"):
        cfg.validate()
        self.cfg = cfg
        self.model_cfg = model_cfg or ModelConfig()
        self.temperature = float(temperature)
        self.device_type = resolve_device(device)
        self.precision = resolve_precision(cfg.precision, self.device_type)
        self.rank, self.world_size, self.local_rank = init_distributed(self.device_type, cfg.collective_timeout_min)
        self.zero_stage = cfg.zero_stage
        self.is_lora = self.model_cfg.lora_rank > 0
        if self.is_lora and self.zero_stage == 3:
            raise ValueError(
                "model.lora_rank > 0 with trainer.zero_stage=3 is not supported, because the merged weights for "
                "the rollout engine are computed from full base weights: use zero_stage 0-2 (LoRA's optimizer "
                "state is small, ZeRO-3 is rarely needed then)"
            )
        if cfg.mini_batch_rows % self.world_size:
            raise ValueError(
                f"trainer.mini_batch_rows={cfg.mini_batch_rows} is not divisible by the {self.world_size} ranks, "
                "because each rank takes an equal share of a mini-batch: pick a multiple of the world size"
            )
        import deepspeed

        self._ds = deepspeed
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        lm = causal_lm_of(model)
        lm.to(dtype)
        if hasattr(lm.config, "use_cache"):
            lm.config.use_cache = False
        if self.model_cfg.hidden_layer is not None:
            hidden_state_module(lm, self.model_cfg.hidden_layer)  # fail now, before compute, if out of range
        ref_lm = None
        if cfg.use_kl_loss and not self.is_lora:
            ref_lm = copy.deepcopy(lm)
            ref_lm.requires_grad_(False)
            ref_lm.eval()
        if cfg.gradient_checkpointing:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.is_lora:
            import peft

            lcfg = peft.LoraConfig(
                r=self.model_cfg.lora_rank,
                lora_alpha=self.model_cfg.lora_alpha,
                lora_dropout=self.model_cfg.lora_dropout,
                target_modules=list(self.model_cfg.lora_target_modules),
                task_type="CAUSAL_LM",
            )
            lm = peft.get_peft_model(lm, lcfg)
        self.ds_config = build_ds_config(cfg, self.device_type, self.precision)
        n_threads = optimizer_threads(cfg.optimizer_threads, offload=cfg.offload_optimizer, device=self.device_type)
        if n_threads is not None:  # the CPU Adam built below and every step run on this process's OpenMP threads
            torch.set_num_threads(n_threads)
            log.info("optimizer offloaded: %d CPU thread(s) per rank (trainer.optimizer_threads)", n_threads)
        actor = ForwardModule(lm)
        params = [p for p in actor.parameters() if p.requires_grad]
        self.engine, _, _, _ = deepspeed.initialize(model=actor, model_parameters=params, config=self.ds_config)
        self.device = self.engine.device
        self.ref = None
        if ref_lm is not None:
            ref = ForwardModule(ref_lm)
            if self.zero_stage == 3:
                ref_cfg = build_ds_config(cfg, self.device_type, self.precision, optimizer=False)
                self.ref, _, _, _ = deepspeed.initialize(model=ref, config=ref_cfg)
            else:
                self.ref = ref.to(self.device)
            self.ref.eval()
        # counters (saved in checkpoints)
        self.optimizer_steps = 0  # applied optimizer steps (drives the warm-up)
        self.skipped_steps = 0  # optimizer steps skipped for NaN/Inf
        self.consecutive_skips = 0
        self.last_nonfinite_rows: list = []
        self._manual_grad_norm: float | None = None
        self.work = dict.fromkeys(WORK_KEYS, 0)  # what this rank's forwards did since the last take_work()

    # ------------------------------------------------------------------------------------ helpers
    @property
    def module(self) -> ForwardModule:
        return self.engine.module

    @property
    def lm(self) -> nn.Module:
        """The (possibly peft-wrapped) Hugging Face model being trained."""
        return self.engine.module.lm

    def _base_optimizer(self) -> torch.optim.Optimizer:
        opt = self.engine.optimizer
        return getattr(opt, "optimizer", opt)

    def _allreduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.world_size == 1:
            return t
        import torch.distributed as dist

        dev = t.device
        t = t.to(self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t.to(dev)

    def _barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then constant [GiGPO: constant]."""
        w = self.cfg.warmup_steps
        if w > 0 and step < w:
            return self.cfg.lr * (step + 1) / w
        return self.cfg.lr

    def _set_lr(self, lr: float) -> None:
        for g in self._base_optimizer().param_groups:
            g["lr"] = lr

    def _gathered(self, params: list[nn.Parameter], modifier_rank: int | None = None):
        """Context in which ZeRO-3 partitioned ``params`` are whole (a no-op below stage 3)."""
        import contextlib

        if self.zero_stage == 3:
            return self._ds.zero.GatheredParameters(params, modifier_rank=modifier_rank)
        return contextlib.nullcontext()

    # ---------------------------------------------------------------------------- log-prob passes
    def sharing_allowed(self, *, grad: bool) -> bool:
        """Whether a forward may compute shared prompt prefixes once (``trainer.prefix_sharing``).

        Off where it would break or change the run [choice, tests/trainer/test_distributed_asym.py]:
        * under gradient checkpointing in a pass with gradients (Hugging Face then turns the KV cache off);
        * under ZeRO-2 on several ranks in a pass with gradients: the prefix and suffix forwards make a rank's
          gradients become ready in an order that follows its own rows, and ZeRO-2 reduces gradient buckets in that
          order, so ranks holding different prefixes would sum mismatched buckets (a different update; ZeRO-0/1
          reduce after the backward, in parameter order, and are unaffected);
        * under ZeRO-3 on several ranks in any pass: every module call gathers parameters there, so each rank must
          run the same forwards, while the prefix plan and the suffix buckets follow the rank's own rows.
        """
        if not self.cfg.prefix_sharing:
            return False
        if grad and getattr(self.lm, "is_gradient_checkpointing", False):
            return False
        if self.world_size == 1 or self.zero_stage < 2:
            return True
        return self.zero_stage == 2 and not grad

    def row_order(self, prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], *,
                  grad: bool) -> list[int]:
        """The order in which a pass cuts rows into forwards: by prompt (rows sharing a prefix side by side, so that
        a forward computes it once) where ``sharing_allowed``, else by length (the least padding). Rows in prompt
        order but packed unshared cost more token positions than in length order (``benchmarks.switches.row_order``)."""
        if self.sharing_allowed(grad=grad):
            return prefix_order(prompt_ids)
        return length_order(prompt_ids, response_ids)

    def pack(self, prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], pad_id: int, *,
             grad: bool):
        """The rows of one forward: shared prompt prefixes computed once where ``sharing_allowed``."""
        if self.sharing_allowed(grad=grad):
            return pack_rows_shared(prompt_ids, response_ids, pad_id, suffix_buckets=self.cfg.suffix_buckets)
        return pack_rows(prompt_ids, response_ids, pad_id)

    def take_work(self) -> dict[str, int]:
        """This rank's work counters (``WORK_KEYS``) since the last call, then reset: how unequal the ranks' shares
        of a batch were (the loop logs them per rank as ``perf/rank<r>/<key>``)."""
        out, self.work = self.work, dict.fromkeys(WORK_KEYS, 0)
        return out

    def _count_forward(self, packed, head_chunks: int, *, extra: bool = False, dummy: bool = False) -> None:
        """Add one forward over ``packed`` to ``self.work``: an extra (log-prob pass) or dummy (update) forward
        counts only as such; the LM head ran ``max(own chunks, head_chunks)`` chunks, the excess being padding."""
        w = self.work
        own = math.ceil(packed.num_response_tokens / max(1, self.cfg.logprob_chunk_tokens))
        ran = max(own, head_chunks)
        w["forwards"] += 1
        w["head_chunks"] += ran
        w["pad_head_chunks"] += ran - own
        if extra:
            w["extra_forwards"] += 1
        elif dummy:
            w["dummy_micro_batches"] += 1
        else:
            w["rows"] += len(packed)
            w["tokens"] += int(packed.num_response_tokens)

    def head_chunks(self, packed) -> int:
        """LM-head chunks every rank runs in this forward: under ZeRO-3 on several ranks the largest number any rank
        needs (``policy_forward``'s ``head_chunks``; every call of the head gathers its weights); else 0 (as needed)."""
        if self.zero_stage != 3 or self.world_size == 1:
            return 0
        need = math.ceil(packed.num_response_tokens / max(1, self.cfg.logprob_chunk_tokens))
        return int(self._allreduce(torch.tensor([need]), "max").item())

    @torch.no_grad()
    def compute_logprobs(self, prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor], *,
                         reference: bool = False, hidden: bool = True,
                         compute_entropy: bool = False, pad_id: int = 0) -> ForwardOutput:
        """Log-probs (N, T_r) of the response tokens under the actor (or the reference), plus, with ``hidden``, the
        hidden state (N, D) of the last prompt token at ``model.hidden_layer`` (``hidden=False``: none captured,
        ``.hidden`` is None), in batches of ``logprob_batch_rows`` rows sorted by length (less padding). T_r is the
        longest response of all N rows. Runs the same number of forwards on every rank (ZeRO-3 gathers in each).
        """
        hidden_layer = self.model_cfg.hidden_layer if hidden else None
        if reference and not self.cfg.use_kl_loss:
            raise RuntimeError("compute_logprobs(reference=True) but trainer.use_kl_loss=false: no reference model")
        n = len(prompt_ids)
        if n == 0:
            raise ValueError("compute_logprobs: no rows")
        order = self.row_order(prompt_ids, response_ids, grad=False)
        bsz = self.cfg.logprob_batch_rows
        chunks = [order[i: i + bsz] for i in range(0, n, bsz)]
        n_chunks = int(self._allreduce(torch.tensor([len(chunks)]), "max").item())
        t_r = max(max(int(r.numel()) for r in response_ids), 1)
        logprobs = torch.zeros((n, t_r), dtype=torch.float32)
        entropy = torch.zeros((n, t_r), dtype=torch.float32) if compute_entropy else None
        mask = torch.zeros((n, t_r), dtype=torch.bool)
        hidden_out = None
        bad: list[int] = []
        if reference and self.ref is not None:
            model = self.ref
        else:
            model = self.engine
        self.engine.eval()
        import contextlib

        ctx = self.lm.disable_adapter() if (reference and self.is_lora) else contextlib.nullcontext()
        with ctx:
            for k in range(n_chunks):
                idx = chunks[k] if k < len(chunks) else chunks[0][:1]  # extra chunks: equal forward counts
                packed = self.pack([prompt_ids[i] for i in idx], [response_ids[i] for i in idx], pad_id,
                                   grad=False).to(self.device)
                head = self.head_chunks(packed)
                self._count_forward(packed, head, extra=k >= len(chunks))
                out = ForwardOutput(**model(packed.as_kwargs(), hidden_layer=hidden_layer,
                                          compute_entropy=compute_entropy, chunk_tokens=self.cfg.logprob_chunk_tokens,
                                          temperature=self.temperature, head_chunks=head))
                if k >= len(chunks):
                    continue
                w = out.logprobs.shape[1]
                ix = torch.tensor(idx)
                logprobs[ix, :w] = out.logprobs.float().cpu()
                mask[ix, :w] = out.mask.cpu()
                if entropy is not None:
                    entropy[ix, :w] = out.entropy.float().cpu()
                if out.hidden is not None:
                    if hidden_out is None:
                        hidden_out = torch.zeros((n, out.hidden.shape[1]), dtype=torch.float32)
                    hidden_out[ix] = out.hidden.cpu()
                bad.extend(idx[j] for j in out.nonfinite_rows.tolist())
        self.engine.train()
        return ForwardOutput(logprobs=logprobs, entropy=entropy, mask=mask, hidden=hidden_out,
                           nonfinite_rows=torch.tensor(sorted(bad), dtype=torch.long))

    # ------------------------------------------------------------------------------------- update
    def update(self, prompt_ids: Sequence[torch.Tensor], response_ids: Sequence[torch.Tensor],
               advantages: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None = None, *,
               row_ids: Sequence | None = None, generator: torch.Generator | None = None,
               pad_id: int = 0) -> dict[str, float]:
        """One PPO pass (``ppo_epochs`` epochs) over this rank's N rows; returns ``loss/...`` metrics.

        advantages   : FloatTensor (N,)        one per row, broadcast over its response tokens
        old_logprobs : FloatTensor (N, >=T_r)  from ``compute_logprobs`` before the update
        ref_logprobs : FloatTensor (N, >=T_r)  from ``compute_logprobs(reference=True)``; needed iff use_kl_loss
        row_ids      : ids reported for non-finite rows (default 0..N-1)
        generator    : torch.Generator for the mini-batch shuffle (``shuffle_minibatches``)

        Raises ``NonFiniteError`` after ``max_consecutive_nonfinite`` skipped steps in a row.
        """
        cfg = self.cfg
        n = len(prompt_ids)
        if n == 0:
            raise ValueError("update: this rank has no rows; every rank must own at least one prompt group")
        if len(response_ids) != n or advantages.shape != (n,) or old_logprobs.shape[0] != n:
            raise ValueError(
                f"update: {n} prompts, {len(response_ids)} responses, advantages {tuple(advantages.shape)}, "
                f"old_logprobs {tuple(old_logprobs.shape)}: all need one entry per row"
            )
        if cfg.use_kl_loss and ref_logprobs is None:
            raise ValueError("update: trainer.use_kl_loss=true needs ref_logprobs (compute_logprobs(reference=True))")
        row_ids = list(range(n)) if row_ids is None else list(row_ids)
        r_len = torch.tensor([int(r.numel()) for r in response_ids])
        n_global = int(self._allreduce(torch.tensor([n])).item())
        n_mb = max(1, math.ceil(n_global / cfg.mini_batch_rows))
        use_kl = cfg.use_kl_loss and cfg.kl_coef > 0
        per_step: list[dict[str, float]] = []
        self.engine.train()
        for _epoch in range(cfg.ppo_epochs):
            order = torch.randperm(n, generator=generator).tolist() if cfg.shuffle_minibatches else list(range(n))
            for mb in split_even(order, n_mb):
                per_step.append(self._minibatch_step(mb, prompt_ids, response_ids, advantages, old_logprobs,
                                                     ref_logprobs if use_kl else None, r_len, row_ids, pad_id))
        applied = [m for m in per_step if m["applied"]]
        out: dict[str, float] = {}
        keys = sorted({k for m in applied for k in m if k.startswith("loss/")})
        for k in keys:
            vals = [m[k] for m in applied if k in m]
            out[k] = float(sum(vals) / len(vals))
        out["loss/optimizer_steps"] = float(len(applied))
        out["loss/skipped_steps"] = float(len(per_step) - len(applied))
        out["loss/lr"] = float(self.lr_at(max(self.optimizer_steps - 1, 0)))
        return out

    def _minibatch_step(self, mb, prompt_ids, response_ids, advantages, old_logprobs, ref_logprobs, r_len,
                        row_ids, pad_id) -> dict:
        sums, bad_rows = self._accumulate(mb, prompt_ids, response_ids, advantages, old_logprobs, ref_logprobs,
                                          r_len, row_ids, pad_id)
        applied = self._optimizer_step(bad_rows)
        # metrics are partial sums over micro-batches and ranks: sum them over ranks
        keys = sorted(sums)
        vec = self._allreduce(torch.tensor([sums[k] for k in keys], dtype=torch.float64))
        out_m: dict = {k: float(vec[i]) for i, k in enumerate(keys)}
        if applied:
            gn = self._manual_grad_norm if self._manual_grad_norm is not None else self.engine.get_global_grad_norm()
            if gn is not None and math.isfinite(float(gn)):
                out_m["loss/grad_norm"] = float(gn)
        out_m["applied"] = applied
        return out_m

    def _accumulate(self, mb, prompt_ids, response_ids, advantages, old_logprobs, ref_logprobs, r_len, row_ids,
                    pad_id, micro_batch_rows: int | None = None) -> tuple[dict[str, float], list]:
        """Forward + backward over the micro-batches of mini-batch ``mb`` (row indices of this rank); gradients
        accumulate in the engine. Returns (metric partial sums, offending row ids)."""
        cfg = self.cfg
        micro_rows = micro_batch_rows or cfg.micro_batch_rows
        # global denominators of this mini-batch (all ranks): tokens and rows with >= 1 token
        mb_t = torch.tensor(mb, dtype=torch.long)
        local = torch.tensor([float(r_len[mb_t].sum()) if mb else 0.0, float((r_len[mb_t] > 0).sum()) if mb else 0.0])
        total_tokens, total_rows = self._allreduce(local).tolist()
        n_micro = max(1, math.ceil(len(mb) / micro_rows))
        n_micro = int(self._allreduce(torch.tensor([n_micro]), "max").item())
        sums: dict[str, float] = defaultdict(float)
        bad_rows: list = []
        settings = PPOLossSettings(clip_ratio=cfg.clip_ratio, dual_clip=cfg.dual_clip, loss_agg_mode=cfg.loss_agg_mode,
                                   entropy_coef=cfg.entropy_coef, kl_coef=cfg.kl_coef, kl_type=cfg.kl_type)
        # the gradient is a sum over micro-batches: their make-up is free to choose
        mb = [mb[k] for k in self.row_order([prompt_ids[i] for i in mb], [response_ids[i] for i in mb], grad=True)]
        for micro in split_even(mb, n_micro):
            dummy = len(micro) == 0
            idx = micro if not dummy else [0]  # a zero-weight row keeps the ranks' backward counts equal
            packed = self.pack([prompt_ids[i] for i in idx], [response_ids[i] for i in idx], pad_id,
                               grad=True).to(self.device)
            head = self.head_chunks(packed)
            self._count_forward(packed, head, dummy=dummy)
            out = ForwardOutput(**self.engine(packed.as_kwargs(), hidden_layer=None, compute_entropy=True,
                                            chunk_tokens=cfg.logprob_chunk_tokens, temperature=self.temperature,
                                            head_chunks=head))
            w = out.logprobs.shape[1]
            ix = torch.tensor(idx)
            mask = out.mask if not dummy else torch.zeros_like(out.mask)
            old = old_logprobs[ix, :w].to(self.device, torch.float32)
            ref = ref_logprobs[ix, :w].to(self.device, torch.float32) if ref_logprobs is not None else None
            adv = advantages[ix].to(self.device, torch.float32)
            res = ppo_loss(out.logprobs, old, adv, mask, entropy=out.entropy, ref_logp=ref, settings=settings,
                           total_tokens=total_tokens, total_rows=total_rows)
            if not dummy:
                flagged = set(out.nonfinite_rows.tolist())
                for j in range(len(idx)):
                    m = mask[j]
                    if not (_is_finite(old[j][m]) and (ref is None or _is_finite(ref[j][m])) and _is_finite(adv[j])):
                        flagged.add(j)
                if not flagged and not bool(torch.isfinite(res.loss.detach())):
                    flagged.update(range(len(idx)))  # a non-finite loss no single row explains
                bad_rows.extend(row_ids[idx[j]] for j in sorted(flagged))
            # DeepSpeed averages gradients over the W ranks; the loss already divides by the global denominators
            loss = res.loss * self.world_size
            if bad_rows:
                loss = loss * float("nan")  # poison: every gradient non-finite -> the step is skipped (docstring)
            self.engine.backward(loss, scale_wrt_gas=False)
            for k, v in res.metrics.items():
                sums[k] += float(v)
        return sums, bad_rows

    def _optimizer_step(self, bad_rows: list) -> bool:
        """engine.step() unless something is non-finite on any rank; returns whether the step was applied."""
        self._set_lr(self.lr_at(self.optimizer_steps))
        opt = self.engine.optimizer
        has_own_check = hasattr(opt, "overflow")  # ZeRO >= 1 and the bf16 optimizer skip non-finite steps
        any_bad = torch.tensor([1.0 if bad_rows else 0.0])
        self._manual_grad_norm = None
        if not has_own_check:
            grads = [p.grad for p in self.engine.module.parameters() if p.requires_grad and p.grad is not None]
            grads_ok = all(_is_finite(g) for g in grads)
            any_bad = torch.maximum(any_bad, torch.tensor([0.0 if grads_ok else 1.0]))
            if self.world_size == 1 and grads:  # DeepSpeed does not report the norm of a plain optimizer
                self._manual_grad_norm = float(torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))
        any_bad = bool(self._allreduce(any_bad, "max").item() > 0)
        if not has_own_check and any_bad:
            opt.zero_grad(set_to_none=True)
            if hasattr(self.engine, "_unmanaged_backward_count"):
                self.engine._unmanaged_backward_count = 0
            applied = False
        else:
            self.engine.step()
            applied = not bool(getattr(opt, "overflow", False))
        if applied:
            self.optimizer_steps += 1
            self.consecutive_skips = 0
            return True
        self.skipped_steps += 1
        self.consecutive_skips += 1
        rows = bad_rows if bad_rows else ["(non-finite gradient; rows unknown)"]
        self.last_nonfinite_rows = list(rows)
        log.warning("optimizer step skipped (NaN/Inf), %d in a row; rank %d rows: %s", self.consecutive_skips,
                    self.rank, rows[:20])
        if self.consecutive_skips >= self.cfg.max_consecutive_nonfinite:
            raise NonFiniteError(
                f"{self.consecutive_skips} optimizer steps in a row were skipped for NaN/Inf "
                f"(trainer.max_consecutive_nonfinite={self.cfg.max_consecutive_nonfinite}); offending rows on rank "
                f"{self.rank}: {rows[:20]}. Lower trainer.lr, try trainer.precision=fp32, or check the rollout "
                "data of those rows (empty or corrupt responses)."
            )
        return False

    # --------------------------------------------------------------------------- weights and state
    def nonfinite_parameters(self) -> list[str]:
        """Names of the model weights holding a NaN/Inf on any rank (empty when all are finite); collective.

        Each rank checks what it holds of every parameter (under ZeRO-3 its own partition, ``ds_tensor``; below
        stage 3 the whole tensor), one flag per parameter in ``named_parameters`` order, and one all-reduce (max)
        joins the flags: every rank makes the same single call and gets the same list, so a NaN in one rank's shard
        stops every rank and none waits for a collective the others skip. No parameter is gathered.
        """
        params = list(self.lm.named_parameters())
        flags = torch.zeros(len(params), dtype=torch.float32)
        for i, (_, p) in enumerate(params):
            t = p.ds_tensor if (self.zero_stage == 3 and hasattr(p, "ds_tensor")) else p.data
            if t.numel() and not bool(torch.isfinite(t).all()):
                flags[i] = 1.0
        flags = self._allreduce(flags, "max")
        return [name for (name, _), f in zip(params, flags.tolist()) if f > 0]

    def full_named_parameters(self, *, clone: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """(Hugging Face name, full tensor) of every model weight, for the rollout engine's refresh and exports.

        Under ZeRO-3 each parameter is gathered in turn (every rank must iterate) and, with ``clone``, copied so that
        it outlives the gathering; ``clone=False`` yields the gathered tensor itself, valid only until the next one
        is asked for. With LoRA the yielded weights are merged (W + scale * B A) under the base model's names.
        Tensors are detached; copy them if you keep them past the next optimizer step.
        """
        if self.is_lora:
            yield from self._merged_lora_parameters()
            return
        for name, p in self.lm.named_parameters():
            with self._gathered([p]):
                t = p.detach()
                yield name, (t.clone() if (clone and self.zero_stage == 3) else t)

    def _merged_lora_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        from peft.tuners.lora import LoraLayer

        base = self.lm.get_base_model()
        lora_modules = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
        adapter = self.lm.active_adapter if isinstance(self.lm.active_adapter, str) else self.lm.active_adapter[0]
        for name, p in base.named_parameters():
            if ".lora_" in name or "lora_embedding" in name:
                continue
            if ".base_layer." in name:
                owner = name.split(".base_layer.")[0]
                hf_name = name.replace(".base_layer.", ".")
                t = p.detach()
                if owner in lora_modules and name.endswith("base_layer.weight"):
                    t = t + lora_modules[owner].get_delta_weight(adapter).to(t.dtype)
                yield hf_name, t
            else:
                yield name, p.detach()

    def trainable_named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of the trainable weights only: all weights, or the LoRA adapters with LoRA."""
        for name, p in self.lm.named_parameters():
            if p.requires_grad:
                with self._gathered([p]):
                    yield name, (p.detach().clone() if self.zero_stage == 3 else p.detach())

    def load_named_parameters(self, tensors: dict[str, torch.Tensor], *, trainable_only: bool = False) -> None:
        """Copy full tensors into the model's weights by name (the inverse of ``full_named_parameters`` without
        LoRA, or of ``trainable_named_parameters``). Every name must be present with the same shape."""
        params = [(n, p) for n, p in self.lm.named_parameters() if p.requires_grad or not trainable_only]
        missing = [n for n, _ in params if n not in tensors]
        if missing:
            raise KeyError(f"checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}: it belongs to another model")
        for name, p in params:
            src = tensors[name]
            shape = tuple(p.ds_shape) if hasattr(p, "ds_shape") else tuple(p.shape)
            if tuple(src.shape) != shape:
                raise ValueError(f"checkpoint weight {name} has shape {tuple(src.shape)}, the model {shape}")
            with self._gathered([p], modifier_rank=0), torch.no_grad():
                if self.zero_stage != 3 or self.rank == 0:
                    p.data.copy_(src.to(p.device, p.dtype))

    def export_hf(self, out_dir: str | Path, tokenizer=None, shard_bytes: int = 5 * 2**30) -> Path | None:
        """Write the actor as a Hugging Face folder (config.json + safetensors, LoRA merged). Returns the folder on
        rank 0, None elsewhere.

        Collective under ZeRO-3: every rank gathers each parameter in turn, and only rank 0 keeps a host copy, one
        shard at a time (at most ``shard_bytes``, or one tensor if larger), which it writes before the next shard
        starts. So the host memory an export needs is one shard on rank 0 and nothing on the other ranks, whatever
        the model's size (``experiments.plan_memory``).
        """
        from safetensors.torch import save_file

        out = Path(out_dir)
        keep = self.rank == 0
        if keep:
            out.mkdir(parents=True, exist_ok=True)
        parts: list[tuple[str, list[str]]] = []  # (temporary file name, its tensors) per written shard
        shard: dict[str, torch.Tensor] = {}
        size = total = 0

        def flush() -> None:
            nonlocal shard, size
            tmp = f"model-{len(parts) + 1:05d}.safetensors.partial"
            save_file(shard, str(out / tmp), metadata={"format": "pt"})
            parts.append((tmp, list(shard)))
            shard, size = {}, 0

        for name, t in self.full_named_parameters(clone=False):
            if not keep:
                continue  # the other ranks only take part in the gathering
            nbytes = t.numel() * t.element_size()
            if shard and size + nbytes > shard_bytes:
                flush()
            shard[name] = t.detach().to("cpu", copy=self.zero_stage == 3).contiguous()
            size += nbytes
            total += nbytes
        if not keep:
            return None
        if shard or not parts:
            flush()
        if len(parts) == 1:
            (out / parts[0][0]).replace(out / "model.safetensors")
        else:
            import json

            weight_map = {}
            for k, (tmp, names) in enumerate(parts):
                fname = f"model-{k + 1:05d}-of-{len(parts):05d}.safetensors"
                (out / tmp).replace(out / fname)
                weight_map.update({name: fname for name in names})
            (out / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
        base = self.lm.get_base_model() if self.is_lora else self.lm
        base.config.save_pretrained(out)
        gen = getattr(base, "generation_config", None)
        if gen is not None:
            try:
                gen.save_pretrained(out)
            except Exception as e:  # an invalid generation config must not lose the weights
                log.warning("generation_config not saved: %s", e)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        return out

    # --------------------------------------------------------------------------- optimizer state
    def _hp_params(self) -> list[list[torch.Tensor]]:
        """The tensors the base optimizer updates, per parameter group: the model's weights (stage 0 fp32),
        the fp32 master partitions (ZeRO-1/2, bf16 stage 0) or the fp32 sub-group partitions (ZeRO-3)."""
        opt = self.engine.optimizer
        if self.zero_stage == 3:
            return [[p] for p in opt.fp32_partitioned_groups_flat]
        return [list(g["params"]) for g in self._base_optimizer().param_groups]

    def optimizer_state(self, *, copy: bool = True) -> tuple[dict[str, torch.Tensor], dict]:
        """This rank's optimizer state as flat tensors + JSON-able metadata (no pickled objects).

        ``copy=False`` (a checkpoint that writes them at once): tensors already in host memory are returned as they
        are, not cloned, so a checkpoint of an offloaded optimizer holds no second copy of its state; they change
        with the next optimizer step.

        Tensors are keyed ``g<i>.p<j>.<name>``: the base optimizer's (AdamW's) parameters — the fp32 master
        partitions under ZeRO/bf16, omitted when they are the model's own weights — and their state (``step``,
        ``exp_avg``, ``exp_avg_sq``). Rank-local: resuming needs the same world size and ZeRO stage.
        """
        base = self._base_optimizer()
        own = {id(p) for p in self.engine.module.parameters()}
        tensors: dict[str, torch.Tensor] = {}
        groups = []
        for gi, params in enumerate(self._hp_params()):
            shapes = []
            for pi, p in enumerate(params):
                key = f"g{gi}.p{pi}"
                shapes.append(list(p.shape))
                if id(p) not in own:
                    tensors[f"{key}.param"] = p.detach().to("cpu", copy=copy)
                for k, v in base.state.get(p, {}).items():
                    if torch.is_tensor(v):
                        tensors[f"{key}.{k}"] = v.detach().to("cpu", copy=copy)
            groups.append({"shapes": shapes})
        meta = {"zero_stage": self.zero_stage, "world_size": self.world_size, "rank": self.rank,
                "precision": self.precision, "groups": groups}
        return tensors, meta

    def load_optimizer_state(self, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        """Inverse of ``optimizer_state`` (same world size, ZeRO stage and model)."""
        if meta.get("zero_stage") != self.zero_stage or meta.get("world_size") != self.world_size:
            raise ValueError(
                f"optimizer state was saved with ZeRO stage {meta.get('zero_stage')} on {meta.get('world_size')} "
                f"ranks; this run uses stage {self.zero_stage} on {self.world_size}: resume with the same settings"
            )
        base = self._base_optimizer()
        hp = self._hp_params()
        if len(meta["groups"]) != len(hp):
            raise ValueError("optimizer state has a different number of parameter groups: another model?")
        flags = base.param_groups[0] if base.param_groups else {}
        for gi, (params, gm) in enumerate(zip(hp, meta["groups"])):
            if [list(p.shape) for p in params] != gm["shapes"]:
                raise ValueError(f"optimizer state group {gi} has other parameter shapes: another model or config?")
            for pi, p in enumerate(params):
                key = f"g{gi}.p{pi}"
                with torch.no_grad():
                    if f"{key}.param" in tensors:
                        p.data.copy_(tensors[f"{key}.param"].to(p.device, p.dtype))
                    state = base.state[p]
                    for name, t in tensors.items():
                        if not name.startswith(key + ".") or name.endswith(".param"):
                            continue
                        k = name[len(key) + 1:]
                        if k in state and torch.is_tensor(state[k]) and state[k].shape == t.shape:
                            state[k].copy_(t.to(state[k].device, state[k].dtype))  # keeps DeepSpeed's views valid
                        else:
                            on_cpu = k == "step" and not flags.get("capturable") and not flags.get("fused")
                            state[k] = t.to("cpu" if on_cpu else p.device)

    def counters_state(self) -> dict:
        e = self.engine
        return {
            "optimizer_steps": self.optimizer_steps,
            "skipped_steps": self.skipped_steps,
            "consecutive_skips": self.consecutive_skips,
            "ds_global_steps": int(e.global_steps),
            "ds_global_samples": int(e.global_samples),
            "ds_skipped_steps": int(e.skipped_steps),
            "ds_micro_steps": int(e.micro_steps),
        }

    def load_counters_state(self, d: dict) -> None:
        self.optimizer_steps = int(d["optimizer_steps"])
        self.skipped_steps = int(d["skipped_steps"])
        self.consecutive_skips = int(d["consecutive_skips"])
        e = self.engine
        e.global_steps = int(d["ds_global_steps"])
        e.global_samples = int(d["ds_global_samples"])
        e.skipped_steps = int(d["ds_skipped_steps"])
        e.micro_steps = int(d["ds_micro_steps"])
        self._set_lr(self.lr_at(self.optimizer_steps))
