"""Write ``gigpo_sample.npz``: generated verl-agent batches and what verl-agent's own GiGPO code returns for them.

Not run by the tests (they read the committed ``.npz``); README.md beside this file says how it was run. Usage:

    python make_sample.py --verl-agent SRC_DIR --out gigpo_sample.npz

``SRC_DIR`` holds verl-agent's ``gigpo/core_gigpo.py``, unchanged, and a stub package ``verl/__init__.py`` defining
only ``DataProto`` (core_gigpo imports it at module level and reads nothing from it but ``.batch`` and
``.non_tensor_batch``; the rest of verl cannot be installed here). This script holds no verl-agent code: it builds
inputs the way verl-agent's trainer does (cited per step below) and calls verl-agent's functions on them.
"""
from __future__ import annotations

import argparse
import sys
import uuid

import numpy as np
import torch

GAMMA = 0.95          # algorithm.gamma of verl-agent's GiGPO scripts (examples/gigpo_trainer/run_alfworld.sh)
PENALTY = 0.1         # actor_rollout_ref.actor.invalid_action_penalty_coef of the same scripts
RESPONSE_LEN = 6      # response tokens per row (small: the file is committed)

# (name, prompt groups, trajectories per group, max steps, observations per group, step_advantage_w,
#  duplicate rows, shuffled rows)
BATCHES = [
    ("plain", 3, 4, 5, 4, 1.0, False, False),
    ("long", 2, 8, 8, 5, 1.0, False, False),
    ("one_trajectory", 1, 1, 4, 3, 1.0, False, False),       # one trajectory: singleton step groups
    ("one_row_groups", 4, 1, 1, 1, 1.0, False, False),       # one-row prompt groups (episode mean 0, std 1)
    ("weight_half", 4, 2, 3, 2, 0.5, False, False),
    ("adjusted", 3, 4, 5, 3, 1.0, True, False),              # adjust_batch(mode="copy") duplicates random rows
    ("balanced", 3, 4, 6, 4, 1.0, True, True),               # _balance_batch reorders the rows
]


class _Batch:
    """What ``compute_step_discounted_returns`` reads from a ``DataProto``."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch


def make_batch(rng: np.random.Generator, groups: int, trajs: int, max_steps: int, n_obs: int):
    """Rows in the order ``TrajectoryCollector.gather_rollout_data`` emits them: trajectory after trajectory, each
    trajectory's steps in order (agent_system/multi_turn_rollout/rollout_loop.py)."""
    rows = []
    for g in range(groups):
        uid = str(uuid.UUID(int=int(rng.integers(1 << 62))))               # uid: one per prompt group
        for _ in range(trajs):
            traj_uid = str(uuid.UUID(int=int(rng.integers(1 << 62))))      # traj_uid: one per trajectory
            length = int(rng.integers(1, max_steps + 1))
            won = bool(rng.random() < 0.5)
            # observations drawn from a few per group, so anchor states repeat across trajectories and steps
            start = f"g{g} start"
            for t in range(length):
                obs = start if t == 0 else f"g{g} room {int(rng.integers(n_obs))}"
                reward = 10.0 if (won and t == length - 1) else 0.0
                valid = bool(rng.random() < 0.85)
                rows.append(dict(uid=uid, traj_uid=traj_uid, step=t, anchor_obs=obs, reward=reward, valid=valid))
    return rows


