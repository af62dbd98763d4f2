"""The build's stages, in the order the data flows, and the driver that runs them.

Each stage reads what earlier ones wrote under ``--work`` and caches its own output there, so a rerun resumes where
the last one stopped; ``card`` is not part of a build (run it by name).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .card import stage_card
from .collect import stage_collect
from .dagger import stage_dagger
from .evaluate import stage_eval
from .options import parse_args
from .package import stage_package
from .tokenizer import stage_tokenizer
from .train import stage_train


class Stage(NamedTuple):
    """One stage: its name on the command line, the function that runs it, what it reads and what it writes (paths
    under ``--work`` unless named otherwise)."""

    name: str
    run: Callable[[argparse.Namespace, Path], None]
    reads: str
    writes: str


#: The build's stages, in the order they run.
STAGES = (
    Stage("collect", stage_collect, "the envs' train tasks and experts",
          "demos/: <part>.jsonl, <part>.done.json, agent.json, val_games.json, search_prior.json"),
    Stage("tokenizer", stage_tokenizer, "demos/ (or the --init-from model)", "tokenizer/"),
    Stage("train", stage_train, "demos/, tokenizer/ (or the --init-from model)", "base/, sft/ (with train.json)"),
    Stage("dagger", stage_dagger, "sft/, demos/", "dagger/round-N/ (rows played, sft/)"),
    Stage("eval", stage_eval, "the final model (--eval-packaged: --out)",
          "eval/ beside the model measured (--eval-packaged: eval-packaged/)"),
    Stage("package", stage_package, "the final model, sft/, dagger/, demos/ stats, eval/",
          "--out: bf16 weights, tokenizer, agentrl.json, README.md"),
    Stage("card", stage_card, "--out/agentrl.json, eval-packaged/", "--out: agentrl.json, README.md"),
)
#: What a build runs when ``--stages`` is not given.
DEFAULT_STAGES = tuple(stage.name for stage in STAGES if stage.name != "card")


def stage_table() -> str:
    """The stages as text, for ``--help``."""
    width = max(len(stage.name) for stage in STAGES)
    lines = [f"  {s.name:<{width}}  reads {s.reads}\n  {'':<{width}}  writes {s.writes}" for s in STAGES]
    return "stages, in order (cached under --work; card runs only by name):\n" + "\n".join(lines)


def main(argv: list[str] | None = None, description: str = "") -> None:
    args = parse_args(argv, f"{description.strip()}\n\n{stage_table()}".strip())
    names = list(DEFAULT_STAGES) if args.stages is None else [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(names) - {stage.name for stage in STAGES})
    if unknown:
        raise SystemExit(f"unknown stage(s) {unknown}; known: {', '.join(stage.name for stage in STAGES)}")
    if args.epochs == 0 and not args.init_from:
        raise SystemExit("--epochs 0 keeps the model it starts from: it needs --init-from MODEL")
    args.work.mkdir(parents=True, exist_ok=True)
    for stage in STAGES:
        if stage.name in names:
            stage.run(args, args.work)
