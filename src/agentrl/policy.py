"""The policy: a causal language model that turns prompts into sampled replies and their log-probabilities.

Data flows env → agent → **policy** → trajectory → algorithm → learner. The policy knows token ids and text only;
it never imports environments or agents.

:class:`HFPolicy` is the default backend (Hugging Face ``transformers``). It offers two ways to act:

* :meth:`HFPolicy.generate` — free generation. The prompts are encoded (on CPU each distinct prompt on its own,
  without padding, and a prefix that several share once: :data:`PREFILL_MODES`), their KV caches laid out
  left-padded side by side in a preallocated cache, and the batch is decoded token by token under
  ``torch.inference_mode``. Each reply comes back as the sampled token ids (kept exactly as sampled; the learner
  trains on these ids, never on a re-tokenization of the text), the decoded text and one log-probability per
  token.
* :meth:`HFPolicy.score_choices` — admissible-action scoring. For each prompt, every candidate reply string is
  scored by its sequence log-likelihood in a forward pass (each prompt is packed with all its candidates into one
  row under a block attention mask, so the prompt is encoded once; one prompt per forward on CPU, where that is
  fastest, and identical prompts once); the policy is the softmax of these log-likelihoods divided by a
  temperature, and an index is sampled from it. The learner recomputes exactly this distribution with the current
  weights (:func:`choice_log_probs`), so the PPO ratio compares like with like.

Which log-probability is reported
    For generation with temperature ``T > 0`` every token's log-probability is ``log_softmax(logits / T)`` at the
    sampled id: the temperature-adjusted distribution the token was sampled from. With the default
    ``top_p = 1`` and ``top_k = -1`` this is exactly the sampling distribution. With nucleus or top-k truncation
    the token is drawn from the truncated, renormalised distribution, but the reported value stays the
    untruncated ``log_softmax(logits / T)``, as in verl (which recomputes old log-probs with a plain forward at
    temperature ``T``): that is the quantity the learner can recompute, so the ratio starts at 1. With ``T = 0``
    (greedy) the reported value is the plain ``log_softmax(logits)``. The learner recomputes log-probs at
    ``LearnerConfig.temperature``, which must therefore equal the rollout temperature.

Weights are shared, not copied
    The learner optimises ``policy.model`` in place, and generation runs on that same module, so every optimizer
    step is visible to the next :meth:`~HFPolicy.generate` call with no synchronisation. A backend that keeps its
    own copy of the weights (vLLM) implements the same interface and receives updates through
    :meth:`HFPolicy.state_dict_for_inference` / :meth:`HFPolicy.load_weights`.

CPU threads
    See :func:`configure_cpu_threads`; the library never changes the global thread count by itself.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl.errors import ConfigError, MissingDataError

__all__ = [
    "PREFILL_MODES",
    "Choice",
    "Generation",
    "GenerationConfig",
    "HFPolicy",
    "LoraSettings",
    "choice_log_probs",
    "choice_sequence_logliks",
    "configure_cpu_threads",
    "default_cpu_threads",
    "token_log_probs",
]


# ----------------------------------------------------------------------------------------------------------------
# Configuration and results
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class GenerationConfig:
    """Sampling parameters for one turn. Defaults follow algorithms.md §1.6 (rollout)."""

    max_new_tokens: int = 512
    """Per-turn budget. A reply that reaches it without an end-of-turn token is flagged ``truncated``."""
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""
    max_prompt_tokens: int = 2048
    """Longer prompts keep their last ``max_prompt_tokens`` tokens and are flagged ``prompt_truncated``."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a reply, besides the tokenizer's and the model's end-of-sequence ids."""
    batch_size: int | None = None
    """Most prompts decoded together; ``None`` decodes all at once. Chunks group prompts of similar length."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ConfigError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 or None, got {self.batch_size}")
        self.stop_token_ids = tuple(int(i) for i in self.stop_token_ids)


@dataclass
class Generation:
    """One sampled reply."""

    prompt_ids: list[int]
    """The prompt the model actually saw (after left truncation)."""
    response_ids: list[int]
    """Sampled ids, kept as sampled (the end-of-turn token included when one was produced)."""
    text: str
    """``response_ids`` decoded with special tokens skipped."""
    logprobs: list[float]
    """One per response token: ``log_softmax(logits / temperature)`` at the sampled id (module docstring)."""
    truncated: bool
    """The reply hit ``max_new_tokens`` without an end-of-turn token."""
    prompt_truncated: bool = False
    """The prompt was longer than ``max_prompt_tokens`` and lost its beginning."""


@dataclass
class Choice:
    """The outcome of scoring one prompt's candidate replies (:meth:`HFPolicy.score_choices`)."""

    index: int
    """The chosen candidate."""
    text: str
    """The chosen candidate string."""
    response_ids: list[int]
    """The chosen candidate's token ids (``choice_ids[index]``)."""
    logprob: float
    """``log softmax(seq_logliks / temperature)[index]``: the log-probability with which it was chosen."""
    choice_ids: list[list[int]]
    """Every candidate's token ids, in order; the learner recomputes the same distribution from these."""
    probs: list[float]
    """The policy over the candidates (sums to 1)."""
    seq_logliks: list[float]
    """Each candidate's sequence log-likelihood under the model (temperature 1)."""
    prompt_ids: list[int] = field(default_factory=list)


