"""Official-format loader on hand-written files; the generator's format, determinism and near misses."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from envs.webshop import DataFilesError, RewardConfig, WebShopConfig, load_catalogue
from envs.webshop.config import SEARCH_FIELD_SETS
from envs.webshop.data import WEBSHOP_DATA_ENV, Goal
from envs.webshop.generate import ensure_generated, file_names, generate_records, main, write_catalogue
from envs.webshop.reward import score_purchase
from envs.webshop.search import SearchIndex, product_document
from envs.webshop.text import NounExtractor
from envs.webshop.vocab import PRODUCT_TYPES, check_vocabulary
from tests.envs.webshop_helpers import make_env, small_catalogue

PRODUCTS = [
    {"asin": "B000000001", "name": "Acme Tea Tree Shampoo", "full_description": "A shampoo with tea tree oil.",
     "small_description": ["Sulfate free", "For dry hair"], "pricing": "$12.99",
     "customization_options": {"Size": [{"value": "8 oz", "image": None}, {"value": "16 oz", "image": None}],
                               "Color": [{"value": "Black/White", "image": "x.jpg"}], "Style": None},
     "product_category": "Beauty & Personal Care › Hair Care › Shampoos", "query": "Shampoo ", "category": "beauty",
     "images": ["a.jpg"], "brand": "Acme", "list_price": "$15"},
    {"asin": "B000000002", "name": "Zeta Running Shoes", "full_description": None,
     "small_description": "Lightweight running shoe", "pricing": "$40.00 - $60.00", "customization_options": None,
     "product_category": "Clothing › Shoes", "query": "running shoes", "category": "fashion", "images": []},
    {"asin": "B000000003", "name": "Plain Mug", "full_description": "A mug.", "small_description": [],
     "pricing": "", "customization_options": {}, "product_category": "Home › Kitchen", "query": "mug",
     "category": "furniture"},
    {"name": "no asin at all", "query": "x", "category": "x"},  # malformed: no ASIN
    {"asin": "B000000004", "name": "Bad Price", "pricing": "$abc", "query": "x", "category": "x"},  # malformed
    {"asin": "B000000005", "name": ["not", "a", "string"], "query": "x", "category": "x"},  # malformed
    "not even an object",  # malformed
    {"asin": "B000000001", "name": "Duplicate", "query": "x", "category": "x"},  # repeated ASIN: dropped
    {"asin": "B0000000001LONG", "name": "Long ASIN", "query": "x", "category": "x"},  # too long: dropped
]
ATTRIBUTES = {
    "B000000001": {"attributes": ["tea tree", "sulfate free"], "instruction": "i need a tea tree shampoo",
                   "instruction_attributes": ["tea tree"]},
    "B000000002": {"attributes": ["lightweight"], "instruction": "i want running shoes",
                   "instruction_attributes": ["lightweight"]},
    "B000000003": {"attributes": "not a list", "instruction": "a mug", "instruction_attributes": ["mug"]},  # bad
    "B999999999": {"attributes": ["unknown product"]},
}
HUMAN = {
    "B000000001": [{"asin": "B000000001", "instruction": "tea tree shampoo in 16 oz please.",
                    "instruction_attributes": ["tea tree"], "instruction_options": ["16 oz"]},
                   {"asin": "B000000001", "instruction": "no attributes", "instruction_attributes": [],
                    "instruction_options": []}],
    "B000000002": [{"instruction": "light shoes", "instruction_attributes": ["lightweight"],
                    "instruction_options": {"color": "red"}}],
}
REVIEWS = [{"asin": "B000000001", "average_rating": 4.5,
            "reviews": [{"title": "Nice", "stars": 5, "review": "Smells good"}]}]


@pytest.fixture()
def official(tmp_path):
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(PRODUCTS, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(ATTRIBUTES), encoding="utf-8")
    (tmp_path / "items_human_ins.json").write_text(json.dumps(HUMAN), encoding="utf-8")
    (tmp_path / "reviews.json").write_text(json.dumps(REVIEWS), encoding="utf-8")
    return tmp_path


def test_loader_reads_the_official_format(official, caplog):
    with caplog.at_level(logging.WARNING, logger="envs.webshop"):
        cat = load_catalogue(WebShopConfig(data_dir=str(official), share_catalogue=False))
    assert [p.asin for p in cat.products] == ["B000000001", "B000000002", "B000000003"]
    assert cat.skipped["products"] == 4 and cat.skipped["attributes"] == 1
    assert "skipped 4 malformed record(s)" in caplog.text and "record 3" in caplog.text
    a, b, c = cat.products
    assert a.options == {"size": ("8 oz", "16 oz"), "color": ("black | white",)}  # lower case, "/" -> " | "
    assert a.price_tag == "$12.99" and cat.prices[0] == 12.99 and a.query == "shampoo"
    assert a.bullets == ("Sulfate free", "For dry hair") and a.attributes == ("tea tree", "sulfate free")
    assert a.rating == "4.5" and a.reviews == (("Nice", "5", "Smells good"),)
    assert b.pricing == (40.0, 60.0) and b.price_tag == "$40.0 to $60.0" and 40.0 <= cat.prices[1] <= 60.0
    assert b.description == "" and b.bullets == ("Lightweight running shoe",) and b.options == {}
    assert c.price_tag == "$100.0" and c.attributes == ("DUMMY_ATTR",) and c.instruction_text is None
    assert b.rating == "N.A." and b.reviews == ()
    # synthetic goals: product 1 has 2 x 1 combinations, product 2 one, product 3 none (bad attribute entry)
    assert cat.num_goals == 3
    goals = sorted((cat.goal(g) for g in range(3)), key=lambda g: g.instruction_text)
    texts = [g.instruction_text for g in goals]
    bound_a = next(g.price_upper for g in goals if g.asin == "B000000001")
    assert f"i need a tea tree shampoo with color: black | white, and size: 16 oz, and price lower than " \
           f"{bound_a:.2f} dollars" in texts
    assert bound_a in (30.0, 40.0, 50.0)  # the larger of two of the four grid prices above $12.99
    shoe = next(g for g in goals if g.asin == "B000000002")
    assert shoe.goal_options == () and shoe.instruction_text.startswith("i want running shoes, and price lower")


def test_loader_human_goals(official):
    cat = load_catalogue(WebShopConfig(data_dir=str(official), goals="human", share_catalogue=False))
    assert cat.num_goals == 2 and cat.skipped["human"] == 1  # the instruction without attributes is skipped
    goals = {g.asin: g for g in (cat.goal(0), cat.goal(1))}
    g1 = goals["B000000001"]
    assert g1.goal_options == (("size", "16 oz"),)  # a value is named by the group that offers it
    assert g1.instruction_text.startswith("tea tree shampoo in 16 oz please, and price lower than")
    assert goals["B000000002"].goal_options == (("color", "red"),)


def test_default_search_document_is_the_originals(official):
    """The original indexes, per product, its title, description, first bullet point and option text joined by
    single spaces and lower-cased (search_engine/convert_product_file_format.py), the option text being
    "<group>: <value>, <value>" per group with the groups joined by ", and", over the values its loader makes
    (group names lower-cased, values stripped, "/" -> " | ", lower-cased; a null group skipped)."""
    cat = load_catalogue(WebShopConfig(data_dir=str(official), share_catalogue=False))
    a, b, c = cat.products
    fields = WebShopConfig().search_fields
    assert fields == SEARCH_FIELD_SETS["original"] == ("title", "description", "first_bullet", "options")
    assert product_document(a, fields) == ("acme tea tree shampoo a shampoo with tea tree oil. sulfate free "
                                           "size: 8 oz, 16 oz, and color: black | white")
    # no description, one bullet given as a string, no options: the empty parts keep their separators
    assert product_document(b, fields) == "zeta running shoes  lightweight running shoe "
    # no bullet point at all (the original's script assumes one): an empty first bullet
    assert product_document(c, fields) == "plain mug a mug.  "
    # the earlier default, kept by name: every bullet point and the attributes, no options
    legacy = WebShopConfig(search_fields="bullets_attributes").search_fields
    assert legacy == ("title", "bullets", "description", "attributes")
    assert product_document(a, legacy) == ("acme tea tree shampoo sulfate free for dry hair a shampoo with tea tree "
                                           "oil. tea tree sulfate free")
    with pytest.raises(ValueError, match="bullets_attributes"):
        WebShopConfig(search_fields="everything")


def test_default_search_finds_option_text_and_not_later_bullets(official):
    """A word only in an option value finds the product under the original's document and not under the earlier
    default; a word only in the second bullet point, the reverse."""
    cat = load_catalogue(WebShopConfig(data_dir=str(official), share_catalogue=False))
    original = SearchIndex(cat.products, SEARCH_FIELD_SETS["original"])
    legacy = SearchIndex(cat.products, SEARCH_FIELD_SETS["bullets_attributes"])
    assert original.search("black 16 oz") == [0] and legacy.search("black 16 oz") == []
    assert original.search("dry hair") == [] and legacy.search("dry hair") == [0]
    env = make_env(official, num_test_goals=1)
    env.reset(options={"split": "test", "task_index": 0})
    obs, *_ = env.step("search[white]")
    assert "B000000001" in obs and env._results == [0]


def test_env_on_official_files(official):
    env = make_env(official, num_test_goals=1)
    obs, info = env.reset(options={"split": "test", "task_index": 0})
    assert info["task"] == env.catalogue.goal(0).instruction_text and env.num_tasks("train") == 2


def test_num_products_cuts_the_file_first(official):
    cat = load_catalogue(WebShopConfig(data_dir=str(official), num_products=2, share_catalogue=False))
    assert [p.asin for p in cat.products] == ["B000000001", "B000000002"]


def test_missing_files_say_what_and_where(tmp_path, monkeypatch):
    with pytest.raises(DataFilesError) as e:
        load_catalogue(WebShopConfig(data_dir=str(tmp_path)))
    msg = str(e.value)
    for needle in (str(tmp_path), "items_shuffle_1000.json", "items_ins_v2_1000.json", "princeton-nlp/WebShop",
                   "python -m envs.webshop.generate"):
        assert needle in msg
    (tmp_path / "items_shuffle_1000.json").write_text("[]")
    with pytest.raises(DataFilesError, match="items_ins_v2_1000.json"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path)))
    monkeypatch.setenv(WEBSHOP_DATA_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DataFilesError, match=rf"nowhere does not exist \(from \${WEBSHOP_DATA_ENV}\)"):
        load_catalogue(WebShopConfig())
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(PRODUCTS[:3]))
    (tmp_path / "items_ins_v2_1000.json").write_text("{}")
    with pytest.raises(DataFilesError, match="goals='human' needs .*items_human_ins.json"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path), goals="human"))


def test_ambiguous_and_broken_files(tmp_path):
    (tmp_path / "items_shuffle_1000.json").write_text("[]")
    (tmp_path / "items_shuffle.json").write_text("[]")
    (tmp_path / "items_ins_v2.json").write_text("{}")
    with pytest.raises(DataFilesError, match="several product files"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="no usable product record"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path), product_file="items_shuffle.json"))
    (tmp_path / "items_shuffle.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path), product_file="items_shuffle.json"))
    (tmp_path / "items_shuffle.json").write_text('[{"asin": "B0')  # truncated: the file and the fill command
    with pytest.raises(ValueError, match=r"items_shuffle\.json is not valid JSON .*python -m envs\.webshop\.generate"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path), product_file="items_shuffle.json"))
    (tmp_path / "items_shuffle.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="JSON list"):
        load_catalogue(WebShopConfig(data_dir=str(tmp_path), product_file="items_shuffle.json"))


# ------------------------------------------------------------------------------------------- generator
def test_vocabulary_keeps_near_misses_apart():
    assert check_vocabulary() == []
    assert {t.category for t in PRODUCT_TYPES} == {"beauty", "electronics", "fashion", "food", "furniture"}


def test_generator_is_deterministic(tmp_path):
    a = write_catalogue(tmp_path / "a", 120, seed=5, progress=False)
    b = write_catalogue(tmp_path / "b", 120, seed=5, progress=False)
    c = write_catalogue(tmp_path / "c", 120, seed=6, progress=False)
    for name in file_names(120).values():
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "items_shuffle_120.json").read_bytes() != (c / "items_shuffle_120.json").read_bytes()
    with pytest.raises(ValueError, match="100..10000"):
        generate_records(99, 0)
    with pytest.raises(ValueError, match="100..10000"):
        generate_records(10_001, 0)


def test_generated_files_have_the_official_format(tmp_path_factory):
    folder = small_catalogue(tmp_path_factory)
    products = json.loads((folder / "items_shuffle_150.json").read_text(encoding="utf-8"))
    attrs = json.loads((folder / "items_ins_v2_150.json").read_text(encoding="utf-8"))
    human = json.loads((folder / "items_human_ins.json").read_text(encoding="utf-8"))
    assert len(products) == 150 and len({p["asin"] for p in products}) == 150
    keys = {"asin", "name", "full_description", "small_description", "pricing", "images", "product_category",
            "query", "category", "customization_options"}
    for p in products:
        assert keys <= set(p) and len(p["asin"]) == 10 and p["pricing"].startswith("$")
        assert " › " in p["product_category"] and isinstance(p["small_description"], list)
        for values in (p["customization_options"] or {}).values():
            assert all(set(v) == {"value", "image"} for v in values)
        entry = attrs[p["asin"]]
        assert set(entry) == {"attributes", "instruction", "instruction_attributes"}
        assert set(entry["instruction_attributes"]) <= set(entry["attributes"])
    for entries in human.values():
        assert all({"instruction", "instruction_attributes", "instruction_options"} <= set(e) for e in entries)
    cat = load_catalogue(WebShopConfig(data_dir=str(folder), share_catalogue=False))
    assert sum(cat.skipped.values()) == 0 and len(cat.products) == 150
    human_cat = load_catalogue(WebShopConfig(data_dir=str(folder), goals="human", share_catalogue=False))
    assert human_cat.num_goals == sum(len(v) for v in human.values())


def test_no_product_text_leaks_an_attribute_it_lacks():
    records = generate_records(400, seed=3)
    by_query = {t.query: t for t in PRODUCT_TYPES}
    for p in records["products"]:
        owned = set(records["attributes"][p["asin"]]["attributes"])
        text = " ".join([p["name"], p["full_description"], *p["small_description"]]).lower()
        for a in by_query[p["query"]].attributes:
            assert (a in owned) == (a in text), (p["asin"], a)


def _best_score(cat, i, goal: Goal, cfg, nouns):
    """Best score of buying product i for goal over every option combination it offers."""
    p = cat.products[i]
    from envs.webshop.data import iter_combinations

    return max(score_purchase(p, goal, float(cat.prices[i]), combo, cfg, nouns).score
               for combo in iter_combinations(p))


def test_goals_are_solvable_and_siblings_are_near_misses(tmp_path_factory):
    """Under the corrected rules (exact sizes): the original's fuzzy sizes let some option near misses score 1."""
    folder = small_catalogue(tmp_path_factory)
    roles = json.loads((folder / "generated.json").read_text())["near_miss_roles"]
    cat = load_catalogue(WebShopConfig(data_dir=str(folder), share_catalogue=False))
    cfg, nouns = RewardConfig(mode="corrected", noun_extractor="heuristic"), NounExtractor("heuristic")
    families: dict[int, dict[str, list[int]]] = {}
    for i, p in enumerate(cat.products):
        role, fam = roles[p.asin]
        families.setdefault(fam, {}).setdefault(role, []).append(i)
    checked = {"attribute near miss": 0, "option near miss": 0, "price near miss": 0}
    for g in range(cat.num_goals):
        goal = cat.goal(g)
        i = goal.product_index
        # every goal is solvable: its own product with its own options scores 1.0
        assert score_purchase(cat.products[i], goal, float(cat.prices[i]), dict(goal.goal_options), cfg,
                              nouns).score == 1.0
        role, fam = roles[goal.asin]
        if role != "base":
            continue
        for sib_role, members in families[fam].items():
            if sib_role == "base":
                continue
            for j in members:  # a sibling never reaches 1.0 on its base's goals, whatever options are chosen
                if sib_role == "option near miss":
                    # its first option group lacks the base's values (all of them when the pool has others)
                    name = next(iter(cat.products[j].options))
                    if dict(goal.goal_options)[name] in cat.products[j].options[name]:
                        continue
                assert _best_score(cat, j, goal, cfg, nouns) < 1.0, (goal.asin, sib_role)
                # but it is the same product type
                assert cat.products[j].query == goal.query
                checked[sib_role] += 1
    assert all(n > 0 for n in checked.values()), checked


