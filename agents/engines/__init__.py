"""Rollout engines behind one interface (``RolloutEngine``): Hugging Face and vLLM.

``make_engine("hf" | "vllm", model, **options)``; see ``agents.engines.base`` for the contract.
The vLLM engine lives in its own venv on CPU machines (``make setup-vllm``) and is imported lazily.
"""
from __future__ import annotations

from .base import Generation, RolloutEngine, SamplingConfig

__all__ = ["Generation", "RolloutEngine", "SamplingConfig", "make_engine", "ENGINES"]

ENGINES = ("hf", "vllm")


def make_engine(name: str, model, **options) -> RolloutEngine:
    """Build a rollout engine by name. ``options`` go to ``HFEngine`` / ``VLLMEngine`` (``VLLMOptions``)."""
    key = str(name).lower()
    if key == "hf":
        from .hf import HFEngine

        return HFEngine(model, **options)
    if key == "vllm":
        from .vllm import VLLMEngine, VLLMOptions

        return VLLMEngine(model, VLLMOptions.of(**options))
    raise ValueError(f"unknown rollout engine {name!r}; choose one of {ENGINES}")