@dataclass
class LoraSettings:
    """LoRA through ``peft``. The reference policy of the learner is then the base model with the adapter off."""

    r: int = 32
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"
    """Module names to adapt, or ``"all-linear"`` (every linear layer except the output head)."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ConfigError(f"LoRA rank r must be >= 1, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not isinstance(self.target_modules, str):
            self.target_modules = tuple(self.target_modules)

    def to_peft_config(self):
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(task_type="CAUSAL_LM", r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=targets)


# ----------------------------------------------------------------------------------------------------------------
# Threads
# ----------------------------------------------------------------------------------------------------------------


def default_cpu_threads(env_workers: int = 0, cores: int | None = None) -> int:
    """Intra-op threads for a model with ``env_workers`` environment processes beside it on ``cores`` cores
    (default: this machine's): 1 when env workers share the cores or there are 2 cores or fewer, else all cores.

    The models.md threading trap: on 2 cores, 2 threads ran a forward pass 3-4x slower than 1 as soon as anything
    else (an env worker, a second evaluation) took a core. The trainer and ``agentrl eval`` both follow this rule.
    """
    cores = cores or os.cpu_count() or 1
    return 1 if env_workers > 0 or cores <= 2 else cores


def configure_cpu_threads(n: int | None) -> int:
    """Set PyTorch's intra-op CPU threads to ``n`` (``None`` leaves it alone); returns the previous count.

    The trap (docs: models.md, "CPU threading trap"): on a machine with few cores, PyTorch's default of one
    OpenMP thread per core makes a forward pass about 10× slower as soon as another process (an environment
    worker) takes a core, because the OpenMP threads spin-wait on each other. When environments or other jobs run
    beside the model, use 1 thread, or start the process with ``GOMP_SPINCOUNT=0`` (an environment variable read
    when the OpenMP runtime starts, so it cannot be set from here). Measure on the machine. The library never
    calls this by itself; the trainer and ``agentrl eval`` do (:func:`default_cpu_threads`).
    """
    previous = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ConfigError(f"the number of CPU threads must be >= 1, got {n}")
        torch.set_num_threads(int(n))
    return previous


# ----------------------------------------------------------------------------------------------------------------
# Model plumbing shared with the learner
# ----------------------------------------------------------------------------------------------------------------


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _forward_params(model: torch.nn.Module) -> frozenset[str]:
    cached = getattr(model, "_agentrl_forward_params", None)
    if cached is None:
        cached = frozenset(inspect.signature(_unwrapped(model).forward).parameters)
        try:
            model._agentrl_forward_params = cached
        except AttributeError:  # pragma: no cover - exotic module types
            pass
    return cached


def _forward(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             position_ids: torch.Tensor, cache: Any = None, logits_to_keep: int = 0,
             use_cache: bool = False) -> tuple[torch.Tensor, Any]:
    """One causal-LM forward; returns (logits, cache or None). Works with transformers 4.5x and 5.x."""
    params = _forward_params(model)
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask,
                              "position_ids": position_ids, "use_cache": use_cache or cache is not None}
    if cache is not None:
        kwargs["cache" if "cache" in params else "past_key_values"] = cache
    if logits_to_keep:
        if "logits_to_keep" in params:
            kwargs["logits_to_keep"] = logits_to_keep
        elif "num_logits_to_keep" in params:
            kwargs["num_logits_to_keep"] = logits_to_keep
    out = model(**kwargs)
    logits = out.logits
    if logits_to_keep and logits.shape[1] > logits_to_keep:
        logits = logits[:, -logits_to_keep:]
    # transformers 5.2x renamed the output's past_key_values to cache (the old name still works, with a warning).
    fields = getattr(out, "__dataclass_fields__", {})
    return logits, getattr(out, "cache" if "cache" in fields else "past_key_values", None)


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask), both (batch, max_len), sequences aligned to the right edge."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq):] = torch.as_tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


def _right_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real token (left padding gets 0)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(softmax(logits)) over the last dimension: logsumexp(z) − Σ softmax(z)·z (as verl computes it)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def _pad_id(model: torch.nn.Module) -> int:
    config = _unwrapped(model).config
    for value in (getattr(config, "pad_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def token_log_probs(model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                    *, temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = True,
                    pad_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Per-token log-probabilities of ``responses`` given ``prompts`` in one forward (no ``no_grad`` here).

    Layout: prompts left-padded, responses right-padded after them, so the logits needed (the last
    ``R + 1`` positions) form one slice. Returns ``(logprobs, entropy, mask)``, each ``(batch, R)`` with
    ``R = max response length``; ``logprobs = log_softmax(logits / temperature)`` at the response ids (a
    temperature of 0 is read as 1), and ``entropy`` is the entropy of that same distribution (``None`` unless
    ``with_entropy``; computed without a graph when ``entropy_grad`` is false).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if any(len(r) == 0 for r in responses):
        raise ValueError("every response needs at least one token")
    device = next(model.parameters()).device
    pad = _pad_id(model) if pad_id is None else pad_id
    prompt_ids, prompt_mask = _left_pad(prompts, pad, device)
    response_ids, response_mask = _right_pad(responses, pad, device)
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    width = response_ids.shape[1]
    logits, _ = _forward(model, input_ids, attention_mask, _positions(attention_mask), logits_to_keep=width + 1)
    # The logit at position i predicts token i + 1: drop the last one.
    logits = logits[:, :-1].float()
    if temperature > 0:
        logits = logits / temperature
    # log p(token) = z_token − logsumexp(z): avoids materialising (and saving for backward) a full log_softmax.
    logprobs = logits.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        if entropy_grad:
            entropy = _entropy(logits)
        else:
            with torch.no_grad():
                entropy = _entropy(logits.detach())
    mask = response_mask.to(logprobs.dtype)
    return logprobs * mask, (entropy * mask if entropy is not None else None), mask


def choice_sequence_logliks(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                            choices: Sequence[Sequence[Sequence[int]]], *, pad_id: int | None = None,
                            method: str = "auto") -> list[torch.Tensor]:
    """Sequence log-likelihood of each candidate continuation of each prompt (temperature 1).

    Each prompt is encoded once, however many candidates it has. Two ways, the same numbers:

    * ``"packed"``: one forward pass. Each prompt and all its candidates form one row
      ``[prompt | cand 1 | cand 2 | ...]`` with a block attention mask (a candidate sees the prompt and its own
      earlier tokens, never another candidate) and position ids that restart after the prompt for every
      candidate. Needs an attention implementation that accepts a custom 4D mask (``sdpa`` or ``eager``, with
      transformers 5).
    * ``"shared_cache"``: two passes. The prompts are encoded into a KV cache whose rows are repeated for each
      candidate, then all candidates run on top. Works with any cache-capable model, but copies the cache.

    ``"auto"`` picks ``"packed"`` where supported. Works with autograd (the learner uses it with gradients).
    Returns one tensor ``(n_candidates,)`` per prompt.
    """
    if len(prompts) != len(choices):
        raise ValueError(f"{len(prompts)} prompts but {len(choices)} candidate lists")
    if any(len(c) == 0 for c in choices):
        raise ValueError("every prompt needs at least one candidate")
    if any(len(ids) == 0 for cands in choices for ids in cands):
        raise ValueError("every candidate needs at least one token")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("scoring candidates needs a non-empty prompt")
    if method not in ("auto", "packed", "shared_cache"):
        raise ValueError(f"unknown scoring method {method!r}; use 'auto', 'packed' or 'shared_cache'")
    pad = _pad_id(model) if pad_id is None else pad_id
    if method == "packed" or (method == "auto" and _accepts_custom_4d_mask(model)):
        return _packed_choice_logliks(model, prompts, choices, pad)[0]
    return _shared_cache_choice_logliks(model, prompts, choices, pad)


def choice_and_prompt_logliks(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                              choices: Sequence[Sequence[Sequence[int]]], *, pad_id: int | None = None
                              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """:func:`choice_sequence_logliks` (packed) plus, from the same forward pass, the log-likelihood of each prompt's
    own tokens 2..n given the tokens before them: one ``(len(prompt) - 1,)`` tensor per prompt. SFT's prompt loss
    (:func:`agentrl.sft.sft`, ``prompt_loss_weight``) is their mean negative."""
    if not _accepts_custom_4d_mask(model):
        raise ConfigError("prompt log-likelihoods need the packed scoring pass: transformers >= 5 and an 'sdpa' or "
                           "'eager' attention implementation")
    return _packed_choice_logliks(model, prompts, choices, _pad_id(model) if pad_id is None else pad_id,
                                  with_prompts=True)


def _accepts_custom_4d_mask(model: torch.nn.Module) -> bool:
    import transformers

    implementation = getattr(_unwrapped(model).config, "_attn_implementation", None)
    return int(transformers.__version__.split(".")[0]) >= 5 and implementation in ("sdpa", "eager")


def _packed_choice_logliks(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                           choices: Sequence[Sequence[Sequence[int]]], pad: int, with_prompts: bool = False
                           ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    device = next(model.parameters()).device
    rows, segments, positions = [], [], []
    for prompt, cands in zip(prompts, choices):
        ids, seg, pos = list(prompt), [0] * len(prompt), list(range(len(prompt)))
        for j, cand in enumerate(cands, start=1):
            ids += cand
            seg += [j] * len(cand)
            pos += range(len(prompt), len(prompt) + len(cand))
        rows.append(ids)
        segments.append(seg)
        positions.append(pos)
    width = max(len(r) for r in rows)
    # Left padding: every row's candidate block ends at the right edge, so one logits slice covers them all.
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    segment = torch.tensor([[-1] * (width - len(s)) + s for s in segments], device=device)
    position_ids = torch.tensor([[0] * (width - len(p)) + p for p in positions], device=device)

    index = torch.arange(width, device=device)
    query_seg, key_seg = segment[:, :, None], segment[:, None, :]
    allowed = (index[None, :] <= index[:, None]) & (key_seg >= 0) & ((key_seg == 0) | (key_seg == query_seg))
    allowed |= torch.eye(width, dtype=torch.bool, device=device)  # padding attends to itself: no empty rows
    mask = allowed[:, None]
    if getattr(_unwrapped(model).config, "_attn_implementation", None) == "eager":
        mask = torch.zeros(mask.shape, dtype=torch.float32, device=device).masked_fill(
            ~mask, torch.finfo(torch.float32).min)

    block = [sum(len(c) for c in cands) for cands in choices]
    keep = width if with_prompts else max(block) + 1
    logits, _ = _forward(model, input_ids, mask, position_ids, logits_to_keep=keep)
    # Kept slot of absolute position a is a − (width − keep). For each candidate token, the slot predicting it.
    row_index, slot_index, targets, owner = [], [], [], []
    candidate = 0
    for row, cands in enumerate(choices):
        start = width - block[row]  # absolute position of the first candidate token
        offset = 0
        for cand in cands:
            for t, token in enumerate(cand):
                predictor = start - 1 if t == 0 else start + offset + t - 1
                row_index.append(row)
                slot_index.append(predictor - (width - keep))
                targets.append(token)
                owner.append(candidate)
            offset += len(cand)
            candidate += 1
    selected = logits[torch.tensor(row_index, device=device), torch.tensor(slot_index, device=device)].float()
    token_logprobs = torch.log_softmax(selected, dim=-1).gather(
        -1, torch.tensor(targets, device=device)[:, None]).squeeze(-1)
    seq_logliks = torch.zeros(candidate, dtype=token_logprobs.dtype, device=device).index_add(
        0, torch.tensor(owner, device=device), token_logprobs)
    prompt_logliks = []
    if with_prompts:  # every slot is kept: slot = absolute position; prompt token i is predicted at its position - 1
        for row, prompt in enumerate(prompts):
            start = width - block[row] - len(prompt)
            predicted = torch.log_softmax(logits[row, start:start + len(prompt) - 1].float(), dim=-1)
            prompt_logliks.append(predicted.gather(
                -1, torch.tensor(list(prompt[1:]), device=device)[:, None]).squeeze(-1))
    return list(torch.split(seq_logliks, [len(c) for c in choices])), prompt_logliks


def _shared_cache_choice_logliks(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                                 choices: Sequence[Sequence[Sequence[int]]], pad: int) -> list[torch.Tensor]:
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = _left_pad(prompts, pad, device)
    prompt_positions = _positions(prompt_mask)
    last_logits, cache = _forward(model, prompt_ids, prompt_mask, prompt_positions, logits_to_keep=1,
                                  use_cache=True)
    first_token_logprobs = torch.log_softmax(last_logits[:, -1].float(), dim=-1)  # predicts candidate token 0

    counts = torch.tensor([len(c) for c in choices], device=device)
    owner = torch.repeat_interleave(torch.arange(len(prompts), device=device), counts)
    flat = [list(ids) for cands in choices for ids in cands]
    cand_ids, cand_mask = _right_pad(flat, pad, device)

    token_logprobs = first_token_logprobs[owner].gather(-1, cand_ids[:, :1])  # (N, 1)
    if cand_ids.shape[1] > 1:
        cache.batch_select_indices(owner)
        attention_mask = torch.cat([prompt_mask[owner], cand_mask], dim=1)
        positions = prompt_positions[owner, -1:] + 1 + torch.arange(cand_ids.shape[1], device=device)
        # Feed all candidate tokens but the last: position j predicts token j + 1.
        logits, _ = _forward(model, cand_ids[:, :-1], attention_mask[:, :-1], positions[:, :-1], cache=cache)
        rest = torch.log_softmax(logits.float(), dim=-1).gather(-1, cand_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        token_logprobs = torch.cat([token_logprobs, rest], dim=1)
    seq_logliks = (token_logprobs * cand_mask.to(token_logprobs.dtype)).sum(dim=1)
    return list(torch.split(seq_logliks, counts.tolist()))


def choice_log_probs(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                     choices: Sequence[Sequence[Sequence[int]]], *, temperature: float = 1.0,
                     pad_id: int | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The scoring-mode policy: ``log_softmax(seq_logliks / temperature)`` over each prompt's candidates.

    Returns ``(log_policy, seq_logliks)``, one ``(n_candidates,)`` tensor per prompt in each list. A temperature
    of 0 is read as 1 (greedy selection reports the untempered distribution).
    """
    seq_logliks = choice_sequence_logliks(model, prompts, choices, pad_id=pad_id)
    scale = temperature if temperature > 0 else 1.0
    return [torch.log_softmax(s / scale, dim=-1) for s in seq_logliks], seq_logliks


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k and outside the nucleus (smallest set with mass >= top_p) to -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p  # the first token is never dropped
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


# ----------------------------------------------------------------------------------------------------------------
# Prefill and KV cache for generation
# ----------------------------------------------------------------------------------------------------------------

PREFILL_MODES = ("auto", "tree", "padded")
"""How :meth:`HFPolicy.generate` encodes a batch of prompts (``HFPolicy(prefill=...)``):

* ``"tree"``: each distinct prompt is encoded on its own, without padding (so attention keeps its causal fast
  path), and a segment that several prompts share (a group's identical first-step prompt, a common instruction
  block, a shared history) is encoded once, through a prefix tree of the prompts. The caches are then laid out
  left-padded side by side and only the decoding steps are batched. Best where one forward is compute-bound (CPU).
* ``"padded"``: one forward over the left-padded batch (fewer, larger kernels: best on a GPU).
* ``"auto"``: ``"tree"`` on CPU, ``"padded"`` elsewhere.

Both give the same log-probabilities up to float rounding (the test suite checks them against a full forward).
"""

#: A segment shared by k prompts becomes its own forward pass when it saves at least this many token encodings,
#: (k - 1) * length: a forward pass has a fixed cost (about 2 ms for a small model on one CPU thread).
_MIN_SHARED_TOKENS = 32


def _plain_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each layer's (keys, values), ``(batch, heads, length, head_dim)``, when ``cache`` is a transformers cache made
    of plain full-attention layers (``DynamicLayer``, transformers >= 4.56); else None (sliding windows, linear
    attention, older transformers: the caller falls back to the padded path)."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # transformers < 4.56
        return None
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return None
    return [(layer.keys, layer.values) for layer in layers]


def _cache_holding(kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A ``DynamicCache`` over these tensors, not copied: a forward on it concatenates into new tensors and leaves
    them untouched, so one prefix can be continued several times."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = []
    for keys, values in kv:
        layer = DynamicLayer()
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    return cache


_PREALLOCATED_LAYER: type | None = None


def _preallocated_layer_class() -> type:
    """``DynamicLayer`` with preallocated room (built on first use: transformers is imported lazily)."""
    global _PREALLOCATED_LAYER
    if _PREALLOCATED_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class PreallocatedLayer(DynamicLayer):
            """Keys and values in buffers with room for the whole reply: ``update`` writes the new positions in
            place and returns a view, where ``DynamicLayer`` concatenates, i.e. copies the whole cache on every
            decoding step (most of a small model's step time at batch 16 and 600 positions)."""

            def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
                super().__init__()
                self.device = keys.device
                self.is_initialized = True
                self._buffers = (keys, values)
                self._length = length
                self.keys, self.values = keys[:, :, :length], values[:, :, :length]

            def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                       **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
                keys, values = self._buffers
                start, end = self._length, self._length + key_states.shape[-2]
                if end > keys.shape[-2]:  # out of room (not reached by generate): grow
                    room = max(end, 2 * keys.shape[-2])
                    keys = torch.cat([keys, keys.new_zeros((*keys.shape[:2], room - keys.shape[-2], keys.shape[-1]))], 2)
                    values = torch.cat([values, values.new_zeros(
                        (*values.shape[:2], room - values.shape[-2], values.shape[-1]))], 2)
                    self._buffers = (keys, values)
                keys[:, :, start:end] = key_states
                values[:, :, start:end] = value_states
                self._length = end
                self.keys, self.values = keys[:, :, :end], values[:, :, :end]
                return self.keys, self.values

            def _reindex(self, index: torch.Tensor) -> None:
                keys, values = self._buffers
                self._buffers = (keys[index], values[index])
                self.keys, self.values = self._buffers[0][:, :, :self._length], self._buffers[1][:, :, :self._length]

            def batch_select_indices(self, indices: torch.Tensor) -> None:
                self._reindex(indices)

            def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
                self._reindex(beam_idx)

            def batch_repeat_interleave(self, repeats: int) -> None:
                self._reindex(torch.arange(self._buffers[0].shape[0], device=self.device).repeat_interleave(repeats))

            def crop(self, tokens_to_remove: int) -> None:
                raise NotImplementedError("agentrl's preallocated generation cache cannot be cropped")

        _PREALLOCATED_LAYER = PreallocatedLayer
    return _PREALLOCATED_LAYER


def _preallocated_cache(buffers: Sequence[tuple[torch.Tensor, torch.Tensor]], length: int) -> Any:
    from transformers.cache_utils import DynamicCache

    layer_class = _preallocated_layer_class()
    cache = DynamicCache()
    cache.layers = [layer_class(keys, values, length) for keys, values in buffers]
    return cache


def _common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    n = start
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _tree_prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], room: int,
                  min_shared: int = _MIN_SHARED_TOKENS) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor] | None:
    """Encode ``prompts`` through a prefix tree (``PREFILL_MODES``, ``"tree"``); None if the model's cache is not
    made of plain layers (then nothing was computed beyond one forward pass).

    Returns ``(last_logits, cache, attention_mask, next_positions)`` for decoding: the last prompt position's
    logits ``(batch, vocab)`` in float32; a preallocated cache with the prompts left-padded to the longest and
    ``room`` more positions; the attention mask ``(batch, width + room)`` (1 on prompt tokens; the decoder sets the
    later columns); each row's next position id ``(batch, 1)``.
    """
    device = next(model.parameters()).device
    batch, width = len(prompts), max(len(p) for p in prompts)
    rows_of: dict[tuple[int, ...], list[int]] = {}
    for row, prompt in enumerate(prompts):
        rows_of.setdefault(tuple(int(t) for t in prompt), []).append(row)
    unique = sorted(rows_of)  # lexicographic: prompts sharing a prefix are contiguous, a prefix before its extensions

    state: dict[str, Any] = {}

    def encode(prompt: tuple[int, ...], start: int, end: int, kv: Any) -> tuple[Any, torch.Tensor] | None:
        ids = torch.tensor([prompt[start:end]], dtype=torch.long, device=device)
        positions = torch.arange(start, end, dtype=torch.long, device=device)[None]
        logits, cache = _forward(model, ids, None, positions, cache=None if kv is None else _cache_holding(kv),
                                 logits_to_keep=1, use_cache=True)
        new_kv = _plain_kv(cache)
        if new_kv is None:
            return None
        return new_kv, logits[0, -1].float()

    def emit(prompt: tuple[int, ...], kv: Any, logits: torch.Tensor) -> None:
        if "buffers" not in state:
            state["buffers"] = [(k.new_zeros((batch, k.shape[1], width + room, k.shape[3])),
                                 v.new_zeros((batch, v.shape[1], width + room, v.shape[3]))) for k, v in kv]
            state["logits"] = logits.new_zeros((batch, logits.shape[-1]))
        n = len(prompt)
        for row in rows_of[prompt]:
            for (keys, values), (k, v) in zip(state["buffers"], kv):
                keys[row, :, width - n:width] = k[0]
                values[row, :, width - n:width] = v[0]
            state["logits"][row] = logits

    # Depth-first over the tree: (lo, hi, depth, kv, logits): unique[lo:hi] share their first `depth` tokens,
    # whose cache is kv (None at the root) and whose last position's logits are `logits`.
    stack: list[tuple[int, int, int, Any, Any]] = [(0, len(unique), 0, None, None)]
    while stack:
        lo, hi, depth, kv, logits = stack.pop()
        while lo < hi and len(unique[lo]) == depth:  # a prompt that ends here (sorted first)
            emit(unique[lo], kv, logits)
            lo += 1
        if lo == hi:
            continue
        if hi - lo == 1:  # a leaf: the rest of one prompt
            prompt = unique[lo]
            encoded = encode(prompt, depth, len(prompt), kv)
            if encoded is None:
                return None
            emit(prompt, *encoded)
            continue
        shared = _common_prefix(unique[lo], unique[hi - 1], depth)  # = the range's common prefix (sorted)
        if (hi - lo - 1) * (shared - depth) >= min_shared:
            encoded = encode(unique[lo], depth, shared, kv)
            if encoded is None:
                return None
            stack.append((lo, hi, shared, *encoded))
            continue
        # Too little in common: split the range by the token after the common prefix (a prompt ending there goes
        # alone); each part then looks for its own longer common prefix from `depth`.
        parts: list[tuple[int, int]] = []
        start = lo
        for i in range(lo + 1, hi + 1):
            if i == hi or _branch(unique[i], shared) != _branch(unique[start], shared):
                parts.append((start, i))
                start = i
        for part_lo, part_hi in reversed(parts):
            stack.append((part_lo, part_hi, depth, kv, logits))

    mask = torch.zeros((batch, width + room), dtype=torch.long, device=device)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    mask[:, :width] = (torch.arange(width, device=device)[None] >= width - lengths[:, None]).long()
    return state["logits"], _preallocated_cache(state["buffers"], width), mask, lengths[:, None]


