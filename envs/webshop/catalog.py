"""WebShop data: finding the files, loading products, drawing prices and building goals.

Everything here follows docs/spec/environments.md §5.4 ("Product loading", "Price per product", "Goals"), which describes
``load_products``, ``generate_product_prices`` and ``get_{synthetic,human}_goals`` of princeton-nlp/WebShop.

Randomness. The original draws product prices and goal price caps from Python's *global* ``random`` state (so, in
upstream WebShop, they change from process to process) and then shuffles the goals after ``random.seed(233)``.
verl-agent seeds that global state with the env seed before loading and again before shuffling. Here one seed,
``goal_seed`` (default 233), drives a private :class:`random.Random` that makes the same sequence of draws: first one
``uniform(lo, hi)`` per price range (catalogue order), then one ``sample(caps, 2)`` per goal source (product order),
then, re-seeded, the shuffle. The goal list is therefore a pure function of the data files and ``goal_seed``.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from agentrl.envs.datadir import candidate_dirs, find_data_dir
from agentrl.errors import ConfigError

ENV_VAR = "WEBSHOP_DATA"
DEFAULT_DIR = "~/.cache/webshop"

#: WebShop's own file names per catalogue size (its ``data/`` folder). The human-instruction file is accepted under
#: either name: WebShop's setup always downloads the full ``items_human_ins.json``; the project copy of the 1k set
#: ships the 13 records that concern it as ``items_human_ins_1000.json`` (docs/spec/environments.md §1.2).
CATALOG_FILES: dict[str, dict[str, tuple[str, ...]]] = {
    "small": {
        "products": ("items_shuffle_1000.json",),
        "attributes": ("items_ins_v2_1000.json",),
        "human_instructions": ("items_human_ins.json", "items_human_ins_1000.json"),
    },
    "full": {
        "products": ("items_shuffle.json",),
        "attributes": ("items_ins_v2.json",),
        "human_instructions": ("items_human_ins.json",),
    },
}
CatalogSize = Literal["small", "full"]
GoalSource = Literal["synthetic", "human"]

HOW_TO_GET = (
    "WebShop's data comes from its setup script (princeton-nlp/WebShop `setup.sh -d small`, which downloads "
    "items_shuffle_1000.json, items_ins_v2_1000.json and items_human_ins.json from Google Drive). Put the files in "
    f"one folder and pass data_dir=..., set ${ENV_VAR}, or copy them with `agentrl data webshop --source DIR` "
    f"(into {DEFAULT_DIR})."
)

#: Price caps offered to goals (docs/spec/environments.md §5.4 "Price cap").
PRICE_RANGE: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
#: A goal whose product is too expensive for two caps gets this bound and no price clause.
NO_PRICE_CAP = 1_000_000.0
DEFAULT_PRICE = 100.0
UPSTREAM_GOAL_SEED = 233


@dataclass(frozen=True)
class WebShopFiles:
    """The resolved data files of one catalogue size."""

    folder: Path
    products: Path
    attributes: Path
    human_instructions: Path | None


def _first_existing(folder: Path, names: Sequence[str]) -> Path | None:
    for sub in (folder, folder / "data"):  # a bare folder, or a WebShop checkout whose data/ holds the files
        for name in names:
            if (sub / name).is_file():
                return sub / name
    return None


def resolve_files(folder: Path, catalog: CatalogSize = "small", *, need_human: bool = False) -> WebShopFiles | str:
    """The data files of ``catalog`` in ``folder`` (or ``folder/data``), or a reason naming the missing ones."""
    if catalog not in CATALOG_FILES:
        raise ConfigError(f"unknown WebShop catalog {catalog!r}; use one of {sorted(CATALOG_FILES)}")
    names = CATALOG_FILES[catalog]
    found = {kind: _first_existing(folder, names[kind]) for kind in names}
    required = ["products", "attributes"] + (["human_instructions"] if need_human else [])
    missing = [" or ".join(names[kind]) for kind in required if found[kind] is None]
    if missing:
        return "missing " + ", ".join(missing)
    return WebShopFiles(folder, found["products"], found["attributes"], found["human_instructions"])


def find_files(
    data_dir: str | Path | None = None, catalog: CatalogSize = "small", *, need_human: bool = False
) -> WebShopFiles:
    """Locate the data: ``data_dir``, else ``$WEBSHOP_DATA``, else ``~/.cache/webshop`` (raises MissingDataError)."""

    def is_complete(folder: Path) -> str | None:
        result = resolve_files(folder, catalog, need_human=need_human)
        return result if isinstance(result, str) else None

    what = f"WebShop data ({'1,000-product' if catalog == 'small' else 'full'} catalogue)"
    folder = find_data_dir(data_dir, ENV_VAR, DEFAULT_DIR, is_complete, HOW_TO_GET, what)
    files = resolve_files(folder, catalog, need_human=need_human)
    assert not isinstance(files, str)
    return files


def default_data_status() -> str | None:
    """None when the 1k catalogue is found at ``$WEBSHOP_DATA`` or ``~/.cache/webshop``, else a one-line reason."""
    reasons = []
    for folder in candidate_dirs(None, ENV_VAR, DEFAULT_DIR):
        problem = resolve_files(folder) if folder.is_dir() else "no such folder"
        if not isinstance(problem, str):
            return None
        reasons.append(f"{folder}: {problem}")
    return f"WebShop data not found ({'; '.join(reasons)}); see `agentrl data webshop --help`"


# ---------------------------------------------------------------------------------------------------- products
@dataclass(frozen=True)
class Product:
    """One catalogue product with the fields WebShop derives in ``load_products`` (docs/spec/environments.md §5.4 "Product loading")."""

    asin: str
    title: str  # ``Title`` (= name)
    description: str  # ``Description`` (= full_description)
    bullet_points: tuple[str, ...]  # ``BulletPoints`` (small_description, always a list)
    pricing: tuple[float, ...]  # parsed prices: one price, or the two ends of a range
    price_tag: str  # ``Price`` as shown: "$x" or "$x to $y"
    options: dict[str, tuple[str, ...]]  # lower-cased option name -> values ("/" shown as " | ")
    attributes: tuple[str, ...]  # from items_ins_v2 (``['DUMMY_ATTR']`` when absent)
    category: str  # top-level category: beauty, electronics, fashion, garden, grocery
    query: str  # the search query the product was scraped for, lower-cased
    product_category: str  # Amazon breadcrumb "A › B › C"
    main_image: str
    rating: str = "N.A."
    reviews: tuple[dict[str, Any], ...] = ()
    instruction: str | None = None  # synthetic instruction (items_ins_v2), None for most products
    instruction_attributes: tuple[str, ...] = ()
    human_instructions: tuple[dict[str, Any], ...] = ()  # records of items_human_ins.json

    @property
    def search_text(self) -> str:
        """The text WebShop indexes for this product (docs/spec/environments.md §5.4 "Indexed text")."""
        option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in self.options.items())
        first_bullet = self.bullet_points[0] if self.bullet_points else ""
        return " ".join([self.title, self.description, first_bullet, option_text]).lower()


def parse_pricing(pricing: str | None) -> tuple[tuple[float, ...], str]:
    """``"$10.99 - $15.99"`` -> ``((10.99, 15.99), "$10.99 to $15.99")``; empty -> ``((100.0,), "$100.0")``."""
    prices = []
    for piece in (pricing or "").split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", piece)
        try:
            prices.append(float(Decimal(digits)))
        except InvalidOperation:  # a stray "$" with no number; the original would crash here
            continue
    if not prices:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if len(prices) == 1:
        return (prices[0],), f"${prices[0]}"
    return (prices[0], prices[1]), f"${prices[0]} to ${prices[1]}"


def _options(customization_options: Any) -> dict[str, tuple[str, ...]]:
    options: dict[str, tuple[str, ...]] = {}
    if not customization_options:
        return options
    for name, contents in customization_options.items():
        if contents is None:
            continue
        options[name.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    return options


def load_products(files: WebShopFiles, *, human_goals: bool = False) -> list[Product]:
    """The catalogue in file order, skipping bad and duplicate asins, with WebShop's derived fields."""
    with open(files.products, encoding="utf-8") as f:
        raw_products = json.load(f)
    with open(files.attributes, encoding="utf-8") as f:
        attributes = json.load(f)
    human: dict[str, list[dict[str, Any]]] = {}
    if human_goals and files.human_instructions is not None:
        with open(files.human_instructions, encoding="utf-8") as f:
            human = json.load(f)

    products, seen = [], set()
    for raw in raw_products:
        asin = raw["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        bullets = raw["small_description"]
        pricing, price_tag = parse_pricing(raw.get("pricing"))
        extra = attributes.get(asin, {})
        products.append(
            Product(
                asin=asin,
                title=raw["name"],
                description=raw["full_description"],
                bullet_points=tuple(bullets) if isinstance(bullets, list) else (bullets,),
                pricing=pricing,
                price_tag=price_tag,
                options=_options(raw["customization_options"]),
                attributes=tuple(extra["attributes"]) if "attributes" in extra else ("DUMMY_ATTR",),
                category=raw["category"],
                query=raw["query"].lower().strip(),
                product_category=raw["product_category"],
                main_image=raw["images"][0] if raw.get("images") else "",
                instruction=None if human_goals else extra.get("instruction"),
                instruction_attributes=() if human_goals else tuple(extra.get("instruction_attributes") or ()),
                human_instructions=tuple(human.get(asin, ())),
            )
        )
    return products


def draw_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """The price of each product (docs/spec/environments.md §5.4 "Price per product"): a range gets a uniform draw, one price is kept."""
    return {p.asin: rng.uniform(*p.pricing[:2]) if len(p.pricing) > 1 else p.pricing[0] for p in products}


# ------------------------------------------------------------------------------------------------------- goals
@dataclass(frozen=True)
class Goal:
    """One shopping goal (docs/spec/environments.md §5.4 "Goals"). ``goal_options`` maps option name -> value for synthetic goals and is a
    list of values for human goals, as in the original (the reward treats the two differently)."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: dict[str, str] | tuple[str, ...]
    price_upper: float
    name: str  # the target product's title
    category: str
    query: str
    product_category: str
    weight: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    caps = [p for p in PRICE_RANGE if p > price][:4]
    if len(caps) >= 2:
        _, upper = sorted(rng.sample(caps, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return NO_PRICE_CAP, ""


def synthetic_goals(products: Sequence[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """One goal per option combination of each product with a synthetic instruction, weighted by the mean inverse
    frequency of its attributes (6,910 goals over 415 products for the 1k catalogue)."""
    drafts: list[dict[str, Any]] = []
    attribute_counts: Counter[str] = Counter()
    for product in products:
        if product.instruction is None:
            continue
        if not product.instruction_attributes:
            raise ConfigError(f"product {product.asin} has a synthetic instruction but no instruction_attributes")
        price_upper, price_text = _price_cap(prices[product.asin], rng)
        names = sorted(product.options)
        for combination in itertools.product(*(product.options[n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = f" with {option_text}" if option_text else ""
            drafts.append(
                dict(
                    asin=product.asin,
                    instruction_text=f"{product.instruction}{option_text}{price_text}",
                    attributes=product.instruction_attributes,
                    goal_options=goal_options,
                    price_upper=price_upper,
                    name=product.title,
                    category=product.category,
                    query=product.query,
                    product_category=product.product_category,
                )
            )
            attribute_counts.update(product.instruction_attributes)
    return [
        Goal(**d, weight=sum(1.0 / attribute_counts[a] for a in d["attributes"]) / len(d["attributes"]))
        for d in drafts
    ]


def human_goals(products: Sequence[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """One goal per human instruction that names at least one attribute; weight 1."""
    goals = []
    for product in products:
        for record in product.human_instructions:
            attributes = tuple(record["instruction_attributes"])
            if not attributes:
                continue
            price_upper, price_text = _price_cap(prices[product.asin], rng)
            goals.append(
                Goal(
                    asin=product.asin,
                    instruction_text=record["instruction"].strip(".") + price_text,
                    attributes=attributes,
                    goal_options=tuple(record["instruction_options"]),
                    price_upper=price_upper,
                    name=product.title,
                    category=product.category,
                    query=product.query,
                    product_category=product.product_category,
                    extra={"assignment_id": record.get("assignment_id"), "worker_id": record.get("worker_id")},
                )
            )
    return goals


@dataclass(frozen=True)
class Catalog:
    """Products, their drawn prices and the shuffled goal list: the immutable world every episode shares."""

    files: WebShopFiles
    products: tuple[Product, ...]
    by_asin: dict[str, Product]
    prices: dict[str, float]
    goals: tuple[Goal, ...]
    goal_source: GoalSource
    goal_seed: int


def load_catalog(files: WebShopFiles, goal_source: GoalSource = "synthetic", goal_seed: int = UPSTREAM_GOAL_SEED) -> Catalog:
    """Load products, draw prices and goal price caps from ``goal_seed``, then shuffle the goals (module docstring)."""
    if goal_source not in ("synthetic", "human"):
        raise ConfigError(f"goals must be 'synthetic' or 'human', got {goal_source!r}")
    products = load_products(files, human_goals=goal_source == "human")
    rng = random.Random(goal_seed)
    prices = draw_prices(products, rng)
    goals = (synthetic_goals if goal_source == "synthetic" else human_goals)(products, prices, rng)
    random.Random(goal_seed).shuffle(goals)
    return Catalog(
        files=files,
        products=tuple(products),
        by_asin={p.asin: p for p in products},
        prices=prices,
        goals=tuple(goals),
        goal_source=goal_source,
        goal_seed=goal_seed,
    )
