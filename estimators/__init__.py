"""Advantage estimators for group-based RL on multi-turn agents (GRPO, GiGPO, BiGPO, BiPACE, HGPO, RLOO).

    from estimators import StepBatch, EstimatorConfig, compute_advantages, ESTIMATORS   # installed: bipace.estimators
    result = compute_advantages(batch, EstimatorConfig(name="bipace_q", epsilon=0.05))
"""
from .batch import StepBatch
from .compute import compute_advantages
from .config import EstimatorConfig
from .registry import ESTIMATORS, EstimatorResult, register_estimator

__all__ = ["StepBatch", "EstimatorConfig", "EstimatorResult", "ESTIMATORS", "compute_advantages", "register_estimator"]

# The modules whose import registers estimators. They come after every public name above is bound, so an estimator
# module may write ``from . import EstimatorResult, register_estimator`` (imports inside the package stay relative:
# installed, it is ``bipace.estimators``); a new one is added on this line.
from . import algorithms  # noqa: E402, F401
