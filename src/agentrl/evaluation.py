"""Evaluation: play the tasks of a split and report success per task type.

Two players: :func:`evaluate` drives a scripted agent (anything with ``act``, e.g. the env's expert) through a
plain Gymnasium loop; :func:`evaluate_model` drives a model through the rollout loop (batched policy calls, env
workers), exactly as the trainer's own evaluations do. Success is ``info["won"]`` at the last step (docs/spec/algorithms.md §5.5); "All" is the micro-average over episodes, the
layout of the published ALFWorld tables (docs/spec/algorithms.md §3.4).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import agentrl.envs as envs
from agentrl.agents.base import ScriptedAgent
from agentrl.agents.react import ReActAgent
from agentrl.config import AgentSection, GenerationConfig, resolve_agent_settings
from agentrl.envpool import EnvPool
from agentrl.errors import ConfigError
from agentrl.models import resolve_model
from agentrl.policy import HFPolicy
from agentrl.records import RolloutBatch
from agentrl.rollout import collect_rollouts

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
    settings: dict[str, Any] = field(default_factory=dict)  # how a model was driven (agent settings, temperature)

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
            **({"settings": self.settings} if self.settings else {}),
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
    agent: ScriptedAgent,
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


def split_tasks(env_name: str, env_args: dict[str, Any],
                 requests: list[tuple[str | None, bool]]) -> list[tuple[str, list[str]]]:
    """Resolve each ``(split or None, default_to_last_split)`` request to ``(split, task ids)`` with one env."""
    env = envs.make(env_name, **env_args)
    resolved = []
    try:
        base = env.unwrapped
        for split, last in requests:
            chosen = split or (base.splits[-1] if last else base.splits[0])
            if chosen not in base.splits:
                raise ConfigError(f"unknown split {chosen!r} for {env_name}; known: {', '.join(base.splits)}")
            ids = list(base.task_ids(chosen))
            if not ids:
                raise ConfigError(f"split {chosen!r} of {env_name} has no tasks (is its data installed?)")
            resolved.append((chosen, ids))
    finally:
        env.close()
    return resolved


def report_from_rollouts(batch: RolloutBatch, env: str, split: str, agent: str) -> EvalReport:
    """The evaluation report of played rollouts: one :class:`EpisodeResult` per trajectory."""
    report = EvalReport(env=env, split=split, agent=agent)
    for rt in batch.trajectories:
        report.episodes.append(EpisodeResult(task_id=rt.task_id, task_type=rt.task_type,
                                             won=rt.trajectory.success, reward=rt.trajectory.episode_return,
                                             steps=len(rt.trajectory.steps), score=rt.score))
    return report


def evaluate_model(env: str, model: str, *, split: str | None = None, episodes: int | None = None,
                   env_args: dict[str, Any] | None = None, temperature: float = 0.4, workers: int = 0, seed: int = 0,
                   generation: GenerationConfig | None = None, cache_dir: str | Path = "runs/models",
                   attempts: int = 1, on_step: Callable[[int, int, int], None] | None = None,
                   **agent: Any) -> EvalReport:
    """Evaluate a model-driven ReAct agent: ``attempts`` episodes (default one) of each task of ``split`` at
    ``temperature`` (docs/spec/algorithms.md §1.6: 0.4). ``agent`` takes :class:`~agentrl.config.AgentSection`'s
    settings (``mode``, ``think``, ``choice_rule``, ...); those left out or ``None`` are the model's own (its
    ``agentrl.json``, :func:`agentrl.config.resolve_agent_settings`), as ``agentrl train`` and ``agentrl eval``
    drive it; the report records the settings used. Several attempts per task measure a sampling policy's success
    on a small task set with less noise. ``on_step(episodes_done, episodes_total, wins)`` reports progress after
    every batched step."""
    start = time.perf_counter()
    settings = resolve_agent_settings(model, agent)
    split, batch = play_model(env, model, settings, split=split, episodes=episodes, env_args=env_args,
                              generation=dataclasses.replace(generation or GenerationConfig(), temperature=temperature),
                              workers=workers, seed=seed, cache_dir=cache_dir, attempts=attempts, on_step=on_step)
    report = report_from_rollouts(batch, env, split, f"model:{model}")
    report.settings = {**dataclasses.asdict(settings), "temperature": temperature, "attempts": attempts}
    report.wall_time_s = time.perf_counter() - start
    return report


def play_model(env: str, model: str, settings: AgentSection, *, split: str | None = None,
               episodes: int | None = None, env_args: dict[str, Any] | None = None,
               generation: GenerationConfig | None = None, workers: int = 0, seed: int = 0,
               cache_dir: str | Path = "runs/models", attempts: int = 1,
               on_step: Callable[[int, int, int], None] | None = None) -> tuple[str, RolloutBatch]:
    """The episodes behind :func:`evaluate_model`, kept whole: the split played and the rollouts, every step's
    observation and action included (for diagnostics such as ``bench/alfworld_choices.py``)."""
    if attempts < 1:
        raise ConfigError(f"attempts must be >= 1, got {attempts}")
    env_args = dict(env_args or {})
    ((split, task_ids),) = split_tasks(env, env_args, [(split, True)])
    task_ids = task_ids[:episodes] if episodes is not None else task_ids
    policy = HFPolicy(resolve_model(model, Path(cache_dir)), device="cpu")
    agent = ReActAgent(env_family=ReActAgent.family_for_env(env), history_length=settings.history_length,
                       think=settings.think, action_memory=settings.action_memory,
                       list_actions=settings.list_actions)
    with EnvPool(env, env_args, workers=workers) as pool:
        batch = collect_rollouts(pool, agent, policy, task_ids, attempts, generation or GenerationConfig(),
                                 mode=settings.mode, choice_rule=settings.choice_rule, seed=seed, group_prefix="eval/",
                                 on_step=on_step)
    return split, batch
