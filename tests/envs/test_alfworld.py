"""ALFWorld through our interface: generated games of every family, a hand-written official-format game,
data errors, state keys, engine speed-ups, and the generator's determinism and validity."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import envs
from envs.alfworld import data as alf_data
from envs.alfworld.data import ALFWorldDataError
from envs.alfworld.engine import install_speedups, speedups_installed, uninstall_speedups
from envs.alfworld.env import ALFWorldEnv
from envs.alfworld.generate import FAMILIES, UNSEEN_SCENES, GeneratorConfig, generate_games, write_game_file

HANDWRITTEN = Path(__file__).parent / "data" / "alfworld_handwritten"


def play_expert(env, split, index, seed=0):
    obs, info = env.reset(seed=seed, options={"split": split, "task_index": index})
    trace = [(obs, tuple(info["admissible_actions"]), info["state_key"], info["won"])]
    done = False
    while not done:
        action = envs.expert_action(env)
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((action, obs, tuple(info["admissible_actions"]), info["state_key"], info["won"], reward))
        done = terminated or truncated
    return trace, info, reward, terminated


def test_expert_wins_every_family_through_the_interface(alfworld_data):
    env = ALFWorldEnv(data_path=alfworld_data)
    assert [env.num_tasks(s) for s in env.splits] == [6, 2, 2]
    won = {}
    for split in env.splits:
        for k in range(env.num_tasks(split)):
            trace, info, reward, terminated = play_expert(env, split, k)
            family = env.task_family_of(split, k)
            assert info["task_family"] == family
            won.setdefault(family, []).append(bool(info["won"] and terminated and reward == 10.0))
    assert set(won) == {f for _, f in FAMILIES}
    assert all(all(v) for v in won.values()), won


def test_handwritten_official_format_game(tmp_path):
    root = tmp_path / "data"
    shutil.copytree(HANDWRITTEN, root)
    trial = next((root / "json_2.1.1" / "valid_seen").glob("*/trial_*"))
    walkthrough = write_game_file(trial)  # what alfworld-generate does for an official traj folder
    assert walkthrough and walkthrough[-1] == "move apple 1 to countertop 1"
    env = ALFWorldEnv(data_path=root)
    assert env.num_tasks("valid_seen") == 1 and env.num_tasks("train") == 0
    obs, info = env.reset(seed=0, options={"split": "valid_seen", "task_index": 0})
    assert "a fridge 1" in obs and "a sinkbasin 1" in obs
    assert info["task"] == "warm up an apple and leave it on the counter" and info["task_family"] == "heat"
    assert "go to microwave 1" in info["admissible_actions"] and "help" not in info["admissible_actions"]
    script = ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to microwave 1",
              "heat apple 1 with microwave 1", "go to countertop 1", "move apple 1 to countertop 1"]
    for action in script:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["noop"], (action, obs)
    assert terminated and info["won"] and reward == 10.0
    assert obs == "You move the apple 1 to the countertop 1."
    with pytest.raises(ALFWorldDataError, match=r"split 'train' has no playable games in .*json_2.1.1/train"):
        env.reset(seed=0, options={"split": "train"})


@pytest.mark.parametrize("via", ["data_path", "ALFWORLD_DATA"])
def test_missing_data_names_the_folder_and_both_fixes(tmp_path, monkeypatch, via):
    empty = tmp_path / "nothing_here"
    (empty / "json_2.1.1" / "train").mkdir(parents=True)
    kwargs = {}
    if via == "data_path":
        kwargs["data_path"] = str(empty)
    else:
        monkeypatch.setattr(alf_data, "_USER_ALFWORLD_DATA", str(empty))
    with pytest.raises(ALFWorldDataError) as err:
        ALFWorldEnv(**kwargs)
    message = str(err.value)
    assert str(empty) in message and "alfworld-download" in message
    assert "python -m envs.alfworld.generate --out" in message


def test_malformed_actions_are_nothing_happens(alfworld_data):
    env = ALFWorldEnv(data_path=alfworld_data)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    key = info["state_key"]
    for action in ["", "go to the moon", "x" * 100_000, "\x00\x07", "craft 1 stick using 2 planks", None, "GO TO"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == "Nothing happens." and info["noop"] and reward == 0 and not terminated
        assert info["state_key"] == key and info["anchor_obs"] == obs


def test_state_key_tracks_the_pddl_state(alfworld_data):
    a, b = ALFWorldEnv(data_path=alfworld_data), ALFWorldEnv(data_path=alfworld_data, expert=False)
    _, ia = a.reset(seed=1, options={"task_index": 2})
    _, ib = b.reset(seed=5, options={"task_index": 2})
    assert ia["state_key"] == ib["state_key"] and ia["state_key"][0] == "alfworld"
    go = next(x for x in ia["admissible_actions"] if x.startswith("go to"))
    ia2, ib2 = a.step(go)[-1], b.step(go)[-1]
    assert ia2["state_key"] == ib2["state_key"] != ia["state_key"]
    facts = a.state_facts()
    assert facts == sorted(facts) and any(f.startswith("atlocation(agent1") for f in facts)
    assert not any(f.startswith(("receptacletype", "cancontain")) for f in facts)
    with pytest.raises(RuntimeError, match="expert=False"):
        b.expert_action()


def test_physical_state_key_forgets_the_route(alfworld_data):
    """Arriving at one place directly or by way of another leaves a negated literal of the detour behind: the full
    key tells the two apart, the physical key (``state_key="physical"``) does not; both are deterministic."""
    full = ALFWorldEnv(data_path=alfworld_data, expert=False)
    phys = ALFWorldEnv(data_path=alfworld_data, expert=False, state_key="physical")
    _, info = full.reset(seed=1, options={"task_index": 2})
    go = [x for x in info["admissible_actions"] if x.startswith("go to")]
    keys = {}
    for name, route in (("direct", [go[0]]), ("detour", [go[1], go[0]])):
        for env in (full, phys):
            env.reset(seed=1, options={"task_index": 2})
        for action in route:
            i_full, i_phys = full.step(action)[-1], phys.step(action)[-1]
        keys[name] = (i_full["state_key"], i_phys["state_key"], set(full.state_facts()))
    (f1, p1, facts1), (f2, p2, facts2) = keys["direct"], keys["detour"]
    diff = facts1 ^ facts2
    assert diff and all(f.startswith("not_") for f in diff)  # only route bookkeeping differs
    assert f1 != f2 and p1 == p2 and p1[:2] == f1[:2] and p1 != f1
    with pytest.raises(ValueError, match="state_key='exact'.*physical"):
        ALFWorldEnv(data_path=alfworld_data, state_key="exact")


def test_speedups_change_no_observation(alfworld_data):
    assert speedups_installed()
    env = ALFWorldEnv(data_path=alfworld_data)
    picks = [k for k in range(env.num_tasks("train")) if env.task_family_of("train", k) in ("pick2", "look")]
    fast = [play_expert(env, "train", k, seed=3)[0] for k in picks]
    uninstall_speedups()
    try:
        plain_env = ALFWorldEnv(data_path=alfworld_data, speedups=False)
        assert not speedups_installed()
        plain = [play_expert(plain_env, "train", k, seed=3)[0] for k in picks]
    finally:
        install_speedups()
    assert fast == plain


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def test_generator_is_deterministic_and_worker_count_free(tmp_path):
    one = generate_games(GeneratorConfig(out=tmp_path / "a", num_train=2, num_valid_unseen=1, seed=3, workers=1,
                                         progress=False))
    generate_games(GeneratorConfig(out=tmp_path / "b", num_train=2, num_valid_unseen=1, seed=3, workers=2,
                                   progress=False))
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")
    other = generate_games(GeneratorConfig(out=tmp_path / "c", num_train=2, num_valid_unseen=1, seed=4, workers=1,
                                           progress=False))
    assert [g["path"] for g in one["games"]] != [g["path"] for g in other["games"]]
    with pytest.raises(FileExistsError, match="--overwrite"):
        generate_games(GeneratorConfig(out=tmp_path / "a", num_train=1, seed=3, workers=1, progress=False))


def test_generated_games_are_valid(alfworld_data):
    import alfworld.gen.constants as C

    manifest = json.loads((alfworld_data / "generation.json").read_text())
    for game in manifest["games"]:
        trial = alfworld_data / game["path"]
        traj = json.loads((trial / "traj_data.json").read_text())
        scene = traj["scene"]["scene_num"]
        assert (scene in UNSEEN_SCENES) == (game["split"] == "valid_unseen")
        room = next(name for name, nums in (("Kitchen", range(1, 31)), ("LivingRoom", range(201, 231)),
                                            ("Bedroom", range(301, 331)), ("Bathroom", range(401, 431)))
                                            if scene in nums)
        assert room in C.GOALS_VALID[traj["task_type"]]
        gamefile = json.loads((trial / "game.tw-pddl").read_text())
        assert gamefile["solvable"] is True and len(gamefile["walkthrough"]) == game["expert_steps"] <= 50
        problem = (trial / "initial_state.pddl").read_text()
        assert problem == gamefile["pddl_problem"]
        problem = problem.split("(:goal")[0]
        types = dict(re.findall(r"\((?:objectType|receptacleType) (\S+) (\S+)Type\)", problem))
        can = set(re.findall(r"\(canContain (\S+)Type (\S+)Type\)", problem))
        toggles = set(re.findall(r"\(toggleable (\S+)\)", problem))
        for obj, rec in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem):
            assert obj in toggles or (types[rec], types[obj]) in can, (obj, rec)
        params = traj["pddl_params"]
        target_starts = [rec for obj, rec in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem)
                         if types[obj] == params["object_target"]]
        assert target_starts and all(types[r] != params["parent_target"] for r in target_starts)


def test_gymnasium_make_and_checker(alfworld_data):
    from gymnasium.utils.env_checker import check_env

    env = gym.make("ALFWorld-v0", data_path=str(alfworld_data), max_steps=5)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["split"] == "train"
    check_env(env.unwrapped)


_UNGUARDED_SCRIPT = """
import gymnasium as gym
import envs  # registers the ids
env = gym.make("ALFWorld-v0")
obs, info = env.reset(seed=0)
print("SOURCE", env.unwrapped.data_source, [env.unwrapped.num_tasks(s) for s in env.unwrapped.splits])
print("TASK" if "Your task is to:" in obs else "NO TASK")
"""


@pytest.mark.slow
def test_default_data_is_generated_on_first_use_even_from_a_script_without_main_guard(tmp_path):
    """gymnasium.make("ALFWorld-v0") with no data anywhere, at the top level of a script with no
    `if __name__ == "__main__":` guard: the default set is generated (in this process: spawn workers would re-run
    the script and wait forever on the lock the parent holds), then played. A hang fails on the timeout."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    script = tmp_path / "my_script.py"
    script.write_text(_UNGUARDED_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    env.update(BIPACE_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"), PYTHONPATH=str(repo),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = list(alf_data.DEFAULT_COUNTS.values())
    assert f"SOURCE generated default {counts}" in done.stdout and "TASK" in done.stdout.split("SOURCE")[1], done.stdout


def test_generator_command_line(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "envs.alfworld.generate", "--out", str(tmp_path / "g"), "--num-valid-unseen", "1",
           "--workers", "1", "--seed", "5", "--quiet"]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "g" / "generation.json").read_text())
    assert manifest["counts"] == {"train": 0, "valid_seen": 0, "valid_unseen": 1} and len(manifest["games"]) == 1
    assert (tmp_path / "g" / "logic" / "alfred.twl2").exists()
    again = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    assert again.returncode != 0 and "--overwrite" in again.stderr
    empty = subprocess.run(cmd[:5], cwd=repo, capture_output=True, text=True, timeout=120)
    assert empty.returncode != 0 and "nothing to generate" in empty.stderr


