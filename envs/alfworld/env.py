"""ALFWorld (text, TextWorld engine) behind the repo's ``TextEnv`` interface.

Games: the official ``json_2.1.1`` layout (``alfworld-download``) or games our generator wrote
(``python -m envs.alfworld.generate``); see ``envs.alfworld.data`` for which folder is used. Splits
``train`` (training), ``valid_seen`` (in-distribution evaluation) and ``valid_unseen`` (held-out rooms,
out of distribution) [ALFWorld]. ``task_family`` is one of ``pick, look, clean, heat, cool, pick2``.

Each step [ALFWorld/GiGPO]: the observation is the engine's feedback ("You arrive at cabinet 1. ..."); the
first observation is the game's introduction ending with "Your task is to: ...". ``admissible_actions``
is the engine's sorted admissible command list without "help" [GiGPO]. A command outside it is answered
"Nothing happens." (``noop=True``). Reward 10 on the winning step (the goal's PDDL condition holds),
then ``terminated``; horizon 50 (``max_steps``) sets ``truncated``.

``state_key`` = ``("alfworld", game, digest)`` where ``digest`` hashes the sorted PDDL facts that
actions can change (``state_facts()`` returns them readable): two states share a key iff the engine's
dynamic facts are equal. Some of those facts record the route rather than the world (negated literals such as
``not_atlocation(agent1, loc)``, and ``checked(receptacle)``); ``state_key="physical"`` hashes the others only, so
two rows in the same place, holding the same things, with the same receptacles open, share a key whatever route
led there (``experiments.grouping_diagnostic state-facts`` measures the difference). Diagnostics only: no agent reads
it.

The expert is ALFWorld's hand-coded expert (``expert=True``, the default), followed through every step
whatever the agent does, as ALFWorld's DAgger training does; it costs a few ms per step, so rollouts
that never ask for it can pass ``expert=False``.
"""
from __future__ import annotations

import hashlib
import re

from envs.alfworld.data import (
    SPLITS,
    ALFWorldDataError,
    GameEntry,
    fill_instructions,
    resolve_data_root,
    scan_split,
)
from envs.alfworld.engine import NOTHING_HAPPENS, Game, install_speedups
from envs.base import SUCCESS_REWARD, TextEnv

__all__ = ["ALFWorldEnv", "STATE_KEYS", "is_bookkeeping", "predicate"]

_TASK_RE = re.compile(r"Your task is to:\s*(.*?)\s*$", re.S)
_PRED = re.compile(r"\s*(\w+)\s*\(")
STATE_KEYS = ("full", "physical")


def predicate(fact: str) -> str:
    """The predicate name of a fact string such as ``inreceptacle(apple_1,fridge_1)``."""
    m = _PRED.match(fact)
    return m.group(1) if m else fact


def is_bookkeeping(fact: str) -> bool:
    """A negated literal (``not_*``) or ``checked(...)``: facts that record the path rather than the world."""
    p = predicate(fact)
    return p.startswith("not_") or p == "checked"


