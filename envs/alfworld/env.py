"""``agentrl/ALFWorld-v0`` (alias ``alfworld``): ALFWorld's household text games on the real engine.

The engine is textworld 1.7's TextWorld-PDDL with fast-downward and alfworld 0.4.2's wrappers
(:mod:`agentrl.envs.alfworld.engine`); nothing of the game is re-implemented. What this env adds, following how
verl-agent wraps ``AlfredTWEnv`` (docs/spec/environments.md §6, docs/spec/algorithms.md §1.2, §1.5, §3.2):

* **Splits** ``train`` (``train/``, 3553 games), ``eval_in_distribution`` (``valid_seen/``, 140) and
  ``eval_out_of_distribution`` (``valid_unseen/``, 134), found as in :mod:`agentrl.envs.alfworld.data`. Task ids are
  the games' relative paths (``valid_unseen/<task dir>/<trial dir>``), stable across machines.
* **Observation**: the engine's raw feedback (at reset, the welcome text with "Your task is to: ...").
* **info**: ``admissible_actions`` (the engine's, ``help`` removed), ``instruction`` (the text after "Your task is
  to: "), ``won``, ``task_type`` (the table label: Pick, Look, Clean, Heat, Cool, Pick2), ``task_type_raw``
  (``pick_and_place_simple`` ...), ``gamefile``, and ``anchor``: by default the raw feedback, as verl-agent's GiGPO
  anchor; ``anchor="location_inventory"`` or ``"state"`` give richer keys (see :class:`ALFWorldEnv`).
* **Reward** ``success_reward`` (10) on the step that wins, else 0; the episode terminates when won and is truncated
  after ``max_steps`` (50).
* **An inadmissible command** changes nothing: the engine answers "Nothing happens." (not an error).
* **Expert** (``expert=True``): the game's stored walkthrough while the agent follows it; once the agent leaves it,
  a plan from the current state by the engine's own fast-downward replanner (textworld's ``policy_commands``),
  searched over the entities that matter
  (:meth:`~agentrl.envs.alfworld.engine.ReusablePddlEnv.focused_policy_commands`) and computed only then.
* **Progress labels** (``progress_labels=True``): ``info["distance_to_goal"]`` is the length of the plan that the
  expert's replanner finds from the current state (``focused_policy_commands``, a uniform-cost search): 0 once won,
  None where it finds none (a dead end, such as holding an object that no receptacle of the room takes). It is
  cached per world state (the ``"state"`` anchor's digest) within a loaded game: a revisited state costs about 1 ms.
  On all 274 eval games the walkthrough is exactly as long as the plan from the start, and following the expert
  lowers the distance by one per step down to 0 at the win (1,600 steps); the plan was a shortest one of the full
  game on all 450 states where that check is affordable (distance at most 5: starts, plan prefixes, random
  detours). A fresh plan costs 88 ms of CPU time (median; p90 213 ms, max 1.4 s; kitchens 134 ms, bathrooms
  11 ms), over 1,874 calls on the states along the expert's path and after random detours of every eval game.
* **Fast resets**: each game is translated and grounded once per process; later resets of it restart from the
  saved initial state (:class:`~agentrl.envs.alfworld.engine.ReusablePddlEnv`): a few ms instead of about a
  second (``bench/envs_alfworld.py``).
* **Fast steps**: textworld's text templates and grammar queries are parsed once per process, not on every step
  (:class:`~agentrl.envs.alfworld.engine.MemoizedGrammar`), with the same observations and admissible commands.

Build it anywhere from its constructor arguments alone (they are plain values), for example in worker processes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agentrl.envs.alfworld.data import SPLIT_FOLDERS, find_games_root, scan_split
from agentrl.envs.alfworld.tasks import TASK_TYPES, ALFWorldTask, normalize_task_type
from agentrl.envs.core import TextEnv
from agentrl.errors import AgentRLError, ConfigError, MissingDataError

TASK_PREFIX = "Your task is to: "
ANCHORS = ("observation", "location_inventory", "state")
_SPLIT_OF_FOLDER = {folder: split for split, folder in SPLIT_FOLDERS.items()}


class ALFWorldEnv(TextEnv):
    """ALFWorld on textworld's PDDL engine. See the module docstring.

    Args:
        split: the split ``reset()`` draws from when no task is given (default ``train``).
        max_steps: truncation limit (default 50, as verl-agent).
        expert: put the expert's next command in ``info["expert_action"]``.
        render_mode: ``"ansi"`` or ``"human"``.
        data_dir: the folder holding ``json_2.1.1/`` (or that folder itself); default ``$ALFWORLD_DATA``, else
            ``~/.cache/alfworld``.
        task_types: keep only these task types: raw names, table labels (``"Heat"``) or alfworld's ids (1-6).
        success_reward: the reward of the winning step (verl-agent: 10).
        progress_labels: put :meth:`distance_to_goal` in ``info["distance_to_goal"]`` after reset and every step.
        anchor: what ``info["anchor"]`` holds. ``"observation"``: the raw feedback (verl-agent's GiGPO anchor;
            every "Nothing happens." falls in one group). ``"location_inventory"``: where the agent stands and what
            it holds (``"at: countertop 1 | holding: apple 1"``), a coarser but state-based key.
            ``"state"``: a 16-hex digest of every true fact of the world, equal exactly when the world states are
            equal (the engine's ``checked`` facts, which only record that look/inventory/examine were played, are
            left out).
        fast_reset: restart games from their saved initial state (default). False re-translates the PDDL on every
            reset, as textworld does; only useful to compare.
        grounding_cache_size: how many grounded games a process keeps (shared by its envs; the largest size asked
            for wins). A kitchen takes about 7 MB.
        memoize_parses: parse each of textworld's text templates and queries once per process instead of on every
            step (default; :class:`~agentrl.envs.alfworld.engine.MemoizedGrammar`: the same texts, steps about
            twice as fast). False keeps textworld's own grammar; only useful to compare.
    """

    splits: ClassVar[tuple[str, ...]] = tuple(SPLIT_FOLDERS)
    description: ClassVar[str] = (
        "ALFWorld household tasks on the real TextWorld-PDDL engine (3553 train games, 140 + 134 eval)"
    )
    default_max_steps: ClassVar[int | None] = 50
    provides_distance: ClassVar[bool] = True

    def __init__(
        self,
        split: str | None = None,
        max_steps: int | None = -1,
        expert: bool = False,
        render_mode: str | None = None,
        progress_labels: bool = False,
        *,
        data_dir: str | os.PathLike | None = None,
        task_types: Sequence[str | int] | None = None,
        success_reward: float = 10.0,
        anchor: str = "observation",
        fast_reset: bool = True,
        grounding_cache_size: int | None = None,
        memoize_parses: bool = True,
    ):
        super().__init__(split=split, max_steps=max_steps, expert=expert, render_mode=render_mode,
                         progress_labels=progress_labels)
        if anchor not in ANCHORS:
            raise ConfigError(f"anchor must be one of {ANCHORS}, got {anchor!r}")
        try:
            wanted = tuple(dict.fromkeys(normalize_task_type(t) for t in task_types)) if task_types else TASK_TYPES
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.games_root: Path = find_games_root(data_dir)
        self.task_types = wanted
        self.success_reward = float(success_reward)
        self.anchor = anchor
        self.fast_reset = fast_reset
        self.grounding_cache_size = grounding_cache_size
        self.memoize_parses = memoize_parses
        # Per split, filled when first asked: an eval-only run never scans the 3553 train games.
        self._tasks: dict[str, dict[str, ALFWorldTask]] = {}
        self._ids: dict[str, tuple[str, ...]] = {}
        if split is not None and not self.task_ids(split):
            raise MissingDataError(self._why_no_tasks(split))

        self._engine: Any = None  # built on the first reset: importing textworld and copying the library cost time
        self._loaded_gamefile: str | None = None
        self._state: Any = None
        self._task: ALFWorldTask | None = None
        self._instruction = ""
        self._won = False
        # Expert bookkeeping: the commands it means to play from the current state, and how far the agent followed.
        self._walkthrough: list[str] = []
        self._plan: list[str] | None = None
        self._plan_pos = 0
        # The planner's distance to the goal by world-state digest, for the loaded game (the plan depends on no more).
        self._distances: dict[str, int | None] = {}

    # ---------------------------------------------------------------- tasks
    def _split_tasks(self, split: str) -> dict[str, ALFWorldTask]:
        if split not in self._tasks:
            games = scan_split(self.games_root, split)
            self._tasks[split] = {t.task_id: t for t in games if t.task_type in self.task_types}
            self._ids[split] = tuple(self._tasks[split])
        return self._tasks[split]

    def task_ids(self, split: str | None = None) -> Sequence[str]:
        split = split or self.split
        self._check_split(split)
        self._split_tasks(split)
        return self._ids[split]

    def _has_task(self, task_id: str) -> bool:
        split = _SPLIT_OF_FOLDER.get(task_id.split("/", 1)[0])
        return split is not None and task_id in self._split_tasks(split)

    def task(self, task_id: str) -> ALFWorldTask:
        """The game behind ``task_id``: file, raw task type, scene and room type."""
        if not self._has_task(task_id):
            raise AgentRLError(f"unknown task_id {task_id!r} for ALFWorldEnv")
        return self._split_tasks(_SPLIT_OF_FOLDER[task_id.split("/", 1)[0]])[task_id]

    def _why_no_tasks(self, split: str) -> str:
        folder = self.games_root / SPLIT_FOLDERS[split]
        if not folder.is_dir():
            reason = f"its folder {folder} is absent"
        elif self.task_types != TASK_TYPES:
            reason = f"no playable game of the task types {list(self.task_types)} in {folder}"
        else:
            reason = f"no playable game in {folder}"
        return f"split {split!r} of ALFWorld has no games: {reason}. Splits with games here: " + (
            ", ".join(f"{s} ({len(self.task_ids(s))})" for s in self.splits if self.task_ids(s)) or "none"
        ) + ". To add the train games, unpack json_2.1.1-train.tar.gz with `agentrl data alfworld --archive FILE`."

    def _select_task(self, options: dict[str, Any]) -> str:
        split = options.get("split", self.split)
        if options.get("task_id") is None and split in self.splits and not self.task_ids(split):
            raise MissingDataError(self._why_no_tasks(split))
        return super()._select_task(options)

    # ---------------------------------------------------------------- dynamics
    def _make_engine(self) -> Any:
        from agentrl.envs.alfworld import engine

        if self.grounding_cache_size is not None:
            engine.GROUNDINGS.maxsize = max(engine.GROUNDINGS.maxsize, int(self.grounding_cache_size))
        return engine.make_engine(reuse=self.fast_reset, memoize_parses=self.memoize_parses)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if self._engine is None:
            self._engine = self._make_engine()
        task = self.task(task_id)
        gamefile = str(task.gamefile)
        if gamefile != self._loaded_gamefile:
            self._engine.load(gamefile)
            self._loaded_gamefile = gamefile
            self._distances = {}
        state = self._engine.reset()
        self._task, self._state, self._won = task, state, False
        feedback = state.feedback
        start = feedback.find(TASK_PREFIX)
        self._instruction = feedback[start + len(TASK_PREFIX):].strip() if start >= 0 else ""
        self._walkthrough = list(self._engine.walkthrough or [])
        self._plan = list(self._walkthrough) or None
        self._plan_pos = 0
        return feedback, self._info(state)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        previous = self._state
        state, _score, _done = self._engine.step(action)
        self._state = state
        won = bool(state["won"])
        reward = self.success_reward if won and not self._won else 0.0
        self._won = self._won or won
        if self.expert:
            self._follow_plan(action.strip(), previous)
        return state.feedback, reward, won, self._info(state)

    def _info(self, state: Any) -> dict[str, Any]:
        assert self._task is not None
        return {
            "admissible_actions": [c for c in state["admissible_commands"] if c != "help"],
            "instruction": self._instruction,
            "won": bool(state["won"]),
            "task_type": self._task.label,
            "task_type_raw": self._task.task_type,
            "gamefile": str(self._task.gamefile),
            "anchor": self._anchor(state),
        }

    def _anchor(self, state: Any) -> str:
        if self.anchor == "observation":
            return state.feedback
        facts = self._engine.true_facts()
        if self.anchor == "state":
            return _state_digest(facts)
        here = {args[1] for name, args in facts if name == "atlocation" and args[0] == "agent1"}
        at = sorted(args[0] for name, args in facts if name == "receptacleatlocation" and args[1] in here)
        held = sorted(args[1] for name, args in facts if name == "holds")
        return f"at: {', '.join(at) or 'the middle of the room'} | holding: {', '.join(held) or 'nothing'}"

    # ---------------------------------------------------------------- expert
    def _follow_plan(self, command: str, previous: Any) -> None:
        """Advance the expert's plan if the agent played its next command; drop it if the agent changed the state
        another way (an inadmissible command changes nothing, so the plan still holds)."""
        if command not in previous["admissible_commands"]:
            return
        if self._plan is not None and self._plan_pos < len(self._plan) and self._plan[self._plan_pos] == command:
            self._plan_pos += 1
        else:
            self._plan = None

    def _expert_action(self) -> str | None:
        if self._won:
            return None
        if self._plan is None or self._plan_pos >= len(self._plan):
            self._plan = list(self._engine.focused_policy_commands(self._walkthrough))
            self._plan_pos = 0
        return self._plan[self._plan_pos] if self._plan else None

    # ---------------------------------------------------------------- progress labels
    def _distance_to_goal(self) -> int | None:
        """The length of the expert's replanner's plan from the current state (module docstring), cached per state."""
        if self._won:
            return 0
        key = _state_digest(self._engine.true_facts())
        if key not in self._distances:
            plan = self._engine.focused_policy_commands(self._walkthrough)
            self._distances[key] = len(plan) if plan else None
        return self._distances[key]

    # ---------------------------------------------------------------- resources
    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._loaded_gamefile = None
        super().close()


def _state_digest(facts: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A 16-hex digest of the true facts, equal exactly when the world states are equal; ``checked`` facts are left
    out: they only record that look/inventory/examine were played, and no action or goal depends on them."""
    lines = sorted(f"{name}({','.join(args)})" for name, args in facts if name != "checked")
    return hashlib.blake2b("\n".join(lines).encode(), digest_size=8).hexdigest()