def _branch(prompt: Sequence[int], at: int) -> int:
    """The token at position ``at``, or -1 where the prompt ends before it."""
    return int(prompt[at]) if at < len(prompt) else -1


def _padded_prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], room: int,
                    pad_id: int) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """One forward over the left-padded batch (``PREFILL_MODES``, ``"padded"``); returns as :func:`_tree_prefill`.
    The cache is moved into a preallocated one where it is made of plain layers."""
    device = next(model.parameters()).device
    input_ids, attention_mask = _left_pad(prompts, pad_id, device)
    positions = _positions(attention_mask)
    logits, cache = _forward(model, input_ids, attention_mask, positions, logits_to_keep=1, use_cache=True)
    width = input_ids.shape[1]
    kv = _plain_kv(cache)
    if kv is not None:
        buffers = []
        for k, v in kv:
            keys = k.new_zeros((*k.shape[:2], width + room, k.shape[3]))
            values = v.new_zeros((*v.shape[:2], width + room, v.shape[3]))
            keys[:, :, :width], values[:, :, :width] = k, v
            buffers.append((keys, values))
        cache = _preallocated_cache(buffers, width)
    mask = torch.cat([attention_mask, attention_mask.new_zeros((attention_mask.shape[0], room))], dim=1)
    return logits[:, -1].float(), cache, mask, positions[:, -1:] + 1


