"""WebShop as a text environment: pages, actions, observations, reward and an oracle expert.

Pages and their clickable elements (text mode of the original [WebShop]; elements joined by " [SEP] "):

=========== ============================================================================================
search      ``WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search``; action ``search[<query>]``
results     ``Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] Page p (Total results: n)
            [SEP] < Prev [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...`` (10 per page;
            ``< Prev`` from page 2 on; ``Next >`` always, as the original)
item        ``... Back to Search [SEP] < Prev [SEP] <group> [SEP] <value> ... [SEP] <title> [SEP] Price: ..
            [SEP] Rating: .. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now``
description / features / reviews   ``... Back to Search [SEP] < Prev [SEP] <text>``
done        ``Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] <score>``
=========== ============================================================================================

Actions are ``search[...]`` (search page only) and ``click[<element>]`` with an element of the current
page, compared in lower case: an ASIN, an option value, ``back to search``, ``< prev``, ``next >``,
``description``, ``features``, ``reviews``, ``buy now``. ``info["admissible_actions"]`` lists them as the
verl-agent protocol shows them (``search[<your query>]`` on the search page). Anything else, however
malformed, is a normal step (``info["noop"]``) that leaves the page as it was and returns it without added text,
as the original (``explain_invalid_actions=True``: followed by "Invalid action: <why>. The page is unchanged.").
Selecting an option replaces the choice in its group; going back to the results forgets choices, as the
original.

Reward [WebShop, GiGPO]: on ``Buy Now`` the episode ends with ``raw_score`` = ``reward.score_purchase``;
the step reward is 10 iff that score is exactly 1.0, else 0 (``won`` likewise).
"""
from __future__ import annotations

import re

import numpy as np

from ..base import SUCCESS_REWARD, TextEnv, clean_action, fold_text
from .config import WebShopConfig, build_config
from .data import Catalogue, Goal, Product, load_catalogue
from .reward import option_value_matches, score_purchase, scored_goal_options
from .text import NounExtractor, thefuzz_0_19

__all__ = ["WebShopEnv"]

SEP = " [SEP] "
_ACTION_RE = re.compile(r"\s*([A-Za-z_]+)\s*\[(.*)\]\s*", re.S)
_SUB_PAGES = {"description": "Description", "features": "Features", "reviews": "Reviews"}
#: the expert's bounds on a hostile product [choice]: it never chooses (nor compares) an option value longer than
#: this (the catalogue's values are short names such as "x-large" or "3.4 ounce (pack of 1)"; one comparison of a
#: 200 KB value costs about 0.1 s), and a product whose groups need more value comparisons than
#: ``EXPERT_MAX_COMPARISONS`` to choose from is scanned with the groups a goal option names first, choosing a value
#: only for a goal option not yet met (so it clicks at most one value per goal option), and stopping once every goal
#: option is met or that many comparisons were made (one product then costs about 2 s at most)
EXPERT_MAX_VALUE_CHARS = 500
EXPERT_MAX_COMPARISONS = 5000


