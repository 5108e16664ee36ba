"""RolloutBatch: what the multi-turn rollout hands to the trainer (one row per live env per turn).

The trainer adds what only the training actor can compute (old/ref log-probs, hidden states) and turns
it into an ``estimators.StepBatch`` with ``to_step_batch``. Symbols as in ``estimators.batch``.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields

import torch

from estimators import StepBatch
from estimators.batch import concat_rows

__all__ = ["RolloutBatch"]


@dataclass
class RolloutBatch:
    """Step rows of a group rollout.

    prompt_ids         : list of N LongTensor (T_p,)  prompt token ids the model saw (chat template applied)
    response_ids       : list of N LongTensor (T_r,)  generated token ids (EOS/stop included, no padding)
    group_id, traj_id, step : LongTensor (N,)         prompt group, trajectory (unique within group), turn
    reward             : FloatTensor (N,)             env reward of the step (10 on success, else 0)
    valid              : BoolTensor (N,)              response projected to a valid action (docs/protocol.md)
    done               : BoolTensor (N,)              the episode ended at this step (terminated or truncated)
    won                : BoolTensor (N,)              the trajectory was won (same value on all its rows)
    response_truncated : BoolTensor (N,)              generation hit max tokens (counted as invalid)
    anchor_obs         : list[str] (N)                observation without history (GiGPO anchor)
    response_text      : list[str] (N)
    action             : list[str] (N)                projected action sent to the env ("" for invalid)
    state_key          : list[Hashable] (N)           true env state (diagnostics)
    task_family        : list[str] (N)
    task_id            : list[Hashable] (N)           task identity (split, index) of the group
    rollout_logprobs   : list of N FloatTensor (T_r,) or None  sampler log-probs (HF engine): a check of the
                                                      trainer's pass, or its old log-probs (trainer.old_logprobs)
    rollout_hidden     : FloatTensor (N, D) or None   layer-L state of the last prompt token from the prompt's
                                                      forward in the rollout (SamplingConfig.hidden_layer, HF engine)
    """

    prompt_ids: list[torch.Tensor]
    response_ids: list[torch.Tensor]
    group_id: torch.Tensor
    traj_id: torch.Tensor
    step: torch.Tensor
    reward: torch.Tensor
    valid: torch.Tensor
    done: torch.Tensor
    won: torch.Tensor
    response_truncated: torch.Tensor
    anchor_obs: list[str]
    response_text: list[str]
    action: list[str]
    state_key: list[Hashable]
    task_family: list[str]
    task_id: list[Hashable]
    rollout_logprobs: list[torch.Tensor] | None = None
    rollout_hidden: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def validate(self) -> None:
        n = len(self.prompt_ids)
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if len(v) != n:
                raise ValueError(f"RolloutBatch.{f.name} has {len(v)} entries, prompt_ids has {n}")
        if n and not torch.isfinite(self.reward).all():
            bad = torch.nonzero(~torch.isfinite(self.reward)).flatten().tolist()
            raise FloatingPointError(f"RolloutBatch.reward holds NaN/Inf in rows {bad[:8]} (task "
                                     f"{self.task_id[bad[0]]!r}, group {int(self.group_id[bad[0]])}, trajectory "
                                     f"{int(self.traj_id[bad[0]])}, step {int(self.step[bad[0]])})")

    def select(self, index: Sequence[int] | torch.Tensor) -> RolloutBatch:
        idx = torch.as_tensor(index, dtype=torch.long).tolist()
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif isinstance(v, torch.Tensor):
                out[f.name] = v[idx]
            else:
                out[f.name] = [v[i] for i in idx]
        return RolloutBatch(**out)

    @staticmethod
    def concat(batches: Sequence[RolloutBatch]) -> RolloutBatch:
        """Concatenate batches (rollout chunks); a field missing from any batch is None in the result."""
        return concat_rows(RolloutBatch, batches, partial="none")

    def padded_responses(self, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(LongTensor (N, T_r_max), BoolTensor (N, T_r_max)): right-padded response ids and mask."""
        n = len(self)
        width = max((int(r.numel()) for r in self.response_ids), default=0)
        ids = torch.full((n, max(width, 1)), pad_id, dtype=torch.long)
        mask = torch.zeros((n, max(width, 1)), dtype=torch.bool)
        for i, r in enumerate(self.response_ids):
            ids[i, : r.numel()] = r
            mask[i, : r.numel()] = True
        return ids, mask

    def to_step_batch(self, hidden: torch.Tensor | None = None) -> StepBatch:
        """The estimator's view. ``hidden``: FloatTensor (N, D) from the trainer's old-log-prob pass."""
        ids, mask = self.padded_responses()
        return StepBatch(
            group_id=self.group_id.long(),
            traj_id=self.traj_id.long(),
            step=self.step.long(),
            reward=self.reward.float(),
            valid=self.valid.bool() & ~self.response_truncated.bool(),
            anchor_obs=list(self.anchor_obs),
            response_text=list(self.response_text),
            response_ids=ids,
            response_mask=mask,
            hidden=hidden,
            state_key=list(self.state_key),
        )
