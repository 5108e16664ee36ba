"""Synthetic step batches with a known state structure, for tests, benchmarks and the calibration demo.

Each prompt group has a small set of latent states; a trajectory walks through them; the hidden state of
a row is the state's embedding plus noise, the anchor observation is the state's name with an optional
surface variant (so exact matching fragments states as in real prompts), actions come from a small
vocabulary inside ``<think>..</think><action>..</action>`` tags, and a trajectory that reaches its
group's goal state gets reward 10 on that step.
"""
from __future__ import annotations

import torch

from .batch import StepBatch

__all__ = ["synthetic_batch"]

ACTIONS = ("go north", "go south", "take key", "open door", "look", "craft 1 stick")


def synthetic_batch(
    groups: int = 4,
    group_size: int = 8,
    max_steps: int = 10,
    hidden_size: int = 32,
    states_per_group: int = 6,
    noise: float = 0.05,
    obs_variants: int = 2,
    invalid_rate: float = 0.1,
    min_steps: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    response_tokens: int = 12,
    early_stop: bool = True,
) -> StepBatch:
    """A batch of ``groups`` x ``group_size`` trajectories with lengths in [min_steps, max_steps]
    (``early_stop``: a trajectory may also end early when it reaches the goal).

    Shapes: N = total rows; hidden (N, D=hidden_size); response_ids (N, response_tokens).
    """
    gen = torch.Generator().manual_seed(seed)
    protos = torch.randn(groups, states_per_group, hidden_size, generator=gen)  # (P, S, D)
    cols = {k: [] for k in ("g", "t", "s", "r", "v", "state", "act", "var")}
    for g in range(groups):
        goal = int(torch.randint(1, states_per_group, (1,), generator=gen))
        for tr in range(group_size):
            length = int(torch.randint(min_steps, max_steps + 1, (1,), generator=gen))
            state = 0
            for st in range(length):
                a = int(torch.randint(0, len(ACTIONS), (1,), generator=gen))
                valid = bool(torch.rand(1, generator=gen) >= invalid_rate)
                cols["g"].append(g)
                cols["t"].append(tr)
                cols["s"].append(st)
                cols["state"].append(state)
                cols["act"].append(a if valid else -1)
                cols["v"].append(valid)
                cols["var"].append(int(torch.randint(0, obs_variants, (1,), generator=gen)))
                nxt = (state + a + 1) % states_per_group if valid else state
                lucky = bool(torch.rand(1, generator=gen) < 0.3) and early_stop
                won = nxt == goal and (st == length - 1 or lucky)
                cols["r"].append(10.0 if won else 0.0)
                state = nxt
                if won:
                    break
    n = len(cols["g"])
    g = torch.tensor(cols["g"])
    state = torch.tensor(cols["state"])
    hidden = protos[g, state] + noise * torch.randn(n, hidden_size, generator=gen)
    responses = []
    for a in cols["act"]:
        if a < 0:
            responses.append("I am not sure what to do here")
        else:
            responses.append(f"<think>try it</think><action>{ACTIONS[a]}</action>")
    ids = torch.randint(0, 50, (n, response_tokens), generator=gen)
    act = torch.tensor(cols["act"])
    ids[:, 0] = act + 100  # the first token identifies the action, as for a real tokenizer
    lengths = torch.randint(response_tokens // 2, response_tokens + 1, (n,), generator=gen)
    mask = torch.arange(response_tokens)[None, :] < lengths[:, None]
    anchor = [f"You are in room {s}." + (f" (variant {v})" if v else "") for s, v in zip(cols["state"], cols["var"])]
    return StepBatch(
        group_id=g.to(device),
        traj_id=torch.tensor(cols["t"], device=device),
        step=torch.tensor(cols["s"], device=device),
        reward=torch.tensor(cols["r"], dtype=dtype, device=device),
        valid=torch.tensor(cols["v"], device=device),
        anchor_obs=anchor,
        response_text=responses,
        response_ids=torch.where(mask, ids, torch.zeros_like(ids)).to(device),
        response_mask=mask.to(device),
        hidden=hidden.to(device=device, dtype=dtype),
        state_key=[(int(a), int(b)) for a, b in zip(cols["g"], cols["state"])],
    )
