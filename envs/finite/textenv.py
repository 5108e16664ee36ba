"""The finite MDPs as gymnasium text environments (``envs.base.TextEnv``), for agents and rollouts.

The benchmark samples the MDP in vectorised form (``groundtruth.sampling``); this wrapper plays the very
same dynamics and renderer one step at a time behind the repo's environment contract, so a language-model
agent can be run on a world whose true values are known (``info["state_key"]`` is the state index).

    env = FiniteMDPEnv("rooms", surface="high", alias=0.5)
    obs, info = env.reset(seed=0, options={"task_index": 2})
    obs, reward, terminated, truncated, info = env.step("go to fridge 1")
"""
from __future__ import annotations

import random

import numpy as np

from envs.base import TextEnv

from .families import make_family
from .mdp import TabularMDP, build_mdp
from .text import surface_preset

__all__ = ["FiniteMDPEnv", "CraftEnv", "RoomsEnv"]


class FiniteMDPEnv(TextEnv):
    """One family's MDP as a ``TextEnv``. Unknown action strings are no-ops (the malformed event).

    ``splits``: one split, ``train``, whose tasks are the family's tasks. ``admissible_actions``: the actions
    whose preconditions hold (``rooms``, ALFWorld-like) or ``[]`` (``craft``, TextCraft has no list).
    """

    env_name = "finite_mdp"
    default_max_steps = 50
    splits = ("train",)
    eval_splits = ("train",)

    def __init__(self, family: str = "rooms", surface: str = "high", alias: float = 0.5, max_steps: int | None = None,
                 render_mode: str | None = None, **family_kwargs):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.mdp: TabularMDP = build_mdp(make_family(family, surface_preset(surface), alias=alias, **family_kwargs),
                                         horizon=self.max_steps)
        self.family_name = family
        self._expert = None
        self._s = 0
        self._rng = random.Random(0)
        self._last_obs_text = ""

    # ------------------------------------------------------------------ contract helpers
    def num_tasks(self, split: str = "train") -> int:
        self.check_split(split)
        return self.mdp.num_tasks

    def task_family_of(self, split: str, k: int) -> str:
        self.check_split(split)
        return self.family_name

    def expert_action(self) -> str:
        if self._expert is None:
            self._expert = self.mdp.optimal_actions()
        return self.mdp.actions[int(self._expert[min(self._t, self.mdp.horizon - 1), self._s])]

    # ------------------------------------------------------------------ hooks
    def _info(self, won: bool) -> dict:
        mdp, s = self.mdp, self._s
        fam = mdp.family
        adm = [mdp.actions[a] for a in np.flatnonzero(mdp.admissible[s])] if self.family_name == "rooms" else []
        return {"task": fam.task_text(mdp.states[s]), "task_family": self.family_name, "admissible_actions": adm,
                "won": bool(won), "anchor_obs": self._last_obs_text, "state_key": int(s)}

    def _reset(self, seed, options):
        _, k = self.resolve_task(seed, options)  # validates split and task_index (envs.base contract)
        self._s = int(self.mdp.start_states[k])
        self._rng = random.Random(int(self.np_random.integers(2**63)))
        obs = self.mdp.family.render(self.mdp.events[self.mdp.start_events[k]], self.mdp.states[self._s], 0, self._rng)
        self._last_obs_text = obs
        return obs, self._info(False)

    def _step(self, action: str):
        mdp = self.mdp
        a = mdp.action_of(action)  # the parser the ground truth uses too (envs.finite.mdp, "Parsing")
        if a is None:  # not an action of this world: state unchanged, the "not understood" message
            event, ns, r, done, noop = mdp.events.index(("malformed",)), self._s, 0.0, False, True
        else:
            outs = mdp.outcomes(self._s, a)
            u, acc, pick = self.np_random.random(), 0.0, outs[-1]
            for out in outs:
                acc += out[0]
                if u < acc:
                    pick = out
                    break
            _, ns, r, done, event = pick
            noop = not bool(mdp.admissible[self._s, a])
        self._s = int(ns)
        obs = mdp.family.render(mdp.events[event], mdp.states[self._s], self._t + 1, self._rng)
        self._last_obs_text = obs
        info = self._info(done)
        info["noop"] = noop
        return obs, float(r), bool(done), info

    def _noop_observation(self, reason: str) -> str:
        return f"Nothing happens (the action was {reason})."

    def _current_info(self) -> dict:
        return self._info(False)


class CraftEnv(FiniteMDPEnv):
    """``FiniteCraft-v0``: the TextCraft-like family (``envs`` registers the id)."""

    env_name = "finitecraft"

    def __init__(self, surface: str = "high", alias: float = 0.5, max_steps: int | None = None,
                 render_mode: str | None = None, **family_kwargs):
        super().__init__("craft", surface=surface, alias=alias, max_steps=max_steps, render_mode=render_mode,
                         **family_kwargs)


class RoomsEnv(FiniteMDPEnv):
    """``FiniteRooms-v0``: the ALFWorld-like family (``envs`` registers the id)."""

    env_name = "finiterooms"

    def __init__(self, surface: str = "high", alias: float = 0.5, max_steps: int | None = None,
                 render_mode: str | None = None, **family_kwargs):
        super().__init__("rooms", surface=surface, alias=alias, max_steps=max_steps, render_mode=render_mode,
                         **family_kwargs)
