"""WebShop purchase score on hand-made products: each term, each switch, the fuzzy and exact rules."""
from __future__ import annotations

import dataclasses

import pytest

from envs.webshop import RewardConfig
from envs.webshop.data import Goal, Product
from envs.webshop.reward import attribute_matches, option_matches, score_purchase, type_reward
from envs.webshop.text import NounExtractor, fuzzy_token_set, normalize_color, s_stem, search_tokens

HEUR = NounExtractor("heuristic")


def product(**kw) -> Product:
    base = dict(
        asin="B0TEST0001", title="Acme Tea Tree Shampoo for Dry Hair", description="A gentle shampoo.",
        bullets=("Made with natural ingredients", "Safe for color treated hair"), pricing=(12.0,), price_tag="$12.0",
        options={"size": ("8 fl oz", "16 fl oz"), "scent": ("lavender", "navy blue mint")},
        attributes=("tea tree", "essential oil", "sulfate free"), query="shampoo", category="beauty",
        product_category="Beauty & Personal Care › Hair Care › Shampoos",
    )
    base.update(kw)
    return Product(**base)


def goal(**kw) -> Goal:
    base = dict(
        asin="B0TEST0001", product_index=0, category="beauty", query="shampoo",
        name="Acme Tea Tree Shampoo for Dry Hair", product_category="Beauty & Personal Care › Hair Care › Shampoos",
        instruction_text="i need tea tree shampoo", attributes=("tea tree", "essential oils"),
        goal_options=(("size", "16 fl oz"), ("scent", "lavender")), price_upper=20.0,
        base_instruction="i need tea tree shampoo",
    )
    base.update(kw)
    return Goal(**base)


CFG = RewardConfig(mode="corrected", noun_extractor="heuristic")


def test_fuzzy_ratio_matches_thefuzz_conventions():
    assert fuzzy_token_set("essential oil", "essential oils") > 85
    assert fuzzy_token_set("Tea-Tree", "tea tree") == 100  # case and punctuation are processed away
    assert fuzzy_token_set("tea tree oil", "tea tree") == 100  # a token subset scores 100 (token-set rule)
    assert fuzzy_token_set("", "x") == 0
    assert fuzzy_token_set("sulfate free", "paraben free") <= 85
    assert normalize_color("light blue") == "blue" and normalize_color("heather grey") == "grey"
    assert normalize_color("walnut") == "walnut" and normalize_color("xyz") == "xyz"


def test_search_tokens():
    assert search_tokens("The Running SHOES for Men's") == ["running", "shoe", "men"]
    assert [s_stem(w) for w in ("berries", "boxes", "glasses", "bus", "cats", "toes")] == \
           ["berry", "boxe", "glasse", "bus", "cat", "toe"]