def test_count_says_why_trial_folders_are_left_out(tmp_path, capsys):
    """envs.alfworld.count on an official layout: the hand-written game (playable once its game file is written, as
    alfworld-generate does) and copies of it broken in each way the loader, like ALFWorld's AlfredTWEnv, skips."""
    from envs.alfworld.count import count_split, main

    root = tmp_path / "data"
    shutil.copytree(HANDWRITTEN, root)
    seen = root / "json_2.1.1" / "valid_seen"
    good = next(seen.glob("*/trial_*"))
    assert write_game_file(good)
    variants = {"no game.tw-pddl": "pick_heat_then_place_in_recep-Apple-None-CounterTop-2",
                "solvable: false": "pick_heat_then_place_in_recep-Apple-None-CounterTop-3",
                "no solvable key": "pick_heat_then_place_in_recep-Apple-None-CounterTop-4",
                "other task type": "pick_heat_then_place_in_recep-Apple-None-CounterTop-5",
                "movable/Sliced variant": "pick_heat_then_place_in_recep-AppleSliced-None-CounterTop-1"}
    for reason, folder in variants.items():
        trial = seen / folder / good.name
        shutil.copytree(good, trial)
        game = json.loads((trial / "game.tw-pddl").read_text())
        if reason == "no game.tw-pddl":
            (trial / "game.tw-pddl").unlink()
        elif reason == "solvable: false":
            game["solvable"] = False
        elif reason == "no solvable key":
            del game["solvable"]
        elif reason == "other task type":
            traj = json.loads((trial / "traj_data.json").read_text())
            traj["task_type"] = "pick_and_place_with_movable_recep"
            (trial / "traj_data.json").write_text(json.dumps(traj))
        if (trial / "game.tw-pddl").exists():
            (trial / "game.tw-pddl").write_text(json.dumps(game))
    counts = count_split(root, "valid_seen")
    assert counts == {"movable/Sliced variant": 1, "no game.tw-pddl": 1, "unreadable": 0, "other task type": 1,
                      "no solvable key": 1, "solvable: false": 1, "playable": 1}
    assert ALFWorldEnv(data_path=root).num_tasks("valid_seen") == counts["playable"]
    assert main(["--data", str(root)]) == 0
    out = capsys.readouterr().out
    assert "| valid_seen | 6 | 1 | 1 | 0 | 1 | 1 | 1 | 1 |" in out and "| train | 0 |" in out


