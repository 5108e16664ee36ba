"""Surface variation of observation text: paraphrases, shuffled lists, distractor sentences, step counters.

One true state is rendered into many strings (exact-match anchors fragment); which state facts the
text shows at all is the family's *aliasing* level (``envs.finite.families``). All randomness comes from
the ``random.Random`` passed in (Python's generator: a draw costs ~0.1 µs against ~3 µs for a NumPy call,
and rendering is per row), so a seed fixes every string.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["SurfaceConfig", "SURFACE_PRESETS", "Speaker", "DISTRACTORS", "surface_preset"]

#: sentences that say nothing about the state [choice]
DISTRACTORS = (
    "A clock ticks somewhere.",
    "The light flickers for a moment.",
    "You hear footsteps in the hall.",
    "It is quiet.",
    "A breeze moves the curtains.",
    "Somewhere a door closes.",
    "You feel a little tired.",
    "Rain taps on the window.",
)


@dataclass(frozen=True)
class SurfaceConfig:
    """How much the wording of one state varies between visits."""

    paraphrases: int = 4
    """Templates used per sentence kind (1 = always the first wording)."""
    shuffle: bool = True
    """Shuffle the order of listed items (inventories, visible objects, recipes)."""
    p_distractor: float = 0.5
    """Probability that an observation carries one distractor sentence at a random position."""
    step_counter: bool = True
    """Append a step counter ("Step 7.") in one of several wordings."""

    @property
    def deterministic(self) -> bool:
        """True when a (event, state) pair always renders to the same string."""
        return self.paraphrases == 1 and not self.shuffle and self.p_distractor == 0 and not self.step_counter

    def __post_init__(self) -> None:
        if not isinstance(self.paraphrases, int) or self.paraphrases < 1:
            raise ValueError(f"SurfaceConfig.paraphrases={self.paraphrases!r} must be an int >= 1")
        if not 0.0 <= self.p_distractor <= 1.0:
            raise ValueError(f"SurfaceConfig.p_distractor={self.p_distractor!r} must lie in [0, 1]")


#: named variation levels used by the benchmark
SURFACE_PRESETS = {
    "none": SurfaceConfig(paraphrases=1, shuffle=False, p_distractor=0.0, step_counter=False),
    "low": SurfaceConfig(paraphrases=2, shuffle=True, p_distractor=0.0, step_counter=False),
    "high": SurfaceConfig(paraphrases=4, shuffle=True, p_distractor=0.5, step_counter=True),
}


def surface_preset(name: str) -> SurfaceConfig:
    if name not in SURFACE_PRESETS:
        raise ValueError(f"surface variation {name!r} is not one of {sorted(SURFACE_PRESETS)}")
    return SURFACE_PRESETS[name]


_STEP_COUNTERS = ("Step {t}.", "[turn {t}]", "You have taken {t} actions.", "Move {t}.")


class Speaker:
    """Builds one observation string sentence by sentence with the configured variation.

    ``say(templates, **kw)`` picks one of the first ``paraphrases`` templates; ``items(xs)`` returns the
    list (shuffled if configured) joined in English; ``finish(t)`` adds the distractor and step counter.
    """

    def __init__(self, surface: SurfaceConfig, rng: random.Random):
        self.surface = surface
        self.rng = rng
        self.parts: list[str] = []

    def pick(self, templates: tuple[str, ...] | list[str]) -> str:
        n = min(self.surface.paraphrases, len(templates))
        return templates[int(self.rng.random() * n)] if n > 1 else templates[0]

    def say(self, templates: tuple[str, ...] | list[str], **kw) -> None:
        self.parts.append(self.pick(templates).format(**kw))

    def items(self, xs: list[str], empty: str = "nothing") -> str:
        xs = list(xs)
        if not xs:
            return empty
        if self.surface.shuffle and len(xs) > 1:
            self.rng.shuffle(xs)
        if len(xs) == 1:
            return xs[0]
        return ", ".join(xs[:-1]) + ", and " + xs[-1]

    def finish(self, t: int) -> str:
        parts = list(self.parts)
        if self.surface.p_distractor > 0 and self.rng.random() < self.surface.p_distractor:
            pos = self.rng.randrange(len(parts) + 1)
            parts.insert(pos, DISTRACTORS[self.rng.randrange(len(DISTRACTORS))])
        if self.surface.step_counter:
            parts.append(self.pick(_STEP_COUNTERS).format(t=t))
        return " ".join(parts)
