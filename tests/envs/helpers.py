"""A tiny real TextEnv for pool and base-class tests: count to a target, with failure modes on demand.

Actions: "inc" adds one to a counter (win at ``target``); "sleep S" sleeps S seconds (a hang);
"raise" raises inside ``_step`` (an env bug); "exit" kills the hosting process (a crash); anything else
is a no-op. Tasks: split "train" has 5 tasks (target = 2 + index), "eval" has 3.
"""
from __future__ import annotations

import os
import time

from envs.base import SUCCESS_REWARD, TextEnv


class CounterEnv(TextEnv):
    env_name = "counter"
    default_max_steps = 8
    splits = ("train", "eval")
    eval_splits = ("eval",)

    def num_tasks(self, split):
        return {"train": 5, "eval": 3}[self.check_split(split)]

    def task_family_of(self, split, index):
        return "even" if index % 2 == 0 else "odd"

    def _info(self, won=False):
        return {
            "task": f"count to {self.target}",
            "task_family": self.family,
            "admissible_actions": ["inc"],
            "won": won,
            "anchor_obs": self.obs,
            "state_key": ("counter", self.target, self.count),
            "raw_score": None,
        }

    def _reset(self, seed, options):
        split, index = self.resolve_task(seed, options)
        self.target, self.count, self.seed = 2 + index, 0, seed
        self.family = self.task_family_of(split, index)
        self.obs = f"count 0 (seed {seed}, target {self.target})"
        return self.obs, self._info()

    def _step(self, action):
        if action == "inc":
            self.count += 1
        elif action.startswith("sleep "):
            time.sleep(float(action.split()[1]))
        elif action == "raise":
            raise ValueError("boom")
        elif action == "exit":
            os._exit(3)
        else:
            self.obs = "Nothing happens."
            info = self._info()
            info["noop"] = True
            return self.obs, 0.0, False, info
        won = self.count >= self.target
        self.obs = f"count {self.count}"
        return self.obs, (SUCCESS_REWARD if won else 0.0), won, self._info(won)

    def _noop_observation(self, reason):
        self.obs = f"Nothing happens ({reason})."
        return self.obs

    def _current_info(self):
        return self._info()

    def expert_action(self):
        return "inc"
