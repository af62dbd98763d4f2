"""The text-environment contract: :class:`TextEnv`, a :class:`gymnasium.Env` whose observations and actions are strings.

Follows Gymnasium's ``core.py`` API exactly (``reset(seed=, options=) -> (obs, info)``, ``step(action) ->
(obs, reward, terminated, truncated, info)``) and adds what group-based RL for agents needs:

* **Tasks are first-class.** ``env.task_ids(split)`` lists a split's tasks; ``reset(options={"task_id": ...})``
  or ``reset(options={"split": ..., "task_index": i})`` starts that exact task, so that the G members of a rollout
  group start from the identical initial state. ``reset(seed=s)`` without a task draws one from ``self.split``
  with the seeded ``np_random``: the same task and seed always give the same observation.
* **Documented ``info`` keys**, present after every ``reset`` and ``step`` (:data:`INFO_KEYS`):
  ``admissible_actions`` (list of str; empty for free-form envs), ``task_id``, ``instruction``, ``won`` (bool),
  ``anchor`` (the state key GiGPO groups steps by; default the raw observation), plus env-specific extras such
  as ``task_type`` or ``expert_action`` (the expert's next action, when the env is built with ``expert=True``).
* **Progress labels** (``progress_labels=True``, envs with a planner only): ``info["distance_to_goal"]``, the planner's
  number of steps from the current state to the goal (0 once won, ``None`` when unknown), after ``reset`` and every
  ``step``. A step "makes progress" when the distance falls, "regresses" when it grows, and is "neutral" otherwise.
* **A step limit** (``max_steps``) handled here, so that every env truncates the same way.

Subclasses implement four small methods: :meth:`task_ids`, :meth:`_reset_task`, :meth:`_step` and, optionally,
:meth:`_expert_action`; envs with a planner also implement :meth:`_distance_to_goal` and set ``provides_distance``.
The base class does the bookkeeping, so the contract holds for every env.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

from agentrl.errors import AgentRLError, ConfigError

#: Keys every TextEnv puts in ``info`` after ``reset`` and ``step``.
INFO_KEYS: tuple[str, ...] = ("admissible_actions", "task_id", "instruction", "won", "anchor")

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class PrintableText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that admits any printable text, newlines, tabs and non-ASCII included.

    ``Text`` only admits characters from a finite charset, which rejects real observations (product pages carry
    accented letters, dashes and symbols). Membership here rejects only control characters other than ``\\t``,
    ``\\n`` and ``\\r``; sampling draws from ``string.printable`` so random actions stay readable.
    """

    def __init__(self, max_length: int = 100_000, *, min_length: int = 0, seed: int | None = None):
        import string

        super().__init__(max_length, min_length=min_length, charset=string.printable.replace("\x0b\x0c", ""), seed=seed)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, str)
            and self.min_length <= len(x) <= self.max_length
            and _CONTROL_CHARS.search(x) is None
        )

    def __repr__(self) -> str:
        return f"PrintableText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, PrintableText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


