"""WebShop environment: pages, transitions, admissible and malformed actions, splits, determinism."""
from __future__ import annotations

import random

import pytest

from envs.base import INFO_KEYS, SUCCESS_REWARD
from envs.webshop import WebShopEnv
from envs.webshop.data import combination_count
from envs.webshop.search import SearchIndex
from tests.envs.webshop_helpers import make_env, play_expert, small_catalogue


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return small_catalogue(tmp_path_factory)


@pytest.fixture()
def env(folder):
    return make_env(folder)


def _to_results(env, task=0, split="test"):
    env.reset(options={"split": split, "task_index": task})
    return env.step(env.expert_action())  # the expert's first action is a search


def _item_with_options(env):
    """Reset on a task whose first result page holds a product with at least one option group."""
    for k in range(env.num_tasks("test")):
        obs, r, term, trunc, info = _to_results(env, k)
        for a in info["admissible_actions"]:
            i = env._clickables()[a[6:-1]]
            if i[0] == "item" and env.catalogue.products[i[1]].options:
                return env.step(a)
    raise AssertionError("no product with options on any first result page")


def test_search_page(env):
    obs, info = env.reset(options={"split": "test", "task_index": 0})
    assert set(INFO_KEYS) <= set(info)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {info['task']} [SEP] Search"
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert info["anchor_obs"] == obs and info["state_key"] == ("search",)
    assert info["raw_score"] is None and not info["won"] and info["step"] == 0
    assert info["task_family"] in {"beauty", "electronics", "fashion", "food", "furniture"}
    assert env.page == "search"


def test_results_pages_and_paging(env):
    env.reset(options={"split": "test", "task_index": 1})
    obs, reward, term, trunc, info = env.step("search[shoes socks shirt dress tea chair]")
    total = len(env._results)
    assert total > 20 and env.page == "results" and reward == 0.0 and not term
    assert obs.startswith(f"Instruction: [SEP] {info['task']} [SEP] Back to Search [SEP] Page 1 (Total results: "
                          f"{total})"
                          " [SEP] Next > [SEP] ")
    acts = info["admissible_actions"]
    assert acts[:2] == ["click[back to search]", "click[next >]"] and "click[< prev]" not in acts
    asins = [a[6:-1] for a in acts[2:]]
    assert len(asins) == 10 and all(len(a) == 10 and a.startswith("b0") for a in asins)
    for asin in asins:  # ASIN, title and price of each product are on the page
        p = env.catalogue.products[env.catalogue.asin_index[asin.upper()]]
        assert f"{p.asin} [SEP] {p.title} [SEP] {p.price_tag}" in obs
    obs2, *_, info2 = env.step("click[next >]")
    assert "Page 2 (Total results" in obs2 and "< Prev [SEP] Next >" in obs2
    assert info2["admissible_actions"][:3] == ["click[back to search]", "click[< prev]", "click[next >]"]
    assert set(info2["admissible_actions"][3:]).isdisjoint(acts[2:])
    assert info2["state_key"][2] == 2
    obs3, *_, info3 = env.step("click[< prev]")
    assert obs3 == obs and info3["state_key"] == info["state_key"]
    obs4, *_, info4 = env.step("click[back to search]")
    assert env.page == "search" and info4["admissible_actions"] == ["search[<your query>]"]


def test_next_past_the_last_page_shows_an_empty_page(env):
    env.reset(options={"split": "test", "task_index": 0})
    env.step("search[zzzunknownword shampoo]")
    total = len(env._results)
    pages = -(-total // 10)
    for _ in range(pages):
        obs, *_, info = env.step("click[next >]")
    assert f"Page {pages + 1} (Total results: {total})" in obs
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]", "click[next >]"]


def test_ratings_and_reviews_only_when_asked(tmp_path_factory):
    env = make_env(small_catalogue(tmp_path_factory), show_reviews=True)
    _item_with_options(env)
    p = env.catalogue.products[env._item]
    reviewed = next(q for q in env.catalogue.products if q.reviews)
    assert p.rating != "N.A." and reviewed.rating != "N.A."
    assert f"Rating: {p.rating} [SEP]" in env._page_text()
    obs, *_ = env.step("click[reviews]")
    for title, score, body in p.reviews:
        assert f'"{title}" [SEP] {score} [SEP] {body}' in obs


def test_search_without_matches(env):
    env.reset(options={"split": "test", "task_index": 0})
    obs, *_, info = env.step("search[zzzz qqqq]")
    assert "Page 1 (Total results: 0) [SEP] Next >" in obs and not info["noop"]


