"""One WebShop shopping session: the page state machine behind ``step`` (docs/spec/environments.md §5.4 "Actions").

This is WebShop's ``SimServer`` + ``SimBrowser`` for one user, without HTML:

* ``search[q]`` with a non-empty ``q`` searches from any page (the argument is lower-cased);
* ``click[x]`` works only if ``x`` (lower-cased) is a clickable of the current page and is not ``search``;
* anything else changes nothing (score 0, not done).

Clicks: an asin opens its item page; an option value selects it; ``description`` / ``features`` / ``reviews``
(and ``attributes`` when shown) open sub-pages; ``< prev`` goes sub-page -> item -> results page; ``next >`` and
``< prev`` page through results; ``back to search`` returns to the search page and forgets the query; ``buy now``
scores the purchase (:func:`~agentrl.envs.webshop.reward.get_reward`) and ends the session. Like the original,
returning to a results page re-runs its search and clears the chosen options.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass, field

from agentrl.envs.webshop import pages
from agentrl.envs.webshop.catalog import Catalog, Goal, Product
from agentrl.envs.webshop.reward import Score, get_reward
from agentrl.envs.webshop.search import SearchEngine, page_of


@dataclass
class SessionState:
    """Where the user is: the page, the last search, the product and options chosen."""

    page_kind: str = "search"
    keywords: str | None = None
    results_page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    done: bool = False
    score: Score | None = None


class WebShopSession:
    """A session on ``goal``: :meth:`step` takes a WebShop action string, :attr:`page` is what the user sees."""

    def __init__(
        self,
        catalog: Catalog,
        engine: SearchEngine,
        goal: Goal,
        rng: random.Random,
        *,
        show_attributes: bool = False,
    ):
        self.catalog, self.engine, self.goal, self.rng = catalog, engine, goal, rng
        self.show_attributes = show_attributes
        self.state = SessionState()
        self.results: list[Product] = []
        self.page = pages.search_page(goal.instruction_text)

    # ---------------------------------------------------------------------------------------------- actions
    def step(self, action: str) -> tuple[float, bool]:
        """Apply ``action``; return ``(score, done)``. The score is nonzero only on the step that buys."""
        if self.state.done:
            return 0.0, True
        name, arg = pages.parse_action(action)
        arg = arg.lower() if arg is not None else None
        if name == "search" and arg:
            self._search(arg, page_number=1)
        elif name == "click" and arg is not None and arg in self.page.clickables and arg != "search":
            return self._click(arg)
        return 0.0, False

    def copy(self) -> WebShopSession:
        """An independent copy: stepping it leaves this session unchanged, its random generator included."""
        other = copy.copy(self)
        other.rng = copy.deepcopy(self.rng)
        other.state = dataclasses.replace(self.state, options=dict(self.state.options))
        other.results = list(self.results)
        return other

    def available_actions(self) -> dict[str, object]:
        """WebShop's ``get_available_actions()``: ``{"has_search_bar": bool, "clickables": [str, ...]}``."""
        return {"has_search_bar": self.page.has_search_bar, "clickables": list(self.page.clickables)}

    @property
    def product(self) -> Product | None:
        return self.catalog.by_asin[self.state.asin] if self.state.asin else None

    # ---------------------------------------------------------------------------------------------- navigation
    def _search(self, keywords: str, page_number: int) -> None:
        self.state.page_kind, self.state.keywords, self.state.results_page = "results", keywords, page_number
        self.state.asin, self.state.options, self.state.sub_page = None, {}, None
        self.results = self.engine.search(keywords, self.rng)
        self.page = pages.results_page(
            self.goal.instruction_text, page_of(self.results, page_number), page_number, len(self.results)
        )

    def _show_item(self) -> None:
        self.state.page_kind, self.state.sub_page = "item", None
        self.page = pages.item_page(self.goal.instruction_text, self.product, show_attributes=self.show_attributes)

    def _click(self, text: str) -> tuple[float, bool]:
        state, kind = self.state, self.state.page_kind
        if text == pages.BUY_NOW.lower():
            return self._buy()
        if text == pages.BACK_TO_SEARCH.lower():
            self.state, self.results = SessionState(), []
            self.page = pages.search_page(self.goal.instruction_text)
        elif text == pages.NEXT_PAGE.lower() and kind == "results":
            self._search(state.keywords, state.results_page + 1)
        elif text == pages.PREV_PAGE.lower() and kind == "results":
            self._search(state.keywords, state.results_page - 1)
        elif text == pages.PREV_PAGE.lower() and kind == "item_sub_page":
            self._show_item()
        elif text == pages.PREV_PAGE.lower() and kind == "item":
            self._search(state.keywords, state.results_page)
        elif text in {s.lower() for s in pages.SUB_PAGES}:
            state.page_kind = "item_sub_page"
            state.sub_page = next(s for s in pages.SUB_PAGES if s.lower() == text)
            self.page = pages.item_sub_page(self.goal.instruction_text, self.product, state.sub_page)
        else:
            clickable = self.page.clickables[text]
            if clickable.kind == "product":
                state.asin = text.upper()
            elif clickable.kind == "option":
                state.options[clickable.option_name] = text
            self._show_item()
        return 0.0, False

    def _buy(self) -> tuple[float, bool]:
        product = self.product
        score = get_reward(product, self.goal, self.catalog.prices[product.asin], self.state.options)
        self.state.page_kind, self.state.done, self.state.score = "done", True, score
        self.page = pages.done_page(product.asin, self.state.options, score.score)
        return score.score, True
