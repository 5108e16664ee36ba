"""Generate ALFWorld games (official on-disk format) from the assets the ``alfworld`` package ships.

    python -m envs.alfworld.generate --out DIR --num-train 300 --num-valid-seen 60 --num-valid-unseen 60 --seed 0

writes ``DIR/json_2.1.1/{train,valid_seen,valid_unseen}/<task>-<Obj>-None-<Recep>-<scene>/<trial>/`` with
``traj_data.json``, ``initial_state.pddl`` and ``game.tw-pddl`` (``"solvable": true`` and the expert's
walkthrough), plus ``DIR/logic/{alfred.pddl,alfred.twl2}`` and ``DIR/generation.json``: the layout
``alfworld-download`` produces, so ``ALFWORLD_DATA=DIR`` (or ``ALFWorldEnv(data_path=DIR)``) plays them.
The output depends only on the arguments (not on ``--workers``); a few hundred games take minutes.

How a game is made [choice unless tagged]:

* Rooms: the 120 AI2-THOR floor plans of ``alfworld/gen/layouts``. Receptacles and their interaction
  poses come from ``FloorPlan*-openable.json`` (ALFRED's ids, e.g. ``Cabinet|+00.68|+00.50|-02.20``, so
  ALFWorld's demangler names them "cabinet 1"); static receptacle types listed in ``-objects.json`` but
  missing there (stove burners, coffee machines, toasters, ...) get one instance (stove burners four) at
  a reachable point of ``-layout.npy``, fixed per room.
* Splits: ``valid_unseen`` uses only ALFRED's held-out rooms (``UNSEEN_SCENES``: FloorPlan10, 219,
  308, 424 [ALFRED]); ``train`` and ``valid_seen`` use the other 116 rooms (new games in seen rooms).
* Families: all six ALFWorld task types, in turn (game i has family i mod 6), each in the room types
  ``constants.GOALS_VALID`` allows [ALFRED]. Parameters: an object type of the room that can be picked
  up; a static receptacle type of the room that ``constants.VAL_RECEPTACLE_OBJECTS`` says can hold it
  (not the appliance of the task: no "cool in fridge then put in fridge"); for Look, a desk or floor lamp
  of the room, placed on a lamp-bearing receptacle; for Clean/Heat/Cool, a sink basin / microwave /
  fridge in the room (the PDDL domain's requirement).
* Objects: every pickable object type of the room gets 1-3 instances (weights 0.6/0.25/0.15; the Pick
  Two target 2-3) in receptacles that can hold them (``VAL_RECEPTACLE_OBJECTS`` [ALFRED]); no instance
  of the target starts in a receptacle of the goal type. Scenery (windows, paintings, ...) is left out.
* Goal PDDL and task text: ``alfworld.gen.goal_library`` (templated goals [ALFWorld]).
* Check: ALFWorld's hand-coded expert must win through the TextWorld engine within
  ``max_expert_steps`` (default 50, the horizon); otherwise the game is drawn again (new attempt seed).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.resources
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

__all__ = [
    "GEN_VERSION",
    "FAMILIES",
    "TASK_TYPE_TO_FAMILY",
    "UNSEEN_SCENES",
    "GeneratorConfig",
    "generate_games",
    "write_game_file",
    "main",
]

GEN_VERSION = 1
#: the six ALFWorld task types (order = the family cycle of the generator) and their short names
FAMILIES = (
    ("pick_and_place_simple", "pick"),
    ("look_at_obj_in_light", "look"),
    ("pick_clean_then_place_in_recep", "clean"),
    ("pick_heat_then_place_in_recep", "heat"),
    ("pick_cool_then_place_in_recep", "cool"),
    ("pick_two_obj_and_place", "pick2"),
)
TASK_TYPE_TO_FAMILY = dict(FAMILIES)
#: ALFRED's valid_unseen rooms (one kitchen, living room, bedroom, bathroom) [ALFRED]
UNSEEN_SCENES = (10, 219, 308, 424)
SPLITS = ("train", "valid_seen", "valid_unseen")
_SCENE_TYPES = (("Kitchen", range(1, 31)), ("LivingRoom", range(201, 231)), ("Bedroom", range(301, 331)),
                ("Bathroom", range(401, 431)))
_APPLIANCE = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
              "pick_cool_then_place_in_recep": "Fridge"}
_LAMPS = ("DeskLamp", "FloorLamp")
_LAMP_HOSTS = ("SideTable", "Desk", "Dresser", "DiningTable", "CoffeeTable", "Shelf", "TVStand", "CounterTop")
_ATTEMPTS = 40


# ====================================================================== package assets
def _pkg_file(*parts: str) -> Path:
    return Path(str(importlib.resources.files("alfworld").joinpath(*parts)))


def domain_path() -> Path:
    return _pkg_file("data", "alfred.pddl")


def grammar_path() -> Path:
    return _pkg_file("data", "alfred.twl2")


@lru_cache(maxsize=1)
def _constants():
    import alfworld.gen.constants as constants

    return constants


@lru_cache(maxsize=1)
def _goal_library():
    import alfworld.gen.goal_library as glib

    return glib.gdict


def _scene_type(scene: int) -> str:
    for name, numbers in _SCENE_TYPES:
        if scene in numbers:
            return name
    raise ValueError(f"scene {scene} is not an ALFRED floor plan number")


def _mangle(name: str) -> str:
    """ALFRED object id -> PDDL name (the encoding ALFWorld's demangler reverses)."""
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        name = name.replace(a, b)
    return name


def _loc(x: float, z: float, rotation: float, horizon: float) -> str:
    return f"loc|{int(round(x / 0.25))}|{int(round(z / 0.25))}|{int(round(rotation / 90.0)) % 4}|{int(round(horizon))}"


# ====================================================================== rooms
@dataclass(frozen=True)
class Room:
    scene: int
    scene_type: str
    receptacles: tuple[tuple[str, str, str], ...]  # (ALFRED id, receptacle type, location)
    object_types: tuple[str, ...]  # pickable object types present
    lamps: tuple[str, ...]
    agent_points: tuple[tuple[float, float], ...]

    def receptacle_types(self) -> set[str]:
        return {t for _, t, _ in self.receptacles}


def _receptacle_type(rid: str) -> str:
    parts = rid.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


@cache
def load_room(scene: int) -> Room:
    import numpy as np

    c = _constants()
    layouts = _pkg_file("gen", "layouts")
    kinds = json.loads((layouts / f"FloorPlan{scene}-objects.json").read_text())
    poses = json.loads((layouts / f"FloorPlan{scene}-openable.json").read_text())
    points = np.load(layouts / f"FloorPlan{scene}-layout.npy")
    static = set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES)
    receptacles = []
    for rid in sorted(poses):
        rtype = _receptacle_type(rid)
        if rtype in static:
            x, z, rot, hor = poses[rid]
            receptacles.append((rid, rtype, _loc(x, z, rot, hor)))
    present = {t for _, t, _ in receptacles}
    rng = random.Random(1_000_003 * scene + 17)  # fixed per room: the synthetic receptacles never move
    taken = {r[0] for r in receptacles}
    for rtype in sorted(set(kinds) & static - present - {"Sink", "Bathtub"}):
        for _ in range(4 if rtype == "StoveBurner" else 1):
            while True:
                x, z = (float(v) for v in points[rng.randrange(len(points))])
                rid = (f"{rtype}|{x + rng.uniform(-0.3, 0.3):+06.2f}|{rng.uniform(0.0, 1.5):+06.2f}"
                       f"|{z + rng.uniform(-0.3, 0.3):+06.2f}")
                if rid not in taken:
                    break
            taken.add(rid)
            receptacles.append((rid, rtype, _loc(x, z, rng.choice((0, 90, 180, 270)), 30)))
    pickable = set().union(*c.VAL_RECEPTACLE_OBJECTS.values()) | set(c.MOVABLE_RECEPTACLES)
    rtypes = {t for _, t, _ in receptacles}
    objects = []
    for t in sorted(set(kinds)):
        if t in pickable and t not in static and "Sliced" not in t:
            if any(t in c.VAL_RECEPTACLE_OBJECTS.get(rt, ()) for rt in rtypes):
                objects.append(t)
    lamps = tuple(t for t in _LAMPS if t in kinds and rtypes & set(_LAMP_HOSTS))
    return Room(
        scene=scene,
        scene_type=_scene_type(scene),
        receptacles=tuple(sorted(receptacles)),
        object_types=tuple(objects),
        lamps=lamps,
        agent_points=tuple((float(x), float(z)) for x, z in points),
    )


