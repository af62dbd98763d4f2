"""The Hugging Face backend: loading a causal LM offline, and :class:`HFPolicy`, which generates and scores with it.

What the two ways to act compute, and which log-probability each reports, is told in :mod:`agentrl.policy`; the
maths lives in :mod:`agentrl.policy.logprobs` and the prompt encoding for generation in :mod:`agentrl.policy.prefill`.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl.config import DEFAULT_CHOICE_RULE, GenerationConfig, LoraSettings
from agentrl.errors import ConfigError, MissingDataError
from agentrl.hardware import cuda_available
from agentrl.policy.logprobs import (
    _filter_top_k_top_p,
    _forward,
    _unwrapped,
    choice_log_probs,
)
from agentrl.policy.prefill import PREFILL_MODES, _padded_prefill, _tree_prefill
from agentrl.records import Choice, Generation

__all__ = ["HFPolicy"]

# ----------------------------------------------------------------------------------------------------------------
# Loading
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
        return torch.device("cuda" if cuda_available() else "cpu")
    return torch.device(device)


def _dtype_kwarg() -> str:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


@contextlib.contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """No per-tensor "Loading weights" or per-shard "Writing" bar: the trainer owns the terminal."""
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


def _with_lora(model: torch.nn.Module, lora: LoraSettings) -> torch.nn.Module:
    """``model`` wrapped in a fresh peft LoRA adapter (only the adapter is trainable)."""
    if hasattr(model, "peft_config"):
        raise ConfigError("the model already carries a PEFT adapter; do not pass `lora=` as well")
    from peft import get_peft_model

    with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias; not actionable here
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora.to_peft_config())


def _truncate_prompts(prompts: Sequence[Sequence[int]], max_prompt_tokens: int) -> tuple[list[list[int]], list[bool]]:
    """Each prompt's last ``max_prompt_tokens`` ids, and whether it lost its beginning; an empty prompt is an error."""
    kept: list[list[int]] = []
    cut: list[bool] = []
    for prompt in prompts:
        if len(prompt) == 0:
            raise ValueError("cannot generate from an empty prompt")
        cut.append(len(prompt) > max_prompt_tokens)
        kept.append([int(t) for t in prompt[-max_prompt_tokens:]])
    return kept, cut


# ----------------------------------------------------------------------------------------------------------------
# The Hugging Face policy
# ----------------------------------------------------------------------------------------------------------------


class HFPolicy:
    """A Hugging Face causal LM as a policy (:mod:`agentrl.policy` tells the log-probability convention).

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
            loaded = self._adopt(model, tokenizer, dtype, torch_dtype)
        else:
            self.name_or_path = str(model)
            loaded, tokenizer = self._load(str(model), tokenizer, torch_dtype, trust_remote_code, base_model)
        if lora is not None:
            loaded = _with_lora(loaded, lora)
        self.model = loaded.eval()
        self.tokenizer = tokenizer
        self.lora = lora
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id = self._pad_token_id()

    # -- loading ---------------------------------------------------------------------------------------------

    def _adopt(self, model: torch.nn.Module, tokenizer: Any, dtype: str | torch.dtype,
               torch_dtype: torch.dtype | str) -> torch.nn.Module:
        """A model object passed in: cast only when a dtype was asked for, then moved to the policy's device."""
        if tokenizer is None:
            raise ConfigError("HFPolicy was given a model object but no tokenizer; pass `tokenizer=`")
        self.name_or_path = str(getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__)
        if dtype != "auto" and isinstance(torch_dtype, torch.dtype):
            model = model.to(torch_dtype)
        return model.to(self.device)

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
            with quiet_progress_bars():
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
        kept, cut = _truncate_prompts(prompts, config.max_prompt_tokens)
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

    def _prefill(self, prompts: list[list[int]], room: int) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """The prompts' KV cache with ``room`` free positions, as :data:`PREFILL_MODES` and the model allow."""
        prefilled = None
        if self._tree_prefill_enabled():
            prefilled = _tree_prefill(self.model, prompts, room)
            if prefilled is None:  # the model's cache is not made of plain layers: padded from now on
                self._tree_prefill_supported = False
        if prefilled is None:
            prefilled = _padded_prefill(self.model, prompts, room, self.pad_token_id)
        return prefilled

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], config: GenerationConfig, stop_ids: torch.Tensor,
                        generator: torch.Generator) -> list[tuple[list[int], list[float], bool]]:
        batch = len(prompts)
        room = config.max_new_tokens - 1  # the last sampled token is never fed back
        logits, cache, attention_mask, next_positions = self._prefill(prompts, room)
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
        """Next token per row and its log-probability under ``log_softmax(logits / T)`` (:mod:`agentrl.policy`)."""
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
                      batch_size: int | None = None, rule: str = DEFAULT_CHOICE_RULE) -> list[Choice]:
        """Choose one candidate reply per prompt by its log-likelihood, summed or per token (``rule``).

        Each candidate is tokenized on its own (no special tokens) and, with ``append_eos``, followed by the
        end-of-turn token, so the score is that of the complete reply ("go to cabinet 1" does not get the credit
        of "go to cabinet 10"). The policy over a prompt's candidates is ``softmax(score / temperature)``, the score
        being the sequence log-likelihood (``rule="sum"``) or its mean over the candidate's tokens (``"mean"``);
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
                                                               temperature=temperature, pad_id=self.pad_token_id,
                                                               rule=rule)
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
                                          seq_logliks=seq.tolist(), prompt_ids=prompts[row], rule=rule))
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
