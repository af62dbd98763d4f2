"""agentrl's per-turn advantages inside TRL's real GRPOTrainer, with a multi-turn rollout_func and a tiny model."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl", reason="TRL is not installed (pip install 'agentrl[trl]')")
torch = pytest.importorskip("torch")

from conftest import REPO_ROOT as REPO
from datasets import Dataset
from integration_batches import random_steps, trajectory_rows
from tiny_model import tiny_model_dir
from trl import GRPOConfig

from agentrl.algos import gigpo_advantages_flat, grpo_advantages_flat, scpo_advantages_flat
from agentrl.integrations.steps import turns_from_mask
from agentrl.integrations.trl import StepCreditGRPOTrainer, episode_return

GROUPS, PER_GROUP = 2, 4


def episodes():
    """The shared random batch as TRL completions: group g's episodes are rows g*4 .. g*4+3."""
    steps = random_steps(seed=21, groups=GROUPS, per_group=PER_GROUP)
    rows = trajectory_rows(steps)
    lengths = rows["response_mask"].sum(1).astype(int)
    masks = [rows["model_mask"][i, :n].astype(int).tolist() for i, n in enumerate(lengths)]
    step_ids = turns_from_mask(rows["model_mask"])
    step_rewards = [[float(rows["rewards"][i][step_ids[i] == t].sum()) for t in range(len(rows["step_texts"][i]))]
                    for i in range(len(masks))]
    rollout = {"env_mask": masks, "step_rewards": step_rewards, "success": rows["success"],
               "step_texts": rows["step_texts"], "anchors": rows["anchors"]}
    return steps, rows, rollout


def make_trainer(tmp_path, estimator, rollout_func):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=GROUPS * PER_GROUP,
                      num_generations=PER_GROUP, max_completion_length=64, use_cpu=True, report_to=[],
                      logging_steps=1, max_steps=1, bf16=False, save_strategy="no")
    dataset = Dataset.from_dict({"prompt": ["task one", "task two"] * 4})
    options = {"scorer": "lexical"} if estimator == "scpo" else {}
    return StepCreditGRPOTrainer(str(tiny_model_dir()), reward_funcs=episode_return, args=args,
                                 train_dataset=dataset, rollout_func=rollout_func, estimator=estimator,
                                 estimator_options=options)


def rollout_func_for(rollout, trainer_calls):
    def play(prompts, trainer):
        trainer_calls.append(len(prompts))
        tok = trainer.processing_class
        prompt_ids = [tok(p)["input_ids"] for p in prompts]
        completion_ids = [[5 + (j % 50) for j in range(len(m))] for m in rollout["env_mask"]]
        logprobs = [[-1.0] * len(m) for m in rollout["env_mask"]]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, **rollout}
    return play


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "scpo"])
def test_grpo_trainer_subclass_gives_each_turn_the_flat_api_advantage(tmp_path, estimator):
    steps, rows, rollout = episodes()
    calls = []
    trainer = make_trainer(tmp_path, estimator, rollout_func_for(rollout, calls))
    inputs = [{"prompt": p} for p in ["task one"] * PER_GROUP + ["task two"] * PER_GROUP]
    output = trainer._generate_and_score_completions(inputs)
    assert calls == [GROUPS * PER_GROUP]
    advantages = output["advantages"]
    assert advantages.shape == output["completion_ids"].shape
    group = np.arange(GROUPS * PER_GROUP) // PER_GROUP
    g, k = group[rows["traj_of_step"]], rows["traj_of_step"]
    s = steps
    expected = {
        "grpo": lambda: grpo_advantages_flat(g, k, s["step_index"], s["rewards"], None),
        "gigpo": lambda: gigpo_advantages_flat(g, k, s["step_index"], s["rewards"], None, s["anchor_obs"]),
        "scpo": lambda: scpo_advantages_flat(g, k, s["step_index"], s["rewards"], None, s["success"],
                                             s["step_text"], s["anchor_obs"], scorer="lexical"),
    }[estimator]()
    width = advantages.shape[1]  # TRL pads the completions to the longest one
    mask = np.zeros((len(rows["model_mask"]), width))
    mask[:, : min(width, rows["model_mask"].shape[1])] = rows["model_mask"][:, :width]
    step_ids = turns_from_mask(mask)
    for i, (row, t) in enumerate(zip(k, steps["step_index"])):
        np.testing.assert_allclose(advantages[row][step_ids[row] == t].numpy(), expected[i], rtol=1e-6, atol=1e-5)
    assert torch.all(advantages[torch.tensor(step_ids) < 0] == 0)
    assert np.abs(expected).max() > 0.5
    loss = trainer.compute_loss(trainer.model, output)  # TRL's own loss takes the (completions × tokens) advantages
    assert torch.isfinite(loss)


def test_trl_example_trains_two_steps():
    result = subprocess.run([sys.executable, str(REPO / "examples" / "integrations" / "trl_scpo.py")],
                            check=False, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "last batch: success" in result.stdout
