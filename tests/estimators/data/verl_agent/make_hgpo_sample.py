"""Write ``hgpo_sample.npz``: generated verl-agent batches and what verl-agent's own HGPO code returns for them.

Not run by the tests (they read the committed ``.npz``); README.md beside this file says how it was run. Usage:

    python make_hgpo_sample.py --verl-agent SRC_DIR --out hgpo_sample.npz

``SRC_DIR`` holds verl-agent's ``recipe/hgpo/core_hgpo.py`` (unchanged, placed at ``SRC_DIR/core_hgpo.py``) and a stub
package ``verl/__init__.py`` defining only ``DataProto`` (core_hgpo imports it at module level and reads nothing from
it but ``.batch`` and ``.non_tensor_batch``). This script holds no verl-agent code: it builds inputs the way
verl-agent's HGPO trainer (``recipe/hgpo/hgpo_ray_trainer.py``) does and calls verl-agent's functions on them.
"""
from __future__ import annotations

import argparse
import sys
import uuid

import numpy as np
import torch
from make_sample import verl_agent_inputs  # this folder is on sys.path when the script runs

GAMMA = 0.95          # algorithm.gamma of verl-agent's HGPO scripts (recipe/hgpo/run_qwen2.5_1.5b_alfworld_train.sh)
PENALTY = 0.1         # actor_rollout_ref.actor.invalid_action_penalty_coef of the same scripts
RESPONSE_LEN = 5      # response tokens per row (small: the file is committed)

# (name, prompt groups, trajectories per group, max steps, observations per group, history_length, alpha)
# history_length 2 and 4 are the scripts' two settings, alpha 1.0 their default; few observations per group make
# histories repeat across trajectories and steps
BATCHES = [
    ("g2_k2", 4, 2, 6, 2, 2, 1.0),
    ("g4_k2", 3, 4, 7, 3, 2, 1.0),
    ("g8_k2", 2, 8, 8, 3, 2, 1.0),
    ("g8_k4", 2, 8, 10, 2, 4, 1.0),
    ("g6_k2_alpha0", 2, 6, 6, 2, 2, 0.0),
    ("g6_k3_alpha2", 2, 6, 8, 2, 3, 2.0),
    ("g5_k1_one_room", 2, 5, 6, 1, 1, 1.0),         # one observation after the start: long equal histories
    ("g1_k2", 3, 1, 5, 2, 2, 1.0),                  # one trajectory per group: repeats within a trajectory only
]


def make_rows(rng: np.random.Generator, groups: int, trajs: int, max_steps: int, n_obs: int):
    """Rows in the order ``TrajectoryCollector.gather_rollout_data`` emits them: trajectory after trajectory, each
    trajectory's steps in order (agent_system/multi_turn_rollout/rollout_loop.py); HGPO's trainer computes the
    advantages before ``adjust_batch`` and ``_balance_batch`` touch the rows."""
    rows = []
    for g in range(groups):
        uid = str(uuid.UUID(int=int(rng.integers(1 << 62))))
        for _ in range(trajs):
            traj_uid = str(uuid.UUID(int=int(rng.integers(1 << 62))))
            length = int(rng.integers(1, max_steps + 1))
            won = bool(rng.random() < 0.5)
            for t in range(length):
                obs = f"g{g} start" if t == 0 else f"g{g} room {int(rng.integers(n_obs))}"
                reward = 10.0 if (won and t == length - 1) else 0.0
                valid = bool(rng.random() < 0.85)
                rows.append(dict(uid=uid, traj_uid=traj_uid, step=t, anchor_obs=obs, reward=reward, valid=valid))
    return rows


def inputs(rows, rng: np.random.Generator, core_hgpo):
    """The inputs as verl-agent's HGPO trainer builds them: GiGPO's (``make_sample.verl_agent_inputs``), with the step
    returns from the HGPO recipe's own ``compute_step_discounted_returns``."""
    return verl_agent_inputs(rows, rng, core_hgpo, response_len=RESPONSE_LEN)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-agent", required=True, help="folder holding core_hgpo.py and the verl stub")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=54)
    args = ap.parse_args()
    sys.path.insert(0, args.verl_agent)
    import core_hgpo  # verl-agent's recipe/hgpo/core_hgpo.py, unchanged

    rng = np.random.default_rng(args.seed)
    out = {"names": np.array([b[0] for b in BATCHES]), "gamma": np.float64(GAMMA), "penalty": np.float64(PENALTY)}
    for name, groups, trajs, max_steps, n_obs, history_length, alpha in BATCHES:
        inp = inputs(make_rows(rng, groups, trajs, max_steps, n_obs), rng, core_hgpo)
        for mode in ("mean_std_norm", "mean_norm"):
            adv, ret = core_hgpo.compute_hgpo_outcome_advantage(
                token_level_rewards=inp["token_level_rewards"].clone(), step_rewards=inp["step_rewards"].clone(),
                response_mask=inp["response_mask"], anchor_obs=inp["anchor_obs"], index=inp["index"],
                traj_index=inp["traj_index"], history_length=history_length, mode=mode,
                length_weight_alpha=alpha, base_group=False)
            out[f"{name}/{mode}/advantages"] = adv.numpy()
        out[f"{name}/history_length"] = np.int64(history_length)
        out[f"{name}/alpha"] = np.float64(alpha)
        for k, v in inp.items():
            v = v.numpy() if isinstance(v, torch.Tensor) else v
            out[f"{name}/{k}"] = v.astype(str) if v.dtype == object else v
    np.savez_compressed(args.out, **out)
    print(f"wrote {args.out}: " + ", ".join(f"{b[0]} ({len(out[b[0] + '/index'])} rows)" for b in BATCHES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
