"""WebShop's score of a purchase: ``get_reward`` (docs/spec/environments.md §5.4 "Reward").

::

    score = r_type * (n_attribute_matches + n_option_matches + [price <= price_upper])
                   / (len(goal.attributes) + len(goal.goal_options) + 1)

* An attribute of the goal matches when some product attribute has ``token_set_ratio > 85`` with it, or when it
  is a substring of the product's lower-cased title, bullet points or description.
* An option of the goal matches when some chosen option value does (``token_set_ratio > 85``), both sides first
  passed through :func:`normalize_color`. For synthetic goals the original passes ``(name, value)`` tuples, which
  its fuzzy matcher stringifies (``"('color', 'black')"`` -> tokens ``color black``) and which ``normalize_color``
  maps to a colour only when the name or the value *equals* a colour word. :func:`option_matches` reproduces that.
* ``r_type`` (:func:`type_reward`) is 1.0, 0.5, 0.1 or 0.0 from query, category and title-noun overlap.

Fuzzy matching uses rapidfuzz. It reproduces thefuzz 0.19's ``token_set_ratio`` (the version WebShop pins): the same
preprocessing (non-ASCII characters dropped, non-alphanumerics to spaces, lower-cased), python-Levenshtein's
InDel ratio, and the result rounded to an integer before the ``> 85`` test.

Title nouns. The original tags both product titles with spaCy's ``en_core_web_sm`` and keeps the lower-cased text of
its NOUN/PROPN tokens. :func:`title_nouns` looks a title up in ``title_nouns.json``, spaCy's nouns for the 1,000
titles of the small catalogue (spaCy 3.8.18, en_core_web_sm 3.8.0; made by ``scripts/webshop_title_nouns.py``, so
spaCy is no run-time dependency): on that catalogue ``r_type`` is the original's. Other titles (a user's own
catalogue, most of the full one) fall back to :func:`rule_title_nouns`, whose ``r_type`` agrees with spaCy's on 97.7%
of the products a search returns (docs/webshop.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rapidfuzz import fuzz

from agentrl.envs.webshop.catalog import Goal, Product

FUZZY_THRESHOLD = 85

#: ``COLOR_SET`` of WebShop's ``web_agent_site/engine/normalize.py`` (MIT licence), in its order: the first entry
#: found in a string is its normalized colour.
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)  # fmt: skip


def normalize_color(value: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """The first colour word of :data:`COLOR_SET` contained in ``value``, else ``value`` unchanged.

    For a string, "contained" means substring (``"dark brown"`` -> ``"brown"``, which precedes ``"dark"`` in the
    list; ``"tank"`` -> ``"tan"``). For a ``(name, value)`` tuple it means an element equal to the colour word,
    which is what Python's ``in`` does on the tuples the original passes.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


_LATIN1_UPPER_HALF = dict.fromkeys(range(128, 256))
_NON_WORD = re.compile(r"(?u)\W")


def _thefuzz_text(value: Any) -> str:
    # thefuzz 0.19's full_process(force_ascii=True): str() of a non-string, code points 128-255 dropped, every
    # non-word character (\W; "_" is a word character) to a space, lower-cased, stripped.
    text = value if isinstance(value, str) else str(value)
    return _NON_WORD.sub(" ", text.translate(_LATIN1_UPPER_HALF)).lower().strip()


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz 0.19's ``fuzz.token_set_ratio(a, b)``: an integer in 0..100 (0 when either side is empty)."""
    left, right = _thefuzz_text(a), _thefuzz_text(b)
    if not left or not right:
        return 0
    return int(round(fuzz.token_set_ratio(left, right)))


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (fuzzy attribute match, else substring of its texts)."""
    title, bullets = product.title.lower(), " ".join(product.bullet_points).lower()
    description = product.description.lower()
    matches = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            matches += 1
        elif wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches


def goal_option_items(goal: Goal) -> list[str | tuple[str, str]]:
    """The goal options as the original compares them: ``(name, value)`` tuples (synthetic) or values (human)."""
    if isinstance(goal.goal_options, Mapping):
        return list(goal.goal_options.items())
    return list(goal.goal_options)


def option_matches(chosen_values: Iterable[str], goal_options: Sequence[str | tuple[str, str]]) -> int:
    """How many goal options some chosen option value matches (both sides colour-normalized, fuzzy > 85)."""
    chosen = [normalize_color(v) for v in chosen_values]
    wanted = [normalize_color(o) for o in goal_options]
    return sum(1 for g in wanted if any(token_set_ratio(c, g) > FUZZY_THRESHOLD for c in chosen))


# --------------------------------------------------------------------------------------------------- title nouns
TITLE_NOUNS_FILE = "title_nouns.json"


def title_key(title: str) -> str:
    """A title's key in the shipped table: the first 16 hex digits of the SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(title.encode("utf-8")).hexdigest()[:16]


