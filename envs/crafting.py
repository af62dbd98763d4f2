"""Crafting: the built-in long-horizon text environment (``agentrl/Crafting-v0``, alias ``crafting``).

A procedurally generated crafting world for tests, docs and CPU demos. The first observation gives the task, a map of
where each raw material lies and the recipes the agent knows; gathering and crafting report the inventory. So the
state is observable and the expert is imitable, yet each task needs a chain of 5-15 actions: walk to the places where raw materials lie, gather them, walk to the right stations
(workbench, furnace, anvil) and craft the intermediate items, then the target. Reward is sparse (``success_reward``
on the crafting of the target, 0 otherwise), but failed attempts usually contain real partial progress (gathered
materials, crafted intermediates), which is what SCPO's credit is for. Distractors are real: unneeded materials
can be gathered, and crafting the wrong recipe consumes ingredients the task needs.

``progress_labels=True`` labels every step with ``info["distance_to_goal"]``: the length of the expert's
:func:`plan` from the current state (0 once the target is crafted): a shortest path, which following the expert
lowers by one per step. A call takes about 5 microseconds (median; p90 10).

Everything is deterministic given the task id: a task's world (where each material lies, which recipes the
agent is told) comes from a seed derived from its split and index. Steps take microseconds.

Splits: ``train`` (10,000 tasks), ``eval_in_distribution`` (1,000 tasks, the same targets as train on unseen
worlds) and ``eval_out_of_distribution`` (1,000 tasks whose targets never appear in train).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from agentrl.envs.core import TextEnv

RAW_MATERIALS = ("wood", "stone", "iron ore", "gold ore", "coal", "sand", "clay", "wool", "flax", "feather")
PLACES = ("forest", "mine", "lake", "field", "cave", "hill")
STATIONS = ("workbench", "furnace", "anvil")
START = "camp"

#: output -> (station, inputs). Inputs may repeat (two planks).
RECIPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "plank": ("workbench", ("wood",)),
    "stick": ("workbench", ("plank",)),
    "rope": ("workbench", ("flax", "flax")),
    "glass": ("furnace", ("sand", "coal")),
    "brick": ("furnace", ("clay", "coal")),
    "iron ingot": ("furnace", ("iron ore", "coal")),
    "gold ingot": ("furnace", ("gold ore", "coal")),
    "torch": ("workbench", ("stick", "coal")),
    "bed": ("workbench", ("plank", "wool")),
    "arrow": ("workbench", ("stick", "feather", "stone")),
    "bow": ("workbench", ("stick", "rope")),
    "window": ("workbench", ("glass", "plank")),
    "stone axe": ("workbench", ("stick", "stone")),
    "bucket": ("anvil", ("iron ingot",)),
    "iron sword": ("anvil", ("iron ingot", "stick")),
    "shears": ("anvil", ("iron ingot", "iron ingot")),
    "ring": ("anvil", ("gold ingot",)),
    "compass": ("anvil", ("iron ingot", "gold ingot")),
    "lantern": ("anvil", ("iron ingot", "glass")),
    "oven": ("furnace", ("brick", "brick")),
    "fishing rod": ("workbench", ("stick", "rope")),
}
#: Targets held out of train and eval_in_distribution.
OOD_TARGETS = ("compass", "lantern", "shears", "arrow")
SPLIT_SIZES = {"train": 10_000, "eval_in_distribution": 1_000, "eval_out_of_distribution": 1_000}
_SPLIT_SEED_BASE = {"train": 0, "eval_in_distribution": 1_000_000, "eval_out_of_distribution": 2_000_000}
MIN_EXPERT_STEPS, MAX_EXPERT_STEPS = 5, 15


@dataclass(frozen=True)
class CraftingTask:
    task_id: str
    target: str
    material_places: dict[str, str]  # raw material -> place where it can be gathered
    known_recipes: tuple[str, ...]  # recipes listed in the instruction (the needed ones plus distractors)
    expert_length: int

    @property
    def task_type(self) -> str:
        if self.expert_length <= 8:
            return "short"
        return "medium" if self.expert_length <= 11 else "long"


def _raw_needs(item: str) -> Counter:
    """Raw materials consumed to make one ``item`` (an item that is itself raw needs itself)."""
    if item not in RECIPES:
        return Counter({item: 1})
    need: Counter = Counter()
    for part in RECIPES[item][1]:
        need += _raw_needs(part)
    return need


def _recipe_closure(item: str) -> list[str]:
    """Recipes needed to make ``item``, in a valid crafting order (post-order, no duplicates)."""
    order: list[str] = []

    def visit(x: str) -> None:
        if x in RECIPES:
            for part in RECIPES[x][1]:
                visit(part)
            if x not in order:
                order.append(x)

    visit(item)
    return order


def plan(target: str, location: str, inventory: Counter, material_places: dict[str, str]) -> list[str]:
    """A complete action sequence that crafts ``target`` from the given state (the expert's plan).

    Uses what the inventory already holds (crafted intermediates included), gathers the rest place by place
    (starting where the agent stands if something is needed there), then crafts bottom-up, walking only when the
    next action needs another location. A shortest sequence on each of 5,400 states checked by breadth-first search
    (task starts and random detours from them).
    """
    have = Counter(inventory)
    crafts: list[str] = []

    def obtain(item: str) -> None:  # expands ``item`` into crafts, consuming what is already held
        if have[item] > 0:
            have[item] -= 1
            return
        if item in RECIPES:
            for part in RECIPES[item][1]:
                obtain(part)
            crafts.append(item)
        else:
            gathers[item] += 1

    gathers: Counter = Counter()
    obtain(target)
    actions: list[str] = []
    here = location
    for place in sorted({material_places[m] for m in gathers}, key=lambda p: (p != location, PLACES.index(p))):
        if here != place:
            actions.append(f"go to {place}")
            here = place
        for material in sorted(m for m in gathers if material_places[m] == place):
            actions += [f"gather {material}"] * gathers[material]
    for item in crafts:
        station = RECIPES[item][0]
        if here != station:
            actions.append(f"go to {station}")
            here = station
        actions.append(f"craft {item}")
    return actions


@lru_cache(maxsize=4096)
def make_task(split: str, index: int) -> CraftingTask:
    """The task ``index`` of ``split``; pure function of its arguments."""
    rng = np.random.default_rng(_SPLIT_SEED_BASE[split] + index)
    targets = [t for t in RECIPES if (t in OOD_TARGETS) == (split == "eval_out_of_distribution")]
    while True:  # rejection-sample a world whose expert plan has the wanted length
        places = list(PLACES)
        material_places = {m: places[int(rng.integers(len(places)))] for m in RAW_MATERIALS}
        target = targets[int(rng.integers(len(targets)))]
        length = len(plan(target, START, Counter(), material_places))
        if MIN_EXPERT_STEPS <= length <= MAX_EXPERT_STEPS:
            break
    needed = _recipe_closure(target)
    others = [r for r in RECIPES if r not in needed]
    distractors = [others[i] for i in rng.choice(len(others), size=3, replace=False)]
    known = needed + distractors
    rng.shuffle(known)
    return CraftingTask(f"{split}/{index:05d}", target, material_places, tuple(known), length)


def _a(item: str) -> str:
    return ("an " if item[0] in "aeiou" else "a ") + item


def _ingredients(inputs: Sequence[str]) -> str:
    return _listing([f"{n} {m}" if n > 1 else m for m, n in Counter(inputs).items()])


def _listing(items: Sequence[str]) -> str:
    items = list(items)
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class CraftingEnv(TextEnv):
    """See the module docstring. ``success_reward`` is paid once, when the target is crafted."""

    splits: ClassVar[tuple[str, ...]] = tuple(SPLIT_SIZES)
    description: ClassVar[str] = "Built-in long-horizon crafting world (5-15 steps, sparse reward, microsecond steps)"
    default_max_steps: ClassVar[int | None] = 30
    provides_distance: ClassVar[bool] = True

    def __init__(self, split: str | None = None, max_steps: int | None = -1, expert: bool = False,
                 render_mode: str | None = None, success_reward: float = 10.0, max_plan_length: int | None = None,
                 progress_labels: bool = False, min_plan_length: int | None = None):
        """``max_plan_length`` / ``min_plan_length``: difficulty knobs. Keep only the tasks whose expert plan has at
        most / at least this many steps (``MIN_EXPERT_STEPS`` .. ``MAX_EXPERT_STEPS``; ``None`` keeps all). The
        splits shrink (about 40% of tasks have plans of 5-6 steps, 50% of at most 7; the held-out targets of
        ``eval_out_of_distribution`` all need 7 or more, so that split can become empty) but every kept task keeps
        its id, world and observations, so ``task_index`` counts among the kept tasks only. ``max_plan_length``
        makes CPU demos where the full horizon is too hard; ``min_plan_length`` long-horizon studies."""
        for name, value in (("max_plan_length", max_plan_length), ("min_plan_length", min_plan_length)):
            if value is not None and not MIN_EXPERT_STEPS <= int(value) <= MAX_EXPERT_STEPS:
                raise ValueError(f"{name} must be in [{MIN_EXPERT_STEPS}, {MAX_EXPERT_STEPS}] or None, "
                                 f"got {value!r}")
        self.max_plan_length = None if max_plan_length is None else int(max_plan_length)
        self.min_plan_length = None if min_plan_length is None else int(min_plan_length)
        if (self.max_plan_length or MAX_EXPERT_STEPS) < (self.min_plan_length or MIN_EXPERT_STEPS):
            raise ValueError(f"min_plan_length {min_plan_length} is above max_plan_length {max_plan_length}")
        super().__init__(split=split, max_steps=max_steps, expert=expert, render_mode=render_mode,
                         progress_labels=progress_labels)
        self.success_reward = float(success_reward)
        self._task: CraftingTask | None = None
        self._location = START
        self._inventory: Counter = Counter()

    # ---------------------------------------------------------------- tasks
    def task_ids(self, split: str | None = None) -> Sequence[str]:
        split = split or self.split
        self._check_split(split)
        return _task_ids(split, self.max_plan_length, self.min_plan_length)

    def _has_task(self, task_id: str) -> bool:
        split, _, index = task_id.partition("/")
        if not (split in SPLIT_SIZES and index.isdigit() and int(index) < SPLIT_SIZES[split]):
            return False
        return _kept(make_task(split, int(index)).expert_length, self.max_plan_length, self.min_plan_length)

    def task(self, task_id: str) -> CraftingTask:
        split, _, index = task_id.partition("/")
        return make_task(split, int(index))

    # ---------------------------------------------------------------- dynamics
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._task = self.task(task_id)
        self._location = START
        self._inventory = Counter()
        recipes = "\n".join(
            f"- {r}: at the {RECIPES[r][0]}, from {_ingredients(RECIPES[r][1])}" for r in self._task.known_recipes
        )
        places = _listing(PLACES + STATIONS)
        where = "\n".join(
            f"- {place}: {_listing(sorted(m for m, p in self._task.material_places.items() if p == place))}"
            for place in PLACES if place in self._task.material_places.values()
        )
        obs = (
            f"You are at the {START}. From here you can go to the {places}.\n"
            f"Your map shows where materials lie:\n{where}\n"
            f"Recipes you know:\n{recipes}\n"
            f"Your task is to: craft {_a(self._task.target)}."
        )
        return obs, self._info()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self._task is not None
        command = " ".join(action.strip().lower().split())
        won = False
        if command not in self._admissible():
            obs = "Nothing happens."
        elif command == "look":
            obs = self._describe_location()
        elif command == "inventory":
            obs = self._carrying()
        elif command.startswith("go to "):
            self._location = command[len("go to "):]
            obs = f"You arrive at the {self._location}. " + self._describe_location()
        elif command.startswith("gather "):
            material = command[len("gather "):]
            self._inventory[material] += 1
            obs = f"You gather {material}. {self._carrying()}"
        else:  # craft
            item = command[len("craft "):]
            inputs = RECIPES[item][1]
            self._inventory -= Counter(inputs)
            self._inventory[item] += 1
            won = item == self._task.target
            obs = f"You craft {_a(item)} from {_ingredients(inputs)}." + (" Task complete!" if won else f" {self._carrying()}")
        reward = self.success_reward if won else 0.0
        return obs, reward, won, self._info(won=won)

    def _carrying(self) -> str:
        return f"You carry {_listing(sorted(self._inventory.elements()))}."

    def _describe_location(self) -> str:
        assert self._task is not None
        if self._location in STATIONS:
            return f"There is a {self._location} here."
        found = sorted(m for m, p in self._task.material_places.items() if p == self._location)
        return f"You see {_listing(found)} here." if found else "There is nothing to gather here."

    def _admissible(self) -> list[str]:
        assert self._task is not None
        actions = [f"go to {p}" for p in PLACES + STATIONS if p != self._location]
        if self._location in PLACES:
            actions += sorted(f"gather {m}" for m, p in self._task.material_places.items() if p == self._location)
        else:
            for item in self._task.known_recipes:
                station, inputs = RECIPES[item]
                if station == self._location and not Counter(inputs) - self._inventory:
                    actions.append(f"craft {item}")
        return actions + ["inventory", "look"]

    def _info(self, won: bool = False) -> dict[str, Any]:
        assert self._task is not None
        return {
            "admissible_actions": self._admissible(),
            "instruction": f"craft {_a(self._task.target)}",
            "task_type": self._task.task_type,
            "won": won,
        }

    def _plan(self) -> list[str]:
        """The expert's plan from the current state (empty once the target is held)."""
        assert self._task is not None
        return plan(self._task.target, self._location, self._inventory, self._task.material_places)

    def _expert_action(self) -> str | None:
        steps = self._plan()
        return steps[0] if steps else None

    def _distance_to_goal(self) -> int | None:
        return len(self._plan())


def _kept(length: int, max_plan_length: int | None, min_plan_length: int | None) -> bool:
    return (max_plan_length is None or length <= max_plan_length) and (min_plan_length is None or
                                                                         length >= min_plan_length)


@lru_cache(maxsize=None)
def _task_ids(split: str, max_plan_length: int | None = None, min_plan_length: int | None = None) -> tuple[str, ...]:
    return tuple(f"{split}/{i:05d}" for i in range(SPLIT_SIZES[split])
                 if _kept(make_task(split, i).expert_length, max_plan_length, min_plan_length))
