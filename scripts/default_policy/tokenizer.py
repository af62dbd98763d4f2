"""Stage ``tokenizer``: a byte-level BPE (``tokenizers``) trained on the demonstrations' text, ChatML template.

Writes ``tokenizer/``. A build that continues a model (``--init-from``) keeps that model's tokenizer instead.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from .collect import load_demos
from .common import log


def stage_tokenizer(args: argparse.Namespace, work: Path) -> None:
    from agentrl.models import build_tiny_tokenizer

    folder = work / "tokenizer"
    if (folder / "tokenizer.json").is_file():
        log(f"tokenizer: cached ({folder})")
        return
    if args.init_from:  # a model continued must keep the tokenizer its embeddings were trained with
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(args.init_from).save_pretrained(folder)
        log(f"tokenizer: that of {args.init_from}")
        return
    demos = load_demos(work)
    rng = random.Random(args.seed)
    sample = rng.sample(demos, min(len(demos), 20_000))
    corpus = [d["prompt"] for d in sample] + sorted({d["reply"] for d in demos})
    t0 = time.perf_counter()
    tokenizer = build_tiny_tokenizer(args.vocab, corpus)
    tokenizer.save_pretrained(folder)
    lengths = [len(tokenizer(d["prompt"])["input_ids"]) for d in sample[:2000]]
    log(f"tokenizer: vocab {len(tokenizer)} in {time.perf_counter() - t0:.1f} s; prompt tokens mean "
        f"{sum(lengths) / len(lengths):.0f}, max {max(lengths)}")
