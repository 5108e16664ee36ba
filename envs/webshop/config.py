"""Typed configuration of the WebShop environment and its reward.

Sources: [WebShop] = the original environment (princeton-nlp/WebShop, text mode), [GiGPO] = verl-agent's
use of it, [choice] = this repo's resolution where the original is silent or not reproducible.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RewardConfig", "WebShopConfig", "OPTION_TEXT_FALLBACKS", "REWARD_MODES", "CORRECTIONS", "GOAL_MODES",
           "SEARCH_FIELDS", "SEARCH_FIELD_SETS", "build_config", "PRICE_GRID"]

#: price bounds are drawn from this grid: $10, $20, ..., $990 [WebShop]
PRICE_GRID: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))

OPTION_TEXT_FALLBACKS = ("missing_group", "always", "never")
#: ``RewardConfig.mode``: the public code's rules, quirks included, or this repo's corrections of them
REWARD_MODES = ("original", "corrected")
GOAL_MODES = ("synthetic", "human")
SEARCH_FIELDS = ("title", "description", "first_bullet", "bullets", "attributes", "options")
#: named ``search_fields``: "original" = the document the original indexes (its
#: search_engine/convert_product_file_format.py: title, description, first bullet point, option text, lower-cased)
#: [WebShop]; "bullets_attributes" = every bullet point and the attribute list, no options (this repo's default
#: before 2026-12-06) [choice]
SEARCH_FIELD_SETS: dict[str, tuple[str, ...]] = {
    "original": ("title", "description", "first_bullet", "options"),
    "bullets_attributes": ("title", "bullets", "description", "attributes"),
}


@dataclass
class RewardConfig:
    """The purchase score ``r_type * (attrs matched + options matched + price ok) / (attrs + options + 1)``.

    Each of the four terms can be switched off (for tests and ablations): an attribute, option or price
    term that is off leaves both the numerator and the denominator; ``use_type=False`` sets r_type = 1.
    """

    mode: str = "original"
    """"original": the public code's rules (web_agent_site/engine/goal.py with thefuzz 0.19), quirks included, so
    scores compare with published WebShop numbers [WebShop]; "corrected": this repo's corrections (sizes match
    exactly, values are compared with values, accents and case are handled, an option may match the product text).
    envs/webshop/README.md lists each correction and how many scores it changes."""
    use_type: bool = True
    """multiply by r_type (1, 0.5, 0.1 or 0 from query, category and title-noun matches) [WebShop]"""
    use_attributes: bool = True
    """count goal attributes matched by the purchased product [WebShop]"""
    use_options: bool = True
    """count goal options matched by the chosen options [WebShop]"""
    use_price: bool = True
    """count price <= the goal's upper bound [WebShop]"""
    attribute_threshold: int = 85
    """an attribute matches a product attribute when the token-set ratio exceeds this (0..100) [WebShop]"""
    option_threshold: int = 85
    """an option matches a chosen value when the token-set ratio of colour-normalised values exceeds this [WebShop]"""
    # The corrections of the original's rules, one switch each; None: the mode's (original: off, corrected: on).
    exact_size_options: bool | None = None
    """options whose group name contains "size" must equal a chosen value exactly (case-insensitive); the original
    fuzzes every option, so "large" satisfies "x-large" and "1 fl oz" satisfies "1.7 fl oz" [choice]"""
    compare_values: bool | None = None
    """compare chosen values with the goal's values; the original compares them with its ``(group, value)`` pairs
    (``goal_options.items()``), whose group words then join the comparison"""
    option_text_fallback: str | None = None
    """when a goal option is not matched by a chosen value, may it match as a substring of the title, bullets or
    description? "always", "missing_group" (only when the product has no option group of that name, so a wrong
    choice in an existing group is never rescued by text; corrected), "never" (the original: no such rule)"""
    keep_accents: bool | None = None
    """token-set ratios on text processed as thefuzz does but with accented letters kept and "_" a separator
    (rapidfuzz); the original's thefuzz 0.19 drops every non-ASCII character first ("crème brûlée" -> "crme brle")"""
    lowercase_attributes: bool | None = None
    """lower-case the goal attribute before looking for it in the (lower-cased) title, bullets and description; the
    original does not, so an attribute with a capital letter is never found there"""
    lowercase_options: bool | None = None
    """lower-case option values before the colour normalisation; the original does not, so "Dark Grey" keeps its
    words (and fuzzes to "grey") while "dark grey" becomes "dark", its first colour word"""
    group_human_options: bool | None = None
    """score a human goal's options as lower-cased values named by the goal product's option group that offers them
    (so the size rule and the text fallback know their group); the original passes the file's raw strings, not
    lower-cased and without a group, so with this off they reach the scorer that way"""
    noun_extractor: str = "auto"
    """title nouns for r_type: "spacy" (an English spaCy pipeline), "heuristic" (documented fallback) or "auto"
    (spaCy when installed) [WebShop uses spaCy]"""

    def __post_init__(self):
        from .text import NOUN_MODES

        if self.mode not in REWARD_MODES:
            raise ValueError(f"reward.mode={self.mode!r}: use one of {REWARD_MODES} (original = the public WebShop "
                             "code's scores, corrected = this repo's corrections; envs/webshop/README.md)")
        if self.option_text_fallback is not None and self.option_text_fallback not in OPTION_TEXT_FALLBACKS:
            raise ValueError(f"reward.option_text_fallback={self.option_text_fallback!r}: use one of "
                             f"{OPTION_TEXT_FALLBACKS}")
        if self.noun_extractor not in NOUN_MODES:
            raise ValueError(f"reward.noun_extractor={self.noun_extractor!r}: use one of {NOUN_MODES}")
        for name in ("attribute_threshold", "option_threshold"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"reward.{name}={value} must lie in 0..100 (a fuzzy ratio)")

    def correction(self, name: str) -> bool:
        """Whether correction ``name`` (one of ``CORRECTIONS``) applies: its switch, or the mode's when None."""
        if name not in CORRECTIONS:
            raise KeyError(f"unknown WebShop reward correction {name!r}; known: {CORRECTIONS}")
        if name == "option_text_fallback":
            return self.text_fallback != "never"
        value = getattr(self, name)
        return self.mode == "corrected" if value is None else bool(value)

    @property
    def text_fallback(self) -> str:
        """``option_text_fallback`` with None resolved by the mode."""
        if self.option_text_fallback is not None:
            return self.option_text_fallback
        return "missing_group" if self.mode == "corrected" else "never"