@lru_cache(maxsize=1)
def all_scenes() -> tuple[int, ...]:
    layouts = _pkg_file("gen", "layouts")
    nums = sorted({int(p.name[len("FloorPlan"):].split("-")[0]) for p in layouts.iterdir()
                   if p.name.startswith("FloorPlan") and p.name.endswith("-openable.json")})
    return tuple(nums)


def scenes_of_split(split: str) -> tuple[int, ...]:
    if split == "valid_unseen":
        return tuple(s for s in all_scenes() if s in UNSEEN_SCENES)
    return tuple(s for s in all_scenes() if s not in UNSEEN_SCENES)


# ====================================================================== one game
@dataclass
class GameSpec:
    task_type: str
    scene: int
    object_target: str
    parent_target: str  # "" for look
    toggle_target: str  # "" unless look
    task_desc: str
    placements: list[tuple[str, str, str]] = field(default_factory=list)  # (object id, type, receptacle id)
    lamp: tuple[str, str] | None = None  # (lamp id, receptacle id)
    agent_loc: str = ""

    @property
    def folder(self) -> str:
        last = self.toggle_target if self.task_type == "look_at_obj_in_light" else self.parent_target
        return f"{self.task_type}-{self.object_target}-None-{last}-{self.scene}"


def _instances(rng: random.Random) -> int:
    r = rng.random()
    return 1 if r < 0.6 else (2 if r < 0.85 else 3)


