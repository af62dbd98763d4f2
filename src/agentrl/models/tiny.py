"""The ``tiny-random`` model: a random-weight Llama (d=64, 2 layers, ~0.14M parameters) built from a
``LlamaConfig``, with a byte-level BPE tokenizer trained in memory on a few lines of environment-like text (any text
round-trips) and a ChatML chat template. It learns nothing useful in minutes on real tasks, but it exercises the
whole pipeline anywhere in about a second, which is what CI, tests and first runs need.

Importing this module is cheap: tokenizers, transformers and torch are imported inside the builders.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "IM_END", "IM_START", "OUTPUT_SCALE", "PAD", "SPECIAL_TOKENS", "build_tiny_model",
           "build_tiny_tokenizer", "save_tiny_model"]

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
OUTPUT_SCALE = 20.0

#: ChatML, the format of Qwen2.5-Instruct (the reference models), without a default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "You are an expert agent operating in a text-based household. Your task is to: put a clean apple in the fridge.",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a fridge 1.",
    "You arrive at cabinet 1. The cabinet 1 is closed. Nothing happens. You pick up the apple 1 from the countertop 1.",
    "Your admissible actions of the current situation are: 'go to cabinet 1' 'open fridge 1' 'take apple 1'.",
    "<think>I need to find the apple first, then clean it in the sinkbasin.</think><action>go to countertop 1</action>",
    "<think>The fridge is closed, so I open it.</think><action>open fridge 1</action>",
    "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and actions.",
    "[Observation 1: 'You arrive at the forest.', Action 1: 'gather wood']",
    "You gather wood. Inventory: wood, stone, coal. You walk to the workbench. You craft a plank.",
    "Your task is to craft a torch. Recipes: plank <- wood at workbench; stick <- plank at workbench.",
    "search[red running shoes size 9] click[b09abc1234] click[buy now] click[< prev] click[next >]",
    "Instruction: i need a long lasting 6.76 fl oz bottle of l'eau d'issey, and price lower than 100.00 dollars",
    "The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9 ! ? , . ; : ' \" ( ) [ ] < > / - + = _",
]


@functools.cache
def _tokenizer_json(vocab_size: int, corpus: tuple[str, ...] = ()) -> str:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) or _CORPUS * 4, trainer=trainer)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = 512, corpus: Sequence[str] = ()) -> Any:
    """A byte-level BPE tokenizer (any text round-trips) with ChatML special tokens and chat template.

    ``corpus``: domain text to learn the merges from (a few thousand lines of env observations give prompts
    2-3x shorter than the built-in lines); default a few lines of environment-like text.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size, tuple(corpus))),
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A random-weight Llama sized for unit tests (~0.14M parameters with the default tokenizer)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)  # the caller owns the global RNG; seeding it keeps the weights reproducible
    model = LlamaForCausalLM(config)
    # Random init gives near-uniform next-token distributions (entropy ~ log V). Scaling the (untied) output head
    # gives model-like ones (~2.8 nats per token), so greedy decoding is not decided by float noise while sampling
    # still varies.
    with torch.no_grad():
        model.lm_head.weight.mul_(OUTPUT_SCALE)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def save_tiny_model(path: str | Path, *, seed: int = 0, vocab_size: int = 512, hidden_size: int = 64,
                    num_layers: int = 2, corpus: Sequence[str] = ()) -> Path:
    """Write a tiny model and its tokenizer to ``path`` (``save_pretrained`` format); returns the path."""
    path = Path(path)
    if (path / "config.json").is_file():  # built before (a resumed run finds its base model)
        return path
    tokenizer = build_tiny_tokenizer(vocab_size, corpus)
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=hidden_size, num_layers=num_layers)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path

