"""Advantage estimators for group-based RL on multi-turn agents (GRPO, GiGPO, BiGPO, BiPACE, HGPO, RLOO).

    from estimators import StepBatch, EstimatorConfig, compute_advantages, ESTIMATORS
    result = compute_advantages(batch, EstimatorConfig(name="bipace_q", epsilon=0.05))
"""
from .batch import StepBatch
from .config import EstimatorConfig
from .registry import ESTIMATORS, EstimatorResult, compute_advantages, register_estimator

__all__ = ["StepBatch", "EstimatorConfig", "EstimatorResult", "ESTIMATORS", "compute_advantages", "register_estimator"]

from . import algorithms as _algorithms  # noqa: E402,F401  (registers the estimators)