class TextEnv(gym.Env[str, str]):
    """Base class of agentrl text environments. See the module docstring for the contract.

    Args:
        split: the split that ``reset()`` draws tasks from when no task is given.
        max_steps: episodes are truncated after this many steps (``None``: never).
        expert: when True, ``info["expert_action"]`` holds the env's expert action for the current state
            (walkthrough, planner or solver), which the ``expert`` agent plays.
        render_mode: ``"ansi"`` returns the last observation from ``render()``; ``"human"`` prints it.
        progress_labels: when True, ``info["distance_to_goal"]`` holds :meth:`distance_to_goal` after reset and
            every step (computed on every step, which can be expensive). Only for envs with ``provides_distance``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    #: Splits this env defines, in a stable order; the first is the default training split.
    splits: ClassVar[tuple[str, ...]] = ("train",)
    #: One line shown by ``agentrl envs``.
    description: ClassVar[str] = ""
    #: Default step limit of the family (overridable per instance).
    default_max_steps: ClassVar[int | None] = 50
    #: Whether :meth:`distance_to_goal` can be computed (the env implements :meth:`_distance_to_goal`).
    provides_distance: ClassVar[bool] = False

    def __init__(
        self,
        split: str | None = None,
        max_steps: int | None = -1,
        expert: bool = False,
        render_mode: str | None = None,
        progress_labels: bool = False,
    ):
        if progress_labels and not self.provides_distance:
            raise ConfigError(f"{type(self).__name__} has no planner to compute distance_to_goal; "
                              "build it with progress_labels=False")
        self.observation_space = PrintableText()
        self.action_space = PrintableText(max_length=10_000)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise AgentRLError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        if not self.splits:
            raise ConfigError(f"{type(self).__name__}.splits is empty; declare at least one split (e.g. ('train',))")
        self.split = split or self.splits[0]
        self._check_split(self.split)
        self.max_steps = self.default_max_steps if max_steps == -1 else max_steps
        self.expert = expert
        self.progress_labels = progress_labels
        self._task_id: str | None = None
        self._elapsed = 0
        self._last_obs = ""
        self._last_info: dict[str, Any] = {}

    # ------------------------------------------------------------------ subclass API
    def task_ids(self, split: str | None = None) -> Sequence[str]:
        """The task ids of ``split`` (default ``self.split``), in a stable order."""
        raise NotImplementedError

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """Start ``task_id`` from its initial state; return the observation and info (at least ``instruction``
        and ``admissible_actions``). Randomness must come from ``self.np_random`` only."""
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply ``action``; return ``(observation, reward, terminated, info)`` with ``info["won"]`` set.
        An action that is not possible changes nothing and is reported in the observation, never raised."""
        raise NotImplementedError

    def _expert_action(self) -> str | None:
        """The expert's next action in the current state, or None when the env has no expert."""
        return None

    def _distance_to_goal(self) -> int | None:
        """The planner's number of steps from the current state to the goal (0 once won), or None when unknown."""
        return None

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = self._select_task(options or {})
        obs, info = self._reset_task(task_id)
        self._task_id = task_id
        self._elapsed = 0
        return obs, self._finish_info(obs, info, won=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task_id is None:
            raise AgentRLError("call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"a TextEnv action is a str, got {type(action).__name__}")
        obs, reward, terminated, info = self._step(action)
        self._elapsed += 1
        truncated = bool(not terminated and self.max_steps is not None and self._elapsed >= self.max_steps)
        info = self._finish_info(obs, info, won=bool(info.get("won", False)))
        return obs, float(reward), bool(terminated), truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        if self.render_mode == "human":
            print(self._last_obs)
        return None

    # ------------------------------------------------------------------ helpers
    @property
    def task_id(self) -> str | None:
        """The task of the current episode."""
        return self._task_id

    @property
    def elapsed_steps(self) -> int:
        return self._elapsed

    def distance_to_goal(self) -> int | None:
        """The number of steps the env's planner needs from the current state to the goal: 0 once the episode is
        won, None when unknown (no plan from here, or no planner). Call it after ``reset()``."""
        if self._task_id is None:
            raise AgentRLError("call reset() before distance_to_goal()")
        return self._distance_to_goal()

    def _check_split(self, split: str) -> None:
        if split not in self.splits:
            raise AgentRLError(f"unknown split {split!r} for {type(self).__name__}; known: {', '.join(self.splits)}")

    def _select_task(self, options: dict[str, Any]) -> str:
        unknown = set(options) - {"task_id", "task_index", "split"}
        if unknown:
            raise AgentRLError(f"unknown reset option(s) {sorted(unknown)}; use task_id, or split and task_index")
        split = options.get("split", self.split)
        self._check_split(split)
        if options.get("task_id") is not None:
            task_id = str(options["task_id"])
            if not self._has_task(task_id):
                raise AgentRLError(f"unknown task_id {task_id!r} for {type(self).__name__}")
            return task_id
        ids = self.task_ids(split)
        if not ids:
            raise AgentRLError(f"split {split!r} of {type(self).__name__} has no tasks")
        if options.get("task_index") is not None:
            index = int(options["task_index"])
            if not 0 <= index < len(ids):
                raise AgentRLError(f"task_index {index} out of range for split {split!r} ({len(ids)} tasks)")
            return ids[index]
        return ids[int(self.np_random.integers(len(ids)))]

    def _has_task(self, task_id: str) -> bool:
        return any(task_id in self.task_ids(s) for s in self.splits)

    def _finish_info(self, obs: str, info: dict[str, Any], *, won: bool) -> dict[str, Any]:
        info = dict(info)
        info.setdefault("admissible_actions", [])
        info.setdefault("instruction", "")
        info["task_id"] = self._task_id
        info["won"] = won
        info.setdefault("anchor", obs)
        if self.expert:
            info["expert_action"] = self._expert_action()
        if self.progress_labels:
            info["distance_to_goal"] = self.distance_to_goal()
        self._last_obs, self._last_info = obs, info
        return info