def test_perfect_purchase_scores_one():
    b = score_purchase(product(), goal(), 12.0, {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert b.score == 1.0 and b.r_type == 1.0 and b.n_attributes == 2 and b.n_options == 2 and b.price_ok


def test_attribute_term():
    p = product()
    assert attribute_matches(p, ("tea tree", "essential oils"), cfg=CFG) == 2  # fuzzy: "essential oil"
    assert attribute_matches(p, ("natural ingredients",), cfg=CFG) == 1  # substring of a bullet point
    assert attribute_matches(p, ("gentle",), cfg=CFG) == 1  # substring of the description
    assert attribute_matches(p, ("dry hair",), cfg=CFG) == 1  # substring of the title
    assert attribute_matches(p, ("paraben free", "long lasting"), cfg=CFG) == 0
    assert attribute_matches(p, ("essential oils",), threshold=97, cfg=CFG) == 0  # threshold switch
    b = score_purchase(p, goal(attributes=("tea tree", "paraben free")), 12.0,
                       {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert b.n_attributes == 1 and b.score == pytest.approx(4 / 5)
    off = dataclasses.replace(CFG, use_attributes=False)
    assert score_purchase(p, goal(attributes=("tea tree", "paraben free")), 12.0,
                          {"size": "16 fl oz", "scent": "lavender"}, off, HEUR).score == 1.0


def test_size_options_match_exactly_and_others_fuzzily():
    p = product(options={"size": ("x-large", "xx-large"), "color": ("light blue", "black")})
    g = (("size", "x-large"), ("color", "blue"))
    assert option_matches(p, {"size": "x-large", "color": "light blue"}, g, CFG) == 2  # colour normalised
    assert option_matches(p, {"size": "xx-large", "color": "black"}, g, CFG) == 0
    assert option_matches(p, {"size": "X-Large "}, (("size", "x-large"),), CFG) == 1  # case/space only
    fuzzy_sizes = dataclasses.replace(CFG, exact_size_options=False)
    assert option_matches(p, {"size": "xx-large"}, (("size", "x-large"),), fuzzy_sizes) == 1  # the public code's
    # values compare across groups, as the original does
    assert option_matches(p, {"color": "x-large"}, (("size", "x-large"),), CFG) == 1
    assert option_matches(p, {}, (("color", "cool powder snow"),), dataclasses.replace(CFG, option_threshold=85)) == 0
    assert option_matches(p, {"color": "powder snow"}, ((None, "cool powder snow"),), CFG) == 1


def test_option_text_fallback_modes():
    # the product has no colour group; "black" is in its title
    p = product(title="Acme Black Shampoo", options={"size": ("8 fl oz",)})
    g = (("color", "black"),)
    assert option_matches(p, {}, g, dataclasses.replace(CFG, option_text_fallback="missing_group")) == 1
    assert option_matches(p, {}, g, dataclasses.replace(CFG, option_text_fallback="always")) == 1
    assert option_matches(p, {}, g, dataclasses.replace(CFG, option_text_fallback="never")) == 0
    # the product offers colours: a wrong choice is not rescued by the text, except under "always"
    q = product(title="Acme Black Shampoo", options={"color": ("black", "white")})
    assert option_matches(q, {"color": "white"}, g, CFG) == 0
    assert option_matches(q, {"color": "white"}, g, dataclasses.replace(CFG, option_text_fallback="always")) == 1
    # unnamed goal options (human goals): rescued only when no group offers a matching value
    assert option_matches(q, {}, ((None, "black"),), CFG) == 0
    assert option_matches(p, {}, ((None, "black"),), CFG) == 1


def test_option_and_price_terms_and_switches():
    p, g = product(), goal()
    wrong = {"size": "8 fl oz", "scent": "lavender"}
    b = score_purchase(p, g, 12.0, wrong, CFG, HEUR)
    assert b.n_options == 1 and b.score == pytest.approx(4 / 5)
    assert score_purchase(p, g, 12.0, wrong, dataclasses.replace(CFG, use_options=False), HEUR).score == 1.0
    over = score_purchase(p, g, 25.0, {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert not over.price_ok and over.score == pytest.approx(4 / 5)
    assert score_purchase(p, g, 25.0, {"size": "16 fl oz", "scent": "lavender"},
                          dataclasses.replace(CFG, use_price=False), HEUR).score == 1.0
    at_bound = score_purchase(p, g, 20.0, {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert at_bound.price_ok and at_bound.score == 1.0
    # everything off but the type term: the score is r_type
    only_type = RewardConfig(use_attributes=False, use_options=False, use_price=False, noun_extractor="heuristic")
    assert score_purchase(p, g, 99.0, {}, only_type, HEUR).score == 1.0


def test_type_term_levels():
    g = goal(name="Acme Shampoo Bottle Pump")  # heuristic nouns: acme, shampoo, bottle, pump
    assert HEUR.nouns(g.name) == ("acme", "shampoo", "bottle", "pump")
    same = product(title="Zeta Shampoo Bottle Jar")  # 2/4 nouns shared, query equal
    assert type_reward(same, g, HEUR) == (1.0, True, True, 0.5)
    # no query match, one shared category level, title share 0.25 > 0.2: still 1.0
    other = product(title="Zeta Shampoo Jar", query="soap", product_category="Beauty & Personal Care › Soap")
    assert type_reward(other, g, HEUR)[0] == 1.0
    # title share exactly 0.2 is not enough without a query or category match: 0.5
    g5 = goal(name="Acme Shampoo Bottle Pump Kit")
    assert type_reward(other, g5, HEUR) == (0.5, False, False, 0.2)
    # same query but a title share under 0.1: 0.1
    g11 = goal(name="Acme Shampoo Bottle Pump Kit Lid Cap Tube Jug Box Bag")
    assert type_reward(product(title="Shampoo"), g11, HEUR)[0:2] == (0.1, True)
    # no shared noun at all: 0 whatever else matches
    assert type_reward(product(title="Lamp"), g, HEUR)[0] == 0.0
    # goal title without nouns: title score 0.2
    assert type_reward(product(title="Lamp"), goal(name="the and"), HEUR)[3] == 0.2
    # the type term multiplies; switched off it is 1
    b = score_purchase(product(title="Lamp"), g, 12.0, {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert b.r_type == 0.0 and b.score == 0.0
    b = score_purchase(product(title="Lamp"), g, 12.0, {"size": "16 fl oz", "scent": "lavender"},
                       dataclasses.replace(CFG, use_type=False), HEUR)
    assert b.score == 1.0
    half = score_purchase(other, g5, 12.0, {"size": "16 fl oz", "scent": "lavender"}, CFG, HEUR)
    assert half.r_type == 0.5 and half.score == 0.5


def test_category_match_counts_shared_levels():
    g = goal(product_category="a › b › c", name="Acme Shampoo")
    for cat, expected in (("b › c › a", True), ("d › e › f", False), ("a › d › b", True), ("a › a › d", False)):
        assert type_reward(product(product_category=cat, query="other"), g, HEUR)[2] is expected


def test_noun_extractor_modes():
    with pytest.raises(ValueError, match="noun_extractor"):
        NounExtractor("tagger")
    assert HEUR.backend == "heuristic"
    assert HEUR.nouns("Organic Green Tea Bags, 100 Count") == ("tea", "bags", "count")


def test_spacy_nouns_follow_the_tagger(spacy_nouns):
    ext = spacy_nouns
    assert ext.backend.startswith("spacy:")
    nouns = ext.nouns("organic green tea bags, 100 count")
    assert {"tea", "bags", "count"} <= set(nouns) and "organic" not in nouns
    # identical titles share every noun, so the goal product itself always has r_type 1
    g = goal(name="Minkissy Stainless Steel Eyebrow Tweezers")
    assert type_reward(product(title=g.name), g, ext)[3] == 1.0
    assert NounExtractor("auto").backend == ext.backend


def test_title_noun_table_is_cached_and_equals_the_tagger(spacy_nouns, tmp_path, tmp_path_factory, monkeypatch):
    from envs.webshop import WebShopConfig, load_catalogue
    from tests.envs.webshop_helpers import small_catalogue

    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path))
    folder = small_catalogue(tmp_path_factory)
    cat = load_catalogue(WebShopConfig(data_dir=str(folder), share_catalogue=False))
    table = cat.noun_table(NounExtractor("spacy"))
    files = list((tmp_path / "webshop" / "nouns").glob("*.json"))
    assert len(files) == 1 and "en_core_web" in files[0].name
    assert set(table) == {p.title for p in cat.products}
    for title in list(table)[:40]:
        assert table[title] == spacy_nouns.nouns(title)
    again = load_catalogue(WebShopConfig(data_dir=str(folder), share_catalogue=False))
    fresh = NounExtractor("spacy")
    assert again.noun_table(fresh) == table
    fresh.use_table(table)
    assert fresh.nouns(cat.products[0].title) == table[cat.products[0].title]
    assert again.noun_table(NounExtractor("heuristic")) is None