def test_item_page_options_and_sub_pages(env):
    obs, reward, term, trunc, info = _item_with_options(env)
    p = env.catalogue.products[env._item]
    assert env.page == "item"
    expected_buttons = ["click[back to search]", "click[< prev]", "click[description]", "click[features]",
                        "click[reviews]", "click[buy now]"]
    values = [v for vals in p.options.values() for v in vals]
    assert info["admissible_actions"] == expected_buttons + [f"click[{v}]" for v in dict.fromkeys(values)]
    option_text = " [SEP] ".join(f"{g} [SEP] {' [SEP] '.join(vs)}" for g, vs in p.options.items())
    assert f"Back to Search [SEP] < Prev [SEP] {option_text} [SEP] {p.title} [SEP] Price: {p.price_tag} [SEP] " \
           "Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now" in obs  # as the original
    assert info["state_key"] == ("item", p.asin, ())
    group, vals = next(iter(p.options.items()))
    obs2, *_, info2 = env.step(f"click[{vals[-1]}]")
    assert obs2 == obs  # simple text mode does not show choices
    assert info2["state_key"] == ("item", p.asin, ((group, vals[-1]),))
    if len(vals) > 1:  # a second click in the same group replaces the choice
        *_, info2 = env.step(f"click[{vals[0]}]")
        assert info2["state_key"] == ("item", p.asin, ((group, vals[0]),))
    chosen = env._options.copy()
    for sub, content in (("description", [p.description]), ("features", list(p.bullets)), ("reviews", None)):
        obs_s, *_, info_s = env.step(f"click[{sub}]")
        assert env.page == sub
        assert info_s["admissible_actions"] == ["click[back to search]", "click[< prev]"]
        assert obs_s.startswith(f"Instruction: [SEP] {info['task']} [SEP] Back to Search [SEP] < Prev")
        if content is not None:
            assert obs_s.endswith(" [SEP] ".join(c.strip() for c in content))
        else:  # the original shows no reviews
            assert obs_s.endswith("< Prev")
        assert env.step("click[buy now]")[4]["noop"]  # not on a sub-page
        obs_b, *_, info_b = env.step("click[< prev]")
        assert env.page == "item" and env._options == chosen and obs_b == obs
    obs_r, *_, info_r = env.step("click[< prev]")  # back to the same results page, choices forgotten
    assert env.page == "results" and env._options == {} and info_r["state_key"][0] == "results"


def test_buy_ends_the_episode(env, folder):
    score, actions, info = play_expert(env, "test", 2)
    assert actions[-1] == "click[buy now]" and env.page == "done"
    assert env.render().startswith("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] ")
    assert info["raw_score"] == score and info["won"] == (score == 1.0)
    assert set(info["score_components"]) >= {"r_type", "n_attributes", "n_options", "price_ok"}
    with pytest.raises(RuntimeError):
        env.step("click[back to search]")
    with pytest.raises(RuntimeError):
        env.expert_action()


def test_episode_reward_is_ten_only_for_a_perfect_score(folder):
    env = make_env(folder)
    seen = set()
    for k in range(10):
        # the expert (mostly perfect) and a careless shopper (last product on the page, no options)
        score, _, info = play_expert(env, "test", k)
        assert info["won"] == (score == 1.0)
        seen.add(score == 1.0)
        env.reset(options={"split": "test", "task_index": k})
        env.step(env.expert_action())
        env.step(f"click[{env.admissible_actions()[-1][6:-1]}]")
        obs, reward, term, trunc, info = env.step("click[buy now]")
        assert term and not trunc and 0.0 <= info["raw_score"] <= 1.0
        assert reward == (SUCCESS_REWARD if info["raw_score"] == 1.0 else 0.0)
        assert info["won"] == (info["raw_score"] == 1.0)
        seen.add(info["raw_score"] == 1.0)
    assert seen == {True, False}


def _replay(env, split, k, actions):
    _, info = env.reset(options={"split": split, "task_index": k})
    for a in actions:
        info = env.step(a)[4]
    return info


def test_every_admissible_action_is_accepted(folder):
    env = make_env(folder)
    _, actions, _ = play_expert(env, "test", 3)
    actions = actions[:-1] + ["click[description]", "click[< prev]"]  # visit item, sub-page, item again
    checked = set()
    for n in range(len(actions) + 1):
        info = _replay(env, "test", 3, actions[:n])
        page = env.page
        for a in info["admissible_actions"]:
            _replay(env, "test", 3, actions[:n])
            probe = "search[running shoes]" if a == "search[<your query>]" else a
            out = env.step(probe)
            assert not out[4]["noop"], (page, a)
        checked.add(page)
    assert {"search", "results", "item", "description"} <= checked