def _can_hold(rtype: str, otype: str) -> bool:
    return otype in _constants().VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def sample_game(task_type: str, scenes: tuple[int, ...], rng: random.Random) -> GameSpec | None:
    """Draw one game of ``task_type`` in one of ``scenes`` (None when the drawn room cannot host it)."""
    c = _constants()
    allowed = c.GOALS_VALID[task_type]
    rooms = [load_room(s) for s in scenes]
    rooms = [r for r in rooms if r.scene_type in allowed]
    if task_type in _APPLIANCE:
        rooms = [r for r in rooms if _APPLIANCE[task_type] in r.receptacle_types()]
    if task_type == "look_at_obj_in_light":
        rooms = [r for r in rooms if r.lamps]
    if not rooms:
        return None
    room = rng.choice(rooms)
    rtypes = sorted(room.receptacle_types())
    toggle = rng.choice(room.lamps) if task_type == "look_at_obj_in_light" else ""
    candidates = list(room.object_types)
    action_set = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
                  "pick_cool_then_place_in_recep": "Coolable"}.get(task_type)
    if action_set:
        candidates = [t for t in candidates if t in c.VAL_ACTION_OBJECTS[action_set]]
    rng.shuffle(candidates)
    for obj in candidates:
        if task_type == "look_at_obj_in_light":
            parent = ""
        else:
            parents = [rt for rt in rtypes if _can_hold(rt, obj) and rt != _APPLIANCE.get(task_type)]
            # the target must start somewhere else than a receptacle of the goal type
            parents = [p for p in parents if any(_can_hold(rt, obj) for rt in rtypes if rt != p)]
            if not parents:
                continue
            parent = rng.choice(parents)
        break
    else:
        return None
    template = rng.choice(_goal_library()[task_type]["templates"])
    desc = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    spec = GameSpec(task_type, room.scene, obj, parent, toggle, desc)
    # objects
    taken: set[str] = set()

    def place(otype: str, count: int, forbid: str | None) -> bool:
        hosts = [(rid, rt) for rid, rt, _ in room.receptacles if _can_hold(rt, otype) and rt != forbid]
        if not hosts:
            return False
        for _ in range(count):
            rid, _rt = rng.choice(hosts)
            x, y, z = (float(v) for v in rid.split("|")[1:4])
            while True:
                oid = (f"{otype}|{x + rng.uniform(-0.4, 0.4):+06.2f}|{y + rng.uniform(0.0, 0.3):+06.2f}"
                       f"|{z + rng.uniform(-0.4, 0.4):+06.2f}")
                if oid not in taken:
                    break
            taken.add(oid)
            spec.placements.append((oid, otype, rid))
        return True

    for otype in room.object_types:
        if otype == obj:
            n = max(2, _instances(rng)) if task_type == "pick_two_obj_and_place" else _instances(rng)
            if not place(otype, n, parent or None):
                return None
        else:
            place(otype, _instances(rng), None)
    if toggle:
        hosts = [(rid, rt) for rid, rt, _ in room.receptacles if rt in _LAMP_HOSTS]
        rid, _ = rng.choice(hosts)
        x, y, z = (float(v) for v in rid.split("|")[1:4])
        spec.lamp = (f"{toggle}|{x:+06.2f}|{y + 0.5:+06.2f}|{z:+06.2f}", rid)
    px, pz = room.agent_points[rng.randrange(len(room.agent_points))]
    spec.agent_loc = _loc(px, pz, rng.choice((0, 90, 180, 270)), 30)
    return spec