class WebShopEnv(TextEnv):
    """WebShop text environment (see the module docstring). Keyword arguments override ``WebShopConfig``."""

    env_name = "webshop"
    default_max_steps = 15
    splits: tuple[str, ...] = ("train", "test")
    eval_splits: tuple[str, ...] = ("test",)

    def __init__(self, max_steps: int | None = None, config: WebShopConfig | dict | None = None,
                 render_mode: str | None = None, **overrides):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.config = build_config(config, overrides)
        self.catalogue: Catalogue = load_catalogue(self.config)
        self.index = self.catalogue.search_index(self.config.search_fields, self.config.bm25_k1,
                                                 self.config.bm25_b)
        self.nouns = NounExtractor(self.config.reward.noun_extractor)
        if not self.config.reward.correction("keep_accents"):
            thefuzz_0_19()  # the original's scoring needs thefuzz 0.19: a wrong install fails here, not at a purchase
        self._noun_table_ready = False
        n, t = self.catalogue.num_goals, self.config.num_test_goals
        if n <= t:
            raise ValueError(
                f"the WebShop catalogue ({self.catalogue.source}) has {n} goals, not more than num_test_goals={t}: "
                "use a larger catalogue or a smaller num_test_goals")
        self._split_rows = {"test": (0, t), "train": (t, n)}
        self.goal: Goal | None = None
        self.task_split: str | None = None
        self.task_index: int | None = None
        self._page = "search"
        self._raw_action = None
        self._clear_state()

    def step(self, action):
        # TextEnv.step hands _step the action with its runs of spaces collapsed; a click compares the argument as
        # typed first (an option value may hold two spaces, "black  |  white" from "black / white"), as the original
        self._raw_action = action
        try:
            return super().step(action)
        finally:
            self._raw_action = None

    # ------------------------------------------------------------------ tasks
    def num_tasks(self, split: str) -> int:
        lo, hi = self._rows(split)
        return hi - lo

    def goal_row(self, split: str, k: int) -> int:
        """Row of the shuffled goal list holding task ``k`` of ``split``."""
        lo, hi = self._rows(split)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) < hi - lo:
            raise ValueError(f"task_index={k!r} is not an integer in 0..{hi - lo - 1} for split {split!r}")
        return lo + int(k)

    def task_family_of(self, split: str, k: int) -> str:
        """The product category of the goal (beauty, electronics, fashion, food, furniture on both data sets)."""
        return self.catalogue.goal(self.goal_row(split, k)).category

    def _rows(self, split: str) -> tuple[int, int]:
        try:
            return self._split_rows[split]
        except KeyError:
            raise ValueError(f"unknown WebShop split {split!r}; splits are {self.splits}") from None

    # ------------------------------------------------------------------ TextEnv hooks
    def _reset(self, seed: int | None, options: dict) -> tuple[str, dict]:
        unknown = sorted(set(options) - {"split", "task_index"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; WebShop accepts 'split' and 'task_index'")
        split = options.get("split", self.splits[0])
        n = self.num_tasks(split)
        k = options.get("task_index")
        if k is None:
            k = seed % n if seed is not None else int(self.np_random.integers(n))
        self.goal = self.catalogue.goal(self.goal_row(split, k))
        self.task_split, self.task_index = split, int(k)
        self._clear_state()
        return self._page_text(), self._info()

    def _clear_state(self) -> None:
        self._page = "search"
        self._query = ""
        self._results: list[int] = []
        self._page_num = 1
        self._item: int | None = None
        self._options: dict[str, str] = {}
        self._n_searches = 0
        self._score = None
        self._expert_cache: dict = {}
        self._expert_options: dict[int, dict[str, str]] = {}

    def _step(self, action: str) -> tuple[str, float, bool, dict]:
        m = _ACTION_RE.fullmatch(action)
        if m is None:
            return self._noop(f"{_show(action)} is not of the form search[...] or click[...]")
        name, arg = m.group(1).lower(), m.group(2).strip()
        if name not in ("search", "click"):
            return self._noop(f"{_show(action)}: the action must be search[...] or click[...]")
        if not arg:
            return self._noop(f"{_show(action)} has empty brackets")
        if name == "search":
            if self._page != "search":
                return self._noop("search[...] works on the search page only; click[back to search] first")
            self._query = arg.lower()
            self._results = self.index.search(self._query, self.config.search_top_k)
            self._page, self._page_num, self._n_searches = "results", 1, self._n_searches + 1
            self._item, self._options = None, {}
            return self._page_text(), 0.0, False, self._info()
        clickables = self._clickables()
        target = clickables.get(self._typed_argument(action, arg).lower())
        if target is None:
            # The original compares the lower-cased argument with the page's own values. The page shows non-ASCII
            # names folded ("creme brulee"), and a value may hold two spaces that an agent types as one: both sides
            # are compared folded, with runs of spaces collapsed, the first element on the page winning (README:
            # "Clicks", with the collisions counted).
            key = _click_key(arg)
            target = next((v for k, v in clickables.items() if _click_key(k) == key), None)
        if target is None:
            return self._noop(f"{_show(arg.lower())} is not a clickable element of this page")
        kind = target[0]
        if kind == "back":
            self._page, self._query, self._results, self._item, self._options = "search", "", [], None, {}
        elif kind == "page":
            self._page_num = target[1]
        elif kind == "item":
            self._page, self._item, self._options = "item", target[1], {}
        elif kind == "option":
            self._options[target[1]] = target[2]
        elif kind == "to_results":
            self._page, self._item, self._options = "results", None, {}
        elif kind == "sub":
            self._page = target[1]
        elif kind == "to_item":
            self._page = "item"
        elif kind == "buy":
            return self._buy()
        return self._page_text(), 0.0, False, self._info()

    def _typed_argument(self, action: str, arg: str) -> str:
        """``arg`` with its runs of spaces as the agent typed them (``arg`` itself when that cannot be recovered)."""
        raw = clean_action(self._raw_action, collapse_spaces=False) if self._raw_action is not None else None
        m = _ACTION_RE.fullmatch(raw) if raw else None
        if m is None or " ".join(raw.split()) != action:
            return arg
        return m.group(2).strip(" ")

    def _ensure_noun_table(self) -> None:
        if not self._noun_table_ready:
            self._noun_table_ready = True
            if self.config.reward.use_type:
                self.nouns.use_table(self.catalogue.noun_table(self.nouns))

    def _buy(self) -> tuple[str, float, bool, dict]:
        assert self.goal is not None and self._item is not None
        self._ensure_noun_table()
        product = self.catalogue.products[self._item]
        breakdown = score_purchase(product, self.goal, float(self.catalogue.prices[self._item]), self._options,
                                   self.config.reward, self.nouns)
        self._score = breakdown.score
        self._page = "done"
        info = self._info()
        info["score_components"] = breakdown.as_dict()
        return self._page_text(), (SUCCESS_REWARD if breakdown.score == 1.0 else 0.0), True, info

    def _noop(self, reason: str) -> tuple[str, float, bool, dict]:
        info = self._info()
        info["noop"] = True
        return self._noop_observation(reason), 0.0, False, info

    def _noop_observation(self, reason: str) -> str:
        if self.config.explain_invalid_actions:
            return f"{self._page_text()}{SEP}Invalid action: {reason}. The page is unchanged."
        return self._page_text()  # the original answers an action that does nothing with the same page, silently

    def _current_info(self) -> dict:
        return self._info()

    # ------------------------------------------------------------------ pages
    def _info(self) -> dict:
        goal = self.goal
        return {
            "task": goal.instruction_text if goal else "",
            "task_family": goal.category if goal else "",
            "admissible_actions": self.admissible_actions(),
            "won": self._score == 1.0,
            "anchor_obs": self._page_text(),
            "state_key": self.state_key(),
            "raw_score": self._score,
            "noop": False,
        }

    def state_key(self) -> tuple:
        """Identity of the page: search; results (query, page number); item pages (ASIN, chosen options)."""
        if self._page == "search":
            return ("search",)
        if self._page == "results":
            return ("results", " ".join(self._query.split()), self._page_num)
        asin = self.catalogue.products[self._item].asin if self._item is not None else None
        return (self._page, asin, tuple(sorted(self._options.items())))

    def _page_products(self) -> list[int]:
        per = self.config.results_per_page
        return self._results[(self._page_num - 1) * per: self._page_num * per]

    def _clickables(self) -> dict[str, tuple]:
        page = self._page
        out: dict[str, tuple] = {}
        if page in ("search", "done"):
            return out
        out["back to search"] = ("back",)
        if page == "results":
            if self._page_num > 1:
                out["< prev"] = ("page", self._page_num - 1)
            out["next >"] = ("page", self._page_num + 1)
            for i in self._page_products():
                out[self.catalogue.products[i].asin.lower()] = ("item", i)
        elif page == "item":
            out["< prev"] = ("to_results",)
            for key in _SUB_PAGES:
                out[key] = ("sub", key)
            out["buy now"] = ("buy",)
            for group, values in self.catalogue.products[self._item].options.items():
                for v in values:
                    out[v.lower()] = ("option", group, v)  # a value shared by two groups selects the last (original)
        else:
            out["< prev"] = ("to_item",)
        return out

    def admissible_actions(self) -> list[str]:
        if self._page == "search":
            return ["search[<your query>]"]
        return [f"click[{k}]" for k in self._clickables()]

    def _page_text(self) -> str:
        goal_text = self.goal.instruction_text if self.goal else ""
        page = self._page
        if page == "search":
            return SEP.join(["WebShop", "Instruction:", goal_text, "Search"])
        if page == "done":
            return SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{self._score}"])
        parts = ["Instruction:", goal_text, "Back to Search"]
        products = self.catalogue.products
        if page == "results":
            parts.append(f"Page {self._page_num} (Total results: {len(self._results)})")
            if self._page_num > 1:
                parts.append("< Prev")
            parts.append("Next >")
            for i in self._page_products():
                p = products[i]
                parts += [p.asin, p.title, p.price_tag]
        else:
            p = products[self._item]
            parts.append("< Prev")
            if page == "item":
                for group, values in p.options.items():
                    parts.append(group)
                    parts.extend(values)
                rating = p.rating if self.config.show_reviews else "N.A."  # the original never shows ratings
                parts += [p.title, f"Price: {p.price_tag}", f"Rating: {rating}", "Description", "Features", "Reviews",
                          "Buy Now"]
                if self.config.show_selected_options:
                    parts += [f"You have clicked {v}." for v in self._options.values()]
            elif page == "description":
                parts.append(p.description)
            elif page == "features":
                parts.extend(p.bullets)
            elif page == "reviews":
                for title, score, body in (p.reviews if self.config.show_reviews else ()):
                    parts += [f'"{title}"', score, body]
        return SEP.join(x.strip() for x in parts if x and x.strip())

    @property
    def page(self) -> str:
        """The current page type: search, results, item, description, features, reviews or done."""
        return self._page

    # ------------------------------------------------------------------ expert
    def goal_on_first_results_page(self, split: str, task_index: int) -> bool:
        """Whether the goal product of ``task_index`` in ``split`` is on the first results page of the expert's first
        search (a fresh episode: reset, the expert's first action, which is its search). A measure of search
        quality apart from the policy (``experiments.eval_webshop_expert``)."""
        self.reset(options={"split": split, "task_index": task_index})
        self.step(self.expert_action())
        return self.goal.product_index in self._results[:self.config.results_per_page]

    def expert_action(self) -> str:
        """The oracle expert's next action (it knows the goal and the scoring rule).

        Search with the goal's instruction (without options and price); on the results, open the product whose
        best achievable score is highest (earliest rank on ties), paging with ``next >``; if no result can reach
        1.0, go back once and search the goal product's title instead; on the item page choose, for each option
        group, a value that matches a goal option, then buy. Off its path (another product, a sub-page) it
        clicks ``< prev``.
        """
        if self._done or self.goal is None:
            raise RuntimeError("expert_action: the episode has ended (or never started); call reset() first")
        page = self._page
        if page == "search":
            queries = self._expert_queries()
            return f"search[{queries[min(self._n_searches, len(queries) - 1)]}]"
        if page == "results":
            best, best_score = self._expert_best()
            if best is None or (best_score < 1.0 and self._n_searches < len(self._expert_queries())):
                return "click[back to search]"
            target_page = self._results.index(best) // self.config.results_per_page + 1
            if target_page == self._page_num:
                return f"click[{self.catalogue.products[best].asin.lower()}]"
            return "click[next >]" if target_page > self._page_num else "click[< prev]"
        if page == "item":
            best, best_score = self._expert_best()
            if best != self._item and self._achievable(self._item) < best_score:
                return "click[< prev]"
            clickables = self._clickables()
            for group, value in self._desired_options(self._item).items():
                target = clickables.get(value.lower())
                if self._options.get(group) != value and target is not None and target[1] == group:
                    return f"click[{value.lower()}]"
            return "click[buy now]"
        return "click[< prev]"  # description / features / reviews

    def _expert_queries(self) -> list[str]:
        goal = self.goal
        clean = [" ".join(re.sub(r"[\[\]]", " ", q).lower().split()) for q in (goal.base_instruction, goal.name)]
        return [q for i, q in enumerate(clean) if q and q not in clean[:i]] or ["product"]

    def _desired_options(self, i: int) -> dict[str, str]:
        """{group: value} the expert chooses on product ``i`` for this episode's goal (computed once per episode)."""
        cache = self._expert_options
        if i not in cache:
            cache[i] = self._choose_options(self.catalogue.products[i])
        return cache[i]

    def _choose_options(self, p: Product) -> dict[str, str]:
        """For each option group, the first value matching a goal option (the goal options of the group's own name
        first), in the product's group order; bounded on a product with more choices than
        ``EXPERT_MAX_COMPARISONS`` (see there). The score counts goal options met by any chosen value, so the
        bounded choice scores as the full one unless the budget ran out."""
        cfg = self.config.reward
        goal_options = scored_goal_options(self.goal, cfg)
        groups = [(group, [v for v in values if len(v) <= EXPERT_MAX_VALUE_CHARS])
                  for group, values in p.options.items()]
        bounded = len(goal_options) * sum(len(values) for _, values in groups) > EXPERT_MAX_COMPARISONS
        if bounded:  # the groups a goal option names first (a stable sort keeps the product's order otherwise)
            named = {g_name for g_name, _ in goal_options}
            groups.sort(key=lambda gv: gv[0] not in named)
        chosen: dict[str, str] = {}
        met: set[int] = set()
        budget = EXPERT_MAX_COMPARISONS
        for group, values in groups:
            candidates = [k for k, g in enumerate(goal_options) if g[0] == group] + \
                [k for k, g in enumerate(goal_options) if g[0] != group]
            for k in candidates:
                if bounded and k in met:  # bounded: a value is chosen only for a goal option not yet met
                    continue
                g_name, g_value = goal_options[k]
                v = None
                for value in values:
                    budget -= 1
                    if option_value_matches(g_name, g_value, value, cfg):
                        v = value
                        break
                if v is not None:
                    chosen[group] = v
                    met.add(k)
                    break
                if bounded and budget <= 0:
                    break
            if bounded and (budget <= 0 or len(met) == len(goal_options)):
                break
        return chosen

    def _achievable(self, i: int) -> float:
        cache = self._expert_cache
        if i not in cache:
            self._ensure_noun_table()
            p = self.catalogue.products[i]
            cache[i] = score_purchase(p, self.goal, float(self.catalogue.prices[i]), self._desired_options(i),
                                      self.config.reward, self.nouns).score
        return cache[i]

    def _expert_best(self) -> tuple[int | None, float]:
        best, best_score = None, -1.0
        for i in self._results:
            s = self._achievable(i)
            if s > best_score:
                best, best_score = i, s
        return best, best_score


def _click_key(text: str) -> str:
    """An element's name as a click may give it: lower case, folded to ASCII, runs of whitespace as one space."""
    return " ".join(fold_text(text.lower()).split())


def _show(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
