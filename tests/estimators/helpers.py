"""Small constructors for hand-written step batches."""
from __future__ import annotations

import torch

from estimators import StepBatch


def act(a: str) -> str:
    return f"<think>ok</think><action>{a}</action>"


def make_batch(rows, hidden=None) -> StepBatch:
    """rows: list of (group, traj, step, reward, valid, anchor_obs, response_text)."""
    g, t, s, r, v, o, resp = zip(*rows)
    return StepBatch(
        group_id=torch.tensor(g),
        traj_id=torch.tensor(t),
        step=torch.tensor(s),
        reward=torch.tensor(r, dtype=torch.float32),
        valid=torch.tensor(v),
        anchor_obs=list(o),
        response_text=list(resp),
        hidden=None if hidden is None else torch.as_tensor(hidden, dtype=torch.float32),
    )


def one_hot_hidden(batch: StepBatch) -> torch.Tensor:
    """FloatTensor (N, K): one-hot embedding of the anchor observation (GiGPO as BiGPO with eps = 0)."""
    table = {}
    codes = torch.tensor([table.setdefault(o, len(table)) for o in batch.anchor_obs])
    return torch.nn.functional.one_hot(codes, len(table)).float()


def hgpo_prestart_batch() -> StepBatch:
    """3 trajectories of one group whose HGPO levels reach before step 0, where the two ``hgpo_rule`` differ
    (``test_hand_cases.test_hgpo_levels_before_step_0`` works it out by hand); rewards on the B rows only."""
    rows = [(0, 0, 0, 0.0, True, "A", act("x")), (0, 0, 1, 4.0, True, "B", act("x")),
            (0, 1, 0, 0.0, True, "A", act("x")), (0, 1, 1, 0.0, True, "B", act("x")),
            (0, 2, 0, 0.0, True, "C", act("x")), (0, 2, 1, 0.0, True, "A", act("x")),
            (0, 2, 2, 6.0, True, "B", act("x"))]
    return make_batch(rows)
