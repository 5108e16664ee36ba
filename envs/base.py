"""The interface every environment of this repo shares.

Each environment is a ``gymnasium.Env`` with text observations and text actions:

* ``reset(seed=..., options=...) -> (obs, info)``
* ``step(action) -> (obs, reward, terminated, truncated, info)``

``info`` always carries (``INFO_KEYS``):

==================== ===========================================================================
task                 the task text (goal / instruction)
task_family          ALFWorld's six families, TextCraft's goal depth ("depth2"), WebShop's category
admissible_actions   list[str], the actions the env accepts now (empty where it has no such list)
won                  bool, the task is solved
anchor_obs           the current observation without history or admissible list (GiGPO's anchor)
state_key            hashable identity of the true environment state (diagnostics only)
raw_score            float where the env has a graded score (WebShop), else None
noop                 bool, the last action was not understood or not applicable (state unchanged)
step                 steps taken so far in this episode
==================== ===========================================================================

Rewards follow the reference protocol: 10 on the step that solves the task, else 0. The invalid-format
penalty belongs to the estimator, not the env. Any action string, however malformed, is a normal step
answered with the env's no-op message: subclasses implement ``_step`` for cleaned, bounded strings only.
"""
from __future__ import annotations

import string
import unicodedata
from typing import Any

import gymnasium as gym
from gymnasium import spaces

__all__ = [
    "TEXT_CHARSET",
    "MAX_ACTION_CHARS",
    "MAX_OBS_CHARS",
    "SUCCESS_REWARD",
    "INFO_KEYS",
    "TextEnv",
    "clean_action",
]

#: printable ASCII: letters, digits, punctuation and space (gymnasium's default Text charset has no space)
TEXT_CHARSET = frozenset(string.ascii_letters + string.digits + string.punctuation + " \n")
#: an action longer than this is answered with the no-op message without reaching the game engine
MAX_ACTION_CHARS = 2000
MAX_OBS_CHARS = 100_000
SUCCESS_REWARD = 10.0
INFO_KEYS = ("task", "task_family", "admissible_actions", "won", "anchor_obs", "state_key", "raw_score", "noop", "step")


def clean_action(action: Any) -> str | None:
    """Normalise any object into an action string, or ``None`` when it cannot be one.

    Non-strings become ``None``; control characters become spaces; Unicode is NFKC-normalised; runs of
    whitespace collapse; the result is stripped. Strings longer than ``MAX_ACTION_CHARS`` give ``None``.
    """
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if not isinstance(action, str):
        return None
    if len(action) > MAX_ACTION_CHARS:
        return None
    action = unicodedata.normalize("NFKC", action)
    action = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in action)
    return " ".join(action.split())


class TextEnv(gym.Env):
    """Base class: time limit, action cleaning, info assembly. Subclasses implement the hooks below.

    Hooks
    -----
    ``_reset(seed, options) -> (obs, info)``
        start an episode; ``info`` must hold the task-level keys (task, task_family, ...).
    ``_step(action: str) -> (obs, reward, terminated, info)``
        one step with a cleaned, bounded action string (possibly empty).
    ``_noop_observation(reason: str) -> str``
        the text answered to an action that never reaches the engine (non-string, too long).
    ``_current_info() -> dict``
        the state-level keys of ``INFO_KEYS`` for the current state (used by the no-op path).
    """

    metadata = {"render_modes": ["ansi"]}
    env_name: str = "text"
    default_max_steps: int = 50

    def __init__(self, max_steps: int | None = None, render_mode: str | None = None):
        super().__init__()
        self.max_steps = int(max_steps if max_steps is not None else self.default_max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=TEXT_CHARSET)
        self._t = 0
        self._done = True
        self._last_obs = ""

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._done = False
        obs, info = self._reset(seed, dict(options or {}))
        self._last_obs = obs
        return obs, self._complete_info(info, noop=False)

    def step(self, action):
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step called after the episode ended; call reset() first")
        text = clean_action(action)
        if text is None:
            reason = "not a string" if not isinstance(action, (str, bytes)) else f"longer than {MAX_ACTION_CHARS} characters"
            obs, reward, terminated, info = self._noop_observation(reason), 0.0, False, self._current_info()
            info["noop"] = True
        else:
            obs, reward, terminated, info = self._step(text)
        self._t += 1
        truncated = (not terminated) and self._t >= self.max_steps
        self._done = bool(terminated or truncated)
        self._last_obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), self._complete_info(info, noop=info.get("noop", False))

    def render(self):
        return self._last_obs

    # ------------------------------------------------------------------ helpers
    def _complete_info(self, info: dict, noop: bool) -> dict:
        info = dict(info)
        info.setdefault("raw_score", None)
        info["noop"] = bool(noop)
        info["step"] = self._t
        missing = [k for k in INFO_KEYS if k not in info]
        if missing:
            raise RuntimeError(f"{type(self).__name__} returned info without keys {missing}")
        return info

    # ------------------------------------------------------------------ hooks
    def _reset(self, seed: int | None, options: dict) -> tuple[str, dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _noop_observation(self, reason: str) -> str:
        return f"Nothing happens (the action was {reason})."

    def _current_info(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError
