"""The learner: the token-level PPO-clip loss of docs/spec/algorithms.md §1.4 and the optimizer loop around it.

One training row is one (trajectory, step) pair (docs/spec/algorithms.md §1.1): the step's prompt, the reply the policy sampled, the
log-probabilities it was sampled with, and the step's scalar advantage, which is broadcast to that reply's tokens
only (the prompt is never in the loss). :meth:`Learner.update` shuffles the rows into mini-batches; each
mini-batch is one AdamW step, computed in micro-batches with gradient accumulation.

Rows produced by admissible-action scoring (:meth:`agentrl.policy.HFPolicy.score_choices`) carry their candidate
list. For them the policy is the softmax over the candidates' sequence log-likelihoods, so each such row is a
single "token" whose log-probability is that of the chosen candidate: the ratio compares the same distribution
that was sampled from, and the entropy is that of the candidate distribution.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from agentrl.config import LearnerConfig
from agentrl.errors import ConfigError
from agentrl.hardware import bf16_support
from agentrl.policy import HFPolicy, choice_log_probs, token_log_probs
from agentrl.records import TrainingSample

__all__ = ["LOSS_STATS", "Learner", "LearnerConfig", "TrainingSample", "bf16_autocast_pays", "bf16_supported",
           "ppo_token_loss"]


# ----------------------------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------------------------

#: The statistics :func:`ppo_token_loss` returns.
LOSS_STATS = ("loss", "pg_loss", "kl", "entropy", "clip_frac", "dual_clip_frac", "approx_kl", "ratio_mean")


def ppo_token_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
                   advantages: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor | None = None, *,
                   clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float | None = 3.0,
                   kl_coef: float = 0.01, entropy_coef: float = 0.001) -> tuple[torch.Tensor, dict[str, float]]:
    """The token-level PPO-clip loss with dual-clip, low-variance KL and entropy bonus (docs/spec/algorithms.md §1.4).

    All tensors share one shape (for example ``(rows, tokens)``); ``advantages`` may also lack the last
    dimension, in which case each row's advantage is broadcast to its tokens. ``mask`` selects the response tokens.
    ``ref_logprobs=None`` drops the KL term, ``entropy=None`` the entropy bonus, ``dual_clip=None`` the dual clip.

    Returns the scalar loss (the token mean over the masked tokens) and float statistics: ``loss``, ``pg_loss``,
    ``kl``, ``entropy``, ``clip_frac`` (tokens where the clipped branch wins), ``dual_clip_frac`` (tokens where
    the dual clip wins), ``approx_kl`` (mean of ``log π_old − log π_θ``) and ``ratio_mean``.
    """
    if advantages.dim() == logprobs.dim() - 1:
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    keep = mask.bool()
    n_tokens = keep.sum().clamp(min=1)

    def token_mean(values: torch.Tensor) -> torch.Tensor:
        # tokmean: the mean over every response token of the batch (loss_agg_mode="token-mean")
        return torch.where(keep, values, torch.zeros_like(values)).sum() / n_tokens

    # ρ = exp(log πθ − log πold); the log-ratio is clamped to ±20 before exp, as verl does, to avoid inf.
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)

    # l_pg = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)

    # Dual clip: if A < 0, l_pg = min(l_pg, −A·c). It bounds the loss of a negative-advantage token whose ratio
    # has grown far above 1.
    if dual_clip is not None:
        loss_dual = -advantages * dual_clip
        dual_active = (advantages < 0) & (pg_losses > loss_dual)
        pg_losses = torch.where(advantages < 0, torch.minimum(pg_losses, loss_dual), pg_losses)
    else:
        dual_active = torch.zeros_like(keep)
    pg_loss = token_mean(pg_losses)

    # k3 = exp(log πref − log πθ) − (log πref − log πθ) − 1, clamped to [−10, 10]  ("low_var_kl")
    if ref_logprobs is not None:
        ref_log_ratio = torch.clamp(ref_logprobs - logprobs, min=-20.0, max=20.0)
        k3 = torch.clamp(torch.exp(ref_log_ratio) - ref_log_ratio - 1.0, min=-10.0, max=10.0)
        kl = token_mean(k3)
    else:
        kl = torch.zeros((), dtype=pg_loss.dtype, device=pg_loss.device)

    mean_entropy = token_mean(entropy) if entropy is not None else torch.zeros_like(kl)

    # loss = tokmean(l_pg) − 0.001·tokmean(H(πθ)) + β·tokmean(k3)
    loss = pg_loss - entropy_coef * mean_entropy + kl_coef * kl

    with torch.no_grad():
        stats = {
            "loss": loss.item(),
            "pg_loss": pg_loss.item(),
            "kl": kl.item(),
            "entropy": mean_entropy.item(),
            "clip_frac": token_mean((loss_clipped > loss_unclipped).float()).item(),
            "dual_clip_frac": token_mean(dual_active.float()).item(),
            "approx_kl": token_mean(old_logprobs - logprobs).item(),
            "ratio_mean": token_mean(ratio).item(),
        }
    return loss, stats


# ----------------------------------------------------------------------------------------------------------------
# Configuration and samples
# ----------------------------------------------------------------------------------------------------------------


def bf16_supported(device: torch.device | str) -> bool:
    """Whether bf16 autocast runs on ``device`` without casts back to fp32 in software (:func:`agentrl.hardware.bf16_support`)."""
    return bf16_support(str(torch.device(device))) is not None


#: Below this hidden size, bf16 autocast on a CPU costs more (casts) than it saves (matmuls). Measured on a 2-core
#: AVX512-BF16 CPU, one thread, a packed scoring forward+backward of 16 Crafting rows (~540 tokens each):
#: d=64/2 layers 0.57 s fp32 vs 0.81 s bf16; d=128/4 layers 1.57 s vs 0.86 s; d=256/4 layers 5.6 s vs 3.3 s.
CPU_BF16_MIN_HIDDEN = 128


def bf16_autocast_pays(model: torch.nn.Module) -> bool:
    """The ``bf16="auto"`` rule: native bf16 on the model's device, and on a CPU a model wide enough to gain."""
    device = next(model.parameters()).device
    if not bf16_supported(device):
        return False
    if device.type != "cpu":
        return True
    config = getattr(model.get_base_model() if hasattr(model, "get_base_model") else model, "config", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "d_model", None)
    return hidden is None or int(hidden) >= CPU_BF16_MIN_HIDDEN