def _handwritten_with_copies(tmp_path: Path, n: int) -> tuple[Path, Path, list[Path]]:
    root = tmp_path / "data"
    shutil.copytree(HANDWRITTEN, root)
    good = next((root / "json_2.1.1" / "valid_seen").glob("*/trial_*"))
    assert write_game_file(good)
    copies = []
    for k in range(n):
        trial = good.parent.parent / f"pick_heat_then_place_in_recep-Apple-None-CounterTop-{10 + k}" / good.name
        shutil.copytree(good, trial)
        copies.append(trial)
    return root, good, copies


def test_broken_games_are_skipped_with_a_warning_that_counts_them(tmp_path):
    root, _, copies = _handwritten_with_copies(tmp_path, 3)
    (copies[0] / "traj_data.json").write_text('{"task_type": "pick_heat')  # truncated
    (copies[1] / "game.tw-pddl").write_bytes(b"\x00garbage")
    with pytest.warns(UserWarning, match=r"split 'valid_seen' .*: 2 broken game\(s\) skipped, 2 playable"):
        env = ALFWorldEnv(data_path=root)
    assert env.num_tasks("valid_seen") == 2


def test_a_broken_pddl_names_its_game_file(tmp_path):
    from envs.alfworld.engine import ALFWorldGameError

    root, good, copies = _handwritten_with_copies(tmp_path, 1)
    for trial in (good, copies[0]):
        game = json.loads((trial / "game.tw-pddl").read_text())
        game["pddl_problem"] = game["pddl_problem"][: len(game["pddl_problem"]) // 2]  # a truncated problem
        (trial / "game.tw-pddl").write_text(json.dumps(game))
    env = ALFWorldEnv(data_path=root)
    with pytest.raises(ALFWorldGameError, match=r"game file .*game\.tw-pddl cannot be loaded"):
        env.reset(seed=0, options={"split": "valid_seen", "task_index": 0})


def test_the_translation_cache_holds_data_never_code_and_names_a_bad_file(tmp_path, monkeypatch, caplog):
    """The disk cache of PDDL translations (which may sit on a shared disk) is compressed JSON: a file replaced by a
    pickle that would run a command is reported by its path and recomputed, never unpickled; a ``*.pkl.z`` file of
    the old format is never opened; the episodes are the same from a fresh translation and from the cache."""
    import logging
    import pickle
    import zlib

    from envs.alfworld import engine

    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "data"
    shutil.copytree(HANDWRITTEN, root)
    write_game_file(next((root / "json_2.1.1" / "valid_seen").glob("*/trial_*")))
    folder = tmp_path / "cache" / "alfworld" / "translations"
    engine._MEMORY_CACHE.clear()
    env = ALFWorldEnv(data_path=root)
    fresh = play_expert(env, "valid_seen", 0)
    files = sorted(folder.iterdir())
    assert files and all(f.name.endswith(".sas.json.z") for f in files)
    for f in files:
        assert json.loads(zlib.decompress(f.read_bytes()))["sas"].startswith("begin_version")
    engine._MEMORY_CACHE.clear()
    assert play_expert(env, "valid_seen", 0) == fresh  # read back from the disk cache

    class Payload:  # what a hostile user of a shared cache could write: unpickling it runs os.mkdir(marker)
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "code-ran"),)

    hostile = zlib.compress(pickle.dumps(Payload()))
    for f in files:
        f.write_bytes(hostile)
        (folder / (f.name.split(".")[0] + ".pkl.z")).write_bytes(hostile)  # the old format's name for the key
    engine._MEMORY_CACHE.clear()
    with caplog.at_level(logging.WARNING, logger="envs.alfworld.engine"):
        assert play_expert(env, "valid_seen", 0) == fresh
    assert not (tmp_path / "code-ran").exists()
    said = caplog.text
    assert all(f"{f} does not read as compressed JSON" in said for f in files), said
    assert "game.tw-pddl" not in said
    assert all(json.loads(zlib.decompress(f.read_bytes()))["sas"].startswith("begin_version") for f in files)
    env.close()


def test_a_split_that_links_to_itself_is_a_data_error_naming_the_folder(tmp_path):
    split = tmp_path / "json_2.1.1" / "valid_seen"
    split.parent.mkdir()
    split.symlink_to("valid_seen")  # the link leads back to itself
    with pytest.raises(ALFWorldDataError, match="valid_seen: the split folder cannot be opened"):
        alf_data.scan_split(tmp_path, "valid_seen")