# ----------------------------------------------------------------------------------------------------------------
# The Hugging Face policy
# ----------------------------------------------------------------------------------------------------------------

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        # Master weights stay in float32: AdamW steps of lr 1e-6 vanish in bf16 weights. Compute can still run in
        # bf16 through the learner's autocast.
        return torch.float32
    if dtype == "checkpoint":
        return "auto"  # transformers' meaning: the dtype stored in the checkpoint
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ConfigError(f"unknown dtype {dtype!r}; use 'auto', 'checkpoint', {', '.join(_DTYPES)} or a torch.dtype")


def _resolve_device(device: str | torch.device) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _dtype_kwarg() -> str:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """No per-tensor "Loading weights" bar: the trainer owns the terminal."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


_MODEL_HINT = (
    "Pass `model=` a local folder written by `save_pretrained` (config.json plus weights), a PEFT adapter folder, "
    "or the name of a model already in the local Hugging Face cache; agentrl never downloads models at run time."
)


class HFPolicy:
    """A Hugging Face causal LM as a policy (see the module docstring for the log-probability convention).

    ``model`` is a local folder, a model name already in the local Hugging Face cache, a PEFT adapter folder
    (its base model is read from ``adapter_config.json``; pass ``base_model=`` to override), or a loaded
    ``PreTrainedModel`` (then ``tokenizer`` is required). Loading never uses the network (``local_files_only``).
    ``dtype="auto"`` loads float32 master weights; ``"checkpoint"`` keeps the checkpoint's dtype. ``lora`` wraps
    the model in a fresh ``peft`` LoRA adapter; only the adapter is then trainable. ``prefill`` chooses how
    :meth:`generate` encodes its prompts (:data:`PREFILL_MODES`; ``"auto"``: a prefix tree without padding on CPU,
    one padded batch elsewhere).
    """

    def __init__(self, model: str | os.PathLike | torch.nn.Module, tokenizer: Any = None, *,
                 device: str | torch.device = "cpu", dtype: str | torch.dtype = "auto",
                 lora: LoraSettings | None = None, trust_remote_code: bool = False,
                 base_model: str | os.PathLike | None = None, prefill: str = "auto") -> None:
        if prefill not in PREFILL_MODES:
            raise ConfigError(f"unknown prefill mode {prefill!r}; use one of {', '.join(PREFILL_MODES)}")
        self.prefill = prefill
        self._tree_prefill_supported: bool | None = None
        self.device = _resolve_device(device)
        torch_dtype = _resolve_dtype(dtype)
        if isinstance(model, torch.nn.Module):
            if tokenizer is None:
                raise ConfigError("HFPolicy was given a model object but no tokenizer; pass `tokenizer=`")
            self.name_or_path = str(getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__)
            if dtype != "auto" and isinstance(torch_dtype, torch.dtype):
                model = model.to(torch_dtype)
            loaded = model.to(self.device)
        else:
            self.name_or_path = str(model)
            loaded, tokenizer = self._load(str(model), tokenizer, torch_dtype, trust_remote_code, base_model)
        if lora is not None:
            if hasattr(loaded, "peft_config"):
                raise ConfigError("the model already carries a PEFT adapter; do not pass `lora=` as well")
            from peft import get_peft_model

            with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias; not actionable here
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                loaded = get_peft_model(loaded, lora.to_peft_config())
        self.model = loaded.eval()
        self.tokenizer = tokenizer
        self.lora = lora
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id = self._pad_token_id()

    # -- loading ---------------------------------------------------------------------------------------------

    def _load(self, source: str, tokenizer: Any, torch_dtype: Any, trust_remote_code: bool,
              base_model: str | os.PathLike | None) -> tuple[torch.nn.Module, Any]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(source).expanduser()
        looks_like_path = path.is_absolute() or source.startswith((".", "~")) or path.exists()
        if looks_like_path and not path.exists():
            raise MissingDataError(f"model folder {str(path)!r} does not exist. {_MODEL_HINT}")
        adapter_config = path / "adapter_config.json"
        base_source = source
        if path.is_dir() and adapter_config.is_file():
            base_source = str(base_model or json.loads(adapter_config.read_text()).get("base_model_name_or_path") or "")
            if not base_source:
                raise MissingDataError(f"the adapter in {source!r} does not name its base model; pass `base_model=`")
        elif path.is_dir() and not (path / "config.json").is_file():
            raise MissingDataError(f"{str(path)!r} has no config.json, so it is not a model folder. {_MODEL_HINT}")

        load_kwargs = {"local_files_only": True, "trust_remote_code": trust_remote_code, _dtype_kwarg(): torch_dtype}
        try:
            with _quiet_progress_bars():
                loaded = AutoModelForCausalLM.from_pretrained(base_source, **load_kwargs)
        except (OSError, ValueError) as exc:
            raise MissingDataError(f"could not load the model {base_source!r} offline ({' '.join(str(exc).split())}). "
                                   f"{_MODEL_HINT}") from exc
        if base_source != source:
            from peft import PeftModel

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                loaded = PeftModel.from_pretrained(loaded, source, is_trainable=True)
        if tokenizer is None:
            tokenizer_source = source if (path / "tokenizer_config.json").is_file() else base_source
            try:
                tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, local_files_only=True,
                                                          trust_remote_code=trust_remote_code)
            except (OSError, ValueError) as exc:
                raise MissingDataError(
                    f"could not load a tokenizer from {tokenizer_source!r} offline ({exc}); save the tokenizer "
                    "next to the model (`tokenizer.save_pretrained(folder)`) or pass `tokenizer=`") from exc
        return loaded.to(self.device), tokenizer

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        candidates = [getattr(self.tokenizer, "eos_token_id", None),
                      getattr(getattr(_unwrapped(self.model), "generation_config", None), "eos_token_id", None)]
        for value in candidates:
            if isinstance(value, (list, tuple, set)):
                ids.update(int(v) for v in value if v is not None)
            elif value is not None:
                ids.add(int(value))
        return frozenset(ids)

    def _pad_token_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = min(self.eos_token_ids) if self.eos_token_ids else 0
        return int(pad)

    # -- prompts ---------------------------------------------------------------------------------------------

    @property
    def is_peft(self) -> bool:
        return hasattr(self.model, "peft_config")

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a conversation followed by the assistant-turn header.

        Uses the tokenizer's chat template (``add_generation_prompt=True``). Tokenizers without one get a plain
        ``"role: content"`` transcript ending in ``"assistant: "``.
        """
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return [int(i) for i in self.tokenizer(text, add_special_tokens=True)["input_ids"]]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        return [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # -- free generation -------------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], config: GenerationConfig | None = None,
                 seed: int | None = None) -> list[Generation]:
        """Sample one reply per prompt (batched decoding over a KV cache, ``torch.inference_mode``).

        The prompts are encoded as :data:`PREFILL_MODES` says (on CPU: each distinct prompt without padding, shared
        prefixes once), then decoded together, left-padded, one token per step for the whole chunk.

        ``seed`` fixes the sampling noise for this call (the result then depends on the prompts and on how they
        were chunked); without it, the noise is drawn from PyTorch's global generator, so ``torch.manual_seed``
        makes runs repeatable. The global generator is otherwise left untouched.
        """
        config = config or GenerationConfig()
        if not prompts:
            return []
        generator = self._generator(seed)
        kept: list[list[int]] = []
        cut: list[bool] = []
        for prompt in prompts:
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            cut.append(len(prompt) > config.max_prompt_tokens)
            kept.append([int(t) for t in prompt[-config.max_prompt_tokens:]])
        # Longest first, so that chunks hold prompts of similar length (less padding).
        order = sorted(range(len(kept)), key=lambda i: -len(kept[i]))
        chunk = config.batch_size or len(order)
        results: list[Generation | None] = [None] * len(kept)
        stop_ids = torch.tensor(sorted(self.eos_token_ids | set(config.stop_token_ids)), dtype=torch.long,
                                device=self.device)
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), chunk):
                rows = order[start:start + chunk]
                outputs = self._generate_batch([kept[i] for i in rows], config, stop_ids, generator)
                for row, (response, logprobs, truncated) in zip(rows, outputs):
                    results[row] = Generation(prompt_ids=kept[row], response_ids=response, text=self.decode(response),
                                              logprobs=logprobs, truncated=truncated, prompt_truncated=cut[row])
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _generator(self, seed: int | None) -> torch.Generator:
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        generator = torch.Generator(device=self.device)
        generator.manual_seed(int(seed))
        return generator

    def _tree_prefill_enabled(self) -> bool:
        if self._tree_prefill_supported is False:
            return False
        return self.prefill == "tree" or (self.prefill == "auto" and self.device.type == "cpu")

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], config: GenerationConfig, stop_ids: torch.Tensor,
                        generator: torch.Generator) -> list[tuple[list[int], list[float], bool]]:
        batch = len(prompts)
        room = config.max_new_tokens - 1  # the last sampled token is never fed back
        prefilled = None
        if self._tree_prefill_enabled():
            prefilled = _tree_prefill(self.model, prompts, room)
            if prefilled is None:  # the model's cache is not made of plain layers: padded from now on
                self._tree_prefill_supported = False
        if prefilled is None:
            prefilled = _padded_prefill(self.model, prompts, room, self.pad_token_id)
        logits, cache, attention_mask, next_positions = prefilled
        width = attention_mask.shape[1] - room

        tokens = torch.full((batch, config.max_new_tokens), self.pad_token_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((batch, config.max_new_tokens), dtype=torch.float32, device=self.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        for step in range(config.max_new_tokens):
            token, token_logprob = self._sample(logits, config, generator)
            token = token.masked_fill(finished, self.pad_token_id)
            tokens[:, step] = token
            logprobs[:, step] = token_logprob
            lengths += (~finished).long()
            finished |= torch.isin(token, stop_ids)
            if step == config.max_new_tokens - 1 or bool(finished.all()):
                break
            attention_mask[:, width + step] = 1
            logits, cache = _forward(self.model, token[:, None], attention_mask[:, :width + step + 1], next_positions,
                                     cache=cache)
            logits = logits[:, -1].float()
            next_positions = next_positions + 1

        tokens_list, logprobs_list = tokens.tolist(), logprobs.tolist()
        lengths_list, finished_list = lengths.tolist(), finished.tolist()
        return [(tokens_list[i][:n], logprobs_list[i][:n], not finished_list[i])
                for i, n in enumerate(lengths_list)]

    @staticmethod
    def _sample(logits: torch.Tensor, config: GenerationConfig,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token per row and its log-probability under ``log_softmax(logits / T)`` (module docstring)."""
        if config.temperature == 0:
            token = logits.argmax(dim=-1)
            return token, torch.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1)
        scaled = logits / config.temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        filtered = _filter_top_k_top_p(scaled, config.top_k, config.top_p)
        probs = torch.softmax(filtered, dim=-1) if filtered is not scaled else logprobs.exp()
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        return token, logprobs.gather(-1, token[:, None]).squeeze(-1)

    # -- admissible-action scoring ---------------------------------------------------------------------------

    def choice_token_ids(self, text: str, *, append_eos: bool = True) -> list[int]:
        """The token ids scored for a candidate reply: the text, then the end-of-turn token when asked."""
        ids = self.encode(text)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if append_eos and eos is not None:
            ids.append(int(eos))
        if not ids:
            raise ValueError(f"candidate {text!r} has no tokens")
        return ids

    def score_choices(self, prompts: list[list[int]], choices: list[list[str]], temperature: float = 1.0,
                      sample: bool = True, seed: int | None = None, *, append_eos: bool = True,
                      batch_size: int | None = None) -> list[Choice]:
        """Choose one candidate reply per prompt by its sequence log-likelihood.

        Each candidate is tokenized on its own (no special tokens) and, with ``append_eos``, followed by the
        end-of-turn token, so the score is that of the complete reply ("go to cabinet 1" does not get the credit
        of "go to cabinet 10"). The policy over a prompt's candidates is ``softmax(seq_logliks / temperature)``;
        the index is sampled from it (``sample=True`` and ``temperature > 0``) or taken as the argmax.
        ``batch_size`` bounds how many distinct prompts share one forward pass (default: one on CPU, where that
        is fastest; all of them elsewhere); identical prompts with identical candidates are scored once.
        """
        if len(prompts) != len(choices):
            raise ValueError(f"{len(prompts)} prompts but {len(choices)} candidate lists")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        if not prompts:
            return []
        choice_ids = [[self.choice_token_ids(text, append_eos=append_eos) for text in cands] for cands in choices]
        prompts = [[int(t) for t in p] for p in prompts]
        generator = self._generator(seed)
        # Identical prompts with identical candidates (a group's first step) are scored once, across the call.
        unique: dict[tuple, int] = {}
        slots = [unique.setdefault((tuple(prompts[r]), tuple(map(tuple, choice_ids[r]))), r)
                 for r in range(len(prompts))]
        firsts = list(dict.fromkeys(slots))
        # On CPU one prompt per forward is about twice as fast as one packed call over all (no padding to the
        # longest row, a small block mask); the numbers are the same up to float rounding.
        step = batch_size or (1 if self.device.type == "cpu" else len(firsts))
        results: list[Choice] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                computed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
                for start in range(0, len(firsts), step):
                    part = firsts[start:start + step]
                    log_policy, seq_logliks = choice_log_probs(self.model, [prompts[r] for r in part],
                                                               [choice_ids[r] for r in part],
                                                               temperature=temperature, pad_id=self.pad_token_id)
                    computed.update({r: (lp, sl) for r, lp, sl in zip(part, log_policy, seq_logliks)})
                for row, first in enumerate(slots):
                    logp, seq = computed[first]
                    if sample and temperature > 0:
                        index = int(torch.multinomial(logp.exp(), 1, generator=generator).item())
                    else:
                        index = int(logp.argmax().item())
                    results.append(Choice(index=index, text=choices[row][index],
                                          response_ids=list(choice_ids[row][index]), logprob=float(logp[index]),
                                          choice_ids=choice_ids[row], probs=logp.exp().tolist(),
                                          seq_logliks=seq.tolist(), prompt_ids=prompts[row]))
        finally:
            self.model.train(was_training)
        return results

    # -- weights ---------------------------------------------------------------------------------------------

    def state_dict_for_inference(self) -> dict[str, torch.Tensor]:
        """Full model weights under the plain transformers names (LoRA deltas merged), detached.

        For a backend that keeps its own copy of the weights (vLLM): the HF backend needs no syncing, since it
        generates with the very module the learner updates.
        """
        if not self.is_peft:
            return {k: v.detach() for k, v in self.model.state_dict().items()}
        from peft.tuners.lora import LoraLayer

        inner = self.model.get_base_model()
        adapter = self.model.active_adapter
        merged: dict[str, torch.Tensor] = {}
        for key, value in inner.state_dict().items():
            if "lora_" in key:
                continue
            merged[key.replace(".base_layer.", ".")] = value.detach()
        for name, module in inner.named_modules():
            if isinstance(module, LoraLayer) and adapter in getattr(module, "lora_A", {}):
                key = f"{name}.weight"
                with torch.no_grad():
                    merged[key] = merged[key] + module.get_delta_weight(adapter).to(merged[key].dtype)
        return merged

    def load_weights(self, state_dict: dict[str, torch.Tensor], strict: bool = True) -> None:
        """Copy weights into the live model in place (names as in :meth:`state_dict_for_inference`).

        With LoRA, full merged weights cannot be split back into base and adapter; pass the adapter's state dict
        (``peft.get_peft_model_state_dict`` names) instead.
        """
        if self.is_peft:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, state_dict)
            if strict and getattr(result, "unexpected_keys", None):
                raise ValueError(f"unexpected adapter keys: {result.unexpected_keys[:5]}")
            return
        self.model.load_state_dict(state_dict, strict=strict)

    def load_adapter(self, path: str | os.PathLike) -> None:
        """Load LoRA adapter weights saved by :meth:`save_pretrained` into this policy's adapter, in place.

        The policy must have been built with the same ``lora`` settings (a resume restores the adapter this way).
        """
        if not self.is_peft:
            raise ConfigError("this policy has no LoRA adapter to load into; build it with `lora=LoraSettings(...)`")
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise MissingDataError(f"{str(folder)!r} holds no PEFT adapter (adapter_config.json is missing)")
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        try:
            result = set_peft_model_state_dict(self.model, load_peft_weights(str(folder), device=str(self.device)))
        except RuntimeError as exc:  # shape mismatch: another rank
            raise ConfigError(f"the adapter in {str(folder)!r} does not match this policy's LoRA settings "
                              f"({exc})") from exc
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise ConfigError(f"the adapter in {str(folder)!r} does not match this policy's LoRA settings "
                              f"(unexpected keys such as {unexpected[:3]})")

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write the model (or only the LoRA adapter) and the tokenizer in ``from_pretrained`` form."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)
