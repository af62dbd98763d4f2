"""agentrl's per-turn SCPO, GiGPO and GRPO advantages in TRL's ``GRPOTrainer``, for multi-turn ``rollout_func``s.

TRL's ``rollout_func`` (experimental in TRL 1.x) returns one completion per episode: model turns and environment
tokens (``env_mask`` 0) in one sequence, plus any extra fields. TRL gives a completion one scalar advantage, but its
loss also takes (completions × tokens) advantages from a subclass; :class:`StepCreditGRPOTrainer` is that subclass.
It reads per row ``step_rewards`` (one raw reward per turn) and, as the estimator needs them, ``success``,
``step_texts`` ("action -> next_obs" per turn) and ``anchors`` (state per turn), and gives each token of a turn the
turn's advantage. Groups are TRL's: ``num_generations`` consecutive completions of one prompt. One process only.

    trainer = StepCreditGRPOTrainer(model, reward_funcs=episode_return, args=GRPOConfig(...),
                                    train_dataset=prompts, rollout_func=play_episodes,
                                    estimator="scpo", estimator_options={"scorer": "minilm"})
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

from agentrl.algos.types import BatchError
from agentrl.integrations.steps import (
    ESTIMATORS,
    step_advantages,
    token_advantages,
    trajectory_columns,
    turns_from_mask,
)

#: rollout_func output fields read per completion (besides TRL's prompt_ids, completion_ids, logprobs, env_mask).
FIELDS = ("step_rewards", "success", "step_texts", "anchors")


def episode_return(completions: list, step_rewards: list[list[float]], **_: Any) -> list[float]:
    """A TRL reward function: the episode's summed step rewards (TRL logs it; the advantages come from the turns)."""
    return [float(sum(rewards)) for rewards in step_rewards]


def turn_token_rewards(step_ids: np.ndarray, step_rewards: list[list[float]]) -> np.ndarray:
    """(rows, tokens) rewards with turn t's reward on the last token of turn t."""
    out = np.zeros(step_ids.shape, np.float64)
    for row, rewards in enumerate(step_rewards):
        turns = int(step_ids[row].max(initial=-1)) + 1
        if len(rewards) != turns:
            raise BatchError(f"completion {row} has {turns} model turns (runs of env_mask 1) but {len(rewards)} "
                             "step rewards")
        for t, reward in enumerate(rewards):
            out[row, np.flatnonzero(step_ids[row] == t)[-1]] = reward
    return out


def rollout_advantages(rollout: dict[str, Any], width: int, group_size: int, estimator: str,
                       options: dict[str, Any] | None = None) -> np.ndarray:
    """(completions × ``width`` tokens) advantages of one ``rollout_func`` output; row i is in group i // group_size."""
    if "env_mask" not in rollout or "step_rewards" not in rollout:
        raise BatchError("rollout_func must return env_mask (1: model token, 0: environment token) and step_rewards "
                         "(one raw reward per model turn) for per-turn advantages")
    masks = rollout["env_mask"]
    if max(len(m) for m in masks) > width:
        raise BatchError(f"env_mask is longer than the completions ({width} tokens)")
    step_ids = turns_from_mask(np.array([list(m) + [0] * (width - len(m)) for m in masks]))
    rewards = turn_token_rewards(step_ids, rollout["step_rewards"])
    group = np.arange(len(masks)) // group_size
    columns, row, turn = trajectory_columns(group, step_ids, rewards, rollout.get("success"),
                                            rollout.get("step_texts"), rollout.get("anchors"))
    return token_advantages(step_ids, row, turn, step_advantages(estimator, columns, options))


class StepCreditGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are agentrl's, per model turn of each multi-turn completion."""

    def __init__(self, *args: Any, rollout_func: Any, estimator: str = "scpo",
                 estimator_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if estimator not in ESTIMATORS:
            raise BatchError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
        if rollout_func is None:
            raise BatchError("per-turn credit needs a multi-turn rollout_func (TRL's own generation is single-turn)")
        self.estimator, self.estimator_options, self.last_rollout = estimator, dict(estimator_options or {}), None

        def recorded(prompts: list, trainer: GRPOTrainer) -> dict[str, Any]:
            self.last_rollout = rollout_func(prompts, trainer)
            return self.last_rollout

        super().__init__(*args, rollout_func=recorded, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.accelerator.num_processes != 1:
            raise NotImplementedError("StepCreditGRPOTrainer runs on one process: TRL splits a group's completions "
                                      "across processes, and the per-turn estimators need the whole group")
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        width = output["completion_ids"].shape[1]
        advantages = rollout_advantages(self.last_rollout, width, group_size, self.estimator, self.estimator_options)
        output["advantages"] = torch.as_tensor(advantages, dtype=torch.float32, device=output["completion_ids"].device)
        return output
