"""Engine doubles for rollout tests: small real ``RolloutEngine`` subclasses that return scripted text.

The thing under test is the rollout (``agents.rollout``), so these engines replace the model only: they
tokenise their text with the real tokenizer and record every ``generate`` call.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from agents.engines.base import Generation, RolloutEngine, SamplingConfig, check_generate_args


class ScriptedEngine(RolloutEngine):
    """``script(call, j, prompt_ids, seed) -> text`` or ``(text, finish_reason)`` for prompt j of call ``call``."""

    name = "scripted"

    def __init__(self, tokenizer, script: Callable[..., str | tuple[str, str]]):
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[list[list[int]]] = []  # prompts of each generate call
        self.seeds: list[list[int]] = []

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        seeds = check_generate_args(prompt_token_ids, sampling, seeds)
        call = len(self.calls)
        self.calls.append([list(p) for p in prompt_token_ids])
        self.seeds.append(list(seeds))
        out = []
        for j, (p, s) in enumerate(zip(prompt_token_ids, seeds)):
            res = self.script(call, j, list(p), s)
            text, finish = (res, "stop") if isinstance(res, str) else res
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] or [self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=list(ids), text=text, finish_reason=finish, logprobs=None))
        return out

    def update_weights(self, named_tensors) -> int:
        return 0


def tagged(action: str) -> str:
    return f"<think>I follow the plan.</think><action>{action}</action>"


class ExpertEngine(ScriptedEngine):
    """Answers each prompt with the env expert's next action in tags. Relies on the rollout's documented order:
    prompts come in ascending slot order of the live envs. ``play(slot) -> bool`` picks the envs the expert
    plays; the others get a response without tags (an invalid action)."""

    def __init__(self, tokenizer, pool, play: Callable[[int], bool] | None = None):
        super().__init__(tokenizer, self._answer)
        self.pool = pool
        self.play = play or (lambda slot: True)
        self._actions: list[str] = []

    def generate(self, prompt_token_ids, sampling, seeds=None):
        slots = self.pool.live_indices()
        assert len(slots) == len(prompt_token_ids), "prompts must be one per live env, in slot order"
        self._slots = slots
        self._actions = self.pool.expert_actions(slots)
        return super().generate(prompt_token_ids, sampling, seeds)

    def _answer(self, call, j, prompt, seed):
        if self.play(self._slots[j]):
            return tagged(self._actions[j])
        return "I do not know what to do here."
