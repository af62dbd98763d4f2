"""SFT on expert demonstrations: the prompts match the agent's, and the expert's action becomes more likely."""

from __future__ import annotations

import subprocess

import pytest
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
    assert not (tmp_path / "out-checkpoints").exists()  # removed once the model is saved


def test_sft_from_expert_renders_prompts_as_the_model_is_driven_and_records_it(tmp_path):
    import json

    from agentrl.config import build_config
    from agentrl.sft import sft_from_expert

    model_dir = save_tiny_model(tmp_path / "m", seed=5)
    run = dict(tasks=2, epochs=1, lr=1e-3, max_prompt_tokens=4096)
    listed = sft_from_expert("crafting", str(model_dir), str(tmp_path / "listed"), **run)
    recommended = {"think": False, "history_length": 1, "action_memory": 4, "list_actions": False, "mode": "score",
                   "choice_rule": "mean"}  # not the default rule: the fine-tuning must train and record the model's
    (model_dir / "agentrl.json").write_text(json.dumps({"agent": recommended}))
    driven = sft_from_expert("crafting", str(model_dir), str(tmp_path / "driven"), **run)
    # Same expert steps, but the prompts follow the model's settings: no action list, a shorter history.
    assert driven["demonstrations"] == listed["demonstrations"]
    assert driven["prompt_tokens"] < 0.9 * listed["prompt_tokens"]
    record = json.loads((tmp_path / "driven" / "agentrl.json").read_text())
    assert record["agent"] == recommended and record["sft"]["from"] == str(model_dir)
    # ...and train drives the fine-tuned folder the same way.
    agent = build_config(overrides={"model.path": str(tmp_path / "driven")}).agent
    assert (agent.list_actions, agent.history_length, agent.action_memory, agent.think) == (False, 1, 4, False)
    assert agent.choice_rule == "mean"
    assert json.loads((tmp_path / "listed" / "agentrl.json").read_text())["agent"]["list_actions"] is True
    # A think given explicitly wins over the recommendation.
    thinking = sft_from_expert("crafting", str(model_dir), str(tmp_path / "think"), think=True, **run)
    assert json.loads((tmp_path / "think" / "agentrl.json").read_text())["agent"]["think"] is True
    assert thinking["prompt_tokens"] > driven["prompt_tokens"]


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


