"""One interface for rollout engines (Hugging Face and vLLM): sampling config, results, weight refresh.

A rollout engine turns a batch of prompts (token ids, chat template already applied) into one
generation per prompt. Symbols: B prompts in a call, T_p prompt tokens, T_r generated tokens.

    engine = make_engine("hf", "path/to/model")          # or "vllm"
    gens = engine.generate(prompt_ids, SamplingConfig(temperature=1.0, max_tokens=512,
                                                      stop=("</action>",)), seeds=[...])
    ... optimiser step ...
    engine.update_weights(iter(state_dict.items()))       # no reload from disk
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["SamplingConfig", "Generation", "RolloutEngine", "FinishReason", "check_generate_args"]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample one response. Rollout defaults follow docs/protocol.md (temperature 1.0, top-p 1,
    max response 512 tokens, stop at the closing action tag)."""

    temperature: float = 1.0
    """softmax temperature; 0 = greedy (argmax). [GiGPO] 1.0 for rollouts, 0.4 for validation"""
    top_p: float = 1.0
    """nucleus sampling: keep the smallest set of tokens with probability mass >= top_p; 1 = off"""
    max_tokens: int = 512
    """maximum generated tokens per response (T_r); a response cut here has finish_reason 'length'"""
    stop: tuple[str, ...] = ("</action>",)
    """stop strings; generation ends after the first one, which stays in the text. EOS always stops"""
    seed: int | None = None
    """base seed when ``generate`` gets no per-prompt seeds (prompt i then uses seed + i)"""
    logprobs: bool = True
    """return the log-prob of each generated token (both engines; vLLM's is computed by vLLM's own sampler)"""
    hidden_layer: int | None = None
    """also return the hidden state of the last prompt token at this layer, Hugging Face ``hidden_states``
    indexing (negative counts from the end), from the prompt's own forward: what the trainer's old-log-prob pass
    captures for BiGPO (``trainer.old_logprobs: rollout``). HF engine only; None = not captured"""

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"SamplingConfig.temperature={self.temperature!r} must be a finite number >= 0 "
                             "(0 = greedy)")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"SamplingConfig.top_p={self.top_p!r} must be in (0, 1]")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingConfig.max_tokens={self.max_tokens!r} must be a positive integer")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingConfig.stop={self.stop!r} must hold non-empty strings")
        if self.hidden_layer is not None and (isinstance(self.hidden_layer, bool)
                                              or not isinstance(self.hidden_layer, int)):
            raise ValueError(f"SamplingConfig.hidden_layer={self.hidden_layer!r} must be an int or None")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Generation:
    """One generated response.

    token_ids     : list[int] (T_r,)   generated ids, EOS / the stop string's last token included, no padding
    text          : str                decoded response (special tokens skipped), cut right after the stop
                                       string when one fired
    finish_reason : 'stop' | 'length'  EOS or stop string / max_tokens reached
    logprobs      : list[float] (T_r,) or None  log p(token) under softmax(logits / temperature)
                                       (temperature 1 when greedy), before top-p (vLLM: after top-p; the
                                       same when top_p is 1); None unless ``SamplingConfig.logprobs``
    stop_string   : str | None         the stop string that fired (None for EOS or length)
    hidden        : FloatTensor (D,) or None  hidden state of the last prompt token at
                                       ``SamplingConfig.hidden_layer`` (fp32, CPU); HF engine only
    """

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None
    stop_string: str | None = None
    hidden: torch.Tensor | None = None

    @property
    def truncated(self) -> bool:
        """The response hit max_tokens (counted as an invalid action by the rollout, docs/protocol.md)."""
        return self.finish_reason == "length"


def check_generate_args(prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                        seeds: Sequence[int] | None, vocab_size: int | None = None) -> list[int]:
    """Validate ``generate``'s arguments; return one seed per prompt."""
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    n = len(prompt_token_ids)
    for i, p in enumerate(prompt_token_ids):
        if len(p) == 0:
            raise ValueError(f"prompt_token_ids[{i}] is empty; every prompt needs at least one token")
        if vocab_size is not None:
            lo, hi = min(p), max(p)
            if lo < 0 or hi >= vocab_size:
                raise ValueError(f"prompt_token_ids[{i}] holds id {lo if lo < 0 else hi} outside the model's "
                                 f"vocabulary [0, {vocab_size}); was it tokenised with another tokenizer?")
    if seeds is None:
        base = 0 if sampling.seed is None else int(sampling.seed)
        return [base + i for i in range(n)]
    seeds = [int(s) for s in seeds]
    if len(seeds) != n:
        raise ValueError(f"got {len(seeds)} seeds for {n} prompts; pass one seed per prompt")
    return seeds


class RolloutEngine(ABC):
    """A text generator with refreshable weights. Implementations: ``HFEngine``, ``VLLMEngine``."""

    name: str = "base"
    supports_sleep: bool = False
    tokenizer = None
    """the transformers tokenizer of the served model (same ids in both engines)"""

    @abstractmethod
    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        """One ``Generation`` per prompt, in order. ``seeds[i]`` fixes prompt i's sampling: the same
        prompt, seed, config and weights give the same response."""

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy new weights (Hugging Face parameter names, e.g. from ``model.state_dict().items()`` or a
        ZeRO-3 gather) into the engine without reloading from disk. Returns the number of tensors."""

    def sleep(self) -> None:
        """Release generation memory (KV cache, and weights where supported) between rollout phases.
        No-op where the engine does not support it (``supports_sleep`` False)."""
        return None

    def wake(self) -> None:
        """Undo ``sleep``. No-op where unsupported."""
        return None

    def close(self) -> None:
        """Free the engine's resources. The engine must not be used afterwards."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
