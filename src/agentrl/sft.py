"""Supervised fine-tuning on expert trajectories: the warm start before RL.

Any env built with ``expert=True`` (walkthrough, planner or solver) yields demonstrations. Each expert step is
rendered exactly as the ReAct agent renders it during RL (same template, same history, same chat template), and the
target is the agent's reply for the expert action, so what SFT teaches is what rollouts ask for:

- ``mode="score"``: cross-entropy of the scoring-mode policy, ``-log softmax_a(loglik(reply_a | prompt))`` at the
  expert action, over the admissible actions' candidate replies (the distribution the policy samples from);
- ``mode="generate"``: token-level negative log-likelihood of the expert reply (``<action>…</action>`` + end of turn);
- ``mode="both"``: the sum of the two, per demonstration (one forward pass), for a policy meant to be driven either
  way. A small model trained from scratch on ``generate`` alone learns the replies' marginal (on ALFWorld: "go to"
  the most frequent receptacles) long before it learns to read the observation; the scoring loss compares the
  expert's action with the other admissible ones in the same state, so its gradient is all about that state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.agents.react import ReActAgent
from agentrl.checkpoint import CheckpointError, find_latest, load_checkpoint, restore_rng, save_checkpoint
from agentrl.config import DEFAULT_CHOICE_RULE, AgentSection, SFTConfig, from_dict
from agentrl.errors import AgentRLError
from agentrl.models import AGENT_SETTINGS_FILE, recommended_agent_settings, resolve_model
from agentrl.policy import HFPolicy, choice_and_prompt_logliks, choice_log_probs, choice_policy, token_log_probs


@dataclass
class Demonstration:
    """One expert step: the prompt the agent would see, the candidates, and which one the expert chose."""

    prompt_ids: list[int]
    choice_ids: list[list[int]]
    expert_index: int


def collect_demonstrations(env_name: str, policy: HFPolicy, agent: ReActAgent, *, split: str | None = None,
                           tasks: int = 100, env_args: dict[str, Any] | None = None,
                           max_prompt_tokens: int = 2048) -> list[Demonstration]:
    """Play the expert on the first ``tasks`` tasks of ``split`` and record every step as a demonstration."""
    import agentrl.envs as envs

    env = envs.make(env_name, expert=True, **(env_args or {}))
    base = env.unwrapped
    split = split or base.splits[0]
    demos: list[Demonstration] = []
    for task_id in list(base.task_ids(split))[:tasks]:
        obs, info = env.reset(options={"task_id": task_id})
        agent.reset(1)
        while True:
            expert = info.get("expert_action")
            actions = agent.candidate_actions(info)
            if expert is None or expert not in actions:
                break  # no expert move the agent could express: end this demonstration here
            prompt = policy.render(agent.messages(0, obs, info))[-max_prompt_tokens:]
            choice_ids = [policy.choice_token_ids(reply) for reply in agent.candidates(info)]
            demos.append(Demonstration(prompt, choice_ids, actions.index(expert)))
            agent.record(0, obs, expert)
            obs, _, terminated, truncated, info = env.step(expert)
            if terminated or truncated:
                break
    env.close()
    if not demos:
        raise AgentRLError(f"the expert of {env_name!r} produced no demonstrations on split {split!r}")
    return demos


def _batch_loss(model: torch.nn.Module, batch: list[Demonstration], mode: str,
                prompt_loss_weight: float = 0.0, rule: str = DEFAULT_CHOICE_RULE) -> torch.Tensor:
    prompts = [d.prompt_ids for d in batch]
    if mode in ("score", "both"):
        if prompt_loss_weight > 0:
            seq_logliks, prompt_logliks = choice_and_prompt_logliks(model, prompts, [d.choice_ids for d in batch])
            log_policy = choice_policy(seq_logliks, [d.choice_ids for d in batch], rule)
        else:
            log_policy, seq_logliks = choice_log_probs(model, prompts, [d.choice_ids for d in batch], rule=rule)
        loss = -torch.stack([lp[d.expert_index] for lp, d in zip(log_policy, batch)]).mean()
        if mode == "both":  # the same forward pass gives the expert reply's tokens: its per-token NLL
            loss = loss - torch.stack([s[d.expert_index] / len(d.choice_ids[d.expert_index])
                                       for s, d in zip(seq_logliks, batch)]).mean()
        if prompt_loss_weight > 0:
            loss = loss - prompt_loss_weight * torch.stack([p.mean() for p in prompt_logliks]).mean()
        return loss
    targets = [d.choice_ids[d.expert_index] for d in batch]
    logprobs, _, mask = token_log_probs(model, prompts, targets)
    return -(logprobs * mask).sum() / mask.sum()


def _check_mode(mode: str, bf16: bool | str) -> None:
    if mode not in ("score", "generate", "both"):
        raise AgentRLError(f"sft mode must be 'score', 'generate' or 'both', got {mode!r}")
    if bf16 not in (True, False, "auto"):
        raise AgentRLError(f"bf16 must be true, false or 'auto', got {bf16!r}")


def _length_batches(demos: list[Demonstration], order: list[int], batch_size: int) -> list[list[int]]:
    """Batches of similar prompt length (less padding): sort windows of 50 batches by length, then cut."""
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: len(demos[i].prompt_ids))
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return batches


def _width(demo: Demonstration, mode: str) -> int:
    """Tokens of a demonstration's row in the forward pass: the prompt and its candidates (or the expert reply)."""
    replies = [demo.choice_ids[demo.expert_index]] if mode == "generate" else demo.choice_ids
    return len(demo.prompt_ids) + sum(len(r) for r in replies)