def test_an_interrupted_sft_resumes_from_its_checkpoint_to_the_same_weights(tmp_path):
    from agentrl.checkpoint import CheckpointError

    model_dir = save_tiny_model(tmp_path / "m", seed=4)
    demos = collect_demonstrations("crafting", HFPolicy(model_dir, device="cpu"), ReActAgent("crafting", think=False),
                                   tasks=2, max_prompt_tokens=128)
    per_epoch = -(-len(demos) // 4)
    assert per_epoch >= 3
    # Checkpoints after epoch 1 (step per_epoch) and one step into epoch 2; the crash comes one step later.
    settings = dict(mode="both", epochs=2, lr=3e-3, batch_size=4, lr_schedule="cosine", bf16=False,
                    checkpoint_every=per_epoch + 1)
    crash_step = per_epoch + 2

    straight = HFPolicy(model_dir, device="cpu")
    straight_losses = sft(straight, demos, checkpoint_dir=tmp_path / "straight", **settings)

    class Interrupted(Exception):
        pass

    def crash(step, total, loss):
        if step == crash_step:
            raise Interrupted

    run_dir = tmp_path / "interrupted"
    with pytest.raises(Interrupted):
        sft(HFPolicy(model_dir, device="cpu"), demos, checkpoint_dir=run_dir, on_step=crash, **settings)
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == f"iter-{per_epoch + 1:06d}"

    resumed, steps = HFPolicy(model_dir, device="cpu"), []  # fresh weights: they must come from the checkpoint
    resumed_losses = sft(resumed, demos, checkpoint_dir=run_dir, on_step=lambda s, t, loss: steps.append(s),
                         **settings)
    assert steps == list(range(crash_step, 2 * per_epoch + 1))  # from the step the crash interrupted
    assert resumed_losses == straight_losses
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name

    with pytest.raises(CheckpointError, match="epochs"):
        sft(HFPolicy(model_dir, device="cpu"), demos, checkpoint_dir=run_dir, **{**settings, "epochs": 3})


def test_micro_batches_of_similar_width_give_the_same_step_with_less_padding(tmp_path):
    from agentrl.sft import _batch_loss, _micro_batches, _width

    model_dir = save_tiny_model(tmp_path / "m", seed=5)
    demos = collect_demonstrations("crafting", HFPolicy(model_dir, device="cpu"), ReActAgent("crafting", think=False),
                                   tasks=2, max_prompt_tokens=256)
    widths = [_width(d, "both") for d in demos]
    budget = 3 * max(widths)
    groups = _micro_batches(demos, list(range(len(demos))), "both", budget)
    assert sorted(i for g in groups for i in g) == list(range(len(demos))) and len(groups) > 1
    assert all(len(g) * max(widths[i] for i in g) <= budget for g in groups)
    padded = sum(len(g) * max(widths[i] for i in g) for g in groups)
    assert padded < len(demos) * max(widths)

    # The same mean loss, and the same gradient, as one pass over the whole batch.
    model = HFPolicy(model_dir, device="cpu").model
    gradients = []
    for micro_batches in ([list(range(len(demos)))], groups):
        model.zero_grad()
        for group in micro_batches:
            (_batch_loss(model, [demos[i] for i in group], "both") * len(group) / len(demos)).backward()
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(gradients[0], gradients[1], atol=1e-5) and gradients[0].abs().max() > 1e-2

    settings = dict(mode="both", epochs=1, lr=1e-3, batch_size=len(demos), bf16=False)  # one step: its loss
    (loss_one,) = sft(HFPolicy(model_dir, device="cpu"), demos, micro_batch_tokens=0, **settings)
    (loss_micro,) = sft(HFPolicy(model_dir, device="cpu"), demos, micro_batch_tokens=budget, **settings)
    assert abs(loss_one - loss_micro) < 1e-5


def test_the_prompt_loss_is_the_prompts_own_next_token_nll_from_the_same_pass_and_lowers_it(tmp_path):
    """``prompt_loss_weight``: the packed scoring pass also gives each prompt's token log-likelihoods, equal to a
    plain forward over the prompt alone; training with it lowers the prompts' NLL far more than without it, and
    still lowers the scoring loss."""
    from agentrl.policy import choice_and_prompt_logliks, choice_sequence_logliks
    from agentrl.sft import sft_loss

    policy = HFPolicy(save_tiny_model(tmp_path / "m", seed=4), device="cpu")
    demos = collect_demonstrations("crafting", policy, ReActAgent("crafting", think=False), tasks=3,
                                   max_prompt_tokens=192)
    prompts, choices = [d.prompt_ids for d in demos[:4]], [d.choice_ids for d in demos[:4]]
    with torch.no_grad():
        scores, prompt_logliks = choice_and_prompt_logliks(policy.model, prompts, choices)
        for got, want in zip(scores, choice_sequence_logliks(policy.model, prompts, choices)):
            torch.testing.assert_close(got, want)
        for prompt, got in zip(prompts, prompt_logliks):
            logits = policy.model(torch.tensor([prompt])).logits[0, :-1].float()
            want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(prompt[1:])[:, None]).squeeze(-1)
            torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)

    def prompt_nll(p):
        with torch.no_grad():
            _, logliks = choice_and_prompt_logliks(p.model, [d.prompt_ids for d in demos],
                                                   [d.choice_ids for d in demos])
        return -float(torch.cat(logliks).mean())

    trained = {}
    for weight in (0.0, 1.0):
        p = HFPolicy(save_tiny_model(tmp_path / f"w{weight}", seed=4), device="cpu")
        before = (prompt_nll(p), sft_loss(p, demos, mode="score", bf16=False))
        sft(p, demos, mode="both", epochs=3, lr=3e-3, batch_size=8, bf16=False, prompt_loss_weight=weight)
        trained[weight] = (prompt_nll(p), sft_loss(p, demos, mode="score", bf16=False))
    assert trained[1.0][0] < trained[0.0][0] - 1.0 and trained[1.0][0] < before[0] - 2.0
    assert trained[1.0][1] < before[1] - 0.1
    with pytest.raises(Exception, match="prompt_loss_weight"):
        sft(policy, demos, mode="generate", prompt_loss_weight=0.5)