class ALFWorldEnv(TextEnv):
    """ALFWorld text games (see module docstring).

    Args:
        max_steps: horizon (default 50 [GiGPO]).
        data_path: folder in the official layout; default: resolved as in ``envs.alfworld.data``.
        expert: follow the hand-coded expert every step (needed by ``expert_action``).
        speedups: install the engine memoisations of ``envs.alfworld.engine`` (no behaviour change).
        state_key: ``"full"`` (every dynamic fact, the default) or ``"physical"`` (without the route's bookkeeping
            facts, ``is_bookkeeping``): what ``info["state_key"]`` identifies.
    """

    env_name = "alfworld"
    default_max_steps = 50
    splits = SPLITS
    eval_splits = ("valid_seen", "valid_unseen")

    def __init__(self, max_steps: int | None = None, data_path: str | None = None, expert: bool = True,
                 speedups: bool = True, render_mode: str | None = None, state_key: str = "full"):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if state_key not in STATE_KEYS:
            raise ValueError(f"env.kwargs.state_key={state_key!r}: ALFWorld's state key is one of {STATE_KEYS} "
                             f"('full': every dynamic PDDL fact; 'physical': without negated literals and checked)")
        self.state_key_mode = state_key
        if speedups:
            install_speedups()
        self.data_root, self.data_source = resolve_data_root(data_path)
        self._games: dict[str, list[GameEntry]] = {s: scan_split(self.data_root, s) for s in SPLITS}
        if not any(self._games.values()):
            raise ALFWorldDataError(f"no playable ALFWorld games under {self.data_root / 'json_2.1.1'} "
                                    f"(need traj_data.json + game.tw-pddl with \"solvable\": true).\n"
                                    + fill_instructions(self.data_root))
        self.expert_enabled = bool(expert)
        self._game = Game(expert=self.expert_enabled)
        self._entry: GameEntry | None = None
        self._task_text = ""
        self._obs = ""

    # ------------------------------------------------------------------ tasks
    def games(self, split: str) -> list[GameEntry]:
        return list(self._games[self.check_split(split)])

    def num_tasks(self, split: str) -> int:
        return len(self._games[self.check_split(split)])

    def task_family_of(self, split: str, index: int) -> str:
        return self._games[self.check_split(split)][index].family

    def resolve_task(self, seed, options):
        split = options.get("split", self.splits[0]) if isinstance(options, dict) else self.splits[0]
        if split in self._games and not self._games[split]:
            folder = self.data_root / "json_2.1.1" / split
            raise ALFWorldDataError(f"ALFWorld split {split!r} has no playable games in {folder}.\n"
                                    + fill_instructions(self.data_root))
        return super().resolve_task(seed, options)

    # ------------------------------------------------------------------ episode
    def _admissible(self) -> list[str]:
        return [c for c in self._game.state["admissible_commands"] if c != "help"]

    def state_facts(self) -> list[str]:
        """The current dynamic PDDL facts (sorted strings): all that ``state_key`` identifies by default; with
        ``state_key="physical"`` it identifies those that are not ``is_bookkeeping``."""
        return self._game.dynamic_facts()

    def _state_key(self):
        facts = self._game.dynamic_facts()
        if self.state_key_mode == "physical":
            facts = [f for f in facts if not is_bookkeeping(f)]
        digest = hashlib.blake2b("\n".join(facts).encode(), digest_size=12).hexdigest()
        return ("alfworld", self._entry.relpath, digest)

    def _info(self, won: bool) -> dict:
        return {
            "task": self._task_text,
            "task_family": self._entry.family,
            "admissible_actions": self._admissible(),
            "won": won,
            "anchor_obs": self._obs,
            "state_key": self._state_key(),
            "raw_score": None,
            "game": self._entry.relpath,
        }

    def _reset(self, seed: int, options: dict):
        split, index = self.resolve_task(seed, options)
        self._entry = self._games[split][index]
        self._game.load(self._entry.gamefile)
        state = self._game.reset(seed=seed)
        self._obs = str(state["feedback"]).strip()
        m = _TASK_RE.search(self._obs)
        self._task_text = m.group(1).rstrip(".") if m else ""
        return self._obs, self._info(False)

    def _step(self, action: str):
        state = self._game.step(action)
        self._obs = str(state["feedback"]).strip()
        won = bool(state["won"])
        info = self._info(won)
        info["noop"] = self._obs == NOTHING_HAPPENS
        return self._obs, (SUCCESS_REWARD if won else 0.0), won, info

    def _noop_observation(self, reason: str) -> str:
        self._obs = NOTHING_HAPPENS  # the anchor, as for any other rejected command
        return NOTHING_HAPPENS

    def _current_info(self) -> dict:
        return self._info(bool(self._game.state["won"]) if self._game.state is not None else False)

    # ------------------------------------------------------------------ expert
    def expert_action(self) -> str:
        """ALFWorld's hand-coded expert's next command ("look" when it has none, as ALFWorld does)."""
        if not self.expert_enabled:
            raise RuntimeError("ALFWorldEnv was built with expert=False; build it with expert=True to ask the expert")
        if self._game.state is None:
            raise RuntimeError("ALFWorldEnv.expert_action called before reset()")
        return self._game.expert_action

    def close(self):
        self._game.close()