def test_generate_command_and_cache(tmp_path, monkeypatch, capsys):
    assert main(["--num-products", "100", "--seed", "3", "--out", str(tmp_path / "out")]) == 0
    assert "items_shuffle_100.json" in capsys.readouterr().out
    assert (tmp_path / "out" / "items_ins_v2_100.json").is_file()
    with pytest.raises(SystemExit):
        main(["--num-products", "50"])
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    folder = ensure_generated(100, 4)
    assert folder.parent == tmp_path / "cache" / "webshop" and (folder / "generated.json").is_file()
    mtime = (folder / "items_shuffle_100.json").stat().st_mtime_ns
    assert ensure_generated(100, 4) == folder and (folder / "items_shuffle_100.json").stat().st_mtime_ns == mtime
    # the environment generates its default catalogue on first use into the cache
    monkeypatch.delenv(WEBSHOP_DATA_ENV, raising=False)
    cat = load_catalogue(WebShopConfig(generated_num_products=100, generated_seed=4, share_catalogue=False))
    assert str(folder) in cat.source and len(cat.products) == 100
    assert np.all(np.isfinite(cat.prices))


def test_clicks_accept_the_folded_form_the_page_shows(tmp_path):
    """An option named "Crème Brûlée" is shown as "creme brulee" (observations are folded to ASCII); clicking the
    shown form and the raw form both select it (once only the raw form, which the page never shows, worked)."""
    products = [dict(PRODUCTS[0], asin="B000000009", name="Acme Coffee Syrup", query="coffee syrup",
                     customization_options={"Flavor": [{"value": "Crème Brûlée", "image": None},
                                                       {"value": "Vanilla", "image": None}]})]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(
        {"B000000009": {"attributes": ["coffee"], "instruction": "i need a coffee syrup",
                        "instruction_attributes": ["coffee"]}}), encoding="utf-8")
    env = make_env(tmp_path, num_test_goals=1)
    for spelling in ("creme brulee", "crème brûlée", "CREME Brulee"):
        env.reset(options={"split": "test", "task_index": 0})
        obs, *_ = env.step("search[coffee syrup]")
        obs, _r, _t, _tr, info = env.step("click[b000000009]")
        assert "creme brulee" in obs and "crème" not in obs  # option values are lower-cased, then folded
        obs, _r, _t, _tr, info = env.step(f"click[{spelling}]")
        assert not info["noop"], spelling
        assert info["state_key"][2] == (("flavor", "crème brûlée"),), spelling
    obs, _r, _t, _tr, info = env.step("click[creme brule]")  # a near miss is still invalid
    assert info["noop"] and info["state_key"][2] == (("flavor", "crème brûlée"),)


