"""Log-probabilities under a causal LM: the transformers shims and the maths shared by the policy and the learner.

* :func:`token_log_probs`: per-token log-probabilities of sampled replies (free generation), recomputed by the
  learner with gradients;
* :func:`choice_sequence_logliks` / :func:`choice_and_prompt_logliks` / :func:`choice_log_probs`: sequence
  log-likelihoods of candidate replies and the scoring-mode policy over them (admissible-action scoring);
* the plumbing under both: one causal-LM forward that works across transformers versions (:func:`_forward`),
  left/right padding, position ids, the pad id, and the top-k/top-p filter used when sampling.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from agentrl.config import CHOICE_RULES, DEFAULT_CHOICE_RULE
from agentrl.errors import ConfigError

# ----------------------------------------------------------------------------------------------------------------
# Model plumbing shared with the learner (transformers shims, padding)
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



# ----------------------------------------------------------------------------------------------------------------
# Free generation: per-token log-probabilities
# ----------------------------------------------------------------------------------------------------------------


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



# ----------------------------------------------------------------------------------------------------------------
# Admissible-action scoring: sequence log-likelihoods of candidates
# ----------------------------------------------------------------------------------------------------------------


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
    """The ``"packed"`` way of :func:`choice_sequence_logliks` (and the prompts' own log-likelihoods when asked)."""
    device = next(model.parameters()).device
    input_ids, segment, position_ids = _packed_rows(prompts, choices, pad, device)
    width = input_ids.shape[1]
    mask = _block_attention_mask(model, segment)

    block = [sum(len(c) for c in cands) for cands in choices]
    keep = width if with_prompts else max(block) + 1
    logits, _ = _forward(model, input_ids, mask, position_ids, logits_to_keep=keep)
    row_index, slot_index, targets, owner = _candidate_slots(choices, block, width, keep)
    selected = logits[torch.tensor(row_index, device=device), torch.tensor(slot_index, device=device)].float()
    token_logprobs = torch.log_softmax(selected, dim=-1).gather(
        -1, torch.tensor(targets, device=device)[:, None]).squeeze(-1)
    candidates = sum(len(c) for c in choices)
    seq_logliks = torch.zeros(candidates, dtype=token_logprobs.dtype, device=device).index_add(
        0, torch.tensor(owner, device=device), token_logprobs)
    prompt_logliks = []
    if with_prompts:  # every slot is kept: slot = absolute position; prompt token i is predicted at its position - 1
        for row, prompt in enumerate(prompts):
            start = width - block[row] - len(prompt)
            predicted = torch.log_softmax(logits[row, start:start + len(prompt) - 1].float(), dim=-1)
            prompt_logliks.append(predicted.gather(
                -1, torch.tensor(list(prompt[1:]), device=device)[:, None]).squeeze(-1))
    return list(torch.split(seq_logliks, [len(c) for c in choices])), prompt_logliks


def _packed_rows(prompts: Sequence[Sequence[int]], choices: Sequence[Sequence[Sequence[int]]], pad: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, segment, position_ids)``, each ``(batch, width)``: one row ``[prompt | cand 1 | cand 2 | ...]``
    per prompt, left-padded; ``segment`` is 0 on the prompt, ``j`` on candidate ``j`` (from 1) and -1 on padding;
    positions restart after the prompt for every candidate."""
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
    return input_ids, segment, position_ids


def _block_attention_mask(model: torch.nn.Module, segment: torch.Tensor) -> torch.Tensor:
    """The 4D mask ``(batch, 1, width, width)`` of a packed row: a token sees the prompt and the earlier tokens of its
    own candidate (boolean for ``sdpa``, additive float for ``eager``)."""
    width, device = segment.shape[1], segment.device
    index = torch.arange(width, device=device)
    query_seg, key_seg = segment[:, :, None], segment[:, None, :]
    allowed = (index[None, :] <= index[:, None]) & (key_seg >= 0) & ((key_seg == 0) | (key_seg == query_seg))
    allowed |= torch.eye(width, dtype=torch.bool, device=device)  # padding attends to itself: no empty rows
    mask = allowed[:, None]
    if getattr(_unwrapped(model).config, "_attn_implementation", None) == "eager":
        mask = torch.zeros(mask.shape, dtype=torch.float32, device=device).masked_fill(
            ~mask, torch.finfo(torch.float32).min)
    return mask


def _candidate_slots(choices: Sequence[Sequence[Sequence[int]]], block: Sequence[int], width: int, keep: int
                     ) -> tuple[list[int], list[int], list[int], list[int]]:
    """For each candidate token of the packed rows (``block[row]`` candidate tokens in all, ``width`` wide, the
    last ``keep`` logits kept): its row, the kept slot predicting it, the token, and its candidate's index
    (counted over all rows), as four lists."""
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
    return row_index, slot_index, targets, owner


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


def choice_scores(seq_logliks: torch.Tensor, lengths: Sequence[int], rule: str = DEFAULT_CHOICE_RULE) -> torch.Tensor:
    """Each candidate's score under ``rule``: its sequence log-likelihood (``"sum"``) or that divided by its token
    count (``"mean"``, the length-normalised rule: a short candidate no longer wins by having fewer tokens to pay
    for)."""
    if rule == "sum":
        return seq_logliks
    if rule == "mean":
        return seq_logliks / torch.as_tensor(lengths, dtype=seq_logliks.dtype, device=seq_logliks.device)
    raise ConfigError(f"unknown choice rule {rule!r}; known: {', '.join(CHOICE_RULES)}")


def choice_log_probs(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                     choices: Sequence[Sequence[Sequence[int]]], *, temperature: float = 1.0,
                     pad_id: int | None = None, rule: str | Sequence[str] = DEFAULT_CHOICE_RULE
                     ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The scoring-mode policy: ``log_softmax(choice_scores(seq_logliks, lengths, rule) / temperature)`` over each
    prompt's candidates (``rule``: one for all prompts, or one per prompt).

    Returns ``(log_policy, seq_logliks)``, one ``(n_candidates,)`` tensor per prompt in each list (``seq_logliks``
    are the plain sums, whatever the rule). A temperature of 0 is read as 1 (greedy selection reports the
    untempered distribution).
    """
    seq_logliks = choice_sequence_logliks(model, prompts, choices, pad_id=pad_id)
    return choice_policy(seq_logliks, choices, rule, temperature), seq_logliks


def choice_policy(seq_logliks: Sequence[torch.Tensor], choices: Sequence[Sequence[Sequence[int]]],
                  rule: str | Sequence[str] = DEFAULT_CHOICE_RULE, temperature: float = 1.0) -> list[torch.Tensor]:
    """The scoring-mode log-policy from the candidates' sequence log-likelihoods (docs/spec/algorithms.md §1.5.1):
    ``log_softmax(choice_scores(seq_logliks, lengths, rule) / temperature)`` per prompt; a temperature of 0 is read
    as 1, ``rule`` is one for all prompts or one per prompt."""
    scale = temperature if temperature > 0 else 1.0
    rules = [rule] * len(seq_logliks) if isinstance(rule, str) else list(rule)
    return [torch.log_softmax(choice_scores(s, [len(c) for c in cands], r) / scale, dim=-1)
            for s, cands, r in zip(seq_logliks, choices, rules)]


# ----------------------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------------------


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

