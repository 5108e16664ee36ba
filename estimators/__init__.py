"""Advantage estimators for group-based RL on multi-turn agents (GRPO, GiGPO, BiGPO, BiPACE, HGPO, RLOO).

    from estimators import StepBatch, EstimatorConfig, compute_advantages, ESTIMATORS
    result = compute_advantages(batch, EstimatorConfig(name="bipace_q", epsilon=0.05))
"""
from . import algorithms as _algorithms  # noqa: F401  (registers the estimators)
from .batch import StepBatch
from .compute import compute_advantages
from .config import EstimatorConfig
from .registry import ESTIMATORS, EstimatorResult, register_estimator

__all__ = ["StepBatch", "EstimatorConfig", "EstimatorResult", "ESTIMATORS", "compute_advantages", "register_estimator"]
