"""``experiments.grouping_diagnostic state-facts``: the fact filters, the pair counts by hand, and a short run on
generated games."""
from __future__ import annotations

import math

import pytest

from envs.alfworld.env import is_bookkeeping, predicate
from experiments.grouping_diagnostic import (
    DEFINITIONS,
    anchor_purity,
    collect_walks,
    facts_report,
    same_commands_share,
)

PHYS = DEFINITIONS["without `not_*` and `checked` (physical)"]
FULL = DEFINITIONS["every dynamic fact (`state_key`)"]


def test_fact_filters():
    assert predicate("inreceptacle(apple_1,fridge_1)") == "inreceptacle"
    assert is_bookkeeping("not_atlocation(agent1,loc_2)") and is_bookkeeping("checked(drawer_1)")
    assert not is_bookkeeping("atlocation(agent1,loc_2)") and not is_bookkeeping("opened(drawer_1)")
    assert PHYS(("atlocation(agent1,loc_2)", "checked(drawer_1)")) == frozenset({"atlocation(agent1,loc_2)"})


def test_anchor_purity_by_hand():
    at = "atlocation(agent1,loc_1)"
    rows = [("g", "You arrive at bed 1.", (at,), ("go to desk 1",)),
            ("g", "You arrive at bed 1.", (at, "checked(drawer_1)"), ("go to desk 1",)),
            ("g", "Nothing happens.", (at,), ("go to desk 1",)),
            ("h", "You arrive at bed 1.", (at,), ("go to desk 1",))]  # another game: never paired
    # full key: 1 same-observation pair (rows 0, 1), different states; 1 same-state pair (rows 0, 2)
    p, r = anchor_purity(rows, FULL)
    assert (p, r) == (0.0, 0.0)
    # physical: rows 0, 1, 2 one state (3 pairs), the observation pair is one of them
    p, r = anchor_purity(rows, PHYS)
    assert p == 1.0 and r == pytest.approx(1 / 3)
    assert same_commands_share(rows) == (2, 1.0)  # pairs (0, 1) and (1, 2) differ only in `checked`
    assert math.isnan(anchor_purity(rows[:1], FULL)[0])


def test_a_short_run_on_generated_games(alfworld_data):
    rows = collect_walks(games=2, episodes=2, steps=6, seed=0, data_path=str(alfworld_data))
    assert len({r[0] for r in rows}) == 2 and 4 <= len(rows) <= 24
    # the physical key is coarser than the full one: more same-observation pairs count as one state
    p_full, _ = anchor_purity(rows, FULL)
    p_phys, _ = anchor_purity(rows, PHYS)
    assert p_phys >= p_full
    md = facts_report(rows, ["--games", "2"])
    assert md.startswith("Made by `python -m experiments.grouping_diagnostic state-facts --games 2`")
    assert md.count("\n| ") == 4


def test_the_subcommand_prints_the_table(alfworld_data, capsys):
    from experiments.grouping_diagnostic import main

    args = ["--games", "1", "--episodes", "2", "--steps", "3", "--data-path", str(alfworld_data)]
    assert main(["state-facts", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Made by `python -m experiments.grouping_diagnostic state-facts {' '.join(args)}`")
