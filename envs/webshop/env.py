"""WebShop as a :class:`~agentrl.envs.TextEnv` (``agentrl/WebShop-v0``, alias ``webshop``).

A clean-room WebShop (Yao et al. 2022) on the real product files, following docs/spec/environments.md §5.4: the catalogue,
prices and goals of :mod:`.catalog`, BM25 search (:mod:`.search`), the text pages (:mod:`.pages`), the page state
machine (:mod:`.session`) and the original score (:mod:`.reward`). Wrapped the way verl-agent trains on it
(docs/spec/environments.md §6, docs/spec/algorithms.md §1.2):

* **Goals and splits.** Synthetic goals by default (6,910 for the 1k catalogue); ``goals="human"`` uses the human
  instructions instead. After the seeded shuffle, ``eval`` = goals[:500] and ``train`` = goals[500:]. A task id is
  ``"goal-<i>"``, ``i`` being the goal's index in the shuffled list (verl-agent's session index).
* **Observation.** WebShop's ``text`` observation: the page's text nodes joined by ``" [SEP] "``.
* **Actions.** ``search[<query>]`` and ``click[<clickable>]`` (:mod:`.session`). ``info["admissible_actions"]``
  lists them as verl-agent's prompt does: ``search[<your query>]`` when the page has the search bar, then
  ``click[<x>]`` for every clickable of the page, in page order. As in verl-agent, ``click[search]`` is listed on
  the search page although WebShop ignores it (searching is ``search[...]``). The raw
  ``{"has_search_bar", "clickables"}`` dict is in ``info["available_actions"]``. Surrounding whitespace of an
  action is ignored (verl-agent strips model output); the action name is case-sensitive, its argument is not.
* **Reward.** ``success_reward`` (10) on the step that buys with WebShop score 1.0, else 0 (verl-agent's reward).
  ``score_reward`` adds that much times the purchase's score in [0, 1] on the buying step: WebShop's own RL reward
  (Yao et al. 2022 train on the score), which pays a partly right purchase, e.g. ``success_reward=0,
  score_reward=10`` for a policy that rarely buys exactly right. The score of the
  purchase is ``info["score"]`` (0.0 until something is bought), its parts ``info["score_breakdown"]``;
  ``info["won"]`` is ``score == 1.0``. ``info["task_type"]`` is the goal product's category (beauty, electronics,
  fashion, garden, grocery). Episodes are truncated after 15 steps.
* **Progress labels** (``progress_labels=True``). ``info["distance_to_goal"]`` is the number of actions the scripted
  expert (:mod:`.expert`) would play from the current page to a purchase with score 1.0, 0 once so bought
  (:func:`~agentrl.envs.webshop.expert.expert_distance`, simulated on a copy of the session). None where the
  expert's path ends in a purchase below 1.0: for 485 of the 6,910 goals from the start, and, after a search of the
  agent's own, wherever the expert's pick among those results cannot score 1.0 (500 eval goals: 14% after searching
  the goal's product type, 36% after the instruction's first six words). It is the expert's path, not a shortest
  one (it pages with ``next >`` where another query could find the product on page one). Following the expert counts
  it down by one per step on all 6,910 goals. A call takes 0.5-0.7 ms (median; p90 1.1-1.6 ms).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from agentrl.envs.core import TextEnv
from agentrl.envs.webshop.catalog import (
    UPSTREAM_GOAL_SEED,
    Catalog,
    CatalogSize,
    GoalSource,
    WebShopFiles,
    find_files,
    load_catalog,
)
from agentrl.envs.webshop.expert import expert_action, expert_distance
from agentrl.envs.webshop.search import SearchEngine
from agentrl.envs.webshop.session import WebShopSession
from agentrl.errors import AgentRLError, ConfigError

#: Goals held out for evaluation: the first 500 of the shuffled list (verl-agent's ``range(500)``).
EVAL_GOALS = 500
SEARCH_PLACEHOLDER = "search[<your query>]"


@lru_cache(maxsize=4)
def load_world(files: WebShopFiles, goal_source: GoalSource, goal_seed: int) -> tuple[Catalog, SearchEngine]:
    """The catalogue and its search index, built once per process for each data folder and goal setting."""
    catalog = load_catalog(files, goal_source, goal_seed)
    return catalog, SearchEngine(catalog.products)


class WebShopEnv(TextEnv):
    """WebShop text environment; see the module docstring.

    Args:
        data_dir: folder with WebShop's data files (else ``$WEBSHOP_DATA``, else ``~/.cache/webshop``).
        catalog: ``"small"`` (the 1,000-product files) or ``"full"`` (``items_shuffle.json``, ``items_ins_v2.json``).
        goals: ``"synthetic"`` (default, as verl-agent) or ``"human"``.
        goal_seed: seeds product prices, goal price caps and the goal shuffle (233 is upstream WebShop's shuffle
            seed; see :mod:`.catalog`).
        show_attributes: show the item page's "Attributes" button (off in WebShop's text env).
        sample_by_weight: ``reset()`` without a task draws goals by their weight, as WebShop does, instead of
            uniformly, as verl-agent does.
        success_reward: the RL reward of a purchase with score 1.0.
        score_reward: the RL reward of a purchase per unit of its score (0: the win alone pays, as in verl-agent).
        split, max_steps, expert, render_mode, progress_labels: see :class:`~agentrl.envs.TextEnv`.
    """

    splits: ClassVar[tuple[str, ...]] = ("train", "eval")
    description: ClassVar[str] = "WebShop on the 1,000-product set: BM25 search, product pages, the original reward"
    default_max_steps: ClassVar[int | None] = 15
    provides_distance: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str | Path | None = None,
        catalog: CatalogSize = "small",
        goals: GoalSource = "synthetic",
        goal_seed: int = UPSTREAM_GOAL_SEED,
        show_attributes: bool = False,
        sample_by_weight: bool = False,
        success_reward: float = 10.0,
        score_reward: float = 0.0,
        split: str | None = None,
        max_steps: int | None = -1,
        expert: bool = False,
        render_mode: str | None = None,
        progress_labels: bool = False,
    ):
        super().__init__(split=split, max_steps=max_steps, expert=expert, render_mode=render_mode,
                         progress_labels=progress_labels)
        if goals not in ("synthetic", "human"):
            raise ConfigError(f"goals must be 'synthetic' or 'human', got {goals!r}")
        files = find_files(data_dir, catalog, need_human=goals == "human")
        self.catalog, self.search_engine = load_world(files, goals, goal_seed)
        self.show_attributes = show_attributes
        self.sample_by_weight = sample_by_weight
        self.success_reward = float(success_reward)
        self.score_reward = float(score_reward)
        n = len(self.catalog.goals)
        self._task_ids = {
            "eval": tuple(f"goal-{i}" for i in range(min(EVAL_GOALS, n))),
            "train": tuple(f"goal-{i}" for i in range(EVAL_GOALS, n)),
        }
        self.session: WebShopSession | None = None

    # ------------------------------------------------------------------ TextEnv API
    def task_ids(self, split: str | None = None) -> Sequence[str]:
        split = split or self.split
        self._check_split(split)
        return self._task_ids[split]

    def _has_task(self, task_id: str) -> bool:
        index = self._goal_index(task_id)
        return index is not None and index < len(self.catalog.goals)

    def _select_task(self, options: dict[str, Any]) -> str:
        if not self.sample_by_weight or options.get("task_id") is not None or options.get("task_index") is not None:
            return super()._select_task(options)
        ids = self.task_ids(options.get("split", self.split))
        if not ids:
            raise AgentRLError(f"split {options.get('split', self.split)!r} of WebShopEnv has no goals")
        weights = [self.catalog.goals[self._goal_index(t)].weight for t in ids]
        total = sum(weights)
        return ids[int(self.np_random.choice(len(ids), p=[w / total for w in weights]))]

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        goal = self.catalog.goals[self._goal_index(task_id)]
        rng = random.Random(int(self.np_random.integers(2**62)))  # only the "<r>" search prefix draws from it
        self.session = WebShopSession(
            self.catalog, self.search_engine, goal, rng, show_attributes=self.show_attributes
        )
        return self.session.page.text, self._info()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        already_done = self.session.state.done
        score, done = self.session.step(action.strip())
        info = self._info()
        bought = done and not already_done
        won = bought and score == 1.0
        info["won"] = won
        if bought:
            info["score_breakdown"] = self.session.state.score.as_dict()
            info["purchased_asin"] = self.session.state.asin
            info["purchased_options"] = dict(self.session.state.options)
        reward = (self.success_reward if won else 0.0) + (self.score_reward * score if bought else 0.0)
        return self.session.page.text, reward, done, info

    def _expert_action(self) -> str | None:
        return expert_action(self.session) if self.session is not None else None

    def _distance_to_goal(self) -> int | None:
        return expert_distance(self.session)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _goal_index(task_id: str) -> int | None:
        prefix, _, number = task_id.partition("-")
        return int(number) if prefix == "goal" and number.isdigit() else None

    def goal(self, task_id: str | None = None):
        """The :class:`~agentrl.envs.webshop.catalog.Goal` of ``task_id`` (default: the current episode's)."""
        task_id = task_id or self.task_id
        if task_id is None or not self._has_task(task_id):
            raise AgentRLError(f"unknown WebShop task {task_id!r}")
        return self.catalog.goals[self._goal_index(task_id)]

    def _info(self) -> dict[str, Any]:
        session = self.session
        available = session.available_actions()
        admissible = ([SEARCH_PLACEHOLDER] if available["has_search_bar"] else []) + [
            f"click[{c}]" for c in available["clickables"]
        ]
        score = session.state.score.score if session.state.score is not None else 0.0
        return {
            "instruction": session.goal.instruction_text,
            "admissible_actions": admissible,
            "available_actions": available,
            "task_type": session.goal.category,
            "score": score,
        }
