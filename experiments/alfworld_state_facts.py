"""How fine is ALFWorld's ``state_key``? GiGPO's anchors against three definitions of the true state.

    python -m experiments.alfworld_state_facts [--games 6 --episodes 8 --steps 20 --seed 0]

``ALFWorldEnv.state_key`` hashes every dynamic PDDL fact of the engine. Some of those facts are bookkeeping that the
path leaves behind: negated literals that the route leaves behind (``not_atlocation(agent1, loc)``, ``not_holds``,
...) and ``checked(receptacle)``. Two rows in the same room, holding the same thing, with the same receptacles open,
can then get different keys because they got there by different routes. The grouping diagnostic
(``experiments.grouping_diagnostic``) scores the anchors against ``state_key``; this script measures how much of the
anchors' low precision there comes from those facts.

Rows come from uniformly random admissible actions (not a trained policy: it wanders more), ``--episodes`` per game
from the same start, as a prompt group's rollouts share one game. For each state definition it prints the anchors'
pair precision and recall (pairs of rows of one game: same observation vs same state), and for pairs that share the
physical state but not the full key, the share whose admissible commands are identical (a check that the dropped
facts do not change what the agent can do next).
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from itertools import combinations

from envs.alfworld.env import is_bookkeeping, predicate

PROG = "python -m experiments.alfworld_state_facts"

DEFINITIONS = {
    "every dynamic fact (`state_key`)": lambda facts: frozenset(facts),
    "without negated literals (`not_*`)":
        lambda facts: frozenset(f for f in facts if not predicate(f).startswith("not_")),
    "without `not_*` and `checked` (physical)": lambda facts: frozenset(f for f in facts if not is_bookkeeping(f)),
}


def anchor_purity(rows: list[tuple], key) -> tuple[float, float]:
    """(precision, recall) of the anchors (same game and observation) against ``key(facts)``, over pairs of rows of
    one game (the pair counts of ``estimators.diagnostics.pair_purity``); NaN where the pair count it divides by is
    0. rows: (game, observation, facts, admissible)."""
    from estimators.diagnostics import pair_count
    from estimators.ops import dense_ids, factorize

    nan = float("nan")
    if not rows:
        return nan, nan
    anchor = factorize([(g, o) for g, o, _, _ in rows])
    state = factorize([(g, key(f)) for g, _, f, _ in rows])
    same_obs, same_state, both = pair_count(anchor), pair_count(state), pair_count(dense_ids(anchor, state))
    return (both / same_obs if same_obs else nan), (both / same_state if same_state else nan)


def same_commands_share(rows: list[tuple]) -> tuple[int, float]:
    """Pairs of rows of one game with equal physical state but different full keys, and the share of them whose
    admissible commands are the same."""
    phys = DEFINITIONS["without `not_*` and `checked` (physical)"]
    by = defaultdict(list)
    for game, _, facts, adm in rows:
        by[(game, phys(facts))].append((frozenset(facts), tuple(adm)))
    n = same = 0
    for items in by.values():
        for (f1, a1), (f2, a2) in combinations(items, 2):
            if f1 != f2:
                n += 1
                same += a1 == a2
    return n, (same / n if n else float("nan"))


def collect(games: int, episodes: int, steps: int, seed: int, data_path: str | None = None) -> list[tuple]:
    from envs.alfworld.env import ALFWorldEnv
    from envs.alfworld.walks import random_walk_rows

    return random_walk_rows(ALFWorldEnv(data_path=data_path, expert=False), games, episodes, steps, seed)


def report(rows: list[tuple], argv: list[str]) -> str:
    games = len({r[0] for r in rows})
    md = [f"Made by `{PROG}{' ' + ' '.join(argv) if argv else ''}`: {len(rows)} rows, {games} training games, random "
          "admissible actions.", "",
          "| true state | anchors' pair precision | anchors' pair recall |", "|---|---|---|"]
    for name, key in DEFINITIONS.items():
        p, r = anchor_purity(rows, key)
        md.append(f"| {name} | {p:.3f} | {r:.3f} |")
    n, share = same_commands_share(rows)
    md += ["", f"Pairs with the same physical state but different full keys: {n}; with identical admissible commands: "
               f"{share:.3f}."]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=6)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-path", default=None, help="ALFWorld data folder (default: the generated games)")
    a = ap.parse_args(argv)
    print(report(collect(a.games, a.episodes, a.steps, a.seed, a.data_path), argv), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