def verl_agent_inputs(rows, rng: np.random.Generator, core_gigpo, response_len: int = RESPONSE_LEN):
    """The advantage function's inputs as verl-agent builds them for ``rows``; ``core_gigpo`` is the verl-agent
    module whose ``compute_step_discounted_returns`` makes ``step_rewards`` (GiGPO's, or the HGPO recipe's)."""
    n = len(rows)
    uid = np.array([r["uid"] for r in rows], dtype=object)
    traj_uid = np.array([r["traj_uid"] for r in rows], dtype=object)
    rewards = np.array([r["reward"] for r in rows], dtype=object)        # non_tensor_batch['rewards'] (per step)
    valid = np.array([r["valid"] for r in rows])
    # episode_rewards: each trajectory's summed reward, copied to its rows (gather_rollout_data)
    episode = {}
    for r in rows:
        episode[r["traj_uid"]] = episode.get(r["traj_uid"], 0.0) + r["reward"]
    resp_len = rng.integers(1, response_len + 1, size=n)
    response_mask = (np.arange(response_len)[None, :] < resp_len[:, None]).astype(np.int64)
    # step_rewards: verl-agent's own compute_step_discounted_returns (ray_trainer.fit, GiGPO branch)
    fake = _Batch({"input_ids": torch.zeros(n, 1, dtype=torch.long)},
                  {"rewards": rewards, "traj_uid": traj_uid, "active_masks": np.ones(n, dtype=object)})
    step_rewards = core_gigpo.compute_step_discounted_returns(fake, GAMMA)
    # token_level_scores: EpisodeRewardManager puts the episode reward on the last valid response token
    # (agent_system/reward_manager/episode.py); apply_invalid_action_penalty (ray_trainer.py) subtracts
    # coef * (1 - is_action_valid) there and from step_rewards; use_kl_in_reward off -> token_level_rewards
    token_level_rewards = torch.zeros(n, response_len, dtype=torch.float32)
    for i, r in enumerate(rows):
        invalid = torch.tensor(1.0 - float(r["valid"]), dtype=torch.float32)
        token_level_rewards[i, resp_len[i] - 1] = torch.tensor(episode[r["traj_uid"]], dtype=torch.float32)
        token_level_rewards[i, resp_len[i] - 1] -= PENALTY * invalid
        step_rewards[i] -= PENALTY * invalid
    return dict(token_level_rewards=token_level_rewards, step_rewards=step_rewards,
                response_mask=torch.from_numpy(response_mask), anchor_obs=np.array([r["anchor_obs"] for r in rows],
                                                                                   dtype=object),
                index=uid, traj_index=traj_uid, valid=valid,
                reward=np.array([r["reward"] for r in rows], dtype=np.float32),
                step=np.array([r["step"] for r in rows], dtype=np.int64))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-agent", required=True, help="folder holding gigpo/core_gigpo.py and the verl stub")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=41)
    args = ap.parse_args()
    sys.path.insert(0, args.verl_agent)
    from gigpo import core_gigpo  # verl-agent's file, unchanged

    rng = np.random.default_rng(args.seed)
    out = {"names": np.array([b[0] for b in BATCHES]), "gamma": np.float64(GAMMA), "penalty": np.float64(PENALTY)}
    for name, groups, trajs, max_steps, n_obs, w, dup, shuffle in BATCHES:
        rows = make_batch(rng, groups, trajs, max_steps, n_obs)
        inp = verl_agent_inputs(rows, rng, core_gigpo)
        order = np.arange(len(rows))
        if dup:  # adjust_batch(mode="copy"): random rows appended once more (agent_system/multi_turn_rollout/utils.py)
            order = np.concatenate([order, rng.choice(len(rows), size=max(1, len(rows) // 8), replace=False)])
        if shuffle:  # _balance_batch reorders rows after step_rewards were computed (ray_trainer.fit)
            order = rng.permutation(order)
        sel = {k: (v[torch.from_numpy(order)] if isinstance(v, torch.Tensor) else v[order]) for k, v in inp.items()}
        for mode in ("mean_std_norm", "mean_norm"):
            adv, ret = core_gigpo.compute_gigpo_outcome_advantage(
                token_level_rewards=sel["token_level_rewards"].clone(), step_rewards=sel["step_rewards"].clone(),
                response_mask=sel["response_mask"], anchor_obs=sel["anchor_obs"], index=sel["index"],
                traj_index=sel["traj_index"], step_advantage_w=w, mode=mode)
            out[f"{name}/{mode}/advantages"] = adv.numpy()
            out[f"{name}/{mode}/returns"] = ret.numpy()
        out[f"{name}/step_advantage_w"] = np.float64(w)
        for k, v in sel.items():
            v = v.numpy() if isinstance(v, torch.Tensor) else v
            out[f"{name}/{k}"] = v.astype(str) if v.dtype == object else v
    np.savez_compressed(args.out, **out)
    print(f"wrote {args.out}: " + ", ".join(f"{b[0]} ({len(out[b[0] + '/index'])} rows)" for b in BATCHES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
