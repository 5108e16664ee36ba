"""BM25 product search (``bm25s``) with deterministic ranking.

Documents: the chosen product fields joined and lower-cased (``product_document``; by default the
original's document: title, description, first bullet point, option text). Tokens from ``text.search_tokens``
(Lucene's English stop words, plural folding). Scoring: ``bm25s`` in Lucene mode with Pyserini's defaults
k1 = 0.9, b = 0.4, the engine behind the original [WebShop]. Only products with a positive score are returned
(Lucene returns matching documents only), at most ``k``, ordered by score and then by catalogue position, so
equal scores always come out in the same order.
"""
from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from .text import search_tokens

__all__ = ["SearchIndex", "product_document"]


def product_document(p, fields: Sequence[str]) -> str:
    """The text indexed for product ``p``: its ``fields`` in order, joined by single spaces, lower-cased.

    With ``SEARCH_FIELD_SETS["original"]`` this is the original's document: title, description, first bullet
    point and option text ("<group>: <value>, <value>" per group, groups joined by ", and "), each present even
    when empty [WebShop]. A product without bullet points gives an empty first bullet (the original's script
    assumes one). "bullets" and "attributes" add one part per entry (none when there are none; the generator's
    placeholder attribute "DUMMY_ATTR" is left out).
    """
    parts: list[str] = []
    for f in fields:
        if f == "title":
            parts.append(p.title)
        elif f == "description":
            parts.append(p.description)
        elif f == "first_bullet":
            parts.append(p.bullets[0] if p.bullets else "")
        elif f == "bullets":
            parts.extend(p.bullets)
        elif f == "attributes":
            parts.extend(a for a in p.attributes if a != "DUMMY_ATTR")
        elif f == "options":
            parts.append(", and ".join(f"{name}: {', '.join(values)}" for name, values in p.options.items()))
        else:  # pragma: no cover - validated by WebShopConfig
            raise ValueError(f"unknown search field {f!r}")
    return " ".join(parts).lower()


class SearchIndex:
    """An immutable BM25 index over a product list; ``search`` is safe to call from many environments."""

    def __init__(self, products: Sequence, fields: Sequence[str], k1: float = 0.9, b: float = 0.4):
        vocab: dict[str, int] = {}
        ids: list[list[int]] = []
        for p in products:
            ids.append([vocab.setdefault(t, len(vocab)) for t in search_tokens(product_document(p, fields))])
        self.vocab = vocab
        self.num_docs = len(ids)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index((ids, vocab), show_progress=False)

    def query_ids(self, query: str) -> list[int]:
        vocab = self.vocab
        return [vocab[t] for t in search_tokens(query) if t in vocab]

    def scores(self, query: str) -> np.ndarray:
        """(num_docs,) BM25 scores of ``query`` (zeros when no query token is in the vocabulary)."""
        ids = self.query_ids(query)
        if not ids:
            return np.zeros(self.num_docs, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(ids))

    def search(self, query: str, k: int = 50) -> list[int]:
        """Indices of the top-``k`` products with a positive score, by (score desc, index asc)."""
        s = self.scores(query)
        hits = np.flatnonzero(s > 0)
        if hits.size == 0:
            return []
        hs = s[hits]
        if hits.size > k:
            kth = np.partition(hs, hits.size - k)[hits.size - k]  # the k-th largest score
            keep = hs >= kth
            hits, hs = hits[keep], hs[keep]
        order = np.lexsort((hits, -hs))  # primary: score desc; ties: catalogue position asc
        return hits[order][:k].tolist()
