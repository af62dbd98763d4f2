"""Framework rows → agentrl's flat credit API → framework rows, in NumPy (no torch, no framework).

A multi-turn trainer keeps one of two layouts. verl / verl-agent keep one row per step (:class:`StepColumns`,
:func:`step_advantages`); SkyRL and TRL keep one row per trajectory whose tokens belong to turns (a ``step_ids``
matrix, -1 for tokens of no step: :func:`token_steps`, :func:`token_advantages`). Both end in
``grpo_advantages_flat`` / ``gigpo_advantages_flat`` / ``scpo_advantages_flat`` (docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from agentrl.algos import gigpo_advantages_flat, grpo_advantages_flat, scpo_advantages_flat
from agentrl.algos.types import BatchError, as_object_array

#: agentrl's estimators an integration can run, and the per-step columns each needs beyond ids and rewards.
ESTIMATORS: dict[str, tuple[str, ...]] = {"grpo": (), "gigpo": ("anchor",), "scpo": ("success", "text")}


@dataclass(frozen=True)
class StepColumns:
    """One entry per step row, in the framework's row order (duplicated rows allowed, see :func:`step_advantages`)."""

    group: np.ndarray  # task / prompt id shared by a group of rollouts (verl: uid)
    traj: np.ndarray  # trajectory id (verl-agent: traj_uid)
    step: np.ndarray  # position of the step in its trajectory
    reward: np.ndarray  # raw reward of this step (not a return, not a token vector)
    valid: np.ndarray | None = None  # format-valid action (verl-agent: is_action_valid)
    anchor: np.ndarray | None = None  # GiGPO anchor state (verl-agent: anchor_obs)
    success: np.ndarray | None = None  # the trajectory's outcome, on each of its rows (SCPO)
    text: np.ndarray | None = None  # "action -> next_obs" (SCPO)

    def take(self, rows: np.ndarray) -> StepColumns:
        return replace(self, **{f.name: None if getattr(self, f.name) is None
                                else np.asarray(getattr(self, f.name))[rows]
                                for f in fields(self)})


def step_order(traj: np.ndarray) -> np.ndarray:
    """0, 1, 2, … per trajectory in row order: the step index of rows still in rollout order (before verl-agent's
    ``adjust_batch`` copies rows and ``balance_batch`` reorders them)."""
    _, traj = np.unique(np.asarray(traj), return_inverse=True)
    order = np.argsort(traj, kind="stable")
    counts = np.bincount(traj)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    position = np.empty(len(traj), np.int64)
    position[order] = np.arange(len(traj)) - np.repeat(starts, counts)
    return position