def problem_pddl(spec: GameSpec, name: str) -> str:
    """The PDDL problem (``initial_state.pddl``) of a game, in the layout of ALFWorld's files."""
    c = _constants()
    room = load_room(spec.scene)
    rloc = {rid: loc for rid, _, loc in room.receptacles}
    objects = list(spec.placements)
    if spec.lamp:
        objects.append((spec.lamp[0], spec.toggle_target, spec.lamp[1]))
    otypes = sorted({t for _, t, _ in objects})
    rtypes = sorted({t for _, t, _ in room.receptacles})
    locations = sorted(set(rloc.values()) | {spec.agent_loc})
    m = _mangle
    lines = [f"(define (problem plan_{name})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in rtypes]
    lines += [f"        {m(oid)} - object" for oid, _, _ in sorted(objects)]
    lines += [f"        {m(rid)} - receptacle" for rid, _, _ in room.receptacles]
    lines += [f"        {m(loc)} - location" for loc in locations]
    lines += ["        )", "", "(:init"]
    for rid, rt, _ in room.receptacles:
        lines.append(f"        (receptacleType {m(rid)} {rt}Type)")
    for oid, ot, _ in sorted(objects):
        lines.append(f"        (objectType {m(oid)} {ot}Type)")
    for rt in rtypes:
        for ot in otypes:
            if _can_hold(rt, ot):
                lines.append(f"        (canContain {rt}Type {ot}Type)")
    lamp_id = spec.lamp[0] if spec.lamp else None
    for oid, ot, _ in sorted(objects):
        if oid == lamp_id:
            lines.append(f"        (toggleable {m(oid)})")
            continue
        lines.append(f"        (pickupable {m(oid)})")
        if ot in c.MOVABLE_RECEPTACLES_SET:
            lines.append(f"        (isReceptacleObject {m(oid)})")
        for pred, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                          ("sliceable", "Sliceable")):
            if ot in c.VAL_ACTION_OBJECTS[key]:
                lines.append(f"        ({pred} {m(oid)})")
    for rid, rt, _ in room.receptacles:
        if rt in c.OPENABLE_CLASS_SET:
            lines.append(f"        (openable {m(rid)})")
    lines.append(f"        (atLocation agent1 {m(spec.agent_loc)})")
    for oid, _, rid in sorted(objects):
        lines.append(f"        (inReceptacle {m(oid)} {m(rid)})")
    for rid, _, loc in room.receptacles:
        lines.append(f"        (receptacleAtLocation {m(rid)} {m(loc)})")
    for oid, _, rid in sorted(objects):
        lines.append(f"        (objectAtLocation {m(oid)} {m(rloc[rid])})")
    lines.append("        )")
    goal = _goal_library()[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep="")
    goal = goal.replace("#", "-")  # the goal library's type separator (as ALFRED's generator writes it)
    return "\n".join(lines) + "\n" + goal


def traj_data(spec: GameSpec, task_id: str, game_seed: int, split: str, index: int, seed: int) -> dict:
    return {
        "task_id": task_id,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene, "random_seed": game_seed},
        "turk_annotations": {"anns": [{"task_desc": spec.task_desc, "high_descs": [], "assignment_id": "generated"}]},
        "generator": {"name": "envs.alfworld.generate", "version": GEN_VERSION, "seed": seed, "split": split,
                      "index": index},
    }


