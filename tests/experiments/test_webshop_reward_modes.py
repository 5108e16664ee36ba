"""experiments.webshop_reward_modes: the table of how many scores each correction of the original's reward changes."""
from __future__ import annotations

import re

from experiments import webshop_reward_modes as wrm
from tests.envs.webshop_helpers import small_catalogue


def test_counts_each_correction_against_the_original(tmp_path_factory, tmp_path):
    folder = small_catalogue(tmp_path_factory)
    out = tmp_path / "modes.md"
    assert wrm.main(["--data-dir", str(folder), "--goals", "60", "--noun-extractor", "heuristic", "--out",
                     str(out)]) == 0
    text, records = out.read_text().split("## Official-format records")
    rows = dict(re.findall(r"^\| (.+?) \| \d+ \| \d+ \| (\d+) \|", text, re.M))
    assert set(rows) >= {"`exact_size_options` alone", "`compare_values` alone", "`mode: corrected` (all)",
                         "all but `keep_accents`"}
    counts = {k: int(v) for k, v in rows.items()}
    # exact sizes change scores on a catalogue with size groups; all corrections together change some too
    assert counts["`exact_size_options` alone"] > 0 and counts["`mode: corrected` (all)"] > 0
    # the generated catalogue is lower-case ASCII: the accent correction changes nothing there
    assert counts["`keep_accents` alone"] == 0
    assert "python -m experiments.webshop_reward_modes --data-dir" in text and "noun extractor `heuristic`" in text
    # the committed sample's official-format records: grouping their human options changes scores
    on_records = {k: int(v) for k, v in re.findall(r"^\| (.+?) \| \d+ \| \d+ \| (\d+) \|", records, re.M)}
    assert "Official-format records: those of `tests/envs/data/webshop_original_human_scores.json`" in text
    assert on_records["`group_human_options` alone"] > 0 and on_records["`mode: corrected` (all)"] > 0


def test_triples_are_seeded(tmp_path_factory):
    import random

    from envs.webshop import WebShopConfig, load_catalogue

    cat = load_catalogue(WebShopConfig(data_dir=str(small_catalogue(tmp_path_factory)), share_catalogue=False))

    a = [(g.asin, i, sorted(c.items())) for g, i, c in wrm.triples(cat, 20, random.Random(3))]
    b = [(g.asin, i, sorted(c.items())) for g, i, c in wrm.triples(cat, 20, random.Random(3))]
    assert a == b and len(a) >= 40