@functools.cache
def title_noun_table() -> dict[str, Any]:
    """The shipped spaCy title-noun table (``title_nouns.json``: a header with versions, and ``nouns``), read once."""
    with resources.files("agentrl.envs.webshop").joinpath(TITLE_NOUNS_FILE).open(encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=1 << 16)
def title_nouns(title: str) -> tuple[str, ...]:
    """The title's nouns as the original has them: the spaCy table's entry, else :func:`rule_title_nouns`."""
    nouns = title_noun_table()["nouns"].get(title_key(title))
    return tuple(nouns) if nouns is not None else rule_title_nouns(title)


# spaCy's English tokenizer, reduced to what occurs in product titles: split at whitespace, peel prefixes and
# suffixes (punctuation, quotes, "'s", a unit after a number, a final period), then split at infixes (a hyphen or
# "/" before a letter, a comma between letters, an operator between digits). It matches spaCy 3.8's tokens on 999
# of the 1,000 WebShop titles.
_QUOTES = "'\"”“`‘´’‚„»«「」『』（）〔〕【】《》〈〉⟦⟧"
_PUNCT = "…,:;!?¿¡()[]{}<>_#*&。？！，、；：～·"
_CURRENCY = "$£€¥฿₽₹₩₪₫"
_SYMBOLS = "°©®™¦"
_PREFIX_CHARS = frozenset(_QUOTES + _PUNCT + _CURRENCY + _SYMBOLS + "§%=—–")
_SUFFIX_CHARS = frozenset(_QUOTES + _PUNCT + _SYMBOLS + "—–")
_UNITS = "km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg t lb oz m/s km/h kmh"
_UNITS += " mph hPa Pa mbar mb MB kb KB gb GB tb TB T G M K %"
_UNIT_ALTERNATION = "|".join(re.escape(u) for u in sorted(_UNITS.split(), key=len, reverse=True))
_SUFFIX = re.compile(
    rf"(?:''|['’][sS]|(?<=[0-9])\+|(?<=[0-9])(?:{_UNIT_ALTERNATION}|[{re.escape(_CURRENCY)}])"
    rf"|(?<=[0-9a-z%²\-+{re.escape(_PUNCT + _QUOTES)}])\.|(?<=[A-Z][A-Z])\.)$"
)
_INFIX = re.compile(
    rf"\.\.+|…|[{_SYMBOLS}]|(?<=[0-9])[+\-*^](?=[0-9-])"
    rf"|(?<=[a-z{re.escape(_QUOTES)}])\.(?=[A-Z{re.escape(_QUOTES)}])|(?<=[A-Za-z]),(?=[A-Za-z])"
    r"|(?<=[A-Za-z0-9])(?:---|--|——|-|–|—|~)(?=[A-Za-z])|(?<=[A-Za-z0-9])[:<>=/](?=[A-Za-z])"
)
_SPECIAL_TOKENS = frozenset("w/ e.g. i.e. U.S. U.S.A. vs. Mr. Mrs. Dr. St. Inc. Co. Ltd. Corp. Jr. ''".split())


def _peel_affixes(chunk: str) -> tuple[list[str], str, list[str]]:
    """``(prefixes, core, suffixes)`` of a whitespace-free chunk, peeled alternately from the front and the back."""
    prefixes: list[str] = []
    suffixes: list[str] = []
    while len(chunk) > 1 and chunk not in _SPECIAL_TOKENS:
        if chunk.startswith("''") or chunk[0] in _PREFIX_CHARS or (chunk[0] == "+" and not chunk[1].isdigit()):
            size = 2 if chunk.startswith("''") else 1
            prefixes.append(chunk[:size])
            chunk = chunk[size:]
            continue
        match = _SUFFIX.search(chunk)
        suffix = match.group() if match is not None and match.start() > 0 else None
        if suffix is None and chunk[-1] in _SUFFIX_CHARS:
            suffix = chunk[-1]
        if suffix is None:
            break
        suffixes.insert(0, suffix)
        chunk = chunk[: -len(suffix)]
    return prefixes, chunk, suffixes


def _split_infixes(core: str) -> list[str]:
    """``core`` split before and after each infix (a whole-token match is no infix)."""
    if core in _SPECIAL_TOKENS:
        return [core]
    pieces, start = [], 0
    for match in _INFIX.finditer(core):
        if match.start() == 0 and match.end() == len(core):
            break
        pieces += [core[start : match.start()], match.group()]
        start = match.end()
    return [piece for piece in [*pieces, core[start:]] if piece]


def spacy_like_tokens(title: str) -> list[str]:
    """The tokens spaCy's English tokenizer makes of a product title, approximately (see the comment above)."""
    tokens = []
    for chunk in title.split():
        prefixes, core, suffixes = _peel_affixes(chunk)
        tokens += [*prefixes, *_split_infixes(core), *suffixes]
    return tokens