MALFORMED = [
    "search[running shoes]",  # search on an item page
    "click[no such button]",
    "click[]",
    "search[]",
    "click[ ]",
    "click[search]",
    "buy now",
    "click buy now",
    "click[buy now",
    "",
    "   ",
    "[click]",
    "search[" + "x" * 10_000 + "]",  # 10 kB query
    "Click[Back to Search] extra",
    "jump[back to search]",
]


@pytest.mark.parametrize("explain", [False, True])
@pytest.mark.parametrize("action", MALFORMED)
def test_malformed_actions_leave_the_page_unchanged(folder, action, explain):
    """As the original, an action that does nothing returns the same page with no added text (default); with
    ``explain_invalid_actions`` the page is followed by the reason. ``info["noop"]`` is set either way."""
    env = make_env(folder, explain_invalid_actions=explain)
    env.reset(options={"split": "test", "task_index": 4})
    env.step(env.expert_action())
    before_obs, _, _, _, before = env.step(env.expert_action())  # now on an item page
    assert env.page == "item"
    obs, reward, term, trunc, info = env.step(action)
    assert info["noop"] and reward == 0.0 and not term
    assert info["state_key"] == before["state_key"] and info["anchor_obs"] == before["anchor_obs"]
    assert info["admissible_actions"] == before["admissible_actions"]
    if explain:
        assert obs.startswith(before["anchor_obs"] + " [SEP] Invalid action: ")
        assert obs.endswith("The page is unchanged.")
    else:
        assert obs == before_obs == before["anchor_obs"]


@pytest.mark.parametrize("action", [None, 12345, ["click[buy now]"], b"\xff\xfe"])
def test_non_string_actions_are_noops(folder, action):
    env = make_env(folder)
    before_obs, before = env.reset(options={"split": "test", "task_index": 0})
    obs, reward, term, trunc, info = env.step(action)
    assert info["noop"] and info["state_key"] == before["state_key"] and reward == 0.0
    assert obs == before_obs  # silent, as the original


def test_invalid_actions_are_silent_by_default_as_the_original(folder):
    """The original's text environment answers an unknown click, a malformed action and ``click[search]`` with the
    page it was on and nothing else; so does the default here, on every page type."""
    env = make_env(folder)
    assert env.config.explain_invalid_actions is False
    page, _ = env.reset(options={"split": "test", "task_index": 2})
    for action in ("click[search]", "click[nothing here]", "search", "search[]", "", "buy now"):
        obs, _r, _t, _tr, info = env.step(action)
        assert obs == page and info["noop"] and info["state_key"] == ("search",), action
    page, *_ = env.step(env.expert_action())
    assert env.page == "results"
    for action in ("click[search]", "click[no such product]", "search[shoes]", "click[< prev]", "[click]"):
        obs, _r, _t, _tr, info = env.step(action)
        assert obs == page and info["noop"], action


def test_search_on_search_page_is_case_insensitive_and_click_lowercases(folder):
    env = make_env(folder)
    env.reset(options={"split": "test", "task_index": 0})
    query = env.expert_action()[len("search["):-1]
    a = env.step(f"SEARCH[{query.upper()}]")[4]
    assert not a["noop"] and env._query == query
    asin = a["admissible_actions"][2][6:-1]
    assert not env.step(f"Click[{asin.upper()}]")[4]["noop"] and env.page == "item"


def test_horizon_truncates_after_15_steps(folder):
    env = make_env(folder)
    assert env.max_steps == 15
    env.reset(options={"split": "train", "task_index": 0})
    for t in range(15):
        obs, reward, term, trunc, info = env.step("click[nothing]")
        assert trunc == (t == 14) and not term
    short = make_env(folder, max_steps=3)
    short.reset(options={"split": "train", "task_index": 0})
    assert [short.step("x")[3] for _ in range(3)] == [False, False, True]


