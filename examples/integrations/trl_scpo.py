"""SCPO in TRL: GRPOTrainer with a multi-turn rollout_func and per-turn advantages, two updates on CPU.

The policy is agentrl's tiny random model (no download). A toy lock opens when two turns in a row write an action of
even length; every episode is one completion: model turns (env_mask 1) and the environment's replies (env_mask 0).
The rollout_func also returns per-turn rewards, texts and anchors, and the episode's success, which
StepCreditGRPOTrainer turns into one advantage per turn. Needs TRL (in the dev extra); run: python trl_scpo.py
"""

import sys
import tempfile

import torch
from datasets import Dataset
from trl import GRPOConfig

from agentrl.integrations.trl import StepCreditGRPOTrainer, episode_return
from agentrl.models.tiny import save_tiny_model

TURNS, ACTION_TOKENS = 3, 3


def play(prompts, trainer):
    """One episode per prompt; the model writes each action, the lock answers."""
    tok, model = trainer.processing_class, trainer.model
    out = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "step_rewards", "success",
                           "step_texts", "anchors")}
    for prompt in prompts:
        prompt_ids = tok(prompt)["input_ids"]
        ids, logprobs, mask, rewards, texts, anchors, streak, obs = [], [], [], [], [], [], 0, "The lock is shut."
        for _ in range(TURNS):
            context = torch.tensor([prompt_ids + ids])
            with torch.no_grad():
                gen = model.generate(context, max_new_tokens=ACTION_TOKENS, min_new_tokens=ACTION_TOKENS,
                                     do_sample=True, output_scores=True, return_dict_in_generate=True,
                                     pad_token_id=tok.pad_token_id)
            action_ids = gen.sequences[0, context.shape[1]:].tolist()
            scores = model.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)[0]
            action = tok.decode(action_ids, skip_special_tokens=True)
            streak = streak + 1 if len(action) % 2 == 0 else 0
            anchors.append(obs)
            obs = "The lock opens." if streak == 2 else "Click." if streak else "Nothing happens."
            reply = tok(" " + obs)["input_ids"]
            ids += action_ids + reply
            logprobs += scores.tolist() + [0.0] * len(reply)
            mask += [1] * len(action_ids) + [0] * len(reply)
            rewards.append(10.0 if streak == 2 else 0.0)
            texts.append(f"{action} -> {obs}")
            if streak == 2:
                break
        for key, value in zip(out, (prompt_ids, ids, logprobs, mask, rewards, streak == 2, texts, anchors)):
            out[key].append(value)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="agentrl-trl-example-")
    model_dir = save_tiny_model(f"{folder}/tiny")
    args = GRPOConfig(output_dir=f"{folder}/run", per_device_train_batch_size=8, num_generations=4, max_steps=2,
                      learning_rate=1e-3, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                      bf16=False, disable_tqdm=True)
    trainer = StepCreditGRPOTrainer(str(model_dir), reward_funcs=episode_return, args=args,
                                    train_dataset=Dataset.from_dict({"prompt": ["Open the lock.", "Unlock it."] * 8}),
                                    rollout_func=play, estimator="scpo", estimator_options={"scorer": "lexical"})
    trainer.train()
    last = trainer.last_rollout
    print("last batch: success", [int(s) for s in last["success"]], "turns", [len(r) for r in last["step_rewards"]])
    sys.exit(0 if trainer.state.global_step == 2 else 1)
