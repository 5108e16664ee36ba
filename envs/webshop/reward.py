"""The WebShop purchase score in [0, 1] [WebShop, `web_agent_site/engine/goal.py`].

    score = r_type * (n_att + n_opt + 1[price <= price_upper]) / (|attributes| + |options| + 1)

* ``n_att``: goal attributes g with a product attribute p where ``token_set_ratio(p, g) > 85``, or g a
  substring of the lower-cased title, bullet points or description.
* ``n_opt``: goal options matched by a chosen option value, by ``token_set_ratio(normalize_color(p),
  normalize_color(g)) > 85``.
* ``r_type``: starts at 1; 0.5 unless the queries are equal, or ≥ 2 category levels ("A › B › C") are shared,
  or the title score exceeds 0.2; 0.1 if the title score is below 0.1; 0 if it is 0. Title score = share of
  the goal title's nouns (with repeats) that appear among the purchased title's nouns (0.2 when the goal
  title has none).

``RewardConfig.mode`` [choice]: ``"original"`` (default) scores as the public code does, with thefuzz 0.19:
sizes are fuzzy ("large" satisfies "x-large"); a synthetic goal's options are ``(group, value)`` pairs compared by
their ``str``, so the group's words join the comparison ("x-small" then misses ("size", "small")); a human goal's
options are the file's raw strings; non-ASCII characters are dropped before the ratio;
the goal attribute is not lower-cased before the substring test; values are not lower-cased before the colour
normalisation; an option never matches the product text. ``"corrected"``: sizes must match exactly, values are
compared with values, lower-cased, accents kept (rapidfuzz), a human goal's options are named by their product's
group, and an option a product does not let you choose may match its text (``option_text_fallback``).

Switching a term off (``RewardConfig.use_*``) removes it from numerator and denominator; r_type off = 1.
The episode reward (10 iff the score is exactly 1.0) is the environment's business, not this module's.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import RewardConfig
from .data import Goal, Product
from .text import NounExtractor, fuzzy_token_set, normalize_color, original_token_set

__all__ = ["ScoreBreakdown", "score_purchase", "scored_goal_options", "type_reward", "attribute_matches",
           "option_matches",
           "option_value_matches"]


@dataclass(frozen=True)
class ScoreBreakdown:
    score: float
    r_type: float
    n_attributes: int
    num_attributes: int
    n_options: int
    num_options: int
    price_ok: bool
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def type_reward(product: Product, goal: Goal, nouns: NounExtractor) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score)."""
    query_match = product.query == goal.query
    bought_levels = {x.strip() for x in product.product_category.split("›")}
    goal_levels = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    desired = nouns.nouns(goal.name)
    bought = set(nouns.nouns(product.title))
    title_score = 0.2 if not desired else sum(1 for n in set(desired) if n in bought) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def _text_fields(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()


def _ratio(a, b, cfg: RewardConfig) -> int:
    """The token-set ratio the config's rules use: rapidfuzz keeping accents, or the original's thefuzz 0.19."""
    if not cfg.correction("keep_accents"):
        return original_token_set(a, b)
    return fuzzy_token_set(a if isinstance(a, str) else str(a), b if isinstance(b, str) else str(b))


def attribute_matches(product: Product, goal_attributes, threshold: int = 85, cfg: RewardConfig | None = None) -> int:
    """How many goal attributes the product has (fuzzy against its list, else a substring of its text), by the rules
    of ``cfg`` (default: ``RewardConfig()``, the original's)."""
    cfg = cfg or RewardConfig()
    lower = cfg.correction("lowercase_attributes")
    fields = None
    n = 0
    for g in goal_attributes:
        if any(_ratio(p, g, cfg) > threshold for p in product.attributes):
            n += 1
            continue
        if fields is None:
            fields = _text_fields(product)
        gl = g.lower() if lower else g
        if any(gl in f for f in fields):
            n += 1
    return n


def _is_size(name: str | None) -> bool:
    return name is not None and "size" in name


def option_value_matches(goal_name: str | None, goal_value: str, chosen_value: str, cfg: RewardConfig) -> bool:
    """Does one chosen value satisfy one goal option (without the text fallback)?

    The original (every correction off) compares ``normalize_color(chosen)`` with ``normalize_color(goal)`` by
    thefuzz 0.19's token-set ratio, where a synthetic goal's option is its ``(group, value)`` pair (a tuple, scored
    by its ``str``: the group's words join the comparison, and any value whose words are a subset matches, e.g.
    "large" for "size x-large"), and neither side is lower-cased before the colour normalisation."""
    if cfg.correction("exact_size_options") and _is_size(goal_name):
        return " ".join(chosen_value.lower().split()) == " ".join(goal_value.lower().split())
    goal = goal_value if goal_name is None or cfg.correction("compare_values") else (goal_name, goal_value)
    if cfg.correction("lowercase_options"):
        chosen_value = chosen_value.lower()
        goal = goal.lower() if isinstance(goal, str) else (goal[0], goal[1].lower())
    return _ratio(normalize_color(chosen_value), normalize_color(goal), cfg) > cfg.option_threshold


def _offers_choice(product: Product, g_name: str | None, g_value: str, cfg: RewardConfig) -> bool:
    if g_name is not None:
        return g_name in product.options
    return any(option_value_matches(None, g_value, v, cfg) for vals in product.options.values() for v in vals)


def option_matches(product: Product, chosen: dict[str, str], goal_options, cfg: RewardConfig) -> int:
    """How many goal options the chosen values (or, per the fallback rule, the product text) satisfy."""
    values = list(chosen.values())
    fields = None
    n = 0
    for g_name, g_value in goal_options:
        if any(option_value_matches(g_name, g_value, v, cfg) for v in values):
            n += 1
            continue
        fallback = cfg.text_fallback
        if fallback == "never":
            continue
        if fallback == "missing_group" and _offers_choice(product, g_name, g_value, cfg):
            continue  # the product lets the shopper choose this option: only a right choice counts
        if fields is None:
            fields = _text_fields(product)
        gv = g_value.lower()
        if any(gv in f for f in fields):
            n += 1
    return n


def scored_goal_options(goal: Goal, cfg: RewardConfig) -> tuple[tuple, ...]:
    """The goal's options as ``(group or None, value)`` pairs, in the form ``cfg`` scores them.

    A human goal keeps the original's raw form unless ``group_human_options`` is on: a list's strings as they are
    (no group, not lower-cased) and an object's raw ``(key, value)`` items, which the original compares as pairs."""
    if goal.human_options is None or cfg.correction("group_human_options"):
        return goal.goal_options
    return tuple(o if isinstance(o, tuple) else (None, o) for o in goal.human_options)


def score_purchase(product: Product, goal: Goal, price: float, chosen: dict[str, str], cfg: RewardConfig,
                   nouns: NounExtractor | None = None) -> ScoreBreakdown:
    """Score buying ``product`` at ``price`` with ``chosen`` options ({group: value}) for ``goal``."""
    if cfg.use_type:
        r_type, qm, cm, ts = type_reward(product, goal, nouns or NounExtractor(cfg.noun_extractor))
    else:
        r_type, qm, cm, ts = 1.0, False, False, 0.0
    num = 0.0
    den = 0
    n_att = n_opt = 0
    if cfg.use_attributes:
        n_att = attribute_matches(product, goal.attributes, cfg.attribute_threshold, cfg)
        num += n_att
        den += len(goal.attributes)
    if cfg.use_options:
        goal_options = scored_goal_options(goal, cfg)
        n_opt = option_matches(product, chosen, goal_options, cfg)
        num += n_opt
        den += len(goal_options)
    price_ok = bool(price <= goal.price_upper)
    if cfg.use_price:
        num += float(price_ok)
        den += 1
    fraction = num / den if den else 1.0
    return ScoreBreakdown(
        score=float(r_type * fraction), r_type=r_type, n_attributes=n_att, num_attributes=len(goal.attributes),
        n_options=n_opt, num_options=len(goal.goal_options), price_ok=price_ok, query_match=qm,
        category_match=cm, title_score=float(ts),
    )