def write_game_file(trial_dir: Path, task_desc: str | None = None, max_expert_steps: int = 50,
                    expert_seed: int = 0) -> list[str] | None:
    """Write ``trial_dir/game.tw-pddl`` from its ``traj_data.json`` and ``initial_state.pddl`` (what
    ``alfworld-generate`` does, without its y/n prompt), then let the hand-coded expert play it.

    Returns the expert's winning walkthrough (and records it, ``"solvable": true``) or ``None`` (the file
    is kept with ``"solvable": false``). ``task_desc`` defaults to the first annotation's text.
    """
    from envs.alfworld.engine import Game, install_speedups

    install_speedups()
    trial_dir = Path(trial_dir)
    traj = json.loads((trial_dir / "traj_data.json").read_text())
    if task_desc is None:
        anns = traj.get("turk_annotations", {}).get("anns", [])
        if not anns:
            raise ValueError(f"{trial_dir}/traj_data.json has no turk_annotations.anns[0].task_desc; pass task_desc")
        task_desc = anns[0]["task_desc"]
    grammar = grammar_path().read_text().replace("UNKNOWN GOAL", task_desc)
    data = {
        "pddl_domain": domain_path().read_text(),
        "grammar": grammar,
        "pddl_problem": (trial_dir / "initial_state.pddl").read_text(),
        "solvable": None,
        "walkthrough": None,
    }
    path = trial_dir / "game.tw-pddl"
    path.write_text(json.dumps(data))
    walkthrough = None
    game = Game(expert=True)
    try:
        game.load(str(path))
        state = game.reset(seed=expert_seed)
        steps = []
        for _ in range(max_expert_steps):
            action = game.expert_action
            state = game.step(action)
            steps.append(action)
            if state["won"]:
                walkthrough = steps
                break
            if game.expert_failed:
                break
    finally:
        game.close()
    data["solvable"] = walkthrough is not None
    data["walkthrough"] = walkthrough
    path.write_text(json.dumps(data))
    return walkthrough


# ====================================================================== many games
@dataclass
class GeneratorConfig:
    """What to generate. Counts are games per split; ``seed`` fixes everything."""

    out: Path
    num_train: int = 0
    num_valid_seen: int = 0
    num_valid_unseen: int = 0
    seed: int = 0
    workers: int = 0  # 0: the CPU count
    max_expert_steps: int = 50
    progress: bool = True
    overwrite: bool = False  # replace games already in out/json_2.1.1 (else refuse to mix sets)

    def __post_init__(self):
        self.out = Path(self.out)
        for name in ("num_train", "num_valid_seen", "num_valid_unseen"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"GeneratorConfig.{name}={value!r} must be an integer >= 0")
        if self.max_expert_steps < 1:
            raise ValueError(f"GeneratorConfig.max_expert_steps={self.max_expert_steps} must be >= 1")

    def counts(self) -> dict[str, int]:
        return {"train": self.num_train, "valid_seen": self.num_valid_seen, "valid_unseen": self.num_valid_unseen}


def _job_seed(*keys) -> int:
    h = hashlib.sha256("/".join(str(k) for k in keys).encode()).digest()
    return int.from_bytes(h[:8], "little") % (2**31 - 1)


def _make_one(job: tuple) -> dict:
    """Generate game ``index`` of ``split`` (runs in a worker process); deterministic in its inputs."""
    out, split, index, seed, max_expert_steps = job
    task_type = FAMILIES[index % len(FAMILIES)][0]
    scenes = scenes_of_split(split)
    split_dir = Path(out) / "json_2.1.1" / split
    for attempt in range(_ATTEMPTS):
        game_seed = _job_seed(seed, split, index, attempt)
        rng = random.Random(game_seed)
        spec = sample_game(task_type, scenes, rng)
        if spec is None:
            continue
        trial = f"trial_s{seed}_{split}_{index:05d}"
        trial_dir = split_dir / spec.folder / trial
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        task_id = f"{trial}_a{attempt}"
        (trial_dir / "traj_data.json").write_text(
            json.dumps(traj_data(spec, task_id, game_seed, split, index, seed), indent=2, sort_keys=True))
        (trial_dir / "initial_state.pddl").write_text(problem_pddl(spec, trial))
        walkthrough = write_game_file(trial_dir, spec.task_desc, max_expert_steps, expert_seed=game_seed)
        if walkthrough is not None:
            return {"split": split, "index": index, "path": str(trial_dir.relative_to(out)), "attempts": attempt + 1,
                    "family": TASK_TYPE_TO_FAMILY[task_type], "expert_steps": len(walkthrough)}
        shutil.rmtree(trial_dir)
        try:
            trial_dir.parent.rmdir()  # the task folder, when this was its only trial
        except OSError:
            pass
    raise RuntimeError(f"could not generate a solvable {task_type} game for {split}[{index}] in {_ATTEMPTS} attempts")


