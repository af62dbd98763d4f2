"""Vectorised building blocks shared by GRPO, GiGPO and SCPO.

:func:`batch_layout` turns the three index arrays of a flat batch into dense group / trajectory numbers and
step positions. The other functions are the group statistics and returns of docs/spec/algorithms.md §2–§3, written
over those numbers with ``np.bincount`` so that no Python loop runs per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos.types import BatchError


@dataclass(frozen=True)
class BatchLayout:
    """Group / trajectory structure of a flat batch (n rows, K trajectories, G groups)."""

    group: np.ndarray  # (n,) dense group number, 0..G-1, ordered by group_index
    traj: np.ndarray  # (n,) dense trajectory number, 0..K-1, ordered by (group_index, traj_index)
    position: np.ndarray  # (n,) 0-based position of the row inside its trajectory (rank of step_index)
    traj_group: np.ndarray  # (K,) dense group of each trajectory
    traj_label: np.ndarray  # (K,) the caller's traj_index of each trajectory (used for tie-breaks)
    traj_length: np.ndarray  # (K,) number of steps
    traj_rows: np.ndarray  # (K, T_max) row of each (trajectory, position), -1 past the end
    order: np.ndarray  # (n,) rows sorted by (trajectory, position): a canonical order for summations
    n_groups: int
    n_trajs: int

    @property
    def max_length(self) -> int:
        return self.traj_rows.shape[1]


def batch_layout(group_index: np.ndarray, traj_index: np.ndarray, step_index: np.ndarray) -> BatchLayout:
    """Dense numbering of a flat batch; a trajectory is the pair (group_index, traj_index).

    Group and trajectory ids may be integers or strings (e.g. verl-agent's ``uid`` and ``traj_uid``); string
    trajectory ids are numbered by their sorted order wherever a number is needed (tie-breaks, seeds).

    Raises BatchError on mismatched lengths or on two rows with the same (group, trajectory, step): a
    verl-style ``adjust_batch`` duplicate must be added after the advantages are computed (docs/spec/algorithms.md §1.1).
    """
    group_index, traj_index, step_index = (np.asarray(a) for a in (group_index, traj_index, step_index))
    n = len(group_index)
    if not (len(traj_index) == len(step_index) == n):
        raise BatchError(
            f"group_index, traj_index and step_index must have one entry per row; got {n}, "
            f"{len(traj_index)} and {len(step_index)}"
        )
    if step_index.dtype.kind not in "iu":
        raise BatchError(f"step_index must hold integers (each step's position in its trajectory), got "
                         f"{step_index.dtype}")
    group_labels, group = np.unique(group_index, return_inverse=True)
    traj_labels, traj_local = np.unique(traj_index, return_inverse=True)
    if traj_labels.dtype.kind not in "iub":  # string ids (verl-agent's uuid traj_uid): numbered in sorted order
        traj_labels = np.arange(len(traj_labels))
    traj_keys, traj = np.unique(group.astype(np.int64) * max(len(traj_labels), 1) + traj_local, return_inverse=True)
    n_trajs = len(traj_keys)
    order = np.lexsort((step_index, traj))  # rows by (trajectory, step)
    sorted_traj, sorted_step = traj[order], step_index[order]
    if n > 1 and np.any((sorted_traj[1:] == sorted_traj[:-1]) & (sorted_step[1:] == sorted_step[:-1])):
        dup = order[1:][(sorted_traj[1:] == sorted_traj[:-1]) & (sorted_step[1:] == sorted_step[:-1])][0]
        raise BatchError(
            f"duplicate step: two rows have group {group_index[dup]!r}, trajectory {traj_index[dup]!r}, "
            f"step {step_index[dup]!r}"
        )
    traj_length = np.bincount(traj, minlength=n_trajs)
    traj_start = np.concatenate([[0], np.cumsum(traj_length)[:-1]]).astype(np.int64)
    position = np.empty(n, np.int64)
    position[order] = np.arange(n) - traj_start[sorted_traj]
    traj_rows = np.full((n_trajs, int(traj_length.max()) if n else 0), -1, np.int64)
    traj_rows[traj, position] = np.arange(n)
    return BatchLayout(
        group=group.astype(np.int64),
        traj=traj.astype(np.int64),
        position=position,
        traj_group=(traj_keys // max(len(traj_labels), 1)).astype(np.int64),
        traj_label=traj_labels[traj_keys % max(len(traj_labels), 1)].astype(np.int64) if n else np.empty(0, np.int64),
        traj_length=traj_length.astype(np.int64),
        traj_rows=traj_rows,
        order=order,
        n_groups=len(group_labels),
        n_trajs=n_trajs,
    )


def flat_reward_valid(reward: np.ndarray, valid: np.ndarray | None,
                      layout: BatchLayout | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The reward and validity columns of a flat batch as float64 and bool arrays; ``valid=None``: all valid.

    With ``layout`` (the flat functions pass it), rewards that are not raw per-step rewards are refused where they
    can be told apart: a 2-D array (token-level rewards, as verl keeps them), and a trajectory whose rewards form a
    discounted return (``r_t = γ^(T−t)·R`` over 3 or more nonzero steps), which the algorithms would discount again.
    """
    reward = np.asarray(reward)
    if reward.ndim != 1:
        raise BatchError(f"reward must hold one raw reward per step (shape (rows,)), got shape {reward.shape}; "
                         "token-level rewards (verl's token_level_rewards) sum to the step's reward: pass "
                         "reward.sum(-1) per step row")
    reward = reward.astype(np.float64)
    if layout is not None:
        _refuse_discounted(layout, reward)
    return reward, np.ones(len(reward), bool) if valid is None else np.asarray(valid, dtype=bool)


def _refuse_discounted(layout: BatchLayout, reward: np.ndarray) -> None:
    """BatchError when a trajectory's rewards look like discounted returns (see :func:`flat_reward_valid`)."""
    rows = layout.traj_rows
    values = np.where(rows >= 0, reward[np.maximum(rows, 0)], 0.0)
    for k in np.flatnonzero((values != 0).sum(1) >= 3):
        tail = values[k, : layout.traj_length[k]]
        nonzero = tail[tail != 0]
        if len(nonzero) != len(tail) - int(np.argmax(tail != 0)):  # zeros in between: not one discounted return
            continue
        ratios = nonzero[:-1] / nonzero[1:]
        if 0 < ratios[0] < 1 and np.allclose(ratios, ratios[0], rtol=1e-6, atol=0):
            raise BatchError(f"trajectory {layout.traj_label[k]}'s rewards {nonzero[:4].tolist()}… fall geometrically "
                             f"(ratio {ratios[0]:.4g}) to the last step: they look like discounted returns. Pass the "
                             "raw per-step rewards (e.g. 0 … 0, 10); the algorithms discount them themselves")


def segment_mean_std(
    values: np.ndarray, segment: np.ndarray, n_segments: int, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-segment mean, unbiased std (ddof=1; 0 for a single member) and member count.

    ``order`` (e.g. :attr:`BatchLayout.order`) fixes the summation order, so that results are bit-identical
    however the rows of the batch are shuffled.
    """
    if order is not None:
        values, segment = values[order], segment[order]
    count = np.bincount(segment, minlength=n_segments)
    safe = np.maximum(count, 1)
    mean = np.bincount(segment, weights=values, minlength=n_segments) / safe
    squares = np.bincount(segment, weights=(values - mean[segment]) ** 2, minlength=n_segments)
    std = np.sqrt(squares / np.maximum(count - 1, 1))
    return mean, std, count


def episode_returns(reward: np.ndarray, layout: BatchLayout) -> np.ndarray:
    """R(τ_k) = Σ_t r_t for each trajectory k (summed in step order), shape (K,)."""
    return np.bincount(layout.traj[layout.order], weights=reward[layout.order], minlength=layout.n_trajs)


def discounted_returns(reward: np.ndarray, layout: BatchLayout, gamma: float) -> np.ndarray:
    """R_t = Σ_{k≥t} γ^{k−t} r_k inside each trajectory (GiGPO Eq. 5), one value per row.

    Computed backwards, R_t = r_t + γ·R_{t+1}, for all trajectories at once (one vector op per position).
    """
    rows = layout.traj_rows
    padded = np.where(rows >= 0, reward[np.maximum(rows, 0)], 0.0)
    out = np.zeros_like(padded)
    acc = np.zeros(layout.n_trajs)
    for t in range(padded.shape[1] - 1, -1, -1):
        acc = padded[:, t] + gamma * acc
        out[:, t] = acc
    returns = np.empty(len(reward))
    returns[rows[rows >= 0]] = out[rows >= 0]
    return returns


def advantage_summary(advantages: np.ndarray) -> dict[str, float]:
    """Batch statistics of the advantages for logging."""
    if len(advantages) == 0:
        return {"adv_mean": 0.0, "adv_std": 0.0, "adv_abs_max": 0.0}
    return {
        "adv_mean": float(np.mean(advantages)),
        "adv_std": float(np.std(advantages)),
        "adv_abs_max": float(np.max(np.abs(advantages))),
    }


def invalid_step_frac(valid: np.ndarray) -> float:
    """Share of format-invalid rows (0 for an empty batch)."""
    return float(np.mean(~valid)) if len(valid) else 0.0


def outcome_summary(layout: BatchLayout, success_per_row: np.ndarray) -> dict[str, float]:
    """Counts of groups and of groups whose trajectories have both outcomes."""
    traj_success = np.zeros(layout.n_trajs, bool)
    traj_success[layout.traj] = success_per_row
    wins = np.bincount(layout.traj_group, weights=traj_success, minlength=layout.n_groups)
    sizes = np.bincount(layout.traj_group, minlength=layout.n_groups)
    mixed = int(np.sum((wins > 0) & (wins < sizes)))
    return {
        "groups": float(layout.n_groups),
        "mixed_outcome_groups": float(mixed),
        "success_rate": float(traj_success.mean()) if layout.n_trajs else 0.0,
    }


def trajectory_success(layout: BatchLayout, success_per_row: np.ndarray) -> np.ndarray:
    """(K,) success flag per trajectory; raises BatchError if a trajectory's rows disagree."""
    success_per_row = np.asarray(success_per_row, dtype=bool)
    wins = np.bincount(layout.traj, weights=success_per_row, minlength=layout.n_trajs)
    if np.any((wins > 0) & (wins < layout.traj_length)):
        k = int(np.flatnonzero((wins > 0) & (wins < layout.traj_length))[0])
        raise BatchError(f"trajectory {layout.traj_label[k]} has rows with different success flags")
    return wins > 0
