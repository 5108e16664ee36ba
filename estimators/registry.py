"""The estimator registry: what an estimator returns and how it is registered.

Adding an estimator is one registered function with this signature::

    @register_estimator("my_estimator", needs_hidden=False)
    def my_estimator(batch: StepBatch, cfg: EstimatorConfig) -> EstimatorResult: ...

The entry point every caller uses, ``compute_advantages``, lives in ``estimators.compute`` (it validates the batch,
runs the function, checks the output for NaN/Inf and adds the diagnostics every run logs). This module imports no
other estimator module but ``batch``, so every module may import it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["EstimatorResult", "EstimatorSpec", "ESTIMATORS", "register_estimator"]


@dataclass
class EstimatorResult:
    """Per-row advantages and diagnostics.

    advantages : FloatTensor (N,)  A = A^ep + w * A^S
    episode    : FloatTensor (N,)  A^ep (zeros where the estimator has none)
    step       : FloatTensor (N,)  A^S (zeros where the estimator has none)
    cluster_id : LongTensor (N,) or None  state group of each row (anchor group or hidden-state cluster)
    metrics    : dict[str, float]  diagnostics (names documented in ``estimators.diagnostics``)
    """

    advantages: torch.Tensor
    episode: torch.Tensor
    step: torch.Tensor
    cluster_id: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    fn: Callable
    needs_hidden: bool = False
    uses_action_keys: bool = False
    doc: str = ""


ESTIMATORS: dict[str, EstimatorSpec] = {}


def register_estimator(name: str, needs_hidden: bool = False, uses_action_keys: bool = False):
    """Decorator: register ``fn(batch, cfg) -> EstimatorResult`` under ``name``.

    ``needs_hidden``: the batch must carry hidden states; ``uses_action_keys``: the estimator reads
    ``cfg.pace_key`` (so ``first_tokens`` requires ``response_ids``)."""

    def deco(fn):
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = EstimatorSpec(
            name=name, fn=fn, needs_hidden=needs_hidden, uses_action_keys=uses_action_keys, doc=fn.__doc__ or ""
        )
        return fn

    return deco