def _iter_jobs(cfg: GeneratorConfig) -> Iterator[tuple]:
    for split, n in cfg.counts().items():
        for index in range(n):
            yield (str(cfg.out), split, index, cfg.seed, cfg.max_expert_steps)


def _init_worker():  # pragma: no cover - runs in worker processes
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def generate_games(cfg: GeneratorConfig) -> dict:
    """Generate the games of ``cfg`` into ``cfg.out`` (see module docstring); returns the manifest."""
    from tqdm import tqdm

    out = cfg.out
    games_dir = out / "json_2.1.1"
    if games_dir.exists() and any(games_dir.iterdir()):
        if not cfg.overwrite:
            raise FileExistsError(f"{games_dir} already holds games; pass --overwrite (overwrite=True) to replace "
                                  f"them, or choose another --out (mixing two generated sets would be unreproducible)")
        shutil.rmtree(games_dir)
    (out / "logic").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(domain_path(), out / "logic" / "alfred.pddl")
    shutil.copyfile(grammar_path(), out / "logic" / "alfred.twl2")
    jobs = list(_iter_jobs(cfg))
    workers = cfg.workers or (os.cpu_count() or 1)
    workers = max(1, min(workers, len(jobs) or 1))
    import multiprocessing as mp

    if mp.current_process().daemon:  # e.g. inside an EnvPool worker: daemons may not start processes
        workers = 1
    start = time.time()
    results = []
    bar = tqdm(total=len(jobs), desc=f"ALFWorld games -> {out}", unit="game", disable=not cfg.progress,
               file=sys.stderr)
    if workers == 1:
        for job in jobs:
            results.append(_make_one(job))
            bar.update(1)
    else:
        with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
            for res in pool.imap(_make_one, jobs, chunksize=1):
                results.append(res)
                bar.update(1)
    bar.close()
    results.sort(key=lambda r: (SPLITS.index(r["split"]), r["index"]))
    manifest = {
        "generator": "envs.alfworld.generate",
        "version": GEN_VERSION,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()
                   if k not in ("out", "workers", "progress", "overwrite")},
        "counts": cfg.counts(),
        "unseen_scenes": list(UNSEEN_SCENES),
        "games": results,
    }
    (out / "generation.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    if cfg.progress:
        print(f"generated {len(results)} games in {time.time() - start:.0f} s into {out}", file=sys.stderr)
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m envs.alfworld.generate",
        description="Generate ALFWorld games (official json_2.1.1 layout) from the alfworld package's room "
        "layouts, goal library, PDDL domain and grammar; every game is checked solvable by ALFWorld's "
        "hand-coded expert. Point ALFWORLD_DATA (or ALFWorldEnv(data_path=...)) at --out to play them.",
    )
    p.add_argument("--out", required=True, help="output folder (created if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace the games already in --out")
    p.add_argument("--num-train", type=int, default=0, help="games in train (seen rooms)")
    p.add_argument("--num-valid-seen", type=int, default=0, help="games in valid_seen (seen rooms, new games)")
    p.add_argument("--num-valid-unseen", type=int, default=0, help="games in valid_unseen (held-out rooms)")
    p.add_argument("--seed", type=int, default=0, help="seed: the output depends on it and the counts only")
    p.add_argument("--workers", type=int, default=0, help="processes (default: CPU count); no effect on the output")
    p.add_argument("--max-expert-steps", type=int, default=50,
                   help="keep a game only if the hand-coded expert wins within this many steps (the horizon)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.num_train + args.num_valid_seen + args.num_valid_unseen == 0:
        p.error("nothing to generate: give --num-train, --num-valid-seen and/or --num-valid-unseen")
    cfg = GeneratorConfig(out=Path(args.out), num_train=args.num_train, num_valid_seen=args.num_valid_seen,
                          num_valid_unseen=args.num_valid_unseen, seed=args.seed, workers=args.workers,
                          max_expert_steps=args.max_expert_steps, progress=not args.quiet, overwrite=args.overwrite)
    try:
        generate_games(cfg)
    except FileExistsError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
