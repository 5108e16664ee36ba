"""Two families of finite text MDPs with known dynamics: ``craft`` (TextCraft-like) and ``rooms`` (ALFWorld-like).

Each family is a small, fully enumerable world whose *true state* the text hides behind:

* surface variation (``envs.finite.text.SurfaceConfig``): one state, many strings;
* aliasing (``alias`` in [0, 1]): the family's state facts are ordered, and the first
  ``floor(alias * n_facts + 0.5)`` of them are never shown, so different states render alike.
  ``alias = 0`` shows every fact (each string names one state); ``alias = 1`` shows only what the last
  action reported, like the real TextCraft (``Got 1 oak log``) and ALFWorld (``Nothing happens.``).

Rewards [GiGPO]: 10 on the winning step, 0 otherwise; inadmissible actions are no-ops answered with a
failure message (well-formed, so ``valid = True``); the malformed-response action is added by
``envs.finite.mdp.build_mdp``.

``craft``: the goal needs ``n_intermediates`` crafted items, each made from ``n_base_per`` base items
fetched with ``get``; ``n_distractors`` useless base items can be fetched too; ``n_junk_recipes``
listed recipes (TextCraft lists distractor recipes) turn a needed base item and a distractor item into
a useless product, undoing progress; ``get`` fails with probability ``p_get_fail``. State: the set of
items held (base, distractor, crafted). Tasks differ by the starting inventory.

``rooms``: put a task object (cleaned first for some tasks) into a target receptacle. State: (task, agent
location, object location or hand, clean flag, set of opened receptacles). Actions ``go to``, ``open``,
``take``, ``put``, ``clean``, ``look``; a state-changing action slips (does nothing) with probability
``p_slip``. Tasks differ by object, target, cleaning requirement and the object's start location.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from .mdp import SUCCESS_REWARD
from .text import Speaker, SurfaceConfig

__all__ = ["CraftConfig", "RoomsConfig", "CraftFamily", "RoomsFamily", "make_family", "n_hidden_facts"]


def n_hidden_facts(alias: float, n_facts: int) -> int:
    """How many of ``n_facts`` ordered facts an aliasing level hides: floor(alias * n + 0.5)."""
    return int(np.floor(alias * n_facts + 0.5))


def _check_alias(name: str, alias: float) -> None:
    if not 0.0 <= alias <= 1.0:
        raise ValueError(f"{name}.alias={alias!r} must lie in [0, 1] (0 = every state fact shown, 1 = none)")


# ============================================================================================ craft
_BASE_NAMES = (
    "oak log", "birch log", "iron ore", "coal", "cobblestone", "sand", "string", "feather", "flint",
    "clay ball", "wheat", "sugar cane", "gold ore", "redstone dust", "bone", "leather", "glass pane", "slime ball",
)
_CRAFTED_NAMES = ("oak planks", "iron ingot", "torch", "glass", "paper", "arrow", "bread", "gold ingot", "brick")
_GOAL_NAMES = ("lantern", "bookshelf", "compass", "bow", "clock", "furnace")
_JUNK_NAMES = ("dye", "button", "lever", "bowl", "sign", "fence gate", "trapdoor", "pressure plate")


@dataclass(frozen=True)
class CraftConfig:
    """A crafting world with sub-goals (TextCraft-like)."""

    n_intermediates: int = 3
    """Crafted ingredients the goal needs (each one sub-goal)."""
    n_base_per: int = 2
    """Base items per crafted ingredient."""
    n_distractors: int = 2
    """Base items that can be fetched but serve no recipe of the goal."""
    n_junk_recipes: int = 2
    """Listed recipes that consume a needed base item and a distractor item and make nothing useful."""
    n_tasks: int = 4
    """Tasks = distinct starting inventories (task 0 starts empty)."""
    p_get_fail: float = 0.2
    """Probability that a ``get`` finds nothing (stochastic dynamics)."""
    alias: float = 0.5
    """Aliasing level: facts hidden in order (base items held, crafted items held)."""
    seed: int = 0
    """Names of items and the starting inventories."""

    def __post_init__(self) -> None:
        for f in ("n_intermediates", "n_base_per", "n_tasks"):
            if getattr(self, f) < 1:
                raise ValueError(f"CraftConfig.{f}={getattr(self, f)} must be >= 1")
        if self.n_distractors < 0:
            raise ValueError(f"CraftConfig.n_distractors={self.n_distractors} must be >= 0")
        if not 0 <= self.n_junk_recipes <= len(_JUNK_NAMES):
            raise ValueError(f"CraftConfig.n_junk_recipes={self.n_junk_recipes} must lie in [0, {len(_JUNK_NAMES)}]")
        if self.n_junk_recipes > 0 and self.n_distractors == 0:
            raise ValueError("CraftConfig.n_junk_recipes > 0 needs n_distractors >= 1 (a junk recipe uses one)")
        if self.n_intermediates * self.n_base_per + self.n_distractors > len(_BASE_NAMES):
            raise ValueError(
                f"CraftConfig: {self.n_intermediates} x {self.n_base_per} base items + {self.n_distractors} "
                f"distractors exceed the {len(_BASE_NAMES)} base item names: choose smaller sizes"
            )
        if self.n_intermediates > len(_CRAFTED_NAMES):
            raise ValueError(f"CraftConfig.n_intermediates={self.n_intermediates} > {len(_CRAFTED_NAMES)} names")
        if self.n_tasks > 2 ** (self.n_intermediates * self.n_base_per):
            raise ValueError(f"CraftConfig.n_tasks={self.n_tasks} exceeds the distinct starting inventories")
        if not 0.0 <= self.p_get_fail < 1.0:
            raise ValueError(f"CraftConfig.p_get_fail={self.p_get_fail} must lie in [0, 1)")
        _check_alias("CraftConfig", self.alias)


class CraftFamily:
    """TextCraft-like world. States are bitmasks over items (base, distractor, crafted)."""

    name = "craft"
    task_family = "craft"
    n_facts = 2

    def __init__(self, cfg: CraftConfig, surface: SurfaceConfig):
        self.cfg, self.surface = cfg, surface
        rng = np.random.default_rng(cfg.seed)
        k, m, d = cfg.n_intermediates, cfg.n_base_per, cfg.n_distractors
        names = [_BASE_NAMES[i] for i in rng.permutation(len(_BASE_NAMES))[: k * m + d]]
        self.bases = names[: k * m]  # recipe items
        self.distractors = names[k * m:]
        self.crafted = [_CRAFTED_NAMES[i] for i in rng.permutation(len(_CRAFTED_NAMES))[:k]]
        self.goal = _GOAL_NAMES[int(rng.integers(len(_GOAL_NAMES)))]
        self.items = self.bases + self.distractors + self.crafted  # bit i of a state <-> items[i]
        self.n_fetchable = k * m + d
        self.recipe = {k_: [k_ * m + j for j in range(m)] for k_ in range(k)}  # crafted index -> base bits
        junk_names = [_JUNK_NAMES[i] for i in rng.permutation(len(_JUNK_NAMES))[: cfg.n_junk_recipes]]
        # junk recipe: (product name, needed base bit, distractor bit)
        self.junk = [(junk_names[j], int(rng.integers(k * m)), k * m + int(rng.integers(max(d, 1))))
                     for j in range(cfg.n_junk_recipes)]
        self._actions = (
            [f"get 1 {x}" for x in self.bases + self.distractors]
            + [f"craft 1 {self.crafted[j]} using " + ", ".join(f"1 {self.bases[b]}" for b in self.recipe[j])
               for j in range(k)]
            + [f"craft 1 {self.goal} using " + ", ".join(f"1 {c}" for c in self.crafted)]
            + [f"craft 1 {name} using 1 {self.items[b]}, 1 {self.items[x]}" for name, b, x in self.junk]
            + ["inventory"]
        )
        # starting inventories: task 0 empty, then distinct random subsets of recipe items
        starts, seen = [0], {0}
        while len(starts) < cfg.n_tasks:
            mask = int(sum(1 << b for b in range(k * m) if rng.random() < 0.35))
            if mask not in seen:
                seen.add(mask)
                starts.append(mask)
        self._starts = starts
        self.hidden_facts = n_hidden_facts(cfg.alias, self.n_facts)

    # ---------------------------------------------------------------- dynamics
    def actions(self) -> list[str]:
        return list(self._actions)

    def start_states(self) -> list[int]:
        return list(self._starts)

    def start_event(self, state) -> tuple:
        return ("start",)

    def _crafted_bit(self, j: int) -> int:
        return self.n_fetchable + j

    def transition(self, s: int, a: int):
        k = self.cfg.n_intermediates
        nf = self.n_fetchable
        if a < nf:  # get
            if s >> a & 1:
                return [(1.0, s, 0.0, False, ("have", a))]
            p = self.cfg.p_get_fail
            out = [(1.0 - p, s | 1 << a, 0.0, False, ("got", a))]
            if p > 0:
                out.append((p, s, 0.0, False, ("get_failed", a)))
            return out
        if a < nf + k:  # craft an intermediate
            j = a - nf
            bit = self._crafted_bit(j)
            if s >> bit & 1:
                return [(1.0, s, 0.0, False, ("have", bit))]
            need = self.recipe[j]
            if all(s >> b & 1 for b in need):
                ns = s | 1 << bit
                for b in need:
                    ns &= ~(1 << b)
                return [(1.0, ns, 0.0, False, ("crafted", bit))]
            return [(1.0, s, 0.0, False, ("craft_failed", bit))]
        if a == nf + k:  # craft the goal
            if all(s >> self._crafted_bit(j) & 1 for j in range(k)):
                return [(1.0, s, SUCCESS_REWARD, True, ("won",))]
            return [(1.0, s, 0.0, False, ("craft_failed", -1))]
        if a < nf + k + 1 + len(self.junk):  # a junk recipe: consumes its two ingredients
            j = a - (nf + k + 1)
            name, b, x = self.junk[j]
            if s >> b & 1 and s >> x & 1:
                return [(1.0, s & ~(1 << b) & ~(1 << x), 0.0, False, ("junk", j))]
            return [(1.0, s, 0.0, False, ("junk_failed", j))]
        return [(1.0, s, 0.0, False, ("inventory",))]  # inventory

    def admissible(self, s: int, a: int) -> bool:
        outs = self.transition(s, a)
        return outs[0][0] > 0 and (outs[0][1] != s or outs[0][3] or outs[0][4][0] == "inventory")

    def feature_names(self) -> list[str]:
        return [f"holds:{x}" for x in self.items]

    def features(self, s: int) -> np.ndarray:
        return np.array([(s >> i) & 1 for i in range(len(self.items))], dtype=np.float64)

    def task_text(self, s: int) -> str:
        return f"craft 1 {self.goal}"

    # ---------------------------------------------------------------- text
    def _name(self, bit: int) -> str:
        return self.goal if bit == -1 else self.items[bit]

    def _junk_name(self, j: int) -> str:
        return self.junk[j][0]

    def render(self, event: tuple, s: int, t: int, rng: random.Random) -> str:
        sp = Speaker(self.surface, rng)
        kind = event[0]
        show_all = False
        if kind == "start":
            recipes = [a for a in self._actions if a.startswith("craft")]
            sp.say(("Crafting commands: {r}.", "You can craft with these recipes: {r}.",
                    "Known recipes: {r}.", "The recipe book lists: {r}."), r=sp.items(recipes))
            sp.say(("Goal: craft {g}.", "Your task is to craft a {g}.", "Make one {g}.", "You need to craft {g}."),
                   g=self.goal)
        elif kind == "got":
            sp.say(("Got 1 {x}.", "You picked up 1 {x}.", "1 {x} added to your inventory.", "You now have 1 {x}."),
                   x=self._name(event[1]))
        elif kind == "get_failed":
            sp.say(("You search but find no {x}.", "Could not get {x} this time.", "No {x} around right now.",
                    "Your search for {x} comes up empty."), x=self._name(event[1]))
        elif kind == "have":
            sp.say(("You already have {x}.", "{x} is already in your inventory.", "No need, you hold {x}.",
                    "You are already carrying {x}."), x=self._name(event[1]))
        elif kind == "crafted":
            sp.say(("Crafted 1 {x}.", "You made 1 {x}.", "1 {x} crafted.", "You put together 1 {x}."),
                   x=self._name(event[1]))
        elif kind == "craft_failed":
            sp.say(("Could not find enough items to craft {x}.", "Missing ingredients for {x}.",
                    "You lack what {x} needs.", "Crafting {x} failed: not enough items."), x=self._name(event[1]))
        elif kind == "junk":
            sp.say(("Crafted 1 {x}.", "You made 1 {x}.", "1 {x} crafted.", "You put together 1 {x}."),
                   x=self._junk_name(event[1]))
        elif kind == "junk_failed":
            sp.say(("Could not find enough items to craft {x}.", "Missing ingredients for {x}.",
                    "You lack what {x} needs.", "Crafting {x} failed: not enough items."), x=self._junk_name(event[1]))
        elif kind == "inventory":
            show_all = True
        elif kind == "won":  # the final observation (seen by a TextEnv user, never by an estimator row)
            sp.say(("Crafted 1 {x}. Task complete.", "You made the {x}. Done.", "Goal reached: {x}.",
                    "The {x} is ready. Task complete."),
                    x=self.goal)  # the inventory command reveals everything whatever the aliasing
        elif kind == "malformed":
            sp.say(("Could not understand that command.", "Invalid command.", "That is not a command.",
                    "Nothing happens."))
        else:  # pragma: no cover - events are produced by transition()
            raise ValueError(f"unknown craft event {event!r}")
        held = [i for i in range(len(self.items)) if s >> i & 1]
        base_held = [self.items[i] for i in held if i < self.n_fetchable]
        crafted_held = [self.items[i] for i in held if i >= self.n_fetchable]
        hidden = 0 if show_all else self.hidden_facts
        if hidden < 1:
            if base_held:
                sp.say(("In your bag: {x}.", "You hold {x}.", "Inventory items: {x}.", "You carry {x}."),
                       x=sp.items(base_held))
            else:
                sp.say(("Your bag holds no raw items.", "You hold no raw materials.", "No raw items in your bag.",
                        "You carry no raw materials."))
        if hidden < 2:
            if crafted_held:
                sp.say(("Crafted so far: {x}.", "You have made {x}.", "Finished parts: {x}.", "Ready parts: {x}."),
                       x=sp.items(crafted_held))
            else:
                sp.say(("Nothing crafted yet.", "You have made nothing yet.", "No finished parts.",
                        "No parts crafted so far."))
        return sp.finish(t)


# ============================================================================================ rooms
_LOCATIONS = (
    "countertop 1", "cabinet 1", "fridge 1", "sinkbasin 1", "drawer 1", "shelf 1", "cabinet 2",
    "microwave 1", "diningtable 1", "drawer 2",
)
_OPENABLE = ("cabinet", "fridge", "drawer", "microwave")
_OBJECTS = ("apple 1", "mug 1", "tomato 1", "potato 1", "plate 1", "cup 1")
_STATIC = ("a pen 1", "a spoon 2", "a book 1", "a knife 1", "a cd 2", "a keychain 1", "a bowl 1", "a candle 1",
           "a soapbar 1", "a vase 2", "a pencil 3", "a saltshaker 1")
_MIDDLE = -1


@dataclass(frozen=True)
class RoomsConfig:
    """An ALFWorld-like navigate / (clean) / pick / place world."""

    n_locations: int = 5
    """Receptacles in the room (4..10; the sink basin is always one of them)."""
    n_objects: int = 2
    """Distinct task objects (each has its own take/put/clean actions)."""
    n_tasks: int = 4
    """Tasks: (object, target, needs cleaning, object's start location)."""
    clean_fraction: float = 0.5
    """Share of tasks that need the object cleaned before it is placed (a sub-goal)."""
    p_slip: float = 0.1
    """Probability that a state-changing action does nothing (stochastic dynamics)."""
    alias: float = 0.5
    """Aliasing level: facts hidden in order (opened receptacles, object memory, location, cleanliness, carrying)."""
    seed: int = 0
    """Static objects, tasks."""

    def __post_init__(self) -> None:
        if not 4 <= self.n_locations <= len(_LOCATIONS):
            raise ValueError(f"RoomsConfig.n_locations={self.n_locations} must lie in [4, {len(_LOCATIONS)}]")
        if not 1 <= self.n_objects <= len(_OBJECTS):
            raise ValueError(f"RoomsConfig.n_objects={self.n_objects} must lie in [1, {len(_OBJECTS)}]")
        if self.n_tasks < 1:
            raise ValueError(f"RoomsConfig.n_tasks={self.n_tasks} must be >= 1")
        if not 0.0 <= self.clean_fraction <= 1.0:
            raise ValueError(f"RoomsConfig.clean_fraction={self.clean_fraction} must lie in [0, 1]")
        if not 0.0 <= self.p_slip < 1.0:
            raise ValueError(f"RoomsConfig.p_slip={self.p_slip} must lie in [0, 1)")
        _check_alias("RoomsConfig", self.alias)


class RoomsFamily:
    """ALFWorld-like world. State = (task, agent_loc, obj_loc, clean, open_mask); obj_loc == L means in hand."""

    name = "rooms"
    n_facts = 5

    def __init__(self, cfg: RoomsConfig, surface: SurfaceConfig):
        self.cfg, self.surface = cfg, surface
        rng = np.random.default_rng(cfg.seed)
        L = cfg.n_locations
        self.locs = list(_LOCATIONS[:L])
        self.sink = self.locs.index("sinkbasin 1")
        self.openable = [i for i, x in enumerate(self.locs) if x.split()[0] in _OPENABLE]
        self.objects = [_OBJECTS[i] for i in rng.permutation(len(_OBJECTS))[: cfg.n_objects]]
        self.static = {i: sorted(rng.choice(_STATIC, size=int(rng.integers(0, 3)), replace=False).tolist())
                       for i in range(L)}
        self.hand = L
        tasks = []
        n_clean = int(round(cfg.clean_fraction * cfg.n_tasks))
        seen, attempts = set(), 0
        while len(tasks) < cfg.n_tasks:
            attempts += 1
            if attempts > 10_000:
                raise ValueError(f"RoomsConfig.n_tasks={cfg.n_tasks}: cannot draw that many distinct tasks; lower it")
            obj = len(tasks) % cfg.n_objects
            target = int(rng.integers(L))
            start = int(rng.integers(L))
            need_clean = len(tasks) < n_clean
            if start == target or target == self.sink or (obj, target, start, need_clean) in seen:
                continue
            seen.add((obj, target, start, need_clean))
            tasks.append((obj, target, need_clean, start))
        self.tasks = tasks
        self._actions = (
            [f"go to {x}" for x in self.locs]
            + [f"open {self.locs[i]}" for i in self.openable]
            + [f"take {o} from {x}" for o in self.objects for x in self.locs]
            + [f"put {o} in/on {x}" for o in self.objects for x in self.locs]
            + [f"clean {o} with sinkbasin 1" for o in self.objects]
            + ["look"]
        )
        self.a_go = 0
        self.a_open = L
        self.a_take = L + len(self.openable)
        self.a_put = self.a_take + cfg.n_objects * L
        self.a_clean = self.a_put + cfg.n_objects * L
        self.a_look = self.a_clean + cfg.n_objects
        self.hidden_facts = n_hidden_facts(cfg.alias, self.n_facts)

    # ---------------------------------------------------------------- dynamics
    def actions(self) -> list[str]:
        return list(self._actions)

    def start_states(self):
        return [(k, _MIDDLE, start, False, 0) for k, (_, _, _, start) in enumerate(self.tasks)]

    def start_event(self, state) -> tuple:
        return ("start", state[0])

    def _is_open(self, loc: int, open_mask: int) -> bool:
        return loc not in self.openable or bool(open_mask >> self.openable.index(loc) & 1)

    def _effect(self, s, a):
        """The deterministic effect of a (state, action): (next_state, reward, done, event) or None (no-op)."""
        task, agent, obj_loc, clean, om = s
        obj, target, need_clean, _ = self.tasks[task]
        L = self.cfg.n_locations
        if a < self.a_open:  # go to
            if agent == a:
                return None
            return (task, a, obj_loc, clean, om), 0.0, False, ("arrive", a)
        if a < self.a_take:  # open
            loc = self.openable[a - self.a_open]
            if agent != loc or self._is_open(loc, om):
                return None
            return (task, agent, obj_loc, clean, om | 1 << (a - self.a_open)), 0.0, False, ("open", loc)
        if a < self.a_put:  # take
            o, loc = divmod(a - self.a_take, L)
            if o != obj or agent != loc or obj_loc != loc or not self._is_open(loc, om):
                return None
            return (task, agent, self.hand, clean, om), 0.0, False, ("take", o, loc)
        if a < self.a_clean:  # put
            o, loc = divmod(a - self.a_put, L)
            if o != obj or agent != loc or obj_loc != self.hand or not self._is_open(loc, om):
                return None
            if loc == target and (clean or not need_clean):
                return (task, agent, loc, clean, om), SUCCESS_REWARD, True, ("won",)
            return (task, agent, loc, clean, om), 0.0, False, ("put", o, loc)
        if a < self.a_look:  # clean
            o = a - self.a_clean
            if o != obj or obj_loc != self.hand or agent != self.sink:
                return None
            return (task, agent, obj_loc, True, om), 0.0, False, ("clean", o)
        return s, 0.0, False, ("look",)

    def transition(self, s, a):
        eff = self._effect(s, a)
        if eff is None:
            return [(1.0, s, 0.0, False, ("nothing",))]
        ns, r, d, e = eff
        p = self.cfg.p_slip
        if p == 0 or e == ("look",):
            return [(1.0, ns, r, d, e)]
        return [(1.0 - p, ns, r, d, e), (p, s, 0.0, False, ("nothing",))]

    def admissible(self, s, a) -> bool:
        return self._effect(s, a) is not None

    def feature_names(self) -> list[str]:
        return ([f"task:{k}" for k in range(len(self.tasks))] + ["agent:middle"] + [f"agent:{x}" for x in self.locs]
                + [f"obj:{x}" for x in self.locs] + ["obj:hand", "clean"]
                + [f"open:{self.locs[i]}" for i in self.openable])

    def features(self, s) -> np.ndarray:
        task, agent, obj_loc, clean, om = s
        L = self.cfg.n_locations
        f = np.zeros(len(self.tasks) + (L + 1) + (L + 1) + 1 + len(self.openable))
        f[task] = 1
        f[len(self.tasks) + agent + 1] = 1
        f[len(self.tasks) + L + 1 + obj_loc] = 1
        f[len(self.tasks) + 2 * L + 2] = float(clean)
        for j in range(len(self.openable)):
            f[len(self.tasks) + 2 * L + 3 + j] = om >> j & 1
        return f

    def task_text(self, s) -> str:
        obj, target, need_clean, _ = self.tasks[s[0]]
        return f"put a {'clean ' if need_clean else ''}{self.objects[obj].split()[0]} in {self.locs[target]}"

    # ---------------------------------------------------------------- text
    def _contents(self, loc: int, s) -> list[str]:
        task, _, obj_loc, _, _ = s
        obj = self.tasks[task][0]
        items = list(self.static[loc])
        if obj_loc == loc:
            items.append("a " + self.objects[obj])
        return items

    def _view(self, sp: Speaker, loc: int, s) -> None:
        name = self.locs[loc]
        if not self._is_open(loc, s[4]):
            sp.say(("The {x} is closed.", "The {x} is shut.", "You see that the {x} is closed.",
                    "The {x} stays closed."), x=name)
        else:
            sp.say(("On the {x}, you see {y}.", "In the {x}, you see {y}.", "The {x} holds {y}.",
                    "You notice {y} in the {x}."), x=name, y=sp.items(self._contents(loc, s)))

    def render(self, event: tuple, s, t: int, rng: random.Random) -> str:
        sp = Speaker(self.surface, rng)
        task, agent, obj_loc, clean, om = s
        obj = self.objects[self.tasks[task][0]]
        kind = event[0]
        if kind == "start":
            sp.say(("You are in the middle of a room. Looking quickly around you, you see {x}.",
                    "You stand in the middle of a room and see {x}.",
                    "Around you are {x}.", "The room contains {x}."),
                   x=sp.items(["a " + x for x in self.locs]))
            sp.say(("Your task is to: {g}.", "Task: {g}.", "You must {g}.", "Your goal: {g}."), g=self.task_text(s))
        elif kind == "arrive":
            sp.say(("You arrive at {x}.", "You walk to the {x}.", "You are now at the {x}.", "You reach the {x}."),
                   x=self.locs[event[1]])
            self._view(sp, event[1], s)
        elif kind == "open":
            sp.say(("You open the {x}.", "You pull the {x} open.", "The {x} opens.", "You swing the {x} open."),
                   x=self.locs[event[1]])
            self._view(sp, event[1], s)
        elif kind == "take":
            sp.say(("You pick up the {o} from the {x}.", "You take the {o} from the {x}.", "You grab the {o}.",
                    "The {o} is now in your hand."), o=self.objects[event[1]], x=self.locs[event[2]])
        elif kind == "put":
            sp.say(("You put the {o} in/on the {x}.", "You place the {o} on the {x}.", "You set the {o} down.",
                    "The {o} now rests in the {x}."), o=self.objects[event[1]], x=self.locs[event[2]])
        elif kind == "clean":
            sp.say(("You clean the {o} using the sinkbasin 1.", "You wash the {o} in the sink.",
                    "The {o} is washed.", "You rinse the {o} clean."), o=self.objects[event[1]])
        elif kind == "look":
            if agent == _MIDDLE:
                sp.say(("You are in the middle of a room.", "You stand in the middle of the room.",
                        "You look around the room.", "Nothing but the room around you."))
            else:
                sp.say(("You are facing the {x}.", "In front of you is the {x}.", "You look at the {x}.",
                        "You stand by the {x}."), x=self.locs[agent])
        elif kind in ("nothing", "malformed"):
            sp.say(("Nothing happens.", "That did not work.", "Nothing changes.", "Your action has no effect."))
        elif kind == "won":  # the final observation (seen by a TextEnv user, never by an estimator row)
            sp.say(("You put the {o} in place. Task complete.", "Done: the task is solved.", "You won.",
                    "The task is complete."), o=obj)
        else:  # pragma: no cover - events are produced by transition()
            raise ValueError(f"unknown rooms event {event!r}")
        h = self.hidden_facts
        # fact order (hidden first -> last): opened receptacles, object memory, location, cleanliness, carrying
        if h < 1:
            opened = [self.locs[i] for j, i in enumerate(self.openable) if om >> j & 1]
            if opened:
                sp.say(("Open: {x}.", "You have opened {x}.", "Already open: {x}.", "Opened so far: {x}."),
                       x=sp.items(opened))
            else:
                sp.say(("Everything is still closed.", "You have opened nothing.", "No receptacle is open.",
                        "All receptacles are closed."))
        if h < 2 and obj_loc != self.hand:
            sp.say(("You remember the {o} is at the {x}.", "The {o} should be on the {x}.",
                    "Last you saw, the {o} was at the {x}.", "The {o} lies at the {x}."),
                   o=obj, x=self.locs[obj_loc])
        if h < 3:
            if agent == _MIDDLE:
                sp.say(("You are in the middle of the room.", "You stand mid-room.", "You are at the room's centre.",
                        "You have not moved yet."))
            else:
                sp.say(("You are at the {x}.", "Your position: {x}.", "You stand by the {x}.", "Location: {x}."),
                       x=self.locs[agent])
        if h < 4:
            sp.say((("The {o} is clean.", "The {o} looks clean.", "The {o} has been washed.", "Clean {o}.")
                    if clean else ("The {o} is dirty.", "The {o} is not clean.", "The {o} is unwashed.", "Dirty {o}.")),
                   o=obj)
        if h < 5:
            if obj_loc == self.hand:
                sp.say(("You are carrying the {o}.", "In your hand: {o}.", "You hold the {o}.", "You carry the {o}."),
                       o=obj)
            else:
                sp.say(("Your hands are empty.", "You carry nothing.", "You hold nothing.", "Nothing in your hands."))
        return sp.finish(t)


def make_family(name: str, surface: SurfaceConfig, **kwargs):
    """``make_family("craft" | "rooms", surface, **config_fields)``."""
    if name == "craft":
        return CraftFamily(CraftConfig(**kwargs), surface)
    if name == "rooms":
        return RoomsFamily(RoomsConfig(**kwargs), surface)
    raise ValueError(f"unknown MDP family {name!r}: choose 'craft' or 'rooms'")
