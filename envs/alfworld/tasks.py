"""ALFWorld task metadata: the six task types, their table labels, and the room type of a scene.

Task types are ALFRED's (``alfworld.agents.environment.alfred_tw_env.TASK_TYPES``); the short labels are the columns
of the published ALFWorld tables (docs/spec/algorithms.md §3.4: Pick, Look, Clean, Heat, Cool, Pick2, then All). Room types
follow AI2-THOR's scene numbering (FloorPlan 1-30 kitchens, 201-230 living rooms, 301-330 bedrooms, 401-430
bathrooms); the scene number is the last ``-``-separated field of an ALFRED task directory name
(``look_at_obj_in_light-AlarmClock-None-DeskLamp-308`` is FloorPlan308, a bedroom).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Raw ALFRED task type -> label used in the published tables, in the tables' column order.
TASK_TYPE_LABELS: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}
#: Raw task types in table order.
TASK_TYPES: tuple[str, ...] = tuple(TASK_TYPE_LABELS)
#: Column labels of the published tables (without "All").
TABLE_COLUMNS: tuple[str, ...] = tuple(TASK_TYPE_LABELS.values())
#: alfworld's numeric task-type ids (``env.task_types`` in its YAML configs) -> raw type.
TASK_TYPE_IDS: dict[int, str] = dict(enumerate(TASK_TYPES, start=1))

ROOM_TYPES: tuple[str, ...] = ("kitchen", "living room", "bedroom", "bathroom")


def task_type_label(task_type: str) -> str:
    """The table label (``Pick`` ... ``Pick2``) of a raw task type; unknown types are returned unchanged."""
    return TASK_TYPE_LABELS.get(task_type, task_type)


def normalize_task_type(name: str | int) -> str:
    """Accept a raw type (``pick_heat_then_place_in_recep``), a label (``Heat``, any case) or alfworld's numeric id
    (``4``), and return the raw type. Raises ``ValueError`` naming the accepted forms otherwise."""
    if isinstance(name, int) or (isinstance(name, str) and name.strip().isdigit()):
        number = int(name)
        if number in TASK_TYPE_IDS:
            return TASK_TYPE_IDS[number]
    elif isinstance(name, str):
        key = name.strip()
        if key in TASK_TYPE_LABELS:
            return key
        by_label = {label.lower(): raw for raw, label in TASK_TYPE_LABELS.items()}
        if key.lower() in by_label:
            return by_label[key.lower()]
    accepted = ", ".join(f"{i}/{label}/{raw}" for i, (raw, label) in enumerate(TASK_TYPE_LABELS.items(), start=1))
    raise ValueError(f"unknown ALFWorld task type {name!r}; use one of (id/label/raw): {accepted}")


def room_type(scene: int | None) -> str:
    """The room type of an AI2-THOR FloorPlan number (``"unknown"`` outside the four ranges)."""
    if scene is None:
        return "unknown"
    hundreds, rest = divmod(scene, 100)
    if 1 <= rest <= 99 and hundreds in (0, 2, 3, 4):
        return {0: "kitchen", 2: "living room", 3: "bedroom", 4: "bathroom"}[hundreds]
    return "unknown"


def scene_of_task_dir(task_dir: str) -> int | None:
    """The FloorPlan number at the end of an ALFRED task directory name, or None if it has none."""
    last = task_dir.rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else None


def object_of_task_dir(task_dir: str) -> str:
    """The task's object type as the game's text names it, from an ALFRED task directory name
    (``look_at_obj_in_light-AlarmClock-None-DeskLamp-308`` -> ``alarmclock``, as in "alarmclock 1")."""
    return task_dir.split("-")[1].lower()


@dataclass(frozen=True)
class ALFWorldTask:
    """One playable game: its stable id (``valid_unseen/<task dir>/<trial dir>``) and what we know about it."""

    task_id: str
    gamefile: Path
    task_type: str  # raw ALFRED type, e.g. "pick_heat_then_place_in_recep"
    scene: int | None  # AI2-THOR FloorPlan number

    @property
    def label(self) -> str:
        return task_type_label(self.task_type)

    @property
    def room_type(self) -> str:
        return room_type(self.scene)


def success_by_task_type(results: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Success rate (%) per table column and "All" from ``(task_type, won)`` pairs, in the published layout.

    ``task_type`` may be raw or a label. Columns with no episode are omitted; "All" is the micro-average over all
    episodes (docs/spec/algorithms.md §3.4).
    """
    wins: dict[str, list[bool]] = defaultdict(list)
    every: list[bool] = []
    for task_type, won in results:
        wins[task_type_label(task_type)].append(bool(won))
        every.append(bool(won))
    table = {label: 100.0 * sum(wins[label]) / len(wins[label]) for label in TABLE_COLUMNS if wins.get(label)}
    for other in sorted(set(wins) - set(TABLE_COLUMNS)):
        table[other] = 100.0 * sum(wins[other]) / len(wins[other])
    if every:
        table["All"] = 100.0 * sum(every) / len(every)
    return table