#: Words that are never nouns: determiners, pronouns, prepositions, conjunctions, auxiliaries, number words, "'s".
_NON_NOUNS = frozenset(
    """a an the this that these those some any each every all both either neither no nor not only own same such
    i me my mine we us our ours you your yours he him his she her hers it its they them their theirs who whom whose
    which what whatever whichever
    about above across after against along amid among around as at before behind below beneath beside besides
    between beyond by despite down during except for from in inside into like near of off on onto out outside over
    past per plus since than through throughout till to toward towards under underneath unlike until up upon via
    with within without
    and but or so yet if because while whereas though although unless whether
    is are was were be been being am do does did done has have had having can could will would shall should may
    might must very too also just more most less least much many few several other another etc 's ’s
    one two three four five six seven eight nine ten eleven twelve twenty hundred thousand""".split()
)
#: Symbols spaCy's tagger calls nouns in titles ("Shirt | Black", "100%", "360°").
_NOUN_SYMBOLS = frozenset("|%°")
_LETTER = re.compile(r"[^\W\d_]")
_DIMENSIONS = re.compile(r"[\d.]+(?:x[\d.]+)+[a-z]*")  # 18x18, 4x6, 39x49inch: spaCy tags them numbers


def _rule_is_noun(token: str) -> bool:
    """Whether a title token counts as a noun by rule: it has a letter, and is no function word, number word,
    lower-case dimension sign ``x`` or dimension; or it is ``|``, ``%`` or ``°``."""
    if token in _NOUN_SYMBOLS:
        return True
    lower = token.lower()
    if not _LETTER.search(token) or lower in _NON_NOUNS or token == "x":
        return False
    return _DIMENSIONS.fullmatch(lower) is None


def rule_title_nouns(title: str) -> tuple[str, ...]:
    """Nouns of a title outside the spaCy table, by rule (the stand-in for spaCy's NOUN/PROPN tags).

    Product titles are noun phrases, mostly in title case, which spaCy tags as proper nouns whatever the word
    (``Black``, ``Portable``, the ``T`` of ``T-Shirt``). So every token of :func:`spacy_like_tokens` is a noun
    unless :func:`_rule_is_noun` says otherwise; no adjective list. Lower-cased, in order, with repeats.
    """
    return tuple(token.lower() for token in spacy_like_tokens(title) if _rule_is_noun(token))


NounsOf = Callable[[str], Sequence[str]]


def title_score(purchased_name: str, goal_name: str, nouns: NounsOf = title_nouns) -> float:
    """The number of distinct nouns the titles share over the goal title's noun count (repeats included); 0.2 when
    the goal title has none (docs/spec/environments.md §5.4 "r_type"). ``nouns``: the extractor (default: the spaCy table, then the rules)."""
    wanted = nouns(goal_name)
    if not wanted:
        return 0.2
    return len(set(nouns(purchased_name)) & set(wanted)) / len(wanted)


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal, nouns: NounsOf = title_nouns) -> TypeReward:
    """``r_type``: 1.0, lowered to 0.5 when neither query, >=2 category levels nor title nouns (> 0.2) agree, to
    0.1 when title_score < 0.1 and to 0.0 when it is 0."""
    query_match = product.query == goal.query
    levels_bought = {x.strip() for x in product.product_category.split("›")}
    levels_wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(levels_bought & levels_wanted) >= 2
    score = title_score(product.title, goal.name, nouns)
    r_type = 1.0
    if not (query_match or category_match or score > 0.2):
        r_type = 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, score)


@dataclass(frozen=True)
class Score:
    """A purchase's score and its parts (the original's ``verbose`` info)."""

    score: float
    r_type: float
    r_attribute: float
    r_option: float | None
    r_price: bool
    attribute_matches: int
    option_matches: int
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def get_reward(product: Product, goal: Goal, price: float, chosen_options: Mapping[str, str]) -> Score:
    """WebShop's score in [0, 1] of buying ``product`` at ``price`` with ``chosen_options`` for ``goal``."""
    kind = type_reward(product, goal)
    r_price = price <= goal.price_upper
    n_attributes = attribute_matches(product, goal.attributes)
    wanted_options = goal_option_items(goal)
    n_options = option_matches(chosen_options.values(), wanted_options)
    total = (n_attributes + n_options + r_price) / (len(goal.attributes) + len(wanted_options) + 1)
    return Score(
        score=total * kind.r_type,
        r_type=kind.r_type,
        r_attribute=n_attributes / len(goal.attributes),
        r_option=n_options / len(wanted_options) if wanted_options else None,
        r_price=r_price,
        attribute_matches=n_attributes,
        option_matches=n_options,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
    )
