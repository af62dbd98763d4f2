"""WebShop's score of a purchase: ``get_reward`` (environments.md §5.4 "Reward").

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

Title nouns. The original tags both product titles with spaCy's ``en_core_web_sm`` and keeps NOUN/PROPN tokens. That
model is not installable from PyPI, so :func:`title_nouns` is a small rule-based extractor (see its docstring). It
only ever changes the score of a product other than the goal's: a title shares all its nouns with itself, so
buying the goal's product always gets ``r_type = 1``. Results computed with it are labelled as using an approximate
``r_type`` (docs/webshop.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    title, bullets, description = product.title.lower(), " ".join(product.bullet_points).lower(), product.description.lower()
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
_TITLE_TOKEN = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
#: Function words: determiners, pronouns, prepositions, conjunctions, auxiliaries and particles (never nouns).
_FUNCTION_WORDS = frozenset(
    """a an the this that these those some any each every all both either neither no nor not only own same such
    i me my mine we us our ours you your yours he him his she her hers it its they them their theirs who whom whose
    which what whatever whichever one ones
    about above across after against along amid among around as at before behind below beneath beside besides
    between beyond by despite down during except for from in inside into like near of off on onto out outside over
    past per plus since than through throughout till to toward towards under underneath unlike until up upon via
    with within without
    and but or so yet if because while whereas though although unless whether
    is are was were be been being am do does did done has have had having can could will would shall should may
    might must very too also just more most less least much many few several other another s t""".split()
)
#: Adjectives frequent in product titles: basic colours, sizes, qualities.
_TITLE_ADJECTIVES = frozenset(
    """new old big small large little mini tiny huge giant tall short long wide narrow thick thin slim heavy
    lightweight high low deep flat round square soft hard smooth rough warm cool cold hot fresh dry wet clean clear
    pure natural organic real true fine good best better great premium deluxe luxury luxurious classic modern
    vintage retro cute pretty beautiful elegant fancy simple plain basic casual formal cozy comfy comfortable
    durable sturdy strong solid safe healthy sweet sour spicy salty bitter fast quick easy full half double single
    triple extra super ultra multi multiple various assorted mixed random perfect ideal universal original
    professional portable adjustable removable reusable washable rechargeable wireless waterproof resistant
    compatible stainless nonstick electric electronic digital automatic manual magnetic elastic flexible foldable
    decorative functional practical personalized custom handmade unisex
    black white red blue green yellow purple pink brown gray grey beige golden dark bright multicolor multicolored
    colorful transparent wooden woolen metallic
    non anti first second third last next free""".split()
)
#: Nouns with an adjective-like ending (kept despite the suffix rules).
_SUFFIX_EXCEPTIONS = frozenset(
    """table cable bible vegetable stable turntable timetable fable marble needle candle handle bundle
    drive olive archive adhesive explosive sedative preservative laxative locomotive
    shed tweed sled chemical""".split()
)
_ADJECTIVE_SUFFIXES = ("able", "ible", "less", "ous", "ful", "ive", "ical")
_UNIT = re.compile(r"^\d+[a-z]{0,4}$|^[a-z]\d+[a-z]?$")  # 12, 5oz, 16inch, 2pk, x2, 4k


def title_nouns(title: str) -> list[str]:
    """Nouns of a product title, by rule (the stand-in for spaCy's NOUN/PROPN tags; module docstring).

    Product titles are noun phrases (``"Brand Model Modifier ... Head-Noun"``), so a word is taken as a noun unless
    it is (1) a function word (determiner, pronoun, preposition, conjunction, auxiliary), (2) a number or a
    number with a unit (``12``, ``5oz``, ``2pk``), (3) a listed title adjective (basic colours, sizes, qualities
    such as ``portable`` or ``wireless``), (4) a word of five letters or more with an adjective suffix (-able,
    -ible, -less, -ous, -ful, -ive, -ical) or a participle in -ed (but not -bed, -eed), outside a short list of
    nouns with those endings (``table``, ``olive``, ``chemical``). Words that modify but are nouns (materials such
    as ``cotton`` or ``glass``; ``men``, ``kids``) stay nouns, as a tagger has them. Tokens are lower-cased words,
    split at hyphens, slashes and other punctuation, with a possessive ``'s`` removed (``Men's`` -> ``men``),
    roughly as spaCy tokenizes.
    """
    nouns = []
    for raw in _TITLE_TOKEN.findall(title.lower()):
        word = re.sub(r"['’]s$", "", raw).replace("’", "'")
        if len(word) < 2 or word in _FUNCTION_WORDS or word in _TITLE_ADJECTIVES or _UNIT.match(word):
            continue
        adjective_like = word.endswith(_ADJECTIVE_SUFFIXES) or (word.endswith("ed") and not word.endswith(("bed", "eed")))
        if len(word) >= 5 and adjective_like and word not in _SUFFIX_EXCEPTIONS:
            continue
        nouns.append(word)
    return nouns


def title_score(purchased_name: str, goal_name: str) -> float:
    """Shared title nouns over the goal title's nouns; 0.2 when the goal title has none (§5.4 "r_type")."""
    wanted = title_nouns(goal_name)
    if not wanted:
        return 0.2
    return len(set(title_nouns(purchased_name)) & set(wanted)) / len(wanted)


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal) -> TypeReward:
    """``r_type``: 1.0, lowered to 0.5 when neither query, >=2 category levels nor title nouns (> 0.2) agree, to
    0.1 when title_score < 0.1 and to 0.0 when it is 0."""
    query_match = product.query == goal.query
    levels_bought = {x.strip() for x in product.product_category.split("›")}
    levels_wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(levels_bought & levels_wanted) >= 2
    score = title_score(product.title, goal.name)
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
