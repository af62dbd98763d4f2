"""SFT on expert demonstrations: the prompts match the agent's, and the expert's action becomes more likely."""

from __future__ import annotations

import subprocess

import torch
from tiny_model import save_tiny_model

from agentrl.agents.react import ReActAgent
from agentrl.policy import HFPolicy, choice_log_probs
from agentrl.sft import collect_demonstrations, sft


def test_sft_raises_the_expert_actions_likelihood(tmp_path):
    policy = HFPolicy(save_tiny_model(tmp_path / "m", seed=1), device="cpu")
    agent = ReActAgent("crafting", think=False)
    demos = collect_demonstrations("crafting", policy, agent, tasks=6, max_prompt_tokens=256)
    assert len(demos) >= 6 * 5  # every expert plan has at least 5 steps
    for demo in demos:
        assert 0 <= demo.expert_index < len(demo.choice_ids)

    def expert_logprob():
        with torch.no_grad():
            log_policy, _ = choice_log_probs(policy.model, [d.prompt_ids for d in demos],
                                             [d.choice_ids for d in demos])
        return float(torch.stack([lp[d.expert_index] for lp, d in zip(log_policy, demos)]).mean())

    before = expert_logprob()
    losses = sft(policy, demos, mode="score", epochs=4, lr=3e-3, batch_size=8)
    after = expert_logprob()
    assert losses[-1] < losses[0]
    assert after > before + 0.3


def test_generate_mode_sft_and_cli(tmp_path, agentrl_cli):
    policy = HFPolicy(save_tiny_model(tmp_path / "m", seed=2), device="cpu")
    demos = collect_demonstrations("crafting", policy, ReActAgent("crafting", think=False), tasks=2,
                                   max_prompt_tokens=128)
    losses = sft(policy, demos, mode="generate", epochs=3, lr=3e-3, batch_size=8)
    assert losses[-1] < losses[0]
    result = subprocess.run([*agentrl_cli, "sft", "--env", "crafting", "--model", "tiny-random", "--out",
                             str(tmp_path / "out"), "--tasks", "2", "--epochs", "1"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_both_mode_is_the_sum_of_the_scoring_and_reply_losses_and_lowers_both(tmp_path):
    from agentrl.sft import sft_loss

    policy = HFPolicy(save_tiny_model(tmp_path / "m", seed=3), device="cpu")
    demos = collect_demonstrations("crafting", policy, ReActAgent("crafting", think=False), tasks=3,
                                   max_prompt_tokens=192)

    def losses():  # one demonstration per batch: the per-demonstration sum is then exact
        return {mode: sft_loss(policy, demos, mode=mode, batch_size=1, bf16=False)
                for mode in ("score", "generate", "both")}

    before = losses()
    assert abs(before["both"] - (before["score"] + before["generate"])) < 1e-4
    sft(policy, demos, mode="both", epochs=3, lr=3e-3, batch_size=8, bf16=False)
    after = losses()
    assert after["score"] < before["score"] - 0.1
    assert after["generate"] < before["generate"] - 0.1
