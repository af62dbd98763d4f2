"""WebShop search: BM25 over the product text with Lucene-like analysis, via ``bm25s`` (environments.md §5.4 "Search").

The original serves a pyserini (Anserini/Lucene) index: BM25 with k1 = 0.9, b = 0.4 and Anserini's default English
analyzer (StandardTokenizer, English possessive filter, lower-casing, Lucene's 33 English stop words, Porter
stemming); a query is the bag of its analyzed terms, a repeated term counting once per occurrence. This module
re-implements that analysis and ranks with ``bm25s`` (``method="lucene"``):

* tokens follow Unicode word-break rules closely enough for product text: ``x-large`` -> ``x``, ``large``;
  ``3.5`` and ``1,000`` stay whole; ``u.s.a`` stays whole; ``men's`` -> ``men``; single characters are kept;
* the stemmer is the original Porter algorithm (PyStemmer's ``porter``), as Lucene's PorterStemFilter;
* hits are documents with a positive score, ties broken by catalogue order (Lucene breaks ties by doc id).

Known differences: Lucene stores document lengths in one byte (a lossy encoding), which can swap near-tied
documents; our lengths are exact. Rankings therefore match closely but not always exactly (docs/webshop.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from agentrl.envs.webshop.catalog import Product

#: Results kept per search and shown per page (``SEARCH_RETURN_N``, ``PRODUCT_WINDOW``).
SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, the default of Anserini's analyzer.
LUCENE_ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

_LETTER = r"[^\W\d_]"
#: A word: runs of word characters, joined through "." "'" "’" ":" between letters and "." "," ";" "'" "’"
#: between digits (Unicode UAX #29 rules WB6/7 and WB11/12).
_WORD = re.compile(rf"\w+(?:(?:(?<={_LETTER})[.'’:](?={_LETTER})|(?<=\d)[.,;'’](?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['’]s$")


class LuceneLikeAnalyzer:
    """Text -> index terms: tokenize, drop possessive 's, lower-case, drop stop words, Porter-stem."""

    def __init__(self) -> None:
        import Stemmer  # PyStemmer

        self._stemmer = Stemmer.Stemmer("porter")
        self._stemmer.maxCacheSize = 100_000

    def __call__(self, text: str) -> list[str]:
        words = (_POSSESSIVE.sub("", w).lower() for w in _WORD.findall(text))
        return self._stemmer.stemWords([w for w in words if w and w not in LUCENE_ENGLISH_STOP_WORDS])


class SearchEngine:
    """BM25 search over a product list, plus WebShop's special keyword prefixes.

    ``search("red running shoes")`` returns up to :data:`SEARCH_RETURN_N` products, best first. Queries that
    start with ``<r>`` (random products), ``<a> attribute``, ``<c> category`` or ``<q> query`` list products
    directly, as WebShop's ``get_top_n_product_from_keywords`` does.
    """

    def __init__(self, products: Sequence[Product], *, k1: float = 0.9, b: float = 0.4):
        import bm25s

        self.products = tuple(products)
        self.analyzer = LuceneLikeAnalyzer()
        self._bm25 = bm25s.BM25(method="lucene", k1=k1, b=b)
        self._bm25.index([self.analyzer(p.search_text) for p in self.products], show_progress=False)
        self._vocabulary = self._bm25.vocab_dict
        self._by_attribute: dict[str, list[int]] = {}
        for i, p in enumerate(self.products):
            for attribute in p.attributes:
                self._by_attribute.setdefault(attribute, []).append(i)
        self._ranked = lru_cache(maxsize=4096)(self._rank)

    def _rank(self, query: str) -> tuple[int, ...]:
        terms = [t for t in self.analyzer(query) if t in self._vocabulary]
        if not terms:
            return ()
        scores = self._bm25.get_scores(terms)
        top = np.argsort(-scores, kind="stable")[:SEARCH_RETURN_N]
        return tuple(int(i) for i in top if scores[i] > 0)

    def search(self, keywords: str, rng: random.Random | None = None) -> list[Product]:
        """The products a search for ``keywords`` (lower-cased by the caller, as WebShop does) returns."""
        words = keywords.split(" ")
        if words[0] == "<r>":
            return (rng or random.Random()).sample(list(self.products), k=min(SEARCH_RETURN_N, len(self.products)))
        if words[0] == "<a>":
            return [self.products[i] for i in self._by_attribute.get(" ".join(words[1:]).strip(), [])]
        if words[0] == "<c>":
            category = words[1].strip() if len(words) > 1 else ""
            return [p for p in self.products if p.category == category]
        if words[0] == "<q>":
            query = " ".join(words[1:]).strip()
            return [p for p in self.products if p.query == query]
        return [self.products[i] for i in self._ranked(keywords)]


def page_of(results: Sequence[Product], page: int) -> list[Product]:
    """The products shown on results page ``page`` (1-based)."""
    return list(results[(page - 1) * PRODUCT_WINDOW : page * PRODUCT_WINDOW])
