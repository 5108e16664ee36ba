"""Where ALFWorld games come from, and the deterministic game list of each split.

Data folder resolution (first match wins):

1. ``ALFWorldEnv(data_path=...)``;
2. ``$ALFWORLD_DATA`` when the user set it (the official layout ``json_2.1.1/{train,valid_seen,
   valid_unseen}``, e.g. filled by ``alfworld-download``, or a folder our generator wrote);
3. ``~/.cache/alfworld`` (``alfworld-download``'s default) when it holds games;
4. the default generated set ``cache_dir("alfworld", ...)`` (``DEFAULT_COUNTS`` games, seed 0), made on
   first use with a progress bar (a file lock makes concurrent processes wait for one generation).

A folder without playable games raises ``ALFWorldDataError`` naming it and both ways to fill it.

A split's games are its trial folders holding ``traj_data.json`` and a ``game.tw-pddl`` marked
``"solvable": true`` whose task type is one of the six families, sorted by relative path (so task k is
the same everywhere); ``movable``/``Sliced`` variants are skipped, as ``AlfredTWEnv`` does.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from envs.alfworld.generate import GEN_VERSION, TASK_TYPE_TO_FAMILY, GeneratorConfig, generate_games
from envs.paths import cache_dir

__all__ = [
    "ALFWorldDataError",
    "GameEntry",
    "DEFAULT_COUNTS",
    "SPLITS",
    "resolve_data_root",
    "default_data_dir",
    "ensure_default_data",
    "scan_split",
    "fill_instructions",
    "chosen_data_root",
]

SPLITS = ("train", "valid_seen", "valid_unseen")
#: games per split of the default generated set (small: made on first use, also in CI)
DEFAULT_COUNTS = {"train": 24, "valid_seen": 12, "valid_unseen": 12}
DEFAULT_SEED = 0
_ALFWORLD_DEFAULT = Path(os.path.expanduser("~/.cache/alfworld"))
#: $ALFWORLD_DATA as the user set it, read before any ``import alfworld`` (which sets it to its default)
_USER_ALFWORLD_DATA = os.environ.get("ALFWORLD_DATA")
_INDEX_CACHE: dict[tuple[str, str], list] = {}
_WARNED: set[tuple[str, str]] = set()  # splits whose broken games were reported


class ALFWorldDataError(FileNotFoundError):
    """No playable ALFWorld games where they were expected."""


@dataclass(frozen=True)
class GameEntry:
    relpath: str  # trial folder relative to json_2.1.1/<split>
    gamefile: str  # absolute path of game.tw-pddl
    task_type: str

    @property
    def family(self) -> str:
        return TASK_TYPE_TO_FAMILY[self.task_type]


def fill_instructions(folder: Path) -> str:
    return (
        f"Fill {folder} in one of two ways:\n"
        f"  * the official games: `alfworld-download` (with ALFWORLD_DATA={folder}), or\n"
        f"  * generated games: `python -m envs.alfworld.generate --out {folder} --num-train 300 "
        f"--num-valid-seen 60 --num-valid-unseen 60 --seed 0`\n"
        f"or unset ALFWORLD_DATA to use the small default set generated on first use."
    )


def default_data_dir() -> Path:
    c = DEFAULT_COUNTS
    name = f"generated-v{GEN_VERSION}-seed{DEFAULT_SEED}-{c['train']}-{c['valid_seen']}-{c['valid_unseen']}"
    return cache_dir("alfworld", create=True) / name


def _has_games(root: Path) -> bool:
    base = root / "json_2.1.1"
    if not base.is_dir():
        return False
    for split in SPLITS:
        d = base / split
        if d.is_dir() and any(d.rglob("game.tw-pddl")):
            return True
    return False


def ensure_default_data(progress: bool = True) -> Path:
    """The default generated set, generating it first if needed (once across processes)."""
    root = default_data_dir()
    if (root / "generation.json").exists():
        return root
    lock_path = root.parent / (root.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (root / "generation.json").exists():
                return root
            tmp = root.parent / (root.name + f".partial-{os.getpid()}")
            if tmp.exists():
                shutil.rmtree(tmp)
            if progress:
                print(f"ALFWorld: no game files found; generating the default set ({DEFAULT_COUNTS}) into {root} "
                      f"(once; `python -m envs.alfworld.generate` makes bigger sets)", file=sys.stderr)
            # games are written under tmp (their game files embed no absolute path), then moved in place
            generate_games(GeneratorConfig(out=tmp, num_train=DEFAULT_COUNTS["train"],
                                           num_valid_seen=DEFAULT_COUNTS["valid_seen"],
                                           num_valid_unseen=DEFAULT_COUNTS["valid_unseen"],
                                           seed=DEFAULT_SEED, progress=progress,
                                           # in this process: a worker pool would re-run a user's script that
                                           # has no `if __name__ == "__main__":` guard, and those copies would
                                           # wait forever on the lock this process holds [choice; ~1 min]
                                           workers=1))
            if root.exists():
                shutil.rmtree(root)
            os.replace(tmp, root)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root


def chosen_data_root() -> Path | None:
    """The games folder the user chose outside the env's options — ``$ALFWORLD_DATA`` as set before ``import
    alfworld``, else the ``alfworld-download`` default when it holds games — or None when envs play the generated
    default set. Cache keys of anything trained on ALFWorld games (the SFT warm start) include it."""
    user = _USER_ALFWORLD_DATA
    if user and Path(user).expanduser() != _ALFWORLD_DEFAULT:
        return Path(user).expanduser().resolve()
    return _ALFWORLD_DEFAULT if _has_games(_ALFWORLD_DEFAULT) else None


def resolve_data_root(data_path: str | os.PathLike | None = None, generate: bool = True) -> tuple[Path, str]:
    """``(root, source)`` of the games to play (see module docstring)."""
    if data_path is not None:
        root = Path(data_path).expanduser()
        if not _has_games(root):
            raise ALFWorldDataError(f"ALFWorld data_path {root} holds no games under json_2.1.1/{{train,valid_seen,"
                                    f"valid_unseen}}.\n" + fill_instructions(root))
        return root, "data_path"
    user = _USER_ALFWORLD_DATA
    if user and Path(user).expanduser() != _ALFWORLD_DEFAULT:
        root = Path(user).expanduser()
        if not _has_games(root):
            raise ALFWorldDataError(f"ALFWORLD_DATA={root} holds no games under json_2.1.1/{{train,valid_seen,"
                                    f"valid_unseen}}.\n" + fill_instructions(root))
        return root, "ALFWORLD_DATA"
    if _has_games(_ALFWORLD_DEFAULT):
        return _ALFWORLD_DEFAULT, "alfworld-download default"
    if not generate:
        raise ALFWorldDataError("no ALFWorld games found.\n" + fill_instructions(default_data_dir()))
    return ensure_default_data(), "generated default"


def _index_key(root: Path, split: str) -> str:
    return hashlib.sha256(f"{root.resolve()}|{split}".encode()).hexdigest()[:24]


def scan_split(root: Path, split: str) -> list[GameEntry]:
    """The playable games of ``split`` under ``root`` (see module docstring); [] when none."""
    try:
        base = (Path(root) / "json_2.1.1" / split).resolve()
    except (RuntimeError, OSError) as e:  # a symbolic link that leads back to itself
        raise ALFWorldDataError(f"{Path(root) / 'json_2.1.1' / split}: the split folder cannot be opened ({e}); "
                                "replace the link with the folder of the split's games (or a link to it)") from e
    key = (str(base), split)
    if not base.is_dir():
        return []
    trials = sorted(p.parent for p in base.rglob("traj_data.json"))
    stamp = [(str(t.relative_to(base)), _mtime(t / "game.tw-pddl"), _mtime(t / "traj_data.json")) for t in trials]
    cached = _INDEX_CACHE.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    disk = cache_dir("alfworld", "index") / f"{_index_key(base, split)}.json"
    entries = None
    if disk.exists():
        try:
            saved = json.loads(disk.read_text())
            if saved.get("stamp") == [list(s) for s in stamp]:
                entries = [GameEntry(r, str(base / r / "game.tw-pddl"), t) for r, t in saved["games"]]
        except (OSError, ValueError, KeyError):
            entries = None
    if entries is None:
        entries, broken = [], []
        for trial in trials:
            rel = str(trial.relative_to(base))
            if "movable" in rel or "Sliced" in rel:
                continue
            game = trial / "game.tw-pddl"
            if not game.exists():
                broken.append(f"{rel}: no game.tw-pddl")
                continue
            try:
                task_type = json.loads((trial / "traj_data.json").read_text())["task_type"]
                if task_type not in TASK_TYPE_TO_FAMILY:
                    broken.append(f"{rel}: unknown task_type {task_type!r}")
                    continue
                if not _is_solvable(game):
                    continue
            except (OSError, ValueError, KeyError, AttributeError) as e:
                broken.append(f"{rel}: unreadable traj_data.json or game.tw-pddl ({type(e).__name__})")
                continue
            entries.append(GameEntry(rel, str(game), task_type))
        tmp = disk.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"stamp": stamp, "games": [[e.relpath, e.task_type] for e in entries],
                                   "broken": broken}))
        os.replace(tmp, disk)
    else:
        try:
            broken = list(json.loads(disk.read_text()).get("broken", []))
        except (OSError, ValueError, AttributeError):
            broken = []
    if broken and key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"ALFWorld split {split!r} in {base}: {len(broken)} broken game(s) skipped, {len(entries)} "
                      f"playable (e.g. {broken[0]}); re-download or regenerate the games to play them all",
                      stacklevel=2)
    _INDEX_CACHE[key] = (stamp, entries)
    return entries


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0


def _is_solvable(game: Path) -> bool:
    return bool(json.loads(game.read_text()).get("solvable"))
