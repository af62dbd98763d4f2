"""WebShop's pages as text: what each page shows and what can be clicked on it (docs/spec/environments.md §5.4 "Pages").

The original renders HTML templates and turns them into the ``text`` observation by joining every visible text node,
stripped, with ``" [SEP] "``. Each function here builds the same sequence of text nodes directly. Two HTML details
are reproduced because they show in the text: a node is absent when its template value is empty, and a node made
only of spaces (no newline), such as a bullet point that is an empty string, becomes an empty part.

Clickables are, in page order, the lower-cased text of every button and product link, then each option value of
the item page (WebShop's ``get_available_actions``). A value may appear once only: a later clickable with the same
text replaces an earlier one, as in the original's dict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrl.envs.webshop.catalog import Product

SEP = " [SEP] "
BUY_NOW, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "Buy Now", "Next >", "< Prev", "Back to Search"
#: Item sub-pages, by button text. ``Attributes`` is shown only with ``show_attributes=True`` (off in the original).
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")

_ASCII_SPACES = dict.fromkeys(map(ord, " \n\t\x0c\r"))
_ACTION = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """``"click[Buy Now]"`` -> ``("click", "Buy Now")``; anything without ``name[arg]`` -> ``(action, None)``.

    The same pattern as WebShop's ``parse_action`` (``(.+)\\[(.+)\\]``, matched from the start, greedy), so text
    after the last ``]`` is ignored and the argument runs to the last ``]``.
    """
    match = _ACTION.match(action)
    if match is None:
        return action, None
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class Clickable:
    """One thing a ``click[...]`` can target: a button, a product link (``asin``) or an option value."""

    kind: str  # "button" | "product" | "option"
    text: str  # as shown
    option_name: str | None = None


@dataclass
class Page:
    """A rendered page: its text nodes, whether it has the search bar, and its clickables by lower-cased text."""

    kind: str  # "search" | "results" | "item" | "item_sub_page" | "done"
    texts: list[str] = field(default_factory=list)
    has_search_bar: bool = False
    clickables: dict[str, Clickable] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return SEP.join(self.texts)

    def add(self, value: object) -> None:
        """Append a text node as the HTML round trip would: none for "", "" for spaces-only, else stripped."""
        value = str(value)
        if value == "":
            return
        if value.translate(_ASCII_SPACES) == "":
            if "\n" not in value:
                self.texts.append("")
            return
        self.texts.append(value.strip())

    def add_button(self, text: str) -> None:
        self.add(text)
        self.clickables[text.lower()] = Clickable("button", text)


def _instruction_header(page: Page, instruction: str) -> None:
    page.add("Instruction:")
    page.add(instruction)


def search_page(instruction: str) -> Page:
    page = Page("search", has_search_bar=True)
    page.add("WebShop")
    _instruction_header(page, instruction)
    page.add_button("Search")
    return page


def results_page(instruction: str, products: Sequence[Product], page_number: int, total: int) -> Page:
    """Results ``page_number`` (1-based) of a search with ``total`` hits; "Next >" is always offered."""
    page = Page("results")
    _instruction_header(page, instruction)
    page.add_button(BACK_TO_SEARCH)
    page.add(f"Page {page_number} (Total results: {total})")
    if page_number > 1:
        page.add_button(PREV_PAGE)
    page.add_button(NEXT_PAGE)
    links = []
    for product in products:
        page.add(product.asin)
        page.add(product.title)
        page.add(product.price_tag)
        links.append(product.asin)
    for asin in links:  # product links come after all buttons in the original's clickable order
        page.clickables[asin.lower()] = Clickable("product", asin)
    return page


def item_page(instruction: str, product: Product, *, show_attributes: bool = False) -> Page:
    page = Page("item")
    _instruction_header(page, instruction)
    page.add_button(BACK_TO_SEARCH)
    page.add_button(PREV_PAGE)
    option_clickables = {}
    for name, values in product.options.items():
        page.add(name)
        for value in values:
            page.add(value)
            option_clickables[value] = Clickable("option", value, option_name=name)
    page.add(product.title)
    page.add(f"Price: {product.price_tag}")
    page.add(f"Rating: {product.rating}")
    for sub_page in SUB_PAGES[:3] + (("Attributes",) if show_attributes else ()):
        page.add_button(sub_page)
    page.add_button(BUY_NOW)
    page.clickables.update(option_clickables)
    return page


def item_sub_page(instruction: str, product: Product, sub_page: str) -> Page:
    """The Description, Features, Reviews or Attributes page of ``product``."""
    page = Page("item_sub_page")
    _instruction_header(page, instruction)
    page.add_button(BACK_TO_SEARCH)
    page.add_button(PREV_PAGE)
    if sub_page == "Description":
        page.add(product.description)
    elif sub_page == "Features":
        for bullet in product.bullet_points:
            page.add(f" {bullet}")
    elif sub_page == "Reviews":
        for review in product.reviews:
            page.add(f'"{review.get("title", "")}"')
            page.add(review.get("score", ""))
            page.add(review.get("body", ""))
    elif sub_page == "Attributes":
        for attribute in product.attributes:
            page.add(f" {attribute}")
        page.add(product.category)
        page.add(product.query)
        page.add(product.product_category)
    else:
        raise ValueError(f"unknown item sub-page {sub_page!r}")
    return page


def _flask_tojson(value: object) -> str:
    # Flask's ``tojson`` filter: sorted keys, ASCII only, and <, >, &, ' escaped for HTML.
    text = json.dumps(value, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")


def done_page(asin: str, options: Mapping[str, str], score: float) -> Page:
    """The page after "Buy Now". The original template's hidden debug fields render as "None" or empty in text
    mode because the env passes only the asin, the options and the score."""
    page = Page("done")
    for text in ("Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
                 "Purchased", "asin", asin, "options", _flask_tojson(dict(options)),
                 "attrs", "None", "category", "None", "query", "None", "product category", "None",
                 "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
                 "product category", "query", "Goal", "None", "Reward",
                 "Your score (min 0.0, max 1.0)", str(score), "Reward Details", "None"):  # fmt: skip
        page.add(text)
    return page
