"""seed_everything fixes every random source on CPU."""
from __future__ import annotations

import random

import numpy as np
import torch

from trainer.seeding import seed_everything


def _draw(seeds):
    return (random.random(), float(np.random.rand()), float(torch.rand(1)), seeds.task.integers(0, 10**9),
            int(torch.randint(0, 10**9, (1,), generator=seeds.rollout)))


def test_same_seed_same_draws_other_seed_other_draws():
    a = _draw(seed_everything(5))
    b = _draw(seed_everything(5))
    c = _draw(seed_everything(6))
    assert a == b
    assert all(x != y for x, y in zip(a, c))


def test_rank_changes_only_the_rollout_generator():
    r0, r1 = seed_everything(5, rank=0), seed_everything(5, rank=1)
    assert r0.task.integers(0, 10**9) == r1.task.integers(0, 10**9)  # same task list on every rank
    assert int(torch.randint(0, 10**9, (1,), generator=r0.rollout)) != int(
        torch.randint(0, 10**9, (1,), generator=r1.rollout))
