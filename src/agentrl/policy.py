"""The policy: a causal language model that turns prompts into sampled replies and their log-probabilities.

Data flows env → agent → **policy** → trajectory → algorithm → learner. The policy knows token ids and text only;
it never imports environments or agents.

:class:`HFPolicy` is the default backend (Hugging Face ``transformers``). It offers two ways to act:

* :meth:`HFPolicy.generate` — free generation. Prompts are left-padded into one batch and decoded token by token
  with a KV cache under ``torch.inference_mode``. Each reply comes back as the sampled token ids (kept exactly as
  sampled; the learner trains on these ids, never on a re-tokenization of the text), the decoded text and one
  log-probability per token.
* :meth:`HFPolicy.score_choices` — admissible-action scoring. For each prompt, every candidate reply string is
  scored by its sequence log-likelihood in one batched forward (each prompt is packed with all its candidates
  into one row under a block attention mask, so the prompt is encoded once); the policy is the softmax of
  these log-likelihoods divided by a temperature, and an index is sampled from it. The learner recomputes
  exactly this distribution with the current weights (:func:`choice_log_probs`), so the PPO ratio compares like
  with like.

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
    "Choice",
    "Generation",
    "GenerationConfig",
    "HFPolicy",
    "LoraSettings",
    "choice_log_probs",
    "choice_sequence_logliks",
    "configure_cpu_threads",
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


def configure_cpu_threads(n: int | None) -> int:
    """Set PyTorch's intra-op CPU threads to ``n`` (``None`` leaves it alone); returns the previous count.

    The trap (docs: models.md, "CPU threading trap"): on a machine with few cores, PyTorch's default of one
    OpenMP thread per core makes a forward pass about 10× slower as soon as another process (an environment
    worker) takes a core, because the OpenMP threads spin-wait on each other. When environments or other jobs run
    beside the model, use 1 thread, or start the process with ``GOMP_SPINCOUNT=0`` (an environment variable read
    when the OpenMP runtime starts, so it cannot be set from here). Measure on the machine. The library never
    calls this by itself; the trainer does.
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
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = getattr(out, "past_key_values", None)
    return logits, new_cache


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
        return _packed_choice_logliks(model, prompts, choices, pad)
    return _shared_cache_choice_logliks(model, prompts, choices, pad)


def _accepts_custom_4d_mask(model: torch.nn.Module) -> bool:
    import transformers

    implementation = getattr(_unwrapped(model).config, "_attn_implementation", None)
    return int(transformers.__version__.split(".")[0]) >= 5 and implementation in ("sdpa", "eager")


def _packed_choice_logliks(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                           choices: Sequence[Sequence[Sequence[int]]], pad: int) -> list[torch.Tensor]:
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
    keep = max(block) + 1
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
    return list(torch.split(seq_logliks, [len(c) for c in choices]))


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
    the model in a fresh ``peft`` LoRA adapter; only the adapter is then trainable.
    """

    def __init__(self, model: str | os.PathLike | torch.nn.Module, tokenizer: Any = None, *,
                 device: str | torch.device = "cpu", dtype: str | torch.dtype = "auto",
                 lora: LoraSettings | None = None, trust_remote_code: bool = False,
                 base_model: str | os.PathLike | None = None) -> None:
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
        """Sample one reply per prompt (batched, left-padded, KV cache, ``torch.inference_mode``).

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

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], config: GenerationConfig, stop_ids: torch.Tensor,
                        generator: torch.Generator) -> list[tuple[list[int], list[float], bool]]:
        batch = len(prompts)
        input_ids, attention_mask = _left_pad(prompts, self.pad_token_id, self.device)
        positions = _positions(attention_mask)
        logits, cache = _forward(self.model, input_ids, attention_mask, positions, logits_to_keep=1, use_cache=True)
        next_positions = positions[:, -1:] + 1

        tokens = torch.full((batch, config.max_new_tokens), self.pad_token_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((batch, config.max_new_tokens), dtype=torch.float32, device=self.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        for step in range(config.max_new_tokens):
            token, token_logprob = self._sample(logits[:, -1].float(), config, generator)
            token = token.masked_fill(finished, self.pad_token_id)
            tokens[:, step] = token
            logprobs[:, step] = token_logprob
            lengths += (~finished).long()
            finished |= torch.isin(token, stop_ids)
            if step == config.max_new_tokens - 1 or bool(finished.all()):
                break
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
            logits, cache = _forward(self.model, token[:, None], attention_mask, next_positions, cache=cache)
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
        ``batch_size`` bounds how many prompts share one forward pass.
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
        step = batch_size or len(prompts)
        results: list[Choice] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for start in range(0, len(prompts), step):
                    # Identical prompts with identical candidates (a group's first step) are scored once.
                    unique: dict[tuple, int] = {}
                    rows = range(start, min(start + step, len(prompts)))
                    slots = [unique.setdefault((tuple(prompts[r]), tuple(map(tuple, choice_ids[r]))), r) for r in rows]
                    firsts = list(dict.fromkeys(slots))
                    log_policy, seq_logliks = choice_log_probs(self.model, [prompts[r] for r in firsts],
                                                               [choice_ids[r] for r in firsts],
                                                               temperature=temperature, pad_id=self.pad_token_id)
                    computed = {r: (lp, sl) for r, lp, sl in zip(firsts, log_policy, seq_logliks)}
                    for row, first in zip(rows, slots):
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