#: the switches of ``RewardConfig`` that correct the original's rules (``reward.mode=corrected`` turns all on)
CORRECTIONS = ("exact_size_options", "compare_values", "option_text_fallback", "keep_accents",
               "lowercase_attributes", "lowercase_options", "group_human_options")


@dataclass
class WebShopConfig:
    """Where the catalogue comes from, how goals are built and split, and how pages behave."""

    data_dir: str | None = None
    """folder with the official files; None: $WEBSHOP_DATA if set, else the generated catalogue"""
    product_file: str | None = None
    """product file name inside data_dir; None: the one items_shuffle*.json there"""
    attribute_file: str | None = None
    """attribute/instruction file name; None: the one items_ins_v2*.json there"""
    human_file: str = "items_human_ins.json"
    """human instruction file (optional unless goals="human")"""
    reviews_file: str = "reviews.json"
    """optional reviews file ([{"asin", "reviews": [{"title", "stars", "review"}], "average_rating"}])"""
    num_products: int | None = None
    """use only the first N products of the file (the original's num_products); None: all"""
    goals: str = "synthetic"
    """"synthetic": one goal per product x option combination [WebShop, GiGPO]; "human": the human file"""
    goal_shuffle_seed: int = 233
    """goals are shuffled with Python's random.Random(233) as the original, then split [WebShop]"""
    price_seed: int = 0
    """seeds the prices of ranged products and the goals' price bounds (unseeded in the original) [choice]"""
    num_test_goals: int = 500
    """goals 0..499 (after shuffling) are the test split, the rest train [WebShop, GiGPO]"""
    generated_num_products: int = 1000
    """size of the generated catalogue used when no official data is configured (100..10,000)"""
    generated_seed: int = 0
    """seed of the generated catalogue"""
    search_top_k: int = 50
    """a search returns at most this many products [WebShop]"""
    results_per_page: int = 10
    """products per results page [WebShop]"""
    search_fields: tuple[str, ...] | str = SEARCH_FIELD_SETS["original"]
    """product text indexed by BM25, in this order: a tuple of ``SEARCH_FIELDS`` or a name of ``SEARCH_FIELD_SETS``
    (stored as its tuple). Default "original": title, description, first bullet point and option text, as the
    original's search documents [WebShop]; "bullets_attributes": every bullet point and the attribute list, no
    options (the default before 2026-12-06) [choice]"""
    explain_invalid_actions: bool = False
    """an action that does nothing (an unknown element, a malformed action, ``click[search]``, ``search[...]`` off
    the search page) returns the page unchanged with no added text, as the original [WebShop]; True appends
    "Invalid action: <why>. The page is unchanged." (the default before 2026-12-06) [choice]. ``info["noop"]`` is
    True either way, and the estimator's penalty for a malformed response does not depend on this text"""
    bm25_k1: float = 0.9
    """BM25 k1 (Pyserini's default, the original's search engine) [WebShop]"""
    bm25_b: float = 0.4
    """BM25 b (Pyserini's default) [WebShop]"""
    show_selected_options: bool = False
    """append "You have clicked <value>." for chosen options on the item page (the original's rich text mode
    does this; its simple text mode, the default, does not show choices) [WebShop]"""
    show_reviews: bool = False
    """show each product's rating and reviews (from reviews_file; the generated catalogue has them). Off: every item
    page says "Rating: N.A." and the Reviews page is empty, as in the original, whose review code is commented out
    [WebShop]"""
    share_catalogue: bool = True
    """share the loaded catalogue and search index between environments of one process [choice]"""
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self):
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        if isinstance(self.search_fields, str):
            if self.search_fields not in SEARCH_FIELD_SETS:
                raise ValueError(f"search_fields={self.search_fields!r}: use a name of {sorted(SEARCH_FIELD_SETS)} "
                                 f"or a non-empty subset of {SEARCH_FIELDS}")
            self.search_fields = SEARCH_FIELD_SETS[self.search_fields]
        self.search_fields = tuple(self.search_fields)
        if self.goals not in GOAL_MODES:
            raise ValueError(f"goals={self.goals!r}: use one of {GOAL_MODES}")
        bad = [f for f in self.search_fields if f not in SEARCH_FIELDS]
        if bad or not self.search_fields:
            raise ValueError(f"search_fields={self.search_fields!r}: choose a non-empty subset of {SEARCH_FIELDS} "
                             f"or a name of {sorted(SEARCH_FIELD_SETS)}")
        if self.num_products is not None and self.num_products < 1:
            raise ValueError(f"num_products={self.num_products} must be >= 1 or None (all)")
        if not 100 <= self.generated_num_products <= 10_000:
            raise ValueError(f"generated_num_products={self.generated_num_products} must lie in 100..10,000")
        if self.num_test_goals < 1:
            raise ValueError(f"num_test_goals={self.num_test_goals} must be >= 1")
        if self.search_top_k < 1 or self.results_per_page < 1:
            raise ValueError("search_top_k and results_per_page must be >= 1")


def build_config(config: WebShopConfig | dict | None, overrides: dict[str, Any]) -> WebShopConfig:
    """A ``WebShopConfig`` from an instance or dict plus keyword overrides; unknown keys are errors."""
    if config is None:
        base: dict[str, Any] = {}
    elif isinstance(config, WebShopConfig):
        base = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    elif isinstance(config, dict):
        base = dict(config)
    else:
        raise TypeError(f"config must be a WebShopConfig, a dict or None, not {type(config).__name__}")
    base.update(overrides)
    known = {f.name for f in dataclasses.fields(WebShopConfig)}
    unknown = sorted(set(base) - known)
    if unknown:
        raise TypeError(f"unknown WebShop option(s) {unknown}; known options: {sorted(known)}")
    if isinstance(base.get("reward"), RewardConfig):
        base["reward"] = dataclasses.replace(base["reward"])
    return WebShopConfig(**base)
