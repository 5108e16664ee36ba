"""The data every estimator reads: one row per agent step.

Symbols (used in every docstring and shape comment of this repo):

====  =========================================================
N     step rows in a batch (one per live environment per turn)
P     prompt groups (tasks) in a batch
G     trajectories per prompt group (same task, same env seed)
T     tokens (response tokens unless said otherwise)
D     hidden size of the actor
====  =========================================================
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields, replace

import torch

__all__ = ["StepBatch", "concat_rows"]


def _check_tensor(name: str, value, n: int | None, dtype_kind: str, ndim: int) -> None:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"StepBatch.{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.ndim != ndim:
        raise ValueError(f"StepBatch.{name} must have {ndim} dimension(s), got shape {tuple(value.shape)}")
    if n is not None and value.shape[0] != n:
        raise ValueError(
            f"StepBatch.{name} has {value.shape[0]} rows but group_id has {n}: every field needs one entry per step row"
        )
    kind_ok = {
        "int": not value.dtype.is_floating_point and value.dtype != torch.bool,
        "float": value.dtype.is_floating_point,
        "bool": value.dtype == torch.bool,
    }[dtype_kind]
    if not kind_ok:
        raise ValueError(f"StepBatch.{name} must be a {dtype_kind} tensor, got dtype {value.dtype}")


def concat_rows(cls, batches: Sequence, *, pad_columns: Sequence[str] = (), partial: str = "error"):
    """Concatenate dataclass batches of row fields (tensors with rows first, or lists) into one ``cls``.

    ``pad_columns``: 2-D tensor fields whose widths may differ; right-padded with 0/False to the widest.
    ``partial``: what a field that is None in some batches and set in others becomes: ``"error"`` (raise) or
    ``"none"`` (None in the result). A field that is None in all batches stays None.
    """
    if not batches:
        raise ValueError(f"{cls.__name__}.concat needs at least one batch")
    if partial not in ("error", "none"):
        raise ValueError(f"concat_rows: partial={partial!r}, use 'error' or 'none'")
    out = {}
    for f in fields(cls):
        vals = [getattr(b, f.name) for b in batches]
        if all(v is None for v in vals):
            out[f.name] = None
            continue
        if any(v is None for v in vals):
            if partial == "none":
                out[f.name] = None
                continue
            raise ValueError(f"{cls.__name__}.concat: field {f.name} is set in some batches and None in others")
        if isinstance(vals[0], torch.Tensor):
            if vals[0].ndim == 2 and f.name in pad_columns:
                width = max(v.shape[1] for v in vals)
                vals = [torch.nn.functional.pad(v, (0, width - v.shape[1])) for v in vals]
            out[f.name] = torch.cat(vals, dim=0)
        else:
            out[f.name] = [x for v in vals for x in v]
    return cls(**out)


@dataclass
class StepBatch:
    """A rollout batch flattened to step rows. Rows may come in any order.

    Required fields
    ---------------
    group_id : LongTensor (N,)      prompt group g(i) (GiGPO's ``uid``)
    traj_id  : LongTensor (N,)      trajectory tau(i); only the pair (group_id, traj_id) must be unique per
                                    trajectory, so ids may restart at 0 in each group
    step     : LongTensor (N,)      step index t(i) inside its trajectory (0-based)
    reward   : FloatTensor (N,)     environment reward r_i of that step (10 on the winning step, else 0)
    valid    : BoolTensor (N,)      v_i: the response parsed into a valid action
    anchor_obs : list[str] (N)      o_i: current observation without history (GiGPO's anchor)
    response_text : list[str] (N)   the model's response at that step

    Optional fields
    ---------------
    response_ids  : LongTensor (N, T)   response token ids (right-padded)
    response_mask : BoolTensor (N, T)   True on real response tokens
    hidden        : FloatTensor (N, D)  actor hidden state at the last prompt token (not normalised)
    state_key     : list[Hashable] (N)  true environment state, for diagnostics only (cluster purity)
    """

    group_id: torch.Tensor
    traj_id: torch.Tensor
    step: torch.Tensor
    reward: torch.Tensor
    valid: torch.Tensor
    anchor_obs: list[str]
    response_text: list[str]
    response_ids: torch.Tensor | None = None
    response_mask: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    state_key: list[Hashable] | None = field(default=None)

    def __len__(self) -> int:
        return int(self.group_id.shape[0])

    @property
    def device(self) -> torch.device:
        return self.reward.device

    # ------------------------------------------------------------------ checks
    def validate(self, need_hidden: bool = False, need_response_ids: bool = False,
                 check_hidden_values: bool | None = None) -> None:
        """Raise ``ValueError`` naming the field when the batch is malformed.

        ``check_hidden_values`` (default: ``need_hidden``): scan ``hidden`` for NaN/Inf. Its shape is always checked.
        """
        if check_hidden_values is None:
            check_hidden_values = need_hidden
        if not isinstance(self.group_id, torch.Tensor):
            raise ValueError(f"StepBatch.group_id must be a torch.Tensor, got {type(self.group_id).__name__}")
        n = self.group_id.shape[0] if self.group_id.ndim == 1 else None
        _check_tensor("group_id", self.group_id, None, "int", 1)
        if n == 0:
            raise ValueError("StepBatch is empty (group_id has 0 rows): a rollout must yield at least one step")
        _check_tensor("traj_id", self.traj_id, n, "int", 1)
        _check_tensor("step", self.step, n, "int", 1)
        _check_tensor("reward", self.reward, n, "float", 1)
        _check_tensor("valid", self.valid, n, "bool", 1)
        for name in ("anchor_obs", "response_text"):
            value = getattr(self, name)
            if not isinstance(value, Sequence) or isinstance(value, str):
                raise ValueError(f"StepBatch.{name} must be a list of str, got {type(value).__name__}")
            if len(value) != n:
                raise ValueError(f"StepBatch.{name} has {len(value)} entries but group_id has {n} rows")
        if self.state_key is not None and len(self.state_key) != n:
            raise ValueError(f"StepBatch.state_key has {len(self.state_key)} entries but group_id has {n} rows")
        if not torch.isfinite(self.reward).all():
            bad = torch.nonzero(~torch.isfinite(self.reward)).flatten()[:5].tolist()
            raise ValueError(f"StepBatch.reward holds NaN/Inf at rows {bad}: check the environment's reward")
        if bool((self.step < 0).any()):
            raise ValueError("StepBatch.step holds negative step indices")
        if self.hidden is not None:
            _check_tensor("hidden", self.hidden, n, "float", 2)
            # The values are checked where they are read (a hidden-state estimator, or the diagnostics): one
            # reduction in the tensor's own dtype (12x cheaper than a float64 sum at N x D = 3.5k x 3.6k) is
            # NaN/Inf iff an entry is, or the values are absurdly large; only then find the rows.
            if check_hidden_values and not torch.isfinite(self.hidden.sum()):
                bad = torch.nonzero(~torch.isfinite(self.hidden).all(dim=1)).flatten()[:5].tolist()
                if bad:
                    raise ValueError(f"StepBatch.hidden holds NaN/Inf at rows {bad}: check the actor's forward pass")
                big = float(self.hidden.abs().max())
                raise ValueError(f"StepBatch.hidden holds values up to {big:.3g}, so large that their sum overflows "
                                 f"{self.hidden.dtype}: check the actor's forward pass or capture in float32")
        elif need_hidden:
            raise ValueError(
                "StepBatch.hidden is None but this estimator clusters hidden states: capture them in the "
                "actor's old-log-prob pass (trainer.forward) or choose 'grpo'/'gigpo'/'hgpo'/'rloo'"
            )
        if self.response_ids is not None:
            _check_tensor("response_ids", self.response_ids, n, "int", 2)
            if self.response_mask is None:
                raise ValueError("StepBatch.response_mask is required when response_ids is given")
            _check_tensor("response_mask", self.response_mask, n, "bool", 2)
            if self.response_mask.shape != self.response_ids.shape:
                raise ValueError(
                    f"StepBatch.response_mask shape {tuple(self.response_mask.shape)} differs from "
                    f"response_ids shape {tuple(self.response_ids.shape)}"
                )
        elif need_response_ids:
            raise ValueError(
                "StepBatch.response_ids is None but pace_key='first_tokens' needs response token ids"
            )
        # one trajectory must not repeat a step index
        key = self._traj_key() * (int(self.step.max()) + 1) + self.step
        if torch.unique(key).numel() != n:
            raise ValueError("StepBatch has two rows with the same (group_id, traj_id, step)")

    # ----------------------------------------------------------------- helpers
    def _traj_key(self) -> torch.Tensor:
        """LongTensor (N,): one dense id per (group_id, traj_id) pair."""
        from .ops import dense_ids

        return dense_ids(self.group_id, self.traj_id)

    def select(self, index: torch.Tensor | Sequence[int]) -> StepBatch:
        """The rows at ``index`` (a LongTensor or list of ints), all fields kept aligned."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.group_id.device)
        idx_list = idx.tolist()
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif isinstance(v, torch.Tensor):
                out[f.name] = v[idx.to(v.device)]
            else:
                out[f.name] = [v[i] for i in idx_list]
        return StepBatch(**out)

    def to(self, device: torch.device | str) -> StepBatch:
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )

    @staticmethod
    def concat(batches: Sequence[StepBatch]) -> StepBatch:
        """Concatenate batches (e.g. from several turns); optional fields must be present in all or none.

        ``response_ids``/``response_mask`` of different widths are right-padded with 0/False.
        """
        return concat_rows(StepBatch, batches, pad_columns=("response_ids", "response_mask"))

    def save(self, path) -> None:
        """Write the batch to ``path`` (torch file of tensors, strings and ints; ``state_key`` as repr strings)."""
        data = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu()
            elif f.name == "state_key" and v is not None:
                v = [repr(k) for k in v]
            elif v is not None:
                v = list(v)
            data[f.name] = v
        torch.save(data, path)

    @staticmethod
    def load(path) -> StepBatch:
        """Read a batch written by ``save`` (``weights_only`` loading: no arbitrary objects are unpickled)."""
        data = torch.load(path, map_location="cpu", weights_only=True)
        unknown = set(data) - {f.name for f in fields(StepBatch)}
        if unknown:
            raise ValueError(f"{path}: not a StepBatch file (unknown fields {sorted(unknown)})")
        return StepBatch(**data)

    @property
    def num_groups(self) -> int:
        return int(torch.unique(self.group_id).numel())

    def summary(self) -> str:
        n = len(self)
        if n == 0:
            return "StepBatch(empty)"
        t = self._traj_key().max().item() + 1
        return (
            f"StepBatch(N={n}, P={self.num_groups}, trajectories={t}, "
            f"max_step={int(self.step.max())}, hidden={'none' if self.hidden is None else tuple(self.hidden.shape)}, "
            f"valid={self.valid.float().mean().item():.3f}, reward_sum={self.reward.sum().item():.1f})"
        )


