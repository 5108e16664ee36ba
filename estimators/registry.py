"""The estimator registry and the one entry point every caller uses.

Adding an estimator is one registered function with this signature::

    @register_estimator("my_estimator", needs_hidden=False)
    def my_estimator(batch: StepBatch, cfg: EstimatorConfig, ctx: EstimatorContext) -> EstimatorResult: ...

``compute_advantages`` validates the batch, runs the function, checks the output for NaN/Inf and adds
the diagnostics every run logs (singleton rates, cluster sizes, PACE mix, advantage statistics).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .batch import StepBatch

__all__ = ["EstimatorResult", "EstimatorSpec", "ESTIMATORS", "register_estimator", "compute_advantages"]


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


def compute_advantages(batch: StepBatch, cfg, diagnostics: bool = True) -> EstimatorResult:
    """Advantages for every step row of ``batch`` with the estimator ``cfg.name``.

    Raises ``ValueError`` naming the field for: an unknown estimator, a malformed or empty batch, NaN/Inf
    in rewards, NaN/Inf in hidden states where they are read (a hidden-state estimator, or the diagnostics),
    a hidden-state estimator without ``batch.hidden``; and ``FloatingPointError``
    if the estimator itself produced NaN/Inf (a bug, reported with the rows).
    ``diagnostics=False`` skips the batch diagnostics (``estimators.diagnostics``), which otherwise
    cluster hidden states for every estimator; the estimator's own metrics are always returned.
    """
    from .config import EstimatorConfig
    from .diagnostics import batch_diagnostics

    if not isinstance(cfg, EstimatorConfig):
        raise ValueError(f"compute_advantages needs an EstimatorConfig, got {type(cfg).__name__}")
    cfg.validate()
    spec = ESTIMATORS[cfg.name]
    need_ids = spec.uses_action_keys and cfg.pace_key == "first_tokens"
    batch.validate(need_hidden=spec.needs_hidden, need_response_ids=need_ids,
                   check_hidden_values=spec.needs_hidden or diagnostics)
    result = spec.fn(batch, cfg)
    for name in ("advantages", "episode", "step"):
        t = getattr(result, name)
        if t.shape != (len(batch),):
            raise RuntimeError(f"estimator {cfg.name!r} returned {name} of shape {tuple(t.shape)}, want ({len(batch)},)")
        if not torch.isfinite(t).all():
            bad = torch.nonzero(~torch.isfinite(t)).flatten()[:5].tolist()
            raise FloatingPointError(f"estimator {cfg.name!r} produced NaN/Inf in {name} at rows {bad}")
    if diagnostics:
        metrics = batch_diagnostics(batch, cfg, result)
        metrics.update(result.metrics)
        result.metrics = metrics
    return result