# ----------------------------------------------------------------------------------------------------------------
# The learner
# ----------------------------------------------------------------------------------------------------------------


def _choice_key(sample: TrainingSample) -> tuple:
    return tuple(sample.prompt_ids), tuple(tuple(ids) for ids in sample.choice_ids or ()), sample.choice_rule



class Learner:
    """AdamW on the policy's trainable parameters with the docs/spec/algorithms.md §1.4 loss.

    The reference policy for the KL term is a frozen copy of the model as it is when the learner is built, or
    ``reference`` (a model folder or module) when given, or, when the policy carries a LoRA adapter, the same
    model with the adapter disabled (no copy). When resuming full fine-tuning from a checkpoint, pass the
    *original* model as ``reference``: the checkpointed weights are no longer the initial policy. The policy's
    model is updated in place, so the next generation uses the new weights.
    """

    def __init__(self, policy: HFPolicy, config: LearnerConfig | None = None, *,
                 reference: str | os.PathLike | torch.nn.Module | None = None) -> None:
        self.policy = policy
        self.config = config or LearnerConfig()
        self.model = policy.model
        self.device = next(self.model.parameters()).device
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ConfigError("the policy has no trainable parameters")
        low_precision = {p.dtype for p in self.parameters if p.dtype in (torch.float16, torch.bfloat16)}
        if low_precision:
            warnings.warn(f"training {sorted(map(str, low_precision))} weights: AdamW steps of lr "
                          f"{self.config.lr:g} are mostly lost to rounding; load float32 weights (HFPolicy "
                          "dtype='auto') and let bf16 autocast do the compute", stacklevel=2)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self.config.lr, betas=self.config.betas,
                                           eps=self.config.adam_eps, weight_decay=self.config.weight_decay)
        self.autocast = self.config.bf16 is True or (self.config.bf16 == "auto" and bf16_autocast_pays(self.model))
        self.recompute_old = self.config.recompute_old_logprobs is True or (
            self.config.recompute_old_logprobs == "auto" and self.autocast)
        self._reference_model: torch.nn.Module | None = None
        if reference is not None and policy.is_peft:
            raise ConfigError("with LoRA the reference policy is the base model with the adapter disabled; "
                              "do not pass `reference=`")
        if self.config.kl_coef > 0 and not policy.is_peft:
            self._reference_model = self._build_reference(reference)
        if self.config.gradient_checkpointing:
            # Non-reentrant checkpointing needs no input gradients, so it also works with frozen embeddings (LoRA).
            kwargs = {"use_reentrant": False}
            if hasattr(self.model, "activation_checkpointing_enable"):
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:  # older transformers know only the old name
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self._shuffle_rng = torch.Generator().manual_seed(self.config.seed)
        self.num_updates = 0
        self.optimizer_steps = 0

    def _build_reference(self, reference: str | os.PathLike | torch.nn.Module | None) -> torch.nn.Module:
        if reference is None:
            model = copy.deepcopy(self.model)
        elif isinstance(reference, torch.nn.Module):
            model = reference.to(self.device)
        else:
            dtype = next(self.model.parameters()).dtype
            model = HFPolicy(reference, self.policy.tokenizer, device=self.device, dtype=dtype).model
        return model.eval().requires_grad_(False)

    # -- log-probabilities -----------------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    @contextlib.contextmanager
    def _reference(self) -> Iterator[torch.nn.Module]:
        """The reference policy, as a module to run forward passes on (no gradients)."""
        if self.policy.is_peft:
            with self.model.disable_adapter():
                yield self.model
        elif self._reference_model is not None:
            yield self._reference_model
        else:
            raise RuntimeError("no reference policy (kl_coef is 0)")

    def _log_probs(self, model: torch.nn.Module, samples: Sequence[TrainingSample], *, with_entropy: bool = False,
                   entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Flat per-token log-probs (and entropies) of ``samples`` in their order, under ``model``.

        Token rows give one value per response token; scoring-mode rows one value each (the chosen candidate).
        """
        temperature = 1.0 if self.config.temperature is None else self.config.temperature
        pad = self.policy.pad_token_id
        token_rows = [i for i, s in enumerate(samples) if not s.is_choice]
        choice_rows = [i for i, s in enumerate(samples) if s.is_choice]
        per_row_logprobs: dict[int, torch.Tensor] = {}
        per_row_entropy: dict[int, torch.Tensor] = {}
        with self._autocast():
            if token_rows:
                # Identical (prompt, response) rows are computed once (see the scoring-mode case below).
                unique_tokens: dict[tuple, int] = {}
                slots = [unique_tokens.setdefault((tuple(samples[i].prompt_ids), tuple(samples[i].response_ids)),
                                                  len(unique_tokens)) for i in token_rows]
                first_of: dict[int, int] = {}
                for i, k in zip(token_rows, slots):
                    first_of.setdefault(k, i)
                order = [first_of[k] for k in range(len(unique_tokens))]
                logprobs, entropy, mask = token_log_probs(
                    model, [samples[i].prompt_ids for i in order], [samples[i].response_ids for i in order],
                    temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, pad_id=pad)
                for row, i in zip(slots, token_rows):
                    n = len(samples[i].response_ids)
                    per_row_logprobs[i] = logprobs[row, :n]
                    if entropy is not None:
                        per_row_entropy[i] = entropy[row, :n]
            if choice_rows:
                # Rows with the same prompt and candidates (every group member's first step, for instance) share
                # one computation: the same values, and the gradient of their sum is the same as computing each.
                unique: dict[tuple, int] = {}
                slot = [unique.setdefault(_choice_key(samples[i]), len(unique)) for i in choice_rows]
                firsts = {}
                for i, k in zip(choice_rows, slot):
                    firsts.setdefault(k, i)
                log_policy, _ = choice_log_probs(
                    model, [samples[firsts[k]].prompt_ids for k in range(len(unique))],
                    [samples[firsts[k]].choice_ids for k in range(len(unique))], temperature=temperature, pad_id=pad,
                    rule=[samples[firsts[k]].choice_rule for k in range(len(unique))])
                for k, i in zip(slot, choice_rows):
                    logp = log_policy[k]
                    per_row_logprobs[i] = logp[samples[i].choice_index].reshape(1)
                    if with_entropy:
                        # Entropy of the policy over the candidates: −Σ p·log p.
                        entropy = -(logp.exp() * logp).sum().reshape(1)
                        per_row_entropy[i] = entropy if entropy_grad else entropy.detach()
        flat_logprobs = torch.cat([per_row_logprobs[i] for i in range(len(samples))])
        flat_entropy = torch.cat([per_row_entropy[i] for i in range(len(samples))]) if with_entropy else None
        return flat_logprobs, flat_entropy

    @torch.no_grad()
    def compute_log_probs(self, samples: Sequence[TrainingSample], *, reference: bool = False) -> list[list[float]]:
        """Log-probs of each sample's response under the current (or the reference) policy, as the loss sees them."""
        results: list[list[float]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(samples), self.config.micro_batch_size):
                batch = samples[start:start + self.config.micro_batch_size]
                if reference:
                    with self._reference() as ref_model:
                        flat, _ = self._log_probs(ref_model, batch)
                else:
                    flat, _ = self._log_probs(self.model, batch)
                for chunk in torch.split(flat, [s.n_loss_tokens for s in batch]):
                    results.append(chunk.float().tolist())
        finally:
            self.model.train(was_training)
        return results

    # -- one update ------------------------------------------------------------------------------------------

    def _micro_batch_loss(self, samples: Sequence[TrainingSample],
                          old_logprobs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        config = self.config
        logprobs, entropy = self._log_probs(self.model, samples, with_entropy=True,
                                            entropy_grad=config.entropy_coef != 0)
        ref_logprobs = None
        if config.kl_coef > 0:
            with torch.no_grad(), self._reference() as ref_model:
                ref_logprobs, _ = self._log_probs(ref_model, samples)
        advantages = torch.cat([torch.full((s.n_loss_tokens,), float(s.advantage), dtype=torch.float32)
                                for s in samples]).to(self.device)
        mask = torch.ones_like(logprobs, dtype=torch.bool)
        return ppo_token_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, entropy,
                              clip_low=config.clip_low, clip_high=config.clip_high, dual_clip=config.dual_clip,
                              kl_coef=config.kl_coef, entropy_coef=config.entropy_coef)

    def update(self, samples: Sequence[TrainingSample]) -> dict[str, float]:
        """One PPO update on ``samples``; returns statistics averaged over the update.

        Rows are shuffled (seeded) into mini-batches of ``mini_batch_size``; each mini-batch is one optimizer step
        over micro-batches of ``micro_batch_size`` with gradient accumulation. A mini-batch whose loss or
        gradient norm is not finite makes no step and is counted in ``skipped_steps``.

        Statistics: the loss terms of :func:`ppo_token_loss` (token-weighted means), ``grad_norm`` (mean
        pre-clipping norm over the steps taken), ``lr``, ``n_tokens``, ``n_samples``, ``optimizer_steps`` and
        ``skipped_steps``.
        """
        config = self.config
        samples = list(samples)
        if not samples:
            raise ValueError("Learner.update needs at least one sample")
        for sample in samples:
            sample.validate()
        n_given = len(samples)
        if config.skip_zero_advantage:
            samples = [s for s in samples if s.advantage != 0.0]
            if not samples:
                return self._empty_update_stats(n_given)
        # The whole schedule first: epochs → mini-batches (optimizer steps) → micro-batches (row indices).
        schedule = [self._mini_batches(samples) for _ in range(config.ppo_epochs)]
        if self.recompute_old:
            # Same micro-batches as the first epoch, so that padding (and with it low-precision rounding) is
            # identical and the first step starts exactly at ratio 1.
            old_per_sample: list[torch.Tensor] = [torch.empty(0)] * len(samples)
            for micro in (m for mini in schedule[0] for m in mini):
                values = self.compute_log_probs([samples[i] for i in micro])
                for i, v in zip(micro, values):
                    old_per_sample[i] = torch.tensor(v, dtype=torch.float32)
        else:
            old_per_sample = [torch.tensor(s.old_logprobs, dtype=torch.float32) for s in samples]

        totals: dict[str, float] = {}
        weight_total = 0.0
        grad_norms: list[float] = []
        steps = skipped = 0
        was_training = self.model.training
        self.model.train()
        try:
            for epoch in schedule:
                for mini in epoch:
                    step_stats, grad_norm = self._optimizer_step(samples, old_per_sample, mini)
                    if step_stats is None:
                        skipped += 1
                        continue
                    steps += 1
                    grad_norms.append(grad_norm)
                    for key, (value, weight) in step_stats.items():
                        totals[key] = totals.get(key, 0.0) + value * weight
                    weight_total += step_stats["loss"][1]
        finally:
            self.model.train(was_training)
            self.optimizer.zero_grad(set_to_none=True)

        self.num_updates += 1
        self.optimizer_steps += steps
        stats = {key: value / weight_total for key, value in totals.items()} if weight_total else {}
        for key in LOSS_STATS:  # present even when every step was skipped
            stats.setdefault(key, float("nan"))
        stats.update({
            "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else float("nan"),
            "lr": float(self.optimizer.param_groups[0]["lr"]),
            "n_tokens": float(sum(s.n_loss_tokens for s in samples) * config.ppo_epochs),
            "n_samples": float(len(samples)),
            "zero_advantage_rows_skipped": float(n_given - len(samples)),
            "optimizer_steps": float(steps),
            "skipped_steps": float(skipped),
        })
        return stats

    def _empty_update_stats(self, n_given: int) -> dict[str, float]:
        """Statistics of an update that had nothing to learn from (every row's advantage was 0): no step, and
        zeros rather than NaN so that it is not mistaken for a diverged update (``n_samples`` 0 marks it)."""
        self.num_updates += 1
        stats = {key: 0.0 for key in LOSS_STATS}
        stats.update({"grad_norm": 0.0, "lr": float(self.optimizer.param_groups[0]["lr"]), "n_tokens": 0.0,
                      "n_samples": 0.0, "zero_advantage_rows_skipped": float(n_given), "optimizer_steps": 0.0,
                      "skipped_steps": 0.0})
        return stats

    def _mini_batches(self, samples: Sequence[TrainingSample]) -> list[list[list[int]]]:
        """One epoch: a (seeded) shuffle of the rows cut into mini-batches, each cut into micro-batches.

        Within a mini-batch the rows are grouped by :attr:`TrainingSample.width` wherever that leaves the step
        unchanged: a micro-batch is padded to its widest row (and a packed scoring row's attention grows with the
        square of its width), so mixing a long row with short ones costs the short ones its width. The rows that a
        shuffle would have put in a short last micro-batch stay there, and the full micro-batches are regrouped,
        so with the ``"mini_batch"`` token mean, or whenever every row has the same number of loss tokens (scoring
        mode: one each), the loss and gradient are those of the shuffled grouping up to float summation order.
        Free-generation rows of different lengths under ``"micro_batch"`` are left in shuffle order: there the
        grouping sets each token's weight.
        """
        config = self.config
        n_samples = len(samples)
        if config.shuffle:
            order = torch.randperm(n_samples, generator=self._shuffle_rng).tolist()
        else:
            order = list(range(n_samples))
        size = config.micro_batch_size
        schedule = []
        for start in range(0, n_samples, config.mini_batch_size):
            mini = order[start:start + config.mini_batch_size]
            full = len(mini) - len(mini) % size
            if config.token_mean_scope == "mini_batch" or len({samples[i].n_loss_tokens for i in mini}) == 1:
                mini = sorted(mini[:full], key=lambda i: samples[i].width) + mini[full:]
            schedule.append([mini[i:i + size] for i in range(0, len(mini), size)])
        return schedule

    def _optimizer_step(self, samples: list[TrainingSample], old_per_sample: list[torch.Tensor],
                        micro_batches: list[list[int]]) -> tuple[dict[str, tuple[float, float]] | None, float]:
        """Accumulate gradients over one mini-batch's micro-batches and step; ``(None, nan)`` when skipped."""
        config = self.config
        self.optimizer.zero_grad(set_to_none=True)
        mini_tokens = sum(samples[i].n_loss_tokens for micro in micro_batches for i in micro)
        sums = {key: 0.0 for key in LOSS_STATS}
        weight, finite = 0.0, True
        for micro in self._own_micro_batches(micro_batches):
            batch = [samples[i] for i in micro]
            old = torch.cat([old_per_sample[i] for i in micro]).to(self.device)
            loss, stats = self._micro_batch_loss(batch, old)
            if not torch.isfinite(loss):
                finite = False
                break
            micro_tokens = sum(s.n_loss_tokens for s in batch)
            if config.token_mean_scope == "mini_batch":
                scale = micro_tokens / mini_tokens
            else:  # verl: loss / gradient_accumulation
                scale = 1.0 / len(micro_batches)
            (loss * scale).backward()
            for key in LOSS_STATS:
                sums[key] += stats[key] * micro_tokens
            weight += micro_tokens
        finite, weight, sums = self._reduce_gradients(finite, weight, sums)
        if not finite or weight == 0:
            self.optimizer.zero_grad(set_to_none=True)
            return None, float("nan")
        grad_norm = self._clip_and_step()
        if grad_norm is None:
            return None, float("nan")
        return {key: (value / weight, weight) for key, value in sums.items()}, grad_norm

    def _own_micro_batches(self, micro_batches: list[list[int]]) -> list[list[int]]:
        """The micro-batches this process computes (all of them; a data-parallel learner takes its share)."""
        return micro_batches

    def _reduce_gradients(self, finite: bool, weight: float,
                          sums: dict[str, float]) -> tuple[bool, float, dict[str, float]]:
        """Combine the accumulated gradients and loss statistics across processes (none here) before the step."""
        return finite, weight, sums

    def _clip_and_step(self) -> float | None:
        """Clip the accumulated gradients and step; ``None`` (gradients dropped, no step) when their norm is not
        finite. Returns the pre-clipping norm."""
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, max_norm))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer.step()
        return grad_norm

    # -- checkpointing ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state, shuffling RNG and counters: with the model weights, enough for an exact resume.

        Only tensors, numbers and plain containers, so ``torch.load(..., weights_only=True)`` reads it back.
        """
        return {
            "optimizer": self.optimizer.state_dict(),
            "shuffle_rng": self._shuffle_rng.get_state(),
            "num_updates": self.num_updates,
            "optimizer_steps": self.optimizer_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self._shuffle_rng.set_state(state["shuffle_rng"])
        self.num_updates = int(state.get("num_updates", 0))
        self.optimizer_steps = int(state.get("optimizer_steps", 0))
