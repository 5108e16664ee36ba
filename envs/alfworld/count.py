"""Count the games each split of an ALFWorld data folder yields, and why the other trial folders are left out.

    python -m envs.alfworld.count --data ~/.cache/alfworld        # after alfworld-download
    python -m envs.alfworld.count                                 # the folder the env would use

Each trial folder (one holding ``traj_data.json``) lands in the first category that applies, in the order the
loader (``envs.alfworld.data.scan_split``, as ALFWorld's own ``AlfredTWEnv``) tests them: a ``movable``/``Sliced``
variant, no ``game.tw-pddl``, an unreadable file, a task type outside the six families, a game file without the
``"solvable"`` key (``alfworld-download``'s tw-pddl files have it; hand-made ones may not), ``"solvable": false``,
or playable. The playable count is ``ALFWorldEnv.num_tasks(split)``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from envs.alfworld.data import SPLITS, resolve_data_root
from envs.alfworld.generate import TASK_TYPE_TO_FAMILY

__all__ = ["CATEGORIES", "count_split", "main"]

CATEGORIES = ("movable/Sliced variant", "no game.tw-pddl", "unreadable", "other task type", "no solvable key",
              "solvable: false", "playable")


def _category(base: Path, trial: Path) -> str:
    if "movable" in str(trial.relative_to(base)) or "Sliced" in str(trial.relative_to(base)):
        return "movable/Sliced variant"
    game = trial / "game.tw-pddl"
    if not game.exists():
        return "no game.tw-pddl"
    try:
        task_type = json.loads((trial / "traj_data.json").read_text())["task_type"]
        data = json.loads(game.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable"
    if task_type not in TASK_TYPE_TO_FAMILY:
        return "other task type"
    if not isinstance(data, dict) or "solvable" not in data:
        return "no solvable key"
    return "playable" if data["solvable"] else "solvable: false"


def count_split(root: Path, split: str) -> dict[str, int]:
    """{category: trial folders} of ``root/json_2.1.1/<split>`` (categories: ``CATEGORIES``)."""
    base = Path(root) / "json_2.1.1" / split
    counts = dict.fromkeys(CATEGORIES, 0)
    if base.is_dir():
        for trial in sorted(p.parent for p in base.rglob("traj_data.json")):
            counts[_category(base, trial)] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.alfworld.count", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="the data folder (default: the one ALFWorldEnv would use)")
    args = ap.parse_args(argv)
    if args.data is not None:
        root, source = Path(args.data).expanduser(), "--data"
    else:
        root, source = resolve_data_root(None, generate=False)
    rows = {s: count_split(root, s) for s in SPLITS}
    print(f"ALFWorld games under {root} ({source})\n")
    print("| split | trial folders | " + " | ".join(CATEGORIES) + " |")
    print("|---|---|" + "---|" * len(CATEGORIES))
    for split, counts in rows.items():
        print(f"| {split} | {sum(counts.values())} | " + " | ".join(str(counts[c]) for c in CATEGORIES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