def _micro_batches(demos: list[Demonstration], indices: list[int], mode: str, max_tokens: int) -> list[list[int]]:
    """A batch's rows regrouped by width into micro-batches of at most ``max_tokens`` padded tokens each (a row
    wider than that on its own). The optimizer step sees the same rows and the same mean loss; only the padding
    goes: in a random batch of 16 ALFWorld/WebShop rows the padded batch is 1.6-1.8x the real tokens (the widest
    row sets the width) and attention 2.3-3.3x."""
    if max_tokens <= 0:
        return [indices]
    ordered = sorted(indices, key=lambda i: _width(demos[i], mode))
    groups: list[list[int]] = [[]]
    for i in ordered:  # ascending width: the row being added is the group's widest
        if groups[-1] and (len(groups[-1]) + 1) * _width(demos[i], mode) > max_tokens:
            groups.append([])
        groups[-1].append(i)
    return groups


def _fingerprint(demos: list[Demonstration]) -> str:
    """A digest of the demonstrations' tokens and labels: a checkpoint resumes only the data it was trained on."""
    digest = hashlib.sha256()
    for d in demos:
        digest.update(repr((d.prompt_ids, d.choice_ids, d.expert_index)).encode())
    return digest.hexdigest()[:16]


def _load_weights(model: torch.nn.Module, folder: Path) -> None:
    """Copy the weights saved in ``folder`` (save_pretrained form) into ``model`` in place (tied weights too)."""
    saved = type(model).from_pretrained(folder, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict())


def sft(policy: HFPolicy, demos: list[Demonstration], config: SFTConfig | None = None, *,
        checkpoint_dir: str | Path | None = None, on_epoch: Callable[[int, float], None] | None = None,
        on_step: Callable[[int, int, float], None] | None = None, **overrides: Any) -> list[float]:
    """Fit ``policy`` to the demonstrations with AdamW (:class:`~agentrl.config.SFTConfig`, whose fields may also
    be given as keyword ``overrides``); returns the mean loss of each epoch.

    Batches are drawn at random (seeded); each is computed in micro-batches of rows of similar width with gradient
    accumulation. ``on_step(step, total_steps, loss)`` reports progress; ``on_epoch(epoch, loss)`` is called for
    the epochs finished in this call (the returned losses cover all epochs).

    ``checkpoint_dir``: write checkpoints under ``checkpoint_dir/checkpoints/`` (weights, optimizer state, progress;
    the atomic layout of :mod:`agentrl.checkpoint`) after every epoch and every ``checkpoint_every`` steps, and
    start from the latest one found there: an interrupted run continues where it stopped, with the same batches and
    learning rates, and ends with the weights an uninterrupted run would have. A checkpoint written for other data
    or settings is refused.
    """
    from agentrl.learner import bf16_autocast_pays

    config = _sft_config(config, overrides)
    model = policy.model
    device = next(model.parameters()).device
    autocast = config.bf16 is True or (config.bf16 == "auto" and bf16_autocast_pays(model))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    total_steps = config.epochs * math.ceil(len(demos) / config.batch_size)
    settings = _checkpoint_settings(config, demos)
    progress = _SFTProgress()
    if checkpoint_dir is not None:
        progress.resume(Path(checkpoint_dir), settings, model, optimizer)

    def save(step: int, total: float, count: int) -> None:
        save_checkpoint(Path(checkpoint_dir), step, policy, optimizer, {
            "settings": settings, "losses": progress.losses, "epoch_total": total, "epoch_count": count})

    rng = random.Random(config.seed)
    order = list(range(len(demos)))
    step, resume_step = 0, progress.step
    for epoch in range(config.epochs):
        # The shuffles are replayed for the epochs a resumed run skips, so the remaining batches are the same.
        rng.shuffle(order)
        if config.length_buckets:
            batches = _length_batches(demos, order, config.batch_size)
            rng.shuffle(batches)
        else:
            batches = [order[i:i + config.batch_size] for i in range(0, len(order), config.batch_size)]
        if step + len(batches) <= resume_step:
            step += len(batches)
            continue
        total, count = (progress.epoch_total, progress.epoch_count) if step < resume_step else (0.0, 0)
        for indices in batches:
            if step < resume_step:
                step += 1
                continue
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(config, step, total_steps)
            loss = _sft_step(model, optimizer, demos, indices, config, device, autocast)
            total += loss * len(indices)
            count += len(indices)
            step += 1
            if on_step is not None:
                on_step(step, total_steps, loss)
            if checkpoint_dir is not None and config.checkpoint_every > 0 and step % config.checkpoint_every == 0 \
                    and count < len(demos):
                save(step, total, count)
        progress.losses.append(total / max(count, 1))
        if on_epoch is not None:
            on_epoch(epoch, progress.losses[-1])
        if checkpoint_dir is not None:
            save(step, 0.0, 0)
    model.eval()
    return progress.losses


