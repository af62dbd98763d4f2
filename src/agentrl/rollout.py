"""Grouped rollouts: N tasks × G attempts from the same initial state, one batched policy call per step and wave.

The loop follows verl-agent's step-wise layout (docs/spec/algorithms.md §1.1): at every step each active episode gets its own
prompt (template + current observation + short history, built by the agent), the policy answers the active
episodes in one batched call, the agent parses each reply into an env action (docs/spec/algorithms.md §1.3), and the env pool steps every
env in parallel. Each (trajectory, step) is one training row: the sampled token ids are kept exactly as sampled,
with their log-probabilities, so the learner never re-tokenizes.

The episodes are played in two *waves* (whole groups alternately; the members of a single group when there is only
one): the env workers step one wave while the policy acts for the other, so env time hides behind generation, as
SkyRL's asynchronous generator overlaps env steps with other trajectories' generation. Which wave an episode is in
and the sampling seed of each call depend only on the slots, never on the number of workers, so a seeded rollout
gives the same trajectories with any pool. ``overlap_env_steps=False`` keeps one lockstep wave (with workers=0 the
envs run in this process and nothing overlaps).

Episodes end when the env terminates or truncates, when the trajectory's response-token budget is spent
(``truncated_by_budget``), or when the env fails (the trajectory is dropped and counted).

The policy renders prompts (its tokenizer) and scores admissible actions; free generation goes to ``generator``
when one is given (any :class:`agentrl.generators.Generator`, e.g. a vLLM engine), else to the policy itself.
``pool`` is any :class:`~agentrl.envpool.SlotPool`: an :class:`~agentrl.envpool.EnvPool` of local processes or
the Ray pool of :mod:`agentrl.raypool`. ``time/env_step`` is the time the loop waited for env steps, the part
that generation did not hide.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentrl.agents.base import PromptAgent
from agentrl.algos.types import Step, Trajectory
from agentrl.envpool import EnvFailure, PendingReplies, SlotPool
from agentrl.errors import ConfigError
from agentrl.generators import Generator
from agentrl.config import DEFAULT_CHOICE_RULE, GenerationConfig
from agentrl.policy import HFPolicy
from agentrl.records import RolloutBatch, RolloutTrajectory, TrainingSample


def reset_requests(task_ids: list[str], group_size: int, seed: int) -> list[tuple[int, int, dict[str, Any]]]:
    """The pool's reset requests of a rollout of ``task_ids`` × ``group_size``: slot ``s`` plays task
    ``task_ids[s // group_size]`` with reset seed ``seed + s // group_size`` (a group shares its initial state)."""
    return [(s, seed + s // group_size, {"task_id": task_ids[s // group_size]})
            for s in range(len(task_ids) * group_size)]


def collect_rollouts(
    pool: SlotPool,
    agent: PromptAgent,
    policy: HFPolicy,
    task_ids: list[str],
    group_size: int,
    generation: GenerationConfig,
    *,
    mode: str = "generate",
    choice_rule: str = DEFAULT_CHOICE_RULE,
    seed: int = 0,
    group_prefix: str = "",
    max_trajectory_tokens: int | None = None,
    generator: Generator | None = None,
    on_step: Callable[[int, int, int], None] | None = None,
    overlap_env_steps: bool = True,
    sent_resets: PendingReplies | None = None,
) -> RolloutBatch:
    """Play ``group_size`` episodes of every task in ``task_ids``; members of a group share task and reset seed.

    ``generator`` replaces ``policy`` for free generation (module docstring); scoring mode always uses ``policy``.
    ``on_step(episodes_done, episodes_total, wins)`` is called after every batched step (progress display).
    ``sent_resets``: this rollout's resets, already sent (``pool.reset_async(reset_requests(task_ids, group_size,
    seed))``, for example while the learner was busy); ``time/env_reset`` is then only the time still waited.
    """
    rollout = _Rollout(agent, policy, policy if generator is None else generator, generation, mode, choice_rule,
                       [task_ids[s // group_size] for s in range(len(task_ids) * group_size)], max_trajectory_tokens)
    t0 = time.perf_counter()
    resets = (sent_resets.result() if sent_resets is not None
              else pool.reset(reset_requests(task_ids, group_size, seed)))
    rollout.timings["time/env_reset"] += time.perf_counter() - t0
    rollout.start(resets)

    n_slots = len(rollout.slot_task)
    n_waves = 2 if overlap_env_steps and n_slots > 1 else 1
    if len(task_ids) >= n_waves:  # whole groups per wave: a group's identical prompts stay in one policy call
        wave_of = [(s // group_size) % n_waves for s in range(n_slots)]
    else:
        wave_of = [s % n_waves for s in range(n_slots)]
    waves = [[s for s in range(n_slots) if wave_of[s] == w and s not in rollout.failed] for w in range(n_waves)]

    # Each round, every wave gets its policy call and sends its actions; while the env workers step one wave, the
    # policy acts for the next, and a wave's replies are read only just before its next call.
    in_flight: dict[int, tuple[list[int], list[str], list[TrainingSample], list[Any], Any]] = {}
    round_index = 0
    while any(waves) or in_flight:
        for w in range(n_waves):
            if w in in_flight:
                active, replies, rows, parsed, pending = in_flight.pop(w)
                t0 = time.perf_counter()
                results = pending.result()
                rollout.timings["time/env_step"] += time.perf_counter() - t0
                waves[w] = rollout.record(active, replies, rows, parsed, results)
                if on_step is not None:
                    wins = sum(bool(i.get("won")) for i in rollout.final_info.values())
                    on_step(n_slots - sum(map(len, waves)), n_slots, wins)
            if not waves[w]:
                continue
            t0 = time.perf_counter()
            replies, rows = rollout.act(waves[w], (seed * 1_000_003 + round_index) * n_waves + w)
            rollout.timings["time/generation"] += time.perf_counter() - t0
            parsed = [agent.parse(reply) for reply in replies]
            t0 = time.perf_counter()
            pending = pool.step_async([(s, p.action) for s, p in zip(waves[w], parsed)])
            rollout.timings["time/env_step"] += time.perf_counter() - t0
            in_flight[w] = (waves[w], replies, rows, parsed, pending)
        round_index += 1
    return rollout.batch(group_prefix, group_size)


class _Rollout:
    """The episodes of one :func:`collect_rollouts` call, slot by slot, as they are played."""

    def __init__(self, agent: PromptAgent, policy: HFPolicy, generator: Generator, generation: GenerationConfig,
                 mode: str, choice_rule: str, slot_task: list[str], max_trajectory_tokens: int | None) -> None:
        self.agent, self.policy, self.generator, self.generation = agent, policy, generator, generation
        self.mode, self.choice_rule = mode, choice_rule
        self.slot_task = slot_task
        self.max_trajectory_tokens = max_trajectory_tokens
        n_slots = len(slot_task)
        self.timings: Counter = Counter()
        self.observation: dict[int, str] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self.failed: dict[int, str] = {}
        self.steps: dict[int, list[Step]] = {s: [] for s in range(n_slots)}
        self.samples: dict[int, list[TrainingSample]] = {s: [] for s in range(n_slots)}
        self.replies: dict[int, list[str]] = {s: [] for s in range(n_slots)}
        self.distances: dict[int, list[float | None]] = {s: [] for s in range(n_slots)}
        self.tokens_used: Counter = Counter()
        self.over_budget: set[int] = set()
        self.final_info: dict[int, dict[str, Any]] = {}
        self.n_generated = self.n_truncated_replies = 0

    def start(self, resets: dict[int, Any]) -> None:
        """Take each slot's first observation (or its env failure)."""
        self.agent.reset(len(self.slot_task))
        for slot, result in resets.items():
            if isinstance(result, EnvFailure):
                self.failed[slot] = result.error
            else:
                self.observation[slot], self.info[slot] = result

    def act(self, active: list[int], step_seed: int) -> tuple[list[str], list[TrainingSample]]:
        """One batched policy call for ``active``: the replies and their training rows."""
        agent, policy, generation = self.agent, self.policy, self.generation
        prompts = [policy.render(agent.messages(s, self.observation[s], self.info[s])) for s in active]
        if self.mode == "score":
            candidates = [agent.candidates(self.info[s]) for s in active]
            if not all(candidates):
                raise ConfigError("agent.mode=score chooses among admissible actions, but the env listed none for "
                                  f"task {self.slot_task[active[candidates.index([])]]!r}; use agent.mode=generate")
            choices = policy.score_choices(prompts, candidates, temperature=max(generation.temperature, 1e-6),
                                           sample=generation.temperature > 0, seed=step_seed, rule=self.choice_rule)
            return [c.text for c in choices], [TrainingSample.from_choice(c, 0.0) for c in choices]
        generations = self.generator.generate(prompts, generation, seed=step_seed)
        self.n_truncated_replies += sum(g.truncated for g in generations)
        return [g.text for g in generations], [
            TrainingSample(prompt_ids=list(g.prompt_ids), response_ids=list(g.response_ids),
                           old_logprobs=list(g.logprobs), advantage=0.0)
            for g in generations
        ]

    def record(self, active: list[int], replies: list[str], rows: list[TrainingSample], parsed: list[Any],
               results: dict[int, Any]) -> list[int]:
        """Append each slot's step to its episode; return the slots still playing."""
        still_active = []
        for s, reply, row, p in zip(active, replies, rows, parsed):
            result = results[s]
            if isinstance(result, EnvFailure):
                self.failed[s] = result.error
                continue
            next_obs, reward, terminated, truncated, next_info = result
            self.n_generated += len(row.response_ids)
            self.tokens_used[s] += len(row.response_ids)
            info = self.info[s]
            self.steps[s].append(Step(obs=self.observation[s], action=p.action, reward=float(reward),
                                      done=bool(terminated or truncated), valid=bool(p.valid), next_obs=next_obs,
                                      anchor=info.get("anchor")))
            self.samples[s].append(row)
            self.replies[s].append(reply)
            if "distance_to_goal" in info:
                self.distances[s].append(info["distance_to_goal"])
            self.agent.record(s, self.observation[s], p.action)
            self.observation[s], self.info[s] = next_obs, next_info
            budget = self.max_trajectory_tokens
            if budget is not None and self.tokens_used[s] >= budget and not (terminated or truncated):
                self.over_budget.add(s)
                truncated = True
            if terminated or truncated:
                self.final_info[s] = next_info
            else:
                still_active.append(s)
        return still_active

    def batch(self, group_prefix: str, group_size: int) -> RolloutBatch:
        """The finished episodes (slots whose env failed are dropped and counted) and the rollout's statistics."""
        trajectories = []
        for s in range(len(self.slot_task)):
            if s in self.failed or not self.steps[s]:
                continue
            last = self.final_info.get(s, self.info.get(s, {}))
            group = f"{group_prefix}{s // group_size}"
            trajectories.append(RolloutTrajectory(
                trajectory=Trajectory(group_id=group, traj_id=f"{group}/{s % group_size}",
                                      success=bool(last.get("won")), steps=self.steps[s]),
                samples=self.samples[s],
                task_id=self.slot_task[s],
                task_type=str(last.get("task_type") or "-"),
                replies=self.replies[s],
                score=float(last["score"]) if last.get("score") is not None else None,
                truncated_by_budget=s in self.over_budget,
                distances=self.distances[s] + [last.get("distance_to_goal")] if self.distances[s] else [],
            ))
        stats = dict(self.timings)
        stats.update({
            "rollout/generated_tokens": float(self.n_generated),
            "rollout/truncated_replies": float(self.n_truncated_replies),
            "rollout/over_token_budget": float(len(self.over_budget)),
            "rollout/steps": float(sum(len(t.samples) for t in trajectories)),
        })
        return RolloutBatch(trajectories=trajectories, dropped=len(self.failed),
                            failures=[(self.slot_task[s], self.failed[s]) for s in sorted(self.failed)], stats=stats)
