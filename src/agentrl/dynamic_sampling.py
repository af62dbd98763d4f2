"""Dynamic sampling: keep only the rollout groups that carry a learning signal (``rollout.filter_groups``).

A group whose attempts all end alike (all failed, or all won with the same return) gives every group-relative
algorithm nothing to compare, so its rows only dilute the update. DAPO's dynamic sampling (arXiv:2503.14476,
section 3.2) and verl's ``filter_groups`` drop such groups and sample more prompts until the batch is full; the
trainer does the same in waves of further tasks (docs/algorithms.md "Dynamic sampling"). This module holds the pure
parts: which groups are informative, and the bookkeeping of what the dropped groups cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.records import RolloutBatch, RolloutTrajectory

FILTER_MODES = ("off", "outcome", "advantage")
#: ``advantage`` mode: a group whose every step advantage is at most this in magnitude is uninformative.
ZERO_ADVANTAGE = 1e-9


def groups_of(trajectories: Sequence[RolloutTrajectory]) -> dict[Any, list[int]]:
    """Group id → indices of its trajectories, in order of first appearance."""
    members: dict[Any, list[int]] = {}
    for i, rt in enumerate(trajectories):
        members.setdefault(rt.trajectory.group_id, []).append(i)
    return members


def is_mixed(trajectories: Sequence[RolloutTrajectory]) -> bool:
    """Whether a group's outcomes differ: some attempt's success or episode return is not the others'."""
    return len({(rt.trajectory.success, rt.trajectory.episode_return) for rt in trajectories}) > 1


def informative_groups(trajectories: Sequence[RolloutTrajectory], mode: str,
                       advantages: Sequence[Sequence[float]] | None = None) -> list[Any]:
    """Ids of the groups kept by ``mode``: all (``off``), those with mixed outcomes (``outcome``), or those with a
    step advantage above :data:`ZERO_ADVANTAGE` in magnitude (``advantage``; ``advantages`` per trajectory)."""
    if mode not in FILTER_MODES:
        raise ValueError(f"unknown filter_groups mode {mode!r}; known: {', '.join(FILTER_MODES)}")
    members = groups_of(trajectories)
    if mode == "off" or not members:
        return list(members)
    if mode == "outcome":
        return [g for g, idx in members.items() if is_mixed([trajectories[i] for i in idx])]
    if advantages is None:
        raise ValueError("filter_groups=advantage needs the advantages of the trajectories")
    return [g for g, idx in members.items() if any(abs(float(a)) > ZERO_ADVANTAGE for i in idx for a in advantages[i])]


def select(batch: RolloutBatch, group_ids: Sequence[Any]) -> tuple[RolloutBatch, RolloutBatch]:
    """``batch`` split into the trajectories of ``group_ids`` and the others (stats and failures go with the first)."""
    wanted = set(group_ids)
    kept = [rt for rt in batch.trajectories if rt.trajectory.group_id in wanted]
    rest = [rt for rt in batch.trajectories if rt.trajectory.group_id not in wanted]
    return (RolloutBatch(kept, dropped=batch.dropped, failures=list(batch.failures), stats=dict(batch.stats)),
            RolloutBatch(rest))


def merge(batches: Sequence[RolloutBatch]) -> RolloutBatch:
    """One batch of several waves' trajectories, in order; env-failure counts and statistics are summed."""
    stats: dict[str, float] = {}
    for batch in batches:
        for key, value in batch.stats.items():
            stats[key] = stats.get(key, 0.0) + value
    return RolloutBatch([rt for b in batches for rt in b.trajectories], dropped=sum(b.dropped for b in batches),
                        failures=[f for b in batches for f in b.failures], stats=stats)


@dataclass
class SamplingTally:
    """An iteration's dynamic sampling: tasks drawn, waves played, groups kept and what the dropped ones cost."""

    draws: int = 0
    waves: int = 0
    kept: int = 0
    dropped: int = 0
    mixed: int = 0  # kept groups whose outcomes differ (:func:`is_mixed`)
    dropped_episodes: int = 0
    dropped_steps: int = 0
    dropped_tokens: int = 0

    def add_wave(self, n_tasks: int, kept: RolloutBatch, dropped: RolloutBatch) -> None:
        members = groups_of(kept.trajectories)
        self.draws += n_tasks
        self.waves += 1
        self.kept += len(members)
        self.dropped += n_tasks - len(members)  # a group lost whole to env failures counts as dropped
        self.mixed += sum(is_mixed([kept.trajectories[i] for i in idx]) for idx in members.values())
        self.dropped_episodes += len(dropped.trajectories)
        self.dropped_steps += sum(len(rt.samples) for rt in dropped.trajectories)
        self.dropped_tokens += sum(len(s.response_ids) for rt in dropped.trajectories for s in rt.samples)

    def metrics(self) -> dict[str, float]:
        """``sampling/*`` metrics; the per-kept-group costs only when a group was kept."""
        out = {"sampling/task_draws": float(self.draws), "sampling/waves": float(self.waves),
               "sampling/kept_groups": float(self.kept), "sampling/dropped_groups": float(self.dropped),
               "sampling/mixed_groups": float(self.mixed), "sampling/dropped_episodes": float(self.dropped_episodes),
               "sampling/dropped_steps": float(self.dropped_steps),
               "sampling/dropped_tokens": float(self.dropped_tokens)}
        if self.kept:
            out["sampling/extra_steps_per_kept_group"] = self.dropped_steps / self.kept
            out["sampling/extra_tokens_per_kept_group"] = self.dropped_tokens / self.kept
        return out