def test_clicks_select_values_with_two_spaces(tmp_path):
    """The loader turns "/" into " | " as the original, so "Black / White" becomes "black  |  white" (two spaces), and
    official values may hold two spaces themselves. Such a value is clickable as the page shows it and as an agent
    types it with one space (once the action's spaces were collapsed and the click missed); a value that equals
    another up to its spaces is told apart by the spaces typed, as the original compares the argument as it is."""
    products = [dict(PRODUCTS[0], asin="B000000009", name="Acme Dish Soap", query="dish soap",
                     customization_options={"Size": [{"value": "Pack of  2", "image": None},
                                                     {"value": "Pack of 4", "image": None}],
                                            "Color": [{"value": "Black/White", "image": None},
                                                      {"value": "Black / White", "image": None}]})]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products), encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(
        {"B000000009": {"attributes": ["soap"], "instruction": "i need dish soap",
                        "instruction_attributes": ["soap"]}}),
        encoding="utf-8")
    env = make_env(tmp_path, num_test_goals=1)
    cases = [("click[pack of  2]", ("size", "pack of  2")), ("click[Pack of 2]", ("size", "pack of  2")),
             ("click[ pack  of 2 ]", ("size", "pack of  2")), ("click[black | white]", ("color", "black | white")),
             ("click[black  |  white]", ("color", "black  |  white")),
             ("click[black |  white]", ("color", "black | white"))]
    for action, selected in cases:
        env.reset(options={"split": "test", "task_index": 0})
        env.step("search[dish soap]")
        obs, _r, _t, _tr, info = env.step("click[b000000009]")
        assert "pack of  2" in obs and "black  |  white" in obs and "click[pack of  2]" in info["admissible_actions"]
        obs, _r, _t, _tr, info = env.step(action)
        assert not info["noop"], action
        assert dict(info["state_key"][2]) == dict([selected]), action
    obs, _r, _t, _tr, info = env.step("click[pack of 22]")
    assert info["noop"]
