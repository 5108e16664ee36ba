"""One seed for everything: Python, NumPy, torch, the task sampler and the rollout sampler.

``seed_everything(seed, rank)`` seeds the global generators (Python ``random``, NumPy's legacy global state,
torch CPU and CUDA) and returns two private generators derived from the seed with NumPy's ``SeedSequence``:

* ``task``: ``numpy.random.Generator`` for sampling training tasks. Derived from ``seed`` only, so every rank
  draws the same task list (each rank then takes its own slice of the groups);
* ``rollout``: ``torch.Generator`` for token sampling and mini-batch shuffling, derived from ``(seed, rank)``
  so ranks sample differently.

Reproducibility: on CPU a seed fixes everything (tests check bit-equal results). On GPU the following are
not bitwise reproducible even with a fixed seed: cuBLAS/cuDNN kernel choices and atomics (reductions in
backward, ``index_add``/scatter), flash/SDPA attention backward, NCCL reduction order across ranks, and vLLM
sampling (continuous batching changes the batch a request is computed in). ``deterministic=True`` asks torch
for deterministic kernels where they exist (slower; some ops then raise) and sets ``CUBLAS_WORKSPACE_CONFIG``;
it does not cover vLLM or NCCL.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Seeds", "seed_everything"]


@dataclass
class Seeds:
    """Generators returned by ``seed_everything``."""

    seed: int
    rank: int
    task: np.random.Generator
    rollout: torch.Generator


def seed_everything(seed: int, rank: int = 0, deterministic: bool = False) -> Seeds:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an int >= 0")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    task_ss, rollout_ss = np.random.SeedSequence(seed).spawn(2)
    task = np.random.default_rng(task_ss)
    rollout_seed = int(np.random.SeedSequence(rollout_ss.generate_state(2).tolist() + [rank]).generate_state(1)[0])
    rollout = torch.Generator().manual_seed(rollout_seed)
    return Seeds(seed=seed, rank=rank, task=task, rollout=rollout)
