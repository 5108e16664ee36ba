"""Prompt builders: how a model sees one step of an environment (docs/protocol.md, "Agent loop").

One user message per step, no system prompt, for the tokenizer's chat template (generation prompt
appended by the caller). The message holds, in order [protocol; wording ours]:

1. a role line for the environment and the task (TextCraft: the crafting commands of the first
   observation too, which would otherwise leave the window after ``history_length`` steps [choice]);
2. how many steps were already taken;
3. the last ``history_length`` (= 2 [GiGPO]) (observation, executed action) pairs, oldest first
   (absent on the first step; reasoning text is never kept);
4. the current observation;
5. the admissible actions, quoted, one per line (only where the env has them);
6. the instruction: reason inside ``<think> </think>``, then one action inside ``<action> </action>``.

Length bound [choice]: a prompt never exceeds ``max_chars`` characters (or ``max_tokens`` as counted by
``count_tokens``, e.g. ``lambda s: len(tokenizer(s).input_ids)``). When it would, it is shortened in this
order until it fits, each cut leaving a visible marker: (a) drop history pairs, oldest first; (b) cut the
current observation from its start (oldest text), keeping its end; (c) cut the admissible list from its
end; (d) cut the task text (and TextCraft's recipe block) from its start. If the fixed parts alone
(role line, step count, instruction) exceed the budget, ``build`` raises ``ValueError`` naming the
budget and the minimum it needs.

Usage with an env (the rollout keeps one ``Transcript`` per live env)::

    builder = get_prompt_builder("alfworld", PromptConfig(max_tokens=2048, count_tokens=n_tokens))
    transcript = Transcript.start(obs, info)
    messages = builder.messages(transcript)          # [{"role": "user", "content": ...}]
    ... generate, project ...
    transcript.record(action, next_obs, next_info)   # only the executed action is kept
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

__all__ = [
    "PromptConfig",
    "PromptBuilder",
    "Transcript",
    "PROMPT_BUILDERS",
    "get_prompt_builder",
    "build_messages",
    "HISTORY_MARKER",
    "CUT_MARKER",
    "PROMPT_FORMATS",
    "VerlAgentPromptBuilder",
    "VERL_AGENT_BUILDERS",
]

logger = logging.getLogger(__name__)

#: replaces history pairs dropped for length
HISTORY_MARKER = "[{n} earlier step(s) omitted to fit the prompt length]"
#: starts a text whose beginning was cut for length
CUT_MARKER = "[... earlier text cut to fit the prompt length ...] "
_LIST_MARKER = "[... {n} more action(s) not shown ...]"


@dataclass
class PromptConfig:
    """How much context a prompt carries.

    history_length: (observation, action) pairs of the recent past shown [GiGPO: 2].
    max_chars: hard bound on the message length in characters (used when ``max_tokens`` is None).
    max_tokens: bound in tokens as counted by ``count_tokens`` (protocol: 2048 ALFWorld / TextCraft,
        4096 WebShop, minus what the chat template adds: set ``reserve_tokens``).
    count_tokens: callable str -> int (e.g. a tokenizer's length); required with ``max_tokens``.
    reserve_tokens: tokens kept free for the chat template around the message.
    """

    history_length: int = 2
    max_chars: int = 12_000
    max_tokens: int | None = None
    count_tokens: Callable[[str], int] | None = field(default=None, repr=False)
    reserve_tokens: int = 0

    def __post_init__(self):
        if not isinstance(self.history_length, int) or self.history_length < 0:
            raise ValueError(f"PromptConfig.history_length={self.history_length!r} must be an integer >= 0")
        if self.max_tokens is not None:
            if self.count_tokens is None:
                raise ValueError("PromptConfig.max_tokens needs count_tokens (e.g. lambda s: len(tok(s).input_ids))")
            if self.max_tokens - self.reserve_tokens < 1:
                raise ValueError(
                    f"PromptConfig: max_tokens={self.max_tokens} minus reserve_tokens={self.reserve_tokens} leaves no "
                    "room"
                )
        elif not isinstance(self.max_chars, int) or self.max_chars < 1:
            raise ValueError(f"PromptConfig.max_chars={self.max_chars!r} must be a positive integer")

    def size(self, text: str) -> int:
        return self.count_tokens(text) if self.max_tokens is not None else len(text)

    @property
    def budget(self) -> int:
        return self.max_tokens - self.reserve_tokens if self.max_tokens is not None else self.max_chars


@dataclass
class Transcript:
    """What the agent has seen of one episode: built from env ``(obs, info)`` and executed actions."""

    task: str
    first_observation: str
    observation: str
    admissible: list[str]
    step: int = 0
    pairs: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def start(cls, obs: str, info: Mapping[str, Any]) -> Transcript:
        return cls(
            task=str(info.get("task", "")),
            first_observation=str(obs),
            observation=str(obs),
            admissible=[str(a) for a in (info.get("admissible_actions") or [])],
            step=int(info.get("step", 0) or 0),
        )

    def record(self, action: str, obs: str, info: Mapping[str, Any]) -> None:
        """The env answered ``action`` (the executed one, never the reasoning) with ``obs``."""
        self.pairs.append((self.observation, str(action)))
        self.observation = str(obs)
        self.admissible = [str(a) for a in (info.get("admissible_actions") or [])]
        self.step = int(info.get("step", self.step + 1))


def _cut_start(text: str, keep: int) -> str:
    """``text`` shortened to about ``keep`` characters by dropping its beginning (marker added)."""
    if keep >= len(text):
        return text
    return CUT_MARKER + text[len(text) - max(keep, 0):]


@dataclass(frozen=True)
class PromptBuilder:
    """The wording of one environment's prompt (see module docstring for the layout)."""

    env_name: str
    role: str
    action_hint: str
    keep_first_observation: bool = False
    first_observation_label: str = "Initial observation"

    # ------------------------------------------------------------------ sections
    def _head(self, t: Transcript, task: str, first_obs: str | None) -> str:
        lines = [self.role, f"Your task: {task}" if task else "Your task is given in the observation below."]
        if first_obs is not None:
            lines.append(f"{self.first_observation_label}:\n{first_obs}")
        return "\n".join(lines)

    @staticmethod
    def _steps(t: Transcript) -> str:
        return f"You have taken {t.step} step(s) so far."

    @staticmethod
    def _history(pairs: Sequence[tuple[str, str]], first_step: int, dropped: int) -> str:
        if not pairs and not dropped:
            return ""
        out = ["Your most recent steps (oldest first):"]
        if dropped:
            out.append(HISTORY_MARKER.format(n=dropped))
        for k, (obs, act) in enumerate(pairs):
            n = first_step + k
            out.append(f"[Step {n}] You saw: {obs}\n[Step {n}] You did: {act}")
        return "\n".join(out)

    @staticmethod
    def _current(obs: str) -> str:
        return f"What you see now:\n{obs}"

    @staticmethod
    def _admissible(actions: Sequence[str], hidden: int) -> str:
        if not actions and not hidden:
            return ""
        out = ["Actions you can take now:"] + [f"'{a}'" for a in actions]
        if hidden:
            out.append(_LIST_MARKER.format(n=hidden))
        return "\n".join(out)

    def _instruction(self, has_list: bool) -> str:
        pick = "one of the actions listed above" if has_list else "one action"
        return (
            f"{self.action_hint}\nFirst think about the situation step by step inside <think> </think>. "
            f"Then give {pick}, exactly as written, inside <action> </action>."
        )

    def _render(self, t: Transcript, st: dict) -> str:
        pairs = st["pairs"]
        first_step = t.step - len(pairs) + 1
        parts = [
            self._head(t, st["task"], st["first"]),
            self._steps(t),
            self._history(pairs, first_step, st["dropped"]),
            self._current(st["obs"]),
            self._admissible(st["actions"], st["hidden"]),
            self._instruction(bool(st["actions"]) or bool(st["hidden"])),
        ]
        return "\n\n".join(p for p in parts if p)

    # ------------------------------------------------------------------ public
    def build(self, t: Transcript, config: PromptConfig | None = None) -> str:
        """The message text for the current step, within ``config``'s length bound."""
        cfg = config or PromptConfig()
        budget = cfg.budget
        k = min(cfg.history_length, len(t.pairs))
        st = {
            "task": t.task,
            # shown once the first observation is no longer the current one
            "first": t.first_observation if self.keep_first_observation and t.pairs else None,
            "pairs": list(t.pairs[len(t.pairs) - k:]) if k else [],
            "dropped": 0,
            "obs": t.observation,
            "actions": list(t.admissible),
            "hidden": 0,
        }

        def fits() -> bool:
            return cfg.size(self._render(t, st)) <= budget

        if fits():
            return self._render(t, st)
        while st["pairs"] and not fits():  # (a) history, oldest first
            st["pairs"].pop(0)
            st["dropped"] += 1

        def cut(key: str) -> None:  # keep the longest end of st[key] that fits (binary search)
            source = st[key]
            if source is None or fits():
                return
            lo, hi = 0, len(source)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                st[key] = _cut_start(source, mid)
                if fits():
                    lo = mid
                else:
                    hi = mid - 1
            st[key] = _cut_start(source, lo)

        cut("obs")  # (b) the current observation from its start
        while st["actions"] and not fits():  # (c) the admissible list from its end
            n = max(1, len(st["actions"]) // 4)
            st["hidden"] += n
            st["actions"] = st["actions"][:-n]
        cut("first")  # (d) TextCraft's recipe block, then the task, from their start
        cut("task")
        text = self._render(t, st)
        if cfg.size(text) > budget:
            unit = "tokens" if cfg.max_tokens is not None else "characters"
            raise ValueError(
                f"prompt budget {budget} {unit} is below what the fixed parts of the {self.env_name} prompt "
                f"need ({cfg.size(text)}); raise PromptConfig.max_tokens / max_chars"
            )
        return text

    def messages(self, t: Transcript, config: PromptConfig | None = None) -> list[dict[str, str]]:
        """Chat messages for the tokenizer's chat template: one user message, no system prompt."""
        return [{"role": "user", "content": self.build(t, config)}]


PROMPT_BUILDERS: dict[str, PromptBuilder] = {
    "alfworld": PromptBuilder(
        env_name="alfworld",
        role="You are a household robot in a text world (ALFWorld). You move between furniture and "
        "appliances, open and close them, pick objects up and put them down, and can heat, cool, clean or "
        "switch things on.",
        action_hint="Choose the action that brings you closest to finishing the task.",
    ),
    "textcraft": PromptBuilder(
        env_name="textcraft",
        role="You are playing a text version of Minecraft crafting (TextCraft). Commands: 'get N item' fetches "
        "base items, 'craft N item using k a, m b' must match one of the crafting commands exactly (a "
        "generic ingredient such as 'planks' must be replaced by a concrete one such as 'oak planks'), "
        "'inventory' lists what you hold.",
        action_hint="Choose the next command that moves you towards crafting the goal item.",
        keep_first_observation=True,
        first_observation_label="Crafting commands you were given",
    ),
    "webshop": PromptBuilder(
        env_name="webshop",
        role="You are shopping on a web store (WebShop) for a customer. Use 'search[your query]' on the search "
        "page and 'click[button or item]' to open results, pick options and buy.",
        action_hint="Choose the action that best finds and buys the product matching every requirement.",
    ),
    # the finite worlds of envs/finite (FiniteCraft-v0 / FiniteRooms-v0): their action strings are exact, so the
    # wording says so; the recipe book of the craft world is in its first observation, kept like TextCraft's
    "finitecraft": PromptBuilder(
        env_name="finitecraft",
        role="You are crafting items in a text world. Commands: 'get 1 item' fetches a base item, 'craft 1 item using "
        "...' crafts it when you hold every ingredient and must repeat a line of the recipe book exactly, "
        "'inventory' lists what you hold.",
        action_hint="Choose the next command that moves you towards crafting the goal item.",
        keep_first_observation=True,
        first_observation_label="The recipe book",
    ),
    "finiterooms": PromptBuilder(
        env_name="finiterooms",
        role="You are a household robot in a text world of furniture and appliances. Commands: 'go to X', 'open X', "
        "'take Y from X', 'put Y in X', 'clean Y', 'look', with the names exactly as the room shows them.",
        action_hint="Choose the action that brings you closest to finishing the task.",
    ),
}


# ====================================================================== verl-agent's prompts
#: The prompt formats a run can choose (``rollout.prompt_format``): ``bipace``, this module's wording above, for every
#: env; ``verl_agent``, verl-agent's own prompts (``agent_system/environments/prompts/{alfworld,webshop}.py`` and the
#: env managers of ``agent_system/environments/env_manager.py`` at commit 796ed31), for the envs it has.
PROMPT_FORMATS = ("bipace", "verl_agent")

_VA_THINK = ("You should first reason step-by-step about the current situation{more}. This reasoning process MUST be "
             "enclosed within <think> </think> tags. \nOnce you've finished your reasoning, you should choose an "
             "admissible action for current step and present it within <action> </action> tags.\n")
_VA_HISTORY = ("Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
               "{history_length} observations and the corresponding actions you took: {action_history}\n")
# verl-agent writes "e\u2011commerce" with a non-breaking hyphen; kept, since the tokens differ
_VA_SHOP = "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment."
_VA_SHOP_THINK = _VA_THINK.format(more=", then think carefully which admissible action best advances the shopping goal")
_VA_TEMPLATES = {
    ("alfworld", False): ("\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
                          "Your current observation is: {current_observation}\n"
                          "Your admissible actions of the current situation are: [{actions}].\n\n"
                          "Now it's your turn to take an action.\n" + _VA_THINK.format(more="")),
    ("alfworld", True): ("\nYou are an expert agent operating in the ALFRED Embodied Environment. Your task is to: "
                         "{task_description}\n" + _VA_HISTORY +
                         "You are now at step {current_step} and your current observation is: {current_observation}\n"
                         "Your admissible actions of the current situation are: [{actions}].\n\n"
                         "Now it's your turn to take an action.\n" + _VA_THINK.format(more="")),
    ("webshop", False): ("\n" + _VA_SHOP + " \nYour task is to: {task_description}.\n"
                         "Your current observation is: {current_observation}.\n"
                         "Your admissible actions of the current situation are: \n[\n{actions}\n].\n\n"
                         "Now it's your turn to take one action for the current step.\n" + _VA_SHOP_THINK),
    ("webshop", True): ("\n" + _VA_SHOP + "\nYour task is to: {task_description}.\n" + _VA_HISTORY +
                        "You are now at step {current_step} and your current observation is: {current_observation}.\n"
                        "Your admissible actions of the current situation are: \n[\n{actions}\n].\n\n"
                        "Now it's your turn to take one action for the current step.\n" + _VA_SHOP_THINK),
}
_VA_TASK = "Your task is to: "
_VA_SEP = " [SEP] "
#: verl-agent's WebShop manager falls back to the prompt without history above this many characters
VA_WEBSHOP_MAX_CHARS = 13_000


@dataclass(frozen=True)
class VerlAgentPromptBuilder:
    """verl-agent's prompt for ALFWorld or WebShop, rendered from a ``Transcript`` (``rollout.prompt_format:
    verl_agent``): one user message, the text its env manager builds, character for character.

    * **First step** (or ``history_length`` 0): the template without history; ALFWorld's shows the observation as it
      is (the task is inside it), WebShop's the task and the page.
    * **Later steps**: the task, ``step_count`` steps taken, the last ``history_length`` steps as
      ``[Observation k: '<obs>', Action k: '<action>']`` lines (k counted from 1), the current step number and
      observation, the admissible actions.
    * **ALFWorld** lists the admissible commands quoted, joined by a newline and a space, without ``help``; the task is
      the text after "Your task is to: " in the first observation.
    * **WebShop** shows each page from after the instruction, its ``[SEP]`` parts quoted (pages without the
      instruction, e.g. the last one, as they are), in the history too; the task is the instruction (the third
      ``[SEP]`` part of the first page); the actions are ``search[<your query>]`` and ``click[search]`` on the search
      page (the original's search bar and its button), ``click[<element>]`` elsewhere, each quoted and followed by a
      comma, one per line; a prompt with history longer than 13,000 characters is replaced by the one without.

    What differs from verl-agent: the history's action is the action this repo executed (for a malformed response
    verl-agent keeps the response's last 20 or 30 lower-cased characters); no length bound is applied here beyond
    WebShop's 13,000 characters (verl-agent truncates at ``data.max_prompt_length``; here ``encode_prompt``'s hard cut
    applies and is counted in ``rollout/prompt_cut_rate``).
    """

    env_name: str

    def _task(self, t: Transcript) -> str:
        first = t.first_observation
        if self.env_name == "alfworld":
            i = first.find(_VA_TASK)
            return first[i + len(_VA_TASK):].strip() if i != -1 else t.task
        parts = first.split(_VA_SEP)
        return parts[2] if len(parts) > 2 and parts[1] == "Instruction:" else t.task

    def _page(self, obs: str, task: str) -> str:
        """WebShop: the parts after the instruction, quoted (verl-agent's ``format_obs``); ALFWorld: as it is."""
        if self.env_name != "webshop":
            return obs
        parts = obs.split(_VA_SEP)
        if task not in parts:
            return obs
        return _VA_SEP.join(f"'{p}'" for p in parts[parts.index(task) + 1:])

    def _actions(self, t: Transcript) -> str:
        if self.env_name == "alfworld":
            return "\n ".join(f"'{a}'" for a in t.admissible if a != "help")
        acts = list(t.admissible)
        if "search[<your query>]" in acts:  # the search page: the original lists its bar and its button
            acts.append("click[search]")
        return "\n".join(f"'{a}'," for a in acts)

    def build(self, t: Transcript, config: PromptConfig | None = None) -> str:
        cfg = config or PromptConfig()
        task = self._task(t)
        obs = self._page(t.observation, task)
        actions = self._actions(t)
        short = _VA_TEMPLATES[(self.env_name, False)].format(task_description=task, current_observation=obs,
                                                             actions=actions)
        if not t.pairs or cfg.history_length <= 0:
            return short
        k = min(cfg.history_length, len(t.pairs))
        first = len(t.pairs) - k + 1
        history = "\n".join(f"[Observation {first + j}: '{self._page(o, task)}', Action {first + j}: '{a}']"
                             for j, (o, a) in enumerate(t.pairs[-k:]))
        text = _VA_TEMPLATES[(self.env_name, True)].format(
            task_description=task, step_count=len(t.pairs), history_length=k, action_history=history,
            current_step=len(t.pairs) + 1, current_observation=obs, actions=actions)
        if self.env_name == "webshop" and len(text) > VA_WEBSHOP_MAX_CHARS:
            return short
        return text

    def messages(self, t: Transcript, config: PromptConfig | None = None) -> list[dict[str, str]]:
        """Chat messages for the tokenizer's chat template: one user message, no system prompt (as verl-agent)."""
        return [{"role": "user", "content": self.build(t, config)}]


VERL_AGENT_BUILDERS = {name: VerlAgentPromptBuilder(name) for name in ("alfworld", "webshop")}


_GENERIC = PromptBuilder(
    env_name="text",
    role="You are an agent acting in a text environment.",
    action_hint="Choose the action that best advances the task.",
)


def get_prompt_builder(env: str, prompt_format: str = "bipace") -> PromptBuilder | VerlAgentPromptBuilder:
    """The builder for an env name or gymnasium id ("alfworld", "ALFWorld-v0", ...): ``PROMPT_BUILDERS`` is keyed by
    the id's part before "-", lower-cased. Any other text env that follows the contract gets a generic wording, with
    a warning logged once per name (``envs/README.md``, "Adding an environment"). ``prompt_format="verl_agent"``:
    verl-agent's prompt (``VerlAgentPromptBuilder``), for ALFWorld and WebShop only (``ValueError`` otherwise)."""
    key = str(env).split("-")[0].lower()
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt format {prompt_format!r} is not one of {', '.join(PROMPT_FORMATS)}")
    if prompt_format == "verl_agent":
        if key not in VERL_AGENT_BUILDERS:
            raise ValueError(f"prompt format 'verl_agent' exists for {' and '.join(VERL_AGENT_BUILDERS)} only "
                             f"(verl-agent has no {env!r} prompt); use rollout.prompt_format=bipace")
        return VERL_AGENT_BUILDERS[key]
    builder = PROMPT_BUILDERS.get(key)
    if builder is None:
        _warn_generic(key)
        return _GENERIC
    return builder


@cache
def _warn_generic(key: str) -> None:
    logger.warning("no prompt builder for %r in agents.prompts.PROMPT_BUILDERS: its prompts use the generic wording "
                   "(%r); add a builder to describe the environment to the model", key, _GENERIC.role)


def build_messages(env: str, transcript: Transcript, config: PromptConfig | None = None) -> list[dict[str, str]]:
    """Shortcut: ``get_prompt_builder(env).messages(transcript, config)``."""
    return get_prompt_builder(env).messages(transcript, config)
