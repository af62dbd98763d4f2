"""Plain Gymnasium text environments, as they are: :class:`GymTextEnv` gives any ``gymnasium.Env`` whose observations
and actions are strings the :class:`~agentrl.envs.TextEnv` contract, reading what its ``info`` provides.

:func:`agentrl.envs.make` wraps such an env by itself (a ``module:Class``, a Gymnasium id, Gymnasium's own
``module:EnvId``, an entry point or :func:`agentrl.envs.register`), so a user's env needs no agentrl import.
What is read, and the default for what is missing:

=======================  ==============================================================================================
``info`` key             default when the env does not provide it
=======================  ==============================================================================================
``admissible_actions``   ``[]``: the env is free-form (agents generate actions; the scoring mode needs a list)
``won``                  ``info["success"]`` if present, else: the episode terminated with a positive reward
``instruction``          ``""`` (the observation is the whole prompt)
``anchor``               the observation (GiGPO groups steps by identical observations)
``task_id``              set by the adapter (below)
``expert_action``        none: ``expert=True`` needs an env that puts its expert's next action there
=======================  ==============================================================================================

Tasks. An env with its own tasks declares ``splits`` (a sequence of names) and a method ``task_ids(split)``, and
starts a task on ``reset(seed=..., options={"task_id": ...})``. Any other env is seeded: its tasks are its reset
seeds, named ``seed-<n>``, with the splits of :data:`SEED_SPLITS` (train: seeds 0-9,999; test: 10,000-10,999), and
``reset(seed=n)`` must start the same task every time for the same ``n``. Episodes are truncated at ``max_steps``
(default :data:`DEFAULT_MAX_STEPS`) or when the env truncates them itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym

from agentrl.envs.core import TextEnv
from agentrl.errors import AgentRLError, ConfigError

#: The splits of a seeded env: name -> range of reset seeds.
SEED_SPLITS: dict[str, range] = {"train": range(0, 10_000), "test": range(10_000, 11_000)}
#: The step limit when the env's constructor is given none.
DEFAULT_MAX_STEPS = 50
#: Constructor arguments the adapter takes for itself (the rest go to the wrapped env).
ADAPTER_ARGS = ("split", "max_steps", "expert", "render_mode", "progress_labels")


def is_text_env_class(obj: Any) -> bool:
    """Whether ``obj`` is a :class:`TextEnv` subclass (which needs no adapter)."""
    return isinstance(obj, type) and issubclass(obj, TextEnv)


class GymTextEnv(TextEnv):
    """A plain ``gymnasium.Env`` with string observations and actions, under the :class:`TextEnv` contract.

    Args:
        env: the environment to adapt (built; ``gymnasium.make`` wrappers are fine).
        split, max_steps, expert, render_mode: as for :class:`TextEnv`.
    """

    default_max_steps: ClassVar[int | None] = DEFAULT_MAX_STEPS

    def __init__(self, env: gym.Env, split: str | None = None, max_steps: int | None = -1, expert: bool = False,
                 render_mode: str | None = None, progress_labels: bool = False):
        self.env = env
        inner = env.unwrapped
        self.env_name = type(inner).__name__
        own_splits = getattr(inner, "splits", None)
        self.own_tasks = callable(getattr(inner, "task_ids", None)) and own_splits is not None
        if self.own_tasks:
            if isinstance(own_splits, str) or not isinstance(own_splits, Sequence) or not own_splits:
                raise ConfigError(f"{self.env_name}.splits must be a non-empty sequence of split names, got "
                                  f"{own_splits!r}")
            self.splits = tuple(str(s) for s in own_splits)
        else:
            self.splits = tuple(SEED_SPLITS)
        self.description = getattr(inner, "description", "") or f"{self.env_name} (plain Gymnasium env)"
        super().__init__(split=split, max_steps=max_steps, expert=expert, render_mode=render_mode,
                         progress_labels=progress_labels)
        self._info: dict[str, Any] = {}
        self._inner_truncated = False

    # ------------------------------------------------------------------ tasks
    def task_ids(self, split: str | None = None) -> Sequence[str]:
        split = split or self.split
        self._check_split(split)
        if self.own_tasks:
            return [str(t) for t in self.env.unwrapped.task_ids(split)]
        return _SeedIds(SEED_SPLITS[split])

    def _has_task(self, task_id: str) -> bool:
        if self.own_tasks:
            return super()._has_task(task_id)
        seed = _seed_of(task_id)
        return seed is not None and any(seed in seeds for seeds in SEED_SPLITS.values())

    # ------------------------------------------------------------------ the TextEnv hooks
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if self.own_tasks:
            seed = int(self.np_random.integers(2**31 - 1))
            obs, info = self.env.reset(seed=seed, options={"task_id": task_id})
        else:
            obs, info = self.env.reset(seed=_seed_of(task_id))
        self._inner_truncated = False
        return self._read(obs, info, "reset")

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._inner_truncated = bool(truncated)
        obs, info = self._read(obs, info, "step")
        if "won" not in info:
            success = info.get("success")
            info["won"] = bool(success) if success is not None else bool(terminated and float(reward) > 0)
        return obs, float(reward), bool(terminated), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated or (self._inner_truncated and not terminated), info

    def _expert_action(self) -> str | None:
        return self._info.get("expert_action")

    def close(self) -> None:
        self.env.close()

    def _read(self, obs: Any, info: dict[str, Any] | None, where: str) -> tuple[str, dict[str, Any]]:
        if not isinstance(obs, str):
            raise AgentRLError(f"{self.env_name}.{where} returned a {type(obs).__name__} observation; agentrl "
                               "trains on text environments, whose observations are str")
        info = dict(info or {})
        actions = info.get("admissible_actions")
        info["admissible_actions"] = [str(a) for a in actions] if actions is not None else []
        self._info = info
        return obs, info


class _SeedIds(Sequence[str]):
    """The ids ``seed-<n>`` of a range of seeds, without building a list of ten thousand strings."""

    def __init__(self, seeds: range):
        self.seeds = seeds

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [f"seed-{s}" for s in self.seeds[index]]
        return f"seed-{self.seeds[index]}"

    def __contains__(self, task_id: object) -> bool:
        seed = _seed_of(task_id) if isinstance(task_id, str) else None
        return seed is not None and seed in self.seeds


def _seed_of(task_id: str) -> int | None:
    prefix, _, number = task_id.partition("-")
    return int(number) if prefix == "seed" and number.isdigit() else None
