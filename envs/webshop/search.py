"""WebShop search: BM25 over the product text with Lucene-like analysis, via ``bm25s`` (docs/spec/environments.md §5.4 "Search").

The original serves a pyserini (Anserini/Lucene) index: BM25 with k1 = 0.9, b = 0.4 and Anserini's default English
analyzer (StandardTokenizer, English possessive filter, lower-casing, Lucene's 33 English stop words, Porter
stemming); a query is the bag of its analyzed terms, a repeated term counting once per occurrence. This module
re-implements that analysis and ranks with ``bm25s`` (``method="lucene"``):

* tokens follow Unicode word-break rules closely enough for product text: ``x-large`` -> ``x``, ``large``;
  ``3.5`` and ``1,000`` stay whole; ``u.s.a`` stays whole; ``men's`` -> ``men``; single characters are kept;
* the stemmer is the original Porter algorithm (PyStemmer's ``porter``), as Lucene's PorterStemFilter;
* hits are documents with a positive score, ties broken by asin, as Anserini's searcher does.

Measured against Anserini 0.21 (Lucene 9.5) on the 1k catalogue, for 1,246 queries (1,000 goal instructions and
every product query): the same first result for 98%, 99.3% of the top-50 in common, and the goal's product in the
top 50 equally often. Near-ties are often ordered differently, because Lucene stores document lengths in one
byte (a lossy encoding) while bm25s uses exact lengths (docs/webshop.md).
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
#: Extended_Pictographic code points (emoji, ™, ®, ★, ✔ ...), which Lucene's tokenizer keeps as tokens.
_PICTOGRAPH = (
    "[\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u21aa\u231a-\u23ff\u24c2\u25aa-\u25fe\u2600-\u27bf\u2934\u2935"
    "\u2b05-\u2b55\u3030\u303d\u3297\u3299\U0001f000-\U0001faff]\ufe0f?"
)
#: A word: runs of word characters, joined through "." "'" "’" ":" between letters and "." "," ";" "'" "’"
#: between digits (Unicode UAX #29 rules WB6/7 and WB11/12); or one pictograph.
_WORD = re.compile(rf"\w+(?:(?:(?<={_LETTER})[.'’:·：](?={_LETTER})|(?<=\d)[.,;'’](?=\d))\w+)*|{_PICTOGRAPH}")
_POSSESSIVE = re.compile(r"['’]s$")
_VOWELS = frozenset("aeiou")


def _porter_measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem`` ("y" after a consonant is a vowel)."""
    m, previous_vowel = 0, False
    for i, ch in enumerate(stem):
        vowel = ch in _VOWELS or (ch == "y" and i > 0 and stem[i - 1] not in _VOWELS)
        if previous_vowel and not vowel:
            m += 1
        previous_vowel = vowel
    return m


def _ends_cvc(stem: str) -> bool:
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    c1, v, c2 = stem[-3], stem[-2], stem[-1]
    return c1 not in _VOWELS and (v in _VOWELS or v == "y") and c2 not in _VOWELS


class LuceneLikeAnalyzer:
    """Text -> index terms: tokenize, drop possessive 's, lower-case, drop stop words, Porter-stem.

    Lucene's PorterStemmer is Martin Porter's reference (C/Java) version, which departs from the published
    algorithm that Snowball's ``porter`` implements in three ways, reproduced here on top of PyStemmer: words of
    one or two letters are not stemmed (``us``, ``xs``), and step 2 maps ``-logi`` to ``-log`` and ``-bli`` to
    ``-ble`` (``technology`` -> ``technolog``, ``assembly`` -> ``assembl``, ``incredibly`` -> ``incred``).
    """

    def __init__(self) -> None:
        import Stemmer  # PyStemmer

        self._stemmer = Stemmer.Stemmer("porter")
        self._stemmer.maxCacheSize = 100_000

    def stem(self, words: list[str]) -> list[str]:
        stems = self._stemmer.stemWords(words)
        for i, (word, stem) in enumerate(zip(words, stems)):
            if len(word) <= 2:
                stems[i] = word
            elif stem.endswith("logi") and _porter_measure(stem[:-4]) > 0:
                stems[i] = stem[:-1]
            elif stem.endswith("bli") and _porter_measure(stem[:-3]) > 0:
                stem = stem[:-3] + "ble"  # then steps 4 and 5a of the reference version
                if stem.endswith("ible") and _porter_measure(stem[:-4]) > 1:
                    stem = stem[:-4]
                elif _porter_measure(stem[:-1]) > 1 or (_porter_measure(stem[:-1]) == 1 and not _ends_cvc(stem[:-1])):
                    stem = stem[:-1]
                stems[i] = stem
        return stems

    def __call__(self, text: str) -> list[str]:
        words = (_POSSESSIVE.sub("", w).lower() for w in _WORD.findall(text))
        return self.stem([w for w in words if w.strip("_") and w not in LUCENE_ENGLISH_STOP_WORDS])


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
        # Anserini sorts hits by score, then by document id (the asin) ascending.
        self._asin_rank = np.argsort(np.argsort([p.asin for p in self.products], kind="stable"))
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
        top = np.lexsort((self._asin_rank, -scores))[:SEARCH_RETURN_N]
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
