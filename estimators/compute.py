"""The one entry point every caller uses: ``compute_advantages(batch, cfg)``.

It validates the batch, runs the registered estimator (``estimators.registry``), checks its output for NaN/Inf and
adds the diagnostics every run logs (``estimators.diagnostics``: singleton rates, cluster sizes, PACE mix,
advantage statistics).
"""
from __future__ import annotations

import torch

from .batch import StepBatch
from .config import EstimatorConfig
from .diagnostics import batch_diagnostics
from .registry import ESTIMATORS, EstimatorResult

__all__ = ["compute_advantages"]


def compute_advantages(batch: StepBatch, cfg, diagnostics: bool = True) -> EstimatorResult:
    """Advantages for every step row of ``batch`` with the estimator ``cfg.name``.

    Raises ``ValueError`` naming the field for: an unknown estimator, a malformed or empty batch, NaN/Inf
    in rewards, NaN/Inf in hidden states where they are read (a hidden-state estimator, or the diagnostics),
    a hidden-state estimator without ``batch.hidden``; and ``FloatingPointError``
    if the estimator itself produced NaN/Inf (a bug, reported with the rows).
    ``diagnostics=False`` skips the batch diagnostics (``estimators.diagnostics``), which otherwise
    cluster hidden states for every estimator; the estimator's own metrics are always returned.
    """
    if not isinstance(cfg, EstimatorConfig):  # checked when built, and frozen: not checked again here
        raise ValueError(f"compute_advantages needs an EstimatorConfig, got {type(cfg).__name__}")
    spec = ESTIMATORS[cfg.name]
    need_ids = spec.uses_action_keys and cfg.pace_key == "first_tokens"
    batch.validate(need_hidden=spec.needs_hidden, need_response_ids=need_ids,
                   check_hidden_values=spec.needs_hidden or diagnostics)
    result = spec.fn(batch, cfg)
    for name in ("advantages", "episode", "step"):
        t = getattr(result, name)
        if t.shape != (len(batch),):
            raise RuntimeError(f"estimator {cfg.name!r} returned {name} of shape {tuple(t.shape)}, "
                               f"want ({len(batch)},)")
        if not torch.isfinite(t).all():
            bad = torch.nonzero(~torch.isfinite(t)).flatten()[:5].tolist()
            raise FloatingPointError(f"estimator {cfg.name!r} produced NaN/Inf in {name} at rows {bad}")
    if diagnostics:
        metrics = batch_diagnostics(batch, cfg, result)
        metrics.update(result.metrics)
        result.metrics = metrics
    return result