def test_splits_and_task_families(folder, env):
    n = env.catalogue.num_goals
    assert env.splits[0] == "train" and env.eval_splits == ("test",)
    assert env.num_tasks("test") == 50 and env.num_tasks("train") == n - 50
    for split, k in (("test", 0), ("test", 49), ("train", 0), ("train", n - 51)):
        _, info = env.reset(options={"split": split, "task_index": k})
        assert info["task_family"] == env.task_family_of(split, k)
        assert env.goal == env.catalogue.goal(k if split == "test" else 50 + k)
    with pytest.raises(ValueError, match="unknown WebShop split"):
        env.reset(options={"split": "valid", "task_index": 0})
    with pytest.raises(ValueError, match="task_index"):
        env.reset(options={"split": "test", "task_index": 50})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"split": "test", "tsak_index": 0})
    with pytest.raises(ValueError, match="num_test_goals"):
        make_env(folder, num_test_goals=n)


def test_task_from_seed_without_index(env):
    n = env.num_tasks("train")
    _, a = env.reset(seed=n + 7)
    assert env.task_split == "train" and env.task_index == 7
    _, b = env.reset(seed=7, options={"split": "train"})
    assert a["task"] == b["task"]
    _, c = env.reset(seed=3, options={"split": "test"})
    assert env.task_index == 3


def test_goal_order_is_the_original_seeded_shuffle(folder):
    env = make_env(folder, share_catalogue=False)
    cat = env.catalogue
    unshuffled = [(i, c) for i, p in enumerate(cat.products) if p.instruction_text is not None
                  for c in range(combination_count(p))]
    random.Random(233).shuffle(unshuffled)
    assert [(int(a), int(b)) for a, b in zip(cat.goal_product, cat.goal_sub)] == unshuffled
    other = make_env(folder, share_catalogue=False)
    assert [cat.goal(g) for g in range(0, cat.num_goals, 7)] == \
           [other.catalogue.goal(g) for g in range(0, cat.num_goals, 7)]
    reseeded = make_env(folder, share_catalogue=False, goal_shuffle_seed=234)
    assert [reseeded.catalogue.goal(g).instruction_text for g in range(20)] != \
           [cat.goal(g).instruction_text for g in range(20)]


def test_synthetic_goal_text_and_bounds(env):
    cat = env.catalogue
    for g in range(40):
        goal = cat.goal(g)
        p = cat.products[goal.product_index]
        assert goal.instruction_text.startswith(goal.base_instruction)
        for name, value in goal.goal_options:
            assert f"{name}: {value}" in goal.instruction_text and value in p.options[name]
        assert goal.price_upper > cat.prices[goal.product_index]
        assert goal.instruction_text.endswith(f", and price lower than {goal.price_upper:.2f} dollars")
        assert goal.price_upper in {10.0 * i for i in range(1, 100)}


def test_search_is_deterministic_with_ordered_ties(folder):
    a = make_env(folder, share_catalogue=False)
    b = make_env(folder, share_catalogue=False)
    for q in ("running shoes", "organic green tea", "black", "wireless earbuds noise cancelling"):
        ra = a.index.search(q, 50)
        assert ra == b.index.search(q, 50) == a.index.search(q, 50)
        s = a.index.scores(q)
        assert all((s[x] > s[y]) or (s[x] == s[y] and x < y) for x, y in zip(ra, ra[1:]))
    # identical documents tie exactly and come out in catalogue order
    p = a.catalogue.products[0]
    idx = SearchIndex([p, a.catalogue.products[1], p, p], fields=("title", "bullets"))
    hits = idx.search(p.title, 50)
    assert [h for h in hits if h != 1] == [0, 2, 3]


def test_shared_catalogue_and_index(folder):
    a, b = make_env(folder), make_env(folder)
    assert a.catalogue is b.catalogue and a.index is b.index
    c = make_env(folder, search_fields=("title",))
    assert c.catalogue is a.catalogue and c.index is not a.index
    d = make_env(folder, share_catalogue=False)
    assert d.catalogue is not a.catalogue


def test_show_selected_options(folder):
    env = make_env(folder, show_selected_options=True)
    _item_with_options(env)
    p = env.catalogue.products[env._item]
    value = next(iter(p.options.values()))[0]
    obs = env.step(f"click[{value}]")[0]
    assert obs.endswith(f"You have clicked {value}.")


def test_config_errors(folder):
    with pytest.raises(TypeError, match="unknown WebShop option"):
        WebShopEnv(data_dir=str(folder), num_tset_goals=5)
    with pytest.raises(ValueError, match="option_text_fallback"):
        make_env(folder, reward={"option_text_fallback": "sometimes"})
    with pytest.raises(ValueError, match="search_fields"):
        make_env(folder, search_fields=("title", "price"))
