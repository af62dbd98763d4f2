"""The embedded default CPU policy (``agentrl-tiny``): shipped, loadable, documented, and better than chance.

Built by ``scripts/build_default_policy.py``; its numbers are in its model card. These tests check what a user
relies on when they run ``agentrl train`` without ``--model`` on a laptop.
"""

from __future__ import annotations

import json

import pytest
import torch

import agentrl.envs as envs
from agentrl.agents.react import ReActAgent
from agentrl.config import build_config
from agentrl.models import EMBEDDED_POLICY, EMBEDDED_POLICY_DIR, recommended_agent_settings, resolve_model
from agentrl.policy import HFPolicy

pytestmark = pytest.mark.skipif(not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file(),
                                reason="the embedded policy is not built (scripts/build_default_policy.py)")


def test_it_ships_small_with_a_model_card_and_its_agent_settings():
    size = sum(p.stat().st_size for p in EMBEDDED_POLICY_DIR.iterdir())
    assert size < 16 * 2**20
    card = (EMBEDDED_POLICY_DIR / "README.md").read_text()
    for needle in ("valid_unseen", "best admissible action", "expert", "How it was built", "Limitations"):
        assert needle in card, needle
    build = json.loads((EMBEDDED_POLICY_DIR / "agentrl.json").read_text())
    assert build["agent"] == {"think": False, "history_length": 2, "action_memory": 12, "list_actions": False,
                              "mode": "score", "choice_rule": "sum"}  # the rule it was trained with
    assert recommended_agent_settings(EMBEDDED_POLICY) == build["agent"]
    assert "alfworld-unseen-score" in build["results"]


def test_it_is_the_default_model_on_a_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = build_config(None, {"env.name": "crafting"})
    assert config.model.path == EMBEDDED_POLICY
    agent = config.agent
    assert (agent.think, agent.history_length, agent.action_memory, agent.list_actions, agent.mode) == (
        False, 2, 12, False, "score")


def test_it_picks_the_experts_action_more_often_than_chance():
    """Teacher-forced along the expert's path on unseen ALFWorld games (valid_unseen): scoring the admissible
    actions, its top choice is the expert's several times more often than a uniform pick (measured 50%, 9 of 18
    steps, vs 4.6%; a random-weight model scores about chance). Its closed-loop success is far lower (model card)."""
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    policy = HFPolicy(resolve_model(EMBEDDED_POLICY, EMBEDDED_POLICY_DIR.parent))
    assert next(policy.model.parameters()).dtype == torch.float32  # bf16 on disk, float32 master weights
    env = envs.make("alfworld", expert=True, max_steps=40)
    settings = recommended_agent_settings(EMBEDDED_POLICY)
    agent = ReActAgent("alfworld", **{key: value for key, value in settings.items()
                                      if key not in ("mode", "choice_rule")})
    prompts, candidates, experts, chance = [], [], [], []
    task_ids = list(env.unwrapped.task_ids("eval_out_of_distribution"))
    for task_id in task_ids[::45]:  # 3 games of different kinds
        obs, info = env.reset(options={"task_id": task_id})
        agent.reset(1)
        while True:
            actions = agent.candidate_actions(info)
            prompts.append(policy.render(agent.messages(0, obs, info)))
            candidates.append(agent.candidates(info))
            experts.append(actions.index(info["expert_action"]))
            chance.append(1 / len(actions))
            agent.record(0, obs, info["expert_action"])
            obs, _, terminated, truncated, info = env.step(info["expert_action"])
            if terminated or truncated:
                break
    env.close()
    choices = policy.score_choices(prompts, candidates, sample=False, batch_size=8, rule=settings["choice_rule"])
    accuracy = sum(c.index == e for c, e in zip(choices, experts)) / len(experts)
    assert accuracy > 3 * sum(chance) / len(chance), (accuracy, sum(chance) / len(chance))
