"""Evaluation: play one episode per task of a split and report success per task type.

Success is ``info["won"]`` at the last step (algorithms.md §5.5); "All" is the micro-average over episodes, the
layout of the published ALFWorld tables (algorithms.md §3.4).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agentrl.agents.base import Agent

#: Column order of the published ALFWorld tables; other envs' types follow in sorted order.
TASK_TYPE_ORDER = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")


@dataclass
class EpisodeResult:
    task_id: str
    task_type: str
    won: bool
    reward: float
    steps: int
    score: float | None = None  # env-specific graded score (WebShop), when the env reports one


@dataclass
class EvalReport:
    env: str
    split: str
    agent: str
    episodes: list[EpisodeResult] = field(default_factory=list)
    wall_time_s: float = 0.0

    def by_type(self) -> dict[str, dict[str, float]]:
        """Success rate (%), mean reward, mean steps and count per task type, plus "All"."""
        groups: dict[str, list[EpisodeResult]] = defaultdict(list)
        for ep in self.episodes:
            groups[ep.task_type].append(ep)
        known = [t for t in TASK_TYPE_ORDER if t in groups]
        order = known + sorted(t for t in groups if t not in TASK_TYPE_ORDER)
        table = {t: _summary(groups[t]) for t in order}
        table["All"] = _summary(self.episodes)
        return table

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "split": self.split,
            "agent": self.agent,
            "wall_time_s": self.wall_time_s,
            "summary": self.by_type(),
            "episodes": [asdict(e) for e in self.episodes],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))


def _summary(episodes: Sequence[EpisodeResult]) -> dict[str, float]:
    if not episodes:
        return {"success": 0.0, "reward": 0.0, "steps": 0.0, "n": 0}
    out = {
        "success": 100.0 * float(np.mean([e.won for e in episodes])),
        "reward": float(np.mean([e.reward for e in episodes])),
        "steps": float(np.mean([e.steps for e in episodes])),
        "n": len(episodes),
    }
    scores = [e.score for e in episodes if e.score is not None]
    if scores:
        out["score"] = 100.0 * float(np.mean(scores))
    return out


def evaluate(
    env: gym.Env,
    agent: Agent,
    *,
    split: str,
    episodes: int | None = None,
    env_name: str = "",
    agent_name: str = "",
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> EvalReport:
    """Play the first ``episodes`` tasks of ``split`` (all when None), one episode each, with ``agent``."""
    task_ids = list(env.unwrapped.task_ids(split))
    if episodes is not None:
        task_ids = task_ids[:episodes]
    report = EvalReport(env=env_name, split=split, agent=agent_name or getattr(agent, "name", type(agent).__name__))
    start = time.perf_counter()
    for index, task_id in enumerate(task_ids):
        obs, info = env.reset(seed=index, options={"task_id": task_id})
        agent.reset(1)
        total, steps = 0.0, 0
        while True:
            (action,) = agent.act([obs], [info])
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            steps += 1
            if terminated or truncated:
                break
        result = EpisodeResult(
            task_id=task_id,
            task_type=str(info.get("task_type") or "-"),
            won=bool(info["won"]),
            reward=total,
            steps=steps,
            score=float(info["score"]) if info.get("score") is not None else None,
        )
        report.episodes.append(result)
        if on_episode is not None:
            on_episode(result)
    report.wall_time_s = time.perf_counter() - start
    return report
