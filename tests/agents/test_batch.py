"""``RolloutBatch.concat`` and ``StepBatch.concat``: one row concatenation (``estimators.batch.concat_rows``), with
each batch's rule for an optional field set in some batches only."""
from __future__ import annotations

import pytest
import torch

from agents.batch import RolloutBatch
from estimators import StepBatch


def _rollout(n: int, start: int, hidden: bool) -> RolloutBatch:
    ids = torch.arange(start, start + n)
    return RolloutBatch(
        prompt_ids=[torch.tensor([i]) for i in ids.tolist()], response_ids=[torch.tensor([i, i]) for i in ids.tolist()],
        group_id=ids, traj_id=torch.zeros(n, dtype=torch.long), step=torch.zeros(n, dtype=torch.long),
        reward=torch.zeros(n), valid=torch.ones(n, dtype=torch.bool), done=torch.ones(n, dtype=torch.bool),
        won=torch.zeros(n, dtype=torch.bool), response_truncated=torch.zeros(n, dtype=torch.bool),
        anchor_obs=[f"o{i}" for i in ids.tolist()], response_text=["r"] * n, action=["a"] * n,
        state_key=list(ids.tolist()), task_family=["f"] * n, task_id=[("train", i) for i in ids.tolist()],
        rollout_hidden=torch.ones(n, 3) if hidden else None)


def _steps(n: int, width: int, hidden: bool, group: int = 0) -> StepBatch:
    return StepBatch(group_id=torch.full((n,), group), traj_id=torch.arange(n), step=torch.zeros(n, dtype=torch.long),
                     reward=torch.zeros(n), valid=torch.ones(n, dtype=torch.bool), anchor_obs=["o"] * n,
                     response_text=["r"] * n, response_ids=torch.ones(n, width, dtype=torch.long),
                     response_mask=torch.ones(n, width, dtype=torch.bool), hidden=torch.ones(n, 3) if hidden else None)


def test_rollout_batches_concatenate_row_by_row_and_drop_a_field_one_chunk_lacks():
    both = RolloutBatch.concat([_rollout(2, 0, True), _rollout(3, 2, True)])
    both.validate()
    assert both.group_id.tolist() == [0, 1, 2, 3, 4] and both.anchor_obs == ["o0", "o1", "o2", "o3", "o4"]
    assert both.rollout_hidden.shape == (5, 3) and both.rollout_logprobs is None
    assert RolloutBatch.concat([_rollout(2, 0, True), _rollout(1, 2, False)]).rollout_hidden is None
    with pytest.raises(ValueError, match="RolloutBatch.concat needs at least one batch"):
        RolloutBatch.concat([])


def test_step_batches_pad_response_columns_and_refuse_a_field_set_in_some_batches_only():
    both = StepBatch.concat([_steps(2, 4, True), _steps(1, 6, True, group=1)])
    both.validate(need_hidden=True, need_response_ids=True)
    assert both.response_ids.shape == (3, 6) and both.response_mask[:2].sum(1).tolist() == [4, 4]
    with pytest.raises(ValueError, match="field hidden is set in some batches and None in others"):
        StepBatch.concat([_steps(2, 4, True), _steps(1, 4, False)])
    with pytest.raises(ValueError, match="StepBatch.concat needs at least one batch"):
        StepBatch.concat([])
