"""Prefill for generation: how :meth:`~agentrl.policy.HFPolicy.generate` encodes a batch of prompts into a KV cache.

The prompts are encoded either through a prefix tree, each distinct prompt without padding and a shared prefix once
(:func:`_tree_prefill`), or in one left-padded forward (:func:`_padded_prefill`); :data:`PREFILL_MODES` says when
which. Either way the keys and values end up in a preallocated cache (:func:`_preallocated_cache`) with room for the
whole reply, so that each decoding step writes in place instead of copying the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.policy.logprobs import _forward, _left_pad, _positions

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
            encoded = _encode_segment(model, prompt, depth, len(prompt), kv, device)
            if encoded is None:
                return None
            emit(prompt, *encoded)
            continue
        shared = _common_prefix(unique[lo], unique[hi - 1], depth)  # = the range's common prefix (sorted)
        if (hi - lo - 1) * (shared - depth) >= min_shared:
            encoded = _encode_segment(model, unique[lo], depth, shared, kv, device)
            if encoded is None:
                return None
            stack.append((lo, hi, shared, *encoded))
            continue
        # Too little in common: split the range by the token after the common prefix (a prompt ending there goes
        # alone); each part then looks for its own longer common prefix from `depth`.
        for part_lo, part_hi in reversed(_split_at(unique, lo, hi, shared)):
            stack.append((part_lo, part_hi, depth, kv, logits))

    mask = torch.zeros((batch, width + room), dtype=torch.long, device=device)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    mask[:, :width] = (torch.arange(width, device=device)[None] >= width - lengths[:, None]).long()
    return state["logits"], _preallocated_cache(state["buffers"], width), mask, lengths[:, None]


def _branch(prompt: Sequence[int], at: int) -> int:
    """The token at position ``at``, or -1 where the prompt ends before it."""
    return int(prompt[at]) if at < len(prompt) else -1


def _split_at(unique: Sequence[Sequence[int]], lo: int, hi: int, at: int) -> list[tuple[int, int]]:
    """``unique[lo:hi]`` (sorted) cut into runs with the same token at position ``at`` (:func:`_branch`)."""
    parts: list[tuple[int, int]] = []
    start = lo
    for i in range(lo + 1, hi + 1):
        if i == hi or _branch(unique[i], at) != _branch(unique[start], at):
            parts.append((start, i))
            start = i
    return parts


def _encode_segment(model: torch.nn.Module, prompt: tuple[int, ...], start: int, end: int, kv: Any,
                    device: torch.device) -> tuple[Any, torch.Tensor] | None:
    """Encode ``prompt[start:end]`` on top of the cache ``kv`` of ``prompt[:start]`` (None: from scratch); returns
    the cache of ``prompt[:end]`` as plain (keys, values) and the last position's logits (float32), or None when the
    model's cache is not made of plain layers."""
    ids = torch.tensor([prompt[start:end]], dtype=torch.long, device=device)
    positions = torch.arange(start, end, dtype=torch.long, device=device)[None]
    logits, cache = _forward(model, ids, None, positions, cache=None if kv is None else _cache_holding(kv),
                             logits_to_keep=1, use_cache=True)
    new_kv = _plain_kv(cache)
    if new_kv is None:
        return None
    return new_kv, logits[0, -1].float()


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