def _sft_config(config: SFTConfig | None, overrides: dict[str, Any]) -> SFTConfig:
    """``config`` (default: the defaults) with ``overrides`` applied, checked."""
    known = {f.name for f in dataclasses.fields(SFTConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"sft() got unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    config = dataclasses.replace(config or SFTConfig(), **overrides)
    _check_mode(config.mode, config.bf16)
    if config.prompt_loss_weight < 0 or (config.prompt_loss_weight > 0 and config.mode == "generate"):
        raise AgentRLError(f"prompt_loss_weight must be >= 0, and 0 in 'generate' mode; got "
                           f"{config.prompt_loss_weight!r} with mode {config.mode!r}")
    if config.lr_schedule not in ("constant", "cosine"):
        raise AgentRLError(f"lr_schedule must be 'constant' or 'cosine', got {config.lr_schedule!r}")
    return config


def _lr_at(config: SFTConfig, step: int, total_steps: int) -> float:
    """``lr_schedule``: constant, or a linear warm-up then a cosine decay to ``min_lr_ratio × lr``."""
    if config.lr_schedule == "constant":
        return config.lr
    warmup = max(1, int(config.warmup_fraction * total_steps))
    if step < warmup:
        return config.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, demos: list[Demonstration],
              indices: list[int], config: SFTConfig, device: torch.device, autocast: bool) -> float:
    """One optimizer step on the batch ``indices`` (micro-batches with gradient accumulation); its mean loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for micro in _micro_batches(demos, indices, config.mode, config.micro_batch_tokens):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            part = _batch_loss(model, [demos[i] for i in micro], config.mode, config.prompt_loss_weight,
                               config.choice_rule) * (
                len(micro) / len(indices))
        part.backward()
        loss += float(part.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def _checkpoint_settings(config: SFTConfig, demos: list[Demonstration]) -> dict[str, Any]:
    """What a checkpoint must have been written with to be resumed: the data's fingerprint and the settings."""
    return {"demonstrations": _fingerprint(demos), "mode": config.mode, "epochs": config.epochs, "lr": config.lr,
            "batch_size": config.batch_size, "seed": config.seed, "weight_decay": config.weight_decay,
            "lr_schedule": config.lr_schedule, "warmup_fraction": config.warmup_fraction,
            "min_lr_ratio": config.min_lr_ratio, "length_buckets": config.length_buckets,
            "micro_batch_tokens": config.micro_batch_tokens,
            **({"prompt_loss_weight": config.prompt_loss_weight} if config.prompt_loss_weight else {})}


@dataclass
class _SFTProgress:
    """Where an SFT run stands: steps done, per-epoch losses, and the running sums of the epoch in progress."""

    step: int = 0
    losses: list[float] = dataclasses.field(default_factory=list)
    epoch_total: float = 0.0
    epoch_count: int = 0

    def resume(self, checkpoint_dir: Path, settings: dict[str, Any], model: torch.nn.Module,
               optimizer: torch.optim.Optimizer) -> None:
        """Continue from the latest checkpoint under ``checkpoint_dir``, if any, refusing one of other settings."""
        latest = find_latest(checkpoint_dir)
        if latest is None:
            return
        checkpoint = load_checkpoint(latest)
        changed = sorted(k for k in settings if checkpoint.state.get("settings", {}).get(k) != settings[k])
        if changed:
            raise CheckpointError(f"the SFT checkpoint {latest} was written with other {', '.join(changed)}; resume "
                                  f"with the same data and settings, or use another checkpoint_dir")
        _load_weights(model, checkpoint.model_dir)
        optimizer.load_state_dict(checkpoint.trainer_state["learner"])
        restore_rng(checkpoint)
        self.step, self.losses = checkpoint.iteration, list(checkpoint.state["losses"])
        self.epoch_total, self.epoch_count = checkpoint.state["epoch_total"], checkpoint.state["epoch_count"]


def checkpoint_dir_for(out_dir: str | Path) -> Path:
    """Where an SFT run that will save its model to ``out_dir`` keeps its checkpoints: ``<out_dir>-checkpoints``."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + "-checkpoints")


@torch.no_grad()
def sft_loss(policy: HFPolicy, demos: list[Demonstration], *, mode: str = "score", batch_size: int = 32,
             bf16: bool | str = "auto", choice_rule: str = DEFAULT_CHOICE_RULE) -> float:
    """The mean SFT loss of ``demos`` under ``policy`` (no update): a validation loss."""
    from agentrl.learner import bf16_autocast_pays

    _check_mode(mode, bf16)
    model = policy.model
    device = next(model.parameters()).device
    autocast = bf16 is True or (bf16 == "auto" and bf16_autocast_pays(model))
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        for indices in _length_batches(demos, list(range(len(demos))), batch_size):
            batch = [demos[i] for i in indices]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
                total += float(_batch_loss(model, batch, mode, rule=choice_rule)) * len(batch)
    finally:
        model.train(was_training)
    return total / max(len(demos), 1)


def sft_from_expert(env_name: str, model: str, out_dir: str, *, mode: str = "score", think: bool | None = None,
                    tasks: int = 200, epochs: int = 3, lr: float = 1e-3, batch_size: int = 16, seed: int = 0,
                    env_args: dict[str, Any] | None = None, max_prompt_tokens: int = 2048,
                    bf16: bool | str = "auto", on_epoch: Callable[[int, float], None] | None = None,
                    checkpoint_every: int = 200) -> dict[str, Any]:
    """Collect demonstrations, fine-tune ``model`` on them and save the result to ``out_dir``.

    The demonstrations are rendered the way ``model`` is driven: its recommended agent settings
    (:func:`agentrl.models.recommended_agent_settings`, e.g. the embedded policy's short history and action memory,
    no ``<think>``), with ``think`` winning when given (no ``<think>`` when neither says). ``out_dir`` records them
    in its own ``agentrl.json``, so ``agentrl train`` and ``agentrl eval`` drive the fine-tuned model as it was
    trained. Training checkpoints go to :func:`checkpoint_dir_for` ``(out_dir)`` after every epoch and every
    ``checkpoint_every`` steps; run the same call again after an interruption and it resumes from the latest. The
    folder is removed once the model is saved."""
    _check_mode(mode, bf16)
    torch.manual_seed(seed)
    folder = resolve_model(model, Path(out_dir).parent / "models")
    given = {"mode": "generate" if mode == "generate" else "score", **({} if think is None else {"think": think})}
    settings = from_dict(AgentSection, {"think": False, **recommended_agent_settings(folder), **given}, "agent")
    policy = HFPolicy(folder, device="cpu")
    agent = ReActAgent(env_family=ReActAgent.family_for_env(env_name), think=settings.think,
                       history_length=settings.history_length, action_memory=settings.action_memory,
                       list_actions=settings.list_actions)
    start = time.perf_counter()
    demos = collect_demonstrations(env_name, policy, agent, tasks=tasks, env_args=env_args,
                                   max_prompt_tokens=max_prompt_tokens)
    collected = time.perf_counter()
    checkpoints = checkpoint_dir_for(out_dir)
    losses = sft(policy, demos, SFTConfig(mode=mode, choice_rule=settings.choice_rule, epochs=epochs, lr=lr,
                                          batch_size=batch_size, seed=seed, bf16=bf16,
                                          checkpoint_every=checkpoint_every),
                 on_epoch=on_epoch, checkpoint_dir=checkpoints)
    policy.save_pretrained(out_dir)
    record = {"agent": dataclasses.asdict(settings),
              "sft": {"env": env_name, "from": model, "mode": mode, "tasks": tasks, "demonstrations": len(demos),
                      "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed}}
    (Path(out_dir) / AGENT_SETTINGS_FILE).write_text(json.dumps(record, indent=1))
    shutil.rmtree(checkpoints, ignore_errors=True)
    return {"demonstrations": len(demos), "prompt_tokens": sum(len(d.prompt_ids) for d in demos), "losses": losses,
            "collect_s": collected - start,
            "train_s": time.perf_counter() - collected, "out_dir": str(out_dir)}