def unique_steps(columns: StepColumns) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each (trajectory, step), each row's index into those rows). Copies of a row (verl's
    ``adjust_batch`` pads the batch with copies) get their original's advantage; two rows that claim the same step
    with different rewards are refused."""
    traj = np.unique(np.asarray(columns.traj), return_inverse=True)[1]
    step = np.asarray(columns.step)
    if step.dtype.kind not in "iu":
        raise BatchError(f"step indices must be integers, got {step.dtype}")
    keys = np.stack([traj, step], 1)
    _, keep, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    reward = np.asarray(columns.reward, dtype=np.float64)
    clash = np.flatnonzero(reward != reward[keep][inverse])
    if len(clash):
        row = int(clash[0])
        raise BatchError(f"rows {int(keep[inverse[row]])} and {row} both claim trajectory {columns.traj[row]!r} step "
                         f"{int(step[row])} with different rewards; step indices must be unique per trajectory")
    return keep, inverse


def step_advantages(estimator: str, columns: StepColumns, options: Mapping[str, Any] | None = None) -> np.ndarray:
    """One advantage per row: the flat API on the unique steps, copied back to every row (copies included)."""
    if estimator not in ESTIMATORS:
        raise BatchError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
    missing = [name for name in ESTIMATORS[estimator] if getattr(columns, name) is None]
    options = dict(options or {})
    if estimator == "scpo" and options.get("base", "gigpo") == "gigpo" and columns.anchor is None:
        missing.append("anchor")
    if missing:
        raise BatchError(f"{estimator} needs per-step {' and '.join(missing)}; docs/integrations.md lists the field "
                         "each framework reads them from")
    keep, inverse = unique_steps(columns)
    c = columns.take(keep)
    if estimator == "grpo":
        advantages = grpo_advantages_flat(c.group, c.traj, c.step, c.reward, c.valid, **options)
    elif estimator == "gigpo":
        advantages = gigpo_advantages_flat(c.group, c.traj, c.step, c.reward, c.valid, c.anchor, **options)
    else:
        advantages = scpo_advantages_flat(c.group, c.traj, c.step, c.reward, c.valid, c.success, c.text, c.anchor,
                                          **options)
    return advantages[inverse]


def token_steps(step_ids: np.ndarray, token_rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps of a (rows, tokens) batch whose ``step_ids`` give each token's turn (-1: prompt, observation, padding).

    Returns (row, turn, reward) per step, sorted by row then turn; a step's reward is the sum of its tokens' rewards
    (a framework that puts a turn's reward on its last token gives back that reward).
    """
    step_ids, token_rewards = np.asarray(step_ids), np.asarray(token_rewards, dtype=np.float64)
    if step_ids.shape != token_rewards.shape or step_ids.ndim != 2:
        raise BatchError(f"step_ids {step_ids.shape} and token rewards {token_rewards.shape} must be the same "
                         "(rows, tokens) shape")
    rows, cols = np.nonzero(step_ids >= 0)
    keys, inverse = np.unique(np.stack([rows, step_ids[rows, cols]], 1), axis=0, return_inverse=True)
    reward = np.bincount(inverse.reshape(-1), weights=token_rewards[rows, cols], minlength=len(keys))
    outside = np.abs(token_rewards[step_ids < 0]).max(initial=0.0)
    if outside > 0:
        raise BatchError(f"a reward ({outside:g}) sits on a token of no step (step_ids = -1); put each turn's reward "
                         "on one of its own tokens")
    return keys[:, 0].astype(np.int64), keys[:, 1].astype(np.int64), reward


def token_advantages(step_ids: np.ndarray, row: np.ndarray, turn: np.ndarray, advantages: np.ndarray) -> np.ndarray:
    """(rows, tokens) advantages: each token of a step gets that step's advantage, tokens of no step 0."""
    step_ids = np.asarray(step_ids)
    out = np.zeros(step_ids.shape, np.float64)
    width = int(step_ids.max(initial=-1)) + 1
    rows, cols = np.nonzero(step_ids >= 0)
    at = np.searchsorted(np.asarray(row) * width + np.asarray(turn), rows * width + step_ids[rows, cols])
    out[rows, cols] = np.asarray(advantages, dtype=np.float64)[at]
    return out


def trajectory_columns(
    group: np.ndarray,
    step_ids: np.ndarray,
    token_rewards: np.ndarray,
    success: np.ndarray | None = None,
    texts: list | None = None,
    anchors: list | None = None,
) -> tuple[StepColumns, np.ndarray, np.ndarray]:
    """:class:`StepColumns` of a one-row-per-trajectory batch (SkyRL, TRL), and each step's (row, turn).

    ``group`` and ``success`` have one entry per row; ``texts`` and ``anchors`` one list per row, indexed by turn.
    """
    row, turn, reward = token_steps(step_ids, token_rewards)

    def per_turn(values: list | None, name: str) -> np.ndarray | None:
        if values is None:
            return None
        try:
            return as_object_array([values[r][t] for r, t in zip(row, turn)])
        except IndexError:
            raise BatchError(f"{name} needs one entry per turn of each row (step_ids go up to {turn.max()})") from None

    columns = StepColumns(
        group=np.asarray(group)[row], traj=row, step=turn, reward=reward,
        success=None if success is None else np.asarray(success, dtype=bool)[row],
        text=per_turn(texts, "texts"), anchor=per_turn(anchors, "anchors"),
    )
    return columns, row, turn


def turns_from_mask(model_tokens: np.ndarray) -> np.ndarray:
    """``step_ids`` of multi-turn rows from the mask of model-written tokens (SkyRL's ``loss_mask``, TRL's
    ``env_mask``): each maximal run of 1s is one turn (0, 1, …), every other token -1."""
    mask = np.asarray(model_tokens) > 0
    if mask.ndim != 2:
        raise BatchError(f"the token mask must be (rows, tokens), got shape {mask.shape}")
    starts = mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1]
    return np.where(mask, np.cumsum(starts, axis=1) - 1, -1)
