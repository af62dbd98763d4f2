"""Input types of the credit-assignment algorithms, in two interchangeable forms.

1. Framework-free dataclasses: a list of :class:`Trajectory`, each a list of :class:`Step`.
2. A flat per-step form, :class:`StepBatch`: one row per (trajectory, step) with NumPy arrays
   ``group_index, traj_index, step_index, reward, valid, success, anchor, step_text``. This is the layout
   of a verl-style batch, where every step is one training row (docs/spec/algorithms.md §1.1).

:func:`to_flat` and :func:`from_flat` convert between them. Every algorithm is computed on the flat form;
the dataclass form is a convenience that converts and splits the result back per trajectory.

Rows may come in any order: algorithms group rows by ``group_index``, identify a trajectory by the pair
``(group_index, traj_index)`` and order its steps by ``step_index``. Nothing depends on row order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from agentrl.errors import AgentRLError

StepTextFormat = Literal["action_next_obs", "obs_action"]
STEP_TEXT_FORMATS: tuple[str, ...] = get_args(StepTextFormat)
#: The step text of the flat form unless a config says otherwise (SCPOConfig.step_text defaults to it).
DEFAULT_STEP_TEXT_FORMAT: StepTextFormat = "action_next_obs"


class BatchError(AgentRLError, ValueError):
    """Malformed algorithm input: mismatched array lengths, duplicate steps, inconsistent success flags."""


@dataclass
class Step:
    """One agent step. ``obs`` is the raw env observation *before* acting (not the templated prompt)."""

    obs: str
    action: str  # env action (the projected text between <action> tags)
    reward: float  # env reward r_t of this step
    done: bool
    valid: bool = True  # format validity, docs/spec/algorithms.md §1.3; invalid steps get the penalty
    next_obs: str = ""  # raw observation after acting (SCPO's step text)
    anchor: Hashable | None = None  # GiGPO anchor-state key; None means "use obs"

    @property
    def anchor_key(self) -> Hashable:
        return self.obs if self.anchor is None else self.anchor


@dataclass
class Trajectory:
    """One rollout. ``group_id`` is shared by the N rollouts of the same task and initial state."""

    group_id: Hashable
    traj_id: Hashable
    success: bool
    steps: list[Step] = field(default_factory=list)

    @property
    def episode_return(self) -> float:
        return float(sum(s.reward for s in self.steps))


def step_text(step: Step, fmt: str = DEFAULT_STEP_TEXT_FORMAT) -> str:
    """SCPO step text u (docs/spec/algorithms.md §4.2 item 1).

    ``action_next_obs`` (default): ``"{action} -> {next_obs}"``, the action and the feedback it produced,
    so an ineffective copy of a good action ("... -> Nothing happens.") does not match the effective one.
    When ``next_obs`` is empty the text is just the action (our choice; keeps :func:`from_flat` lossless).
    ``obs_action``: ``"{obs} || {action}"``.
    """
    if fmt == "action_next_obs":
        return f"{step.action} -> {step.next_obs}" if step.next_obs else step.action
    if fmt == "obs_action":
        return f"{step.obs} || {step.action}"
    raise AgentRLError(f"unknown step text format {fmt!r}; known: {', '.join(STEP_TEXT_FORMATS)}")


@dataclass(frozen=True)
class StepBatch:
    """Flat per-step form: one row per (trajectory, step), every field an array of length n.

    ``group_ids`` / ``traj_ids`` optionally keep the original ids (``group_ids[group_index[r]]``); they are
    filled by :func:`to_flat` and only used to rebuild dataclasses.
    """

    group_index: np.ndarray  # int64: rollout group (same task and initial state)
    traj_index: np.ndarray  # int64: trajectory; (group_index, traj_index) identifies it
    step_index: np.ndarray  # int64: orders the steps inside a trajectory
    reward: np.ndarray  # float64: env reward r_t
    valid: np.ndarray  # bool: format validity
    success: np.ndarray  # bool: the trajectory's success flag, repeated on each of its rows
    anchor: np.ndarray  # object: hashable GiGPO anchor key per row
    step_text: np.ndarray  # object: SCPO step text per row
    group_ids: tuple = ()
    traj_ids: tuple = ()

    def __post_init__(self) -> None:
        n = len(self.group_index)
        for name in ("traj_index", "step_index", "reward", "valid", "success", "anchor", "step_text"):
            if len(getattr(self, name)) != n:
                raise BatchError(f"StepBatch.{name} has {len(getattr(self, name))} rows, group_index has {n}")

    def __len__(self) -> int:
        return len(self.group_index)

    @classmethod
    def from_arrays(
        cls,
        group_index: Sequence,
        traj_index: Sequence,
        step_index: Sequence,
        reward: Sequence,
        valid: Sequence | None = None,
        success: Sequence | None = None,
        anchor: Sequence | None = None,
        step_text: Sequence | None = None,
    ) -> StepBatch:
        """Build a batch from array-likes; ``valid`` defaults to all True, ``anchor``/``step_text`` to ""."""
        n = len(group_index)
        return cls(
            group_index=_int_array(group_index),
            traj_index=_int_array(traj_index),
            step_index=_int_array(step_index),
            reward=np.asarray(reward, dtype=np.float64),
            valid=np.ones(n, bool) if valid is None else np.asarray(valid, dtype=bool),
            success=np.zeros(n, bool) if success is None else np.asarray(success, dtype=bool),
            anchor=as_object_array([""] * n if anchor is None else anchor),
            step_text=as_object_array([""] * n if step_text is None else step_text),
        )

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """Split per-row ``values`` into one array per trajectory, trajectories ordered by ``traj_index``
        (then ``group_index``), steps by ``step_index``. For a batch from :func:`to_flat` this is the
        order of the original list."""
        order = np.lexsort((self.step_index, self.group_index, self.traj_index))
        if len(order) == 0:
            return []
        g, t = self.group_index[order], self.traj_index[order]
        boundaries = np.flatnonzero((g[1:] != g[:-1]) | (t[1:] != t[:-1])) + 1
        return np.split(np.asarray(values)[order], boundaries)


def to_flat(trajectories: Sequence[Trajectory], step_text_format: str = DEFAULT_STEP_TEXT_FORMAT) -> StepBatch:
    """Dataclasses → :class:`StepBatch`. ``traj_index`` is the trajectory's position in the list,
    ``group_index`` numbers groups by first appearance; rows are in list order, steps in order."""
    group_number: dict[Hashable, int] = {}
    lengths = [len(tr.steps) for tr in trajectories]
    n = sum(lengths)
    group_index = np.empty(n, np.int64)
    traj_index = np.repeat(np.arange(len(trajectories), dtype=np.int64), lengths)
    step_index = np.concatenate([np.arange(k, dtype=np.int64) for k in lengths]) if n else np.empty(0, np.int64)
    reward = np.empty(n, np.float64)
    valid = np.empty(n, bool)
    success = np.repeat(np.array([bool(tr.success) for tr in trajectories], bool), lengths)
    anchor = np.empty(n, object)
    texts = np.empty(n, object)
    row = 0
    for tr in trajectories:
        g = group_number.setdefault(tr.group_id, len(group_number))
        for s in tr.steps:
            group_index[row] = g
            reward[row] = s.reward
            valid[row] = s.valid
            anchor[row] = s.anchor_key
            texts[row] = step_text(s, step_text_format)
            row += 1
    return StepBatch(
        group_index=group_index,
        traj_index=traj_index,
        step_index=step_index,
        reward=reward,
        valid=valid,
        success=success,
        anchor=anchor,
        step_text=texts,
        group_ids=tuple(group_number),
        traj_ids=tuple(tr.traj_id for tr in trajectories),
    )


def from_flat(batch: StepBatch) -> list[Trajectory]:
    """:class:`StepBatch` → dataclasses, ordered as :meth:`StepBatch.split` orders them.

    The flat form keeps only the step text, so each step gets ``action = step_text``, ``next_obs = ""``,
    ``anchor`` = the row's anchor (and ``obs`` = the anchor when it is a string). With the default step
    text format ``to_flat(from_flat(b))`` reproduces ``b``'s values. ``done`` is True on the last step.
    """
    order = np.lexsort((batch.step_index, batch.group_index, batch.traj_index))
    trajectories: list[Trajectory] = []
    last_key = None
    for r in order.tolist():
        g, t = int(batch.group_index[r]), int(batch.traj_index[r])
        if (g, t) != last_key:
            group_id = batch.group_ids[g] if g < len(batch.group_ids) else g
            traj_id = batch.traj_ids[t] if t < len(batch.traj_ids) else t
            trajectories.append(Trajectory(group_id, traj_id, bool(batch.success[r]), []))
            last_key = (g, t)
        anchor = batch.anchor[r]
        trajectories[-1].steps.append(
            Step(
                obs=anchor if isinstance(anchor, str) else "",
                action=str(batch.step_text[r]),
                reward=float(batch.reward[r]),
                done=False,
                valid=bool(batch.valid[r]),
                anchor=anchor,
            )
        )
    for tr in trajectories:
        if tr.steps:
            tr.steps[-1].done = True
    return trajectories


def _int_array(values: Sequence) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise BatchError(f"index arrays must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def as_object_array(values: Sequence) -> np.ndarray:
    """A 1-D object array holding ``values`` as they are (strings, tuples, any hashable)."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    out = np.empty(len(values), object)
    for i, value in enumerate(values):  # element-wise, so tuples stay tuples
        out[i] = value
    return out
