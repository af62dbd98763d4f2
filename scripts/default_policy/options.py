"""The command line of ``scripts/build_default_policy.py``, and the command that reproduces a build.

Variants that were measured and lost are not options any more; what they were and what they measured is in
``docs/experiments.md``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .common import DEFAULT_OUT, DEFAULT_WORK

#: The options that shape the policy: a build's command names those that differ from their defaults.
SHAPING = ("seed", "alfworld_games", "alfworld_skip_games", "alfworld_labels", "init_from", "list_actions", "vocab",
           "hidden", "intermediate", "layers", "epochs", "sft_mode", "max_candidates", "hard_negatives", "lr",
           "dagger_rounds", "skip_kinds", "object_swaps")


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    # What to run, where.
    add("--stages", default=None, help="comma-separated stages to run (default: all but card)")
    add("--work", type=Path, default=DEFAULT_WORK, help="cache of every stage")
    add("--out", type=Path, default=DEFAULT_OUT, help="where the packaged policy goes")
    add("--seed", type=int, default=0, help="seed of every stage")
    add("--workers", type=int, default=2, help="processes that collect, play DAgger and evaluate")
    add("--threads", type=int, default=min(2, os.cpu_count() or 1), help="torch threads for training")
    # Demonstrations (collect).
    add("--alfworld-games", type=int, default=1200, help="ALFWorld train games, balanced over task types")
    add("--alfworld-skip-games", type=int, default=0,
        help="leave out the first K games of the balanced order (those an --init-from model trained on)")
    add("--alfworld-labels", choices=("planner", "observable"), default="planner",
        help="who labels ALFWorld states: the planner after a short search, or SearchingExpert everywhere")
    add("--skip-kinds", default="alfworld/walkthrough",
        help="demonstration kinds neither trained on nor (ALFWorld episodes) collected")
    add("--webshop-goals", type=int, default=400, help="WebShop train goals played by its expert")
    add("--textworld-games", type=int, default=8, help="TextWorld games played by their walkthroughs")
    add("--crafting-tasks", type=int, default=200, help="Crafting tasks played by its solver")
    add("--collect-minutes", type=float, default=None, help="stop each ALFWorld worker after this long")
    add("--list-actions", action="store_true", help="list the admissible actions in the prompts")
    # Model and SFT (tokenizer, train).
    add("--vocab", type=int, default=4096, help="tokenizer vocabulary size")
    add("--hidden", type=int, default=256, help="Llama hidden size")
    add("--intermediate", type=int, default=768, help="Llama MLP size")
    add("--layers", type=int, default=4, help="Llama layers")
    add("--init-from", type=Path, default=None, help="continue training this model folder instead of a new Llama")
    add("--epochs", type=int, default=1, help="SFT epochs (0 with --init-from: that model unchanged)")
    add("--webshop-demos", type=int, default=400, help="WebShop demonstrations trained on")
    add("--crafting-demos", type=int, default=800, help="Crafting demonstrations trained on")
    add("--sft-mode", choices=("score", "generate", "both"), default="both",
        help="SFT loss: choice among the admissible actions, reply tokens, or both")
    add("--max-candidates", type=int, default=9, help="candidate replies per state in the scoring loss (0: all)")
    add("--hard-negatives", action="store_true", help="scoring-loss candidates with the expert's command word first")
    add("--object-swaps", type=int, default=0, help="counterfactual copies per state that takes the task's object")
    add("--lr", type=float, default=2e-3, help="SFT learning rate")
    add("--batch-size", type=int, default=16, help="SFT batch size (rows)")
    add("--micro-batch-tokens", type=int, default=2048, help="padded tokens per micro-batch (0: one pass)")
    add("--checkpoint-every", type=int, default=100, help="SFT steps between checkpoints")
    add("--max-prompt-tokens", type=int, default=1024, help="prompt tokens kept (the last ones)")
    # DAgger.
    add("--dagger-rounds", type=int, default=0, help="DAgger rounds after SFT")
    add("--dagger-minutes", type=float, default=15.0, help="time each DAgger worker plays per round")
    add("--dagger-replay", type=int, default=3000, help="demonstrations mixed into each DAgger fine-tuning")
    add("--dagger-lr", type=float, default=5e-4, help="DAgger fine-tuning learning rate")
    # Evaluation.
    add("--eval-jobs", default="", help="comma-separated eval jobs to run (default: all)")
    add("--eval-packaged", action="store_true", help="evaluate the packaged policy in --out, for the card stage")
    return parser.parse_args(argv)


def build_command(args: argparse.Namespace) -> str:
    """The command that reproduces this build: the script and the options that shape the policy and differ from
    their defaults."""
    defaults = parse_args([])
    words = ["python scripts/build_default_policy.py"]
    for name in SHAPING:
        value = getattr(args, name)
        if value == getattr(defaults, name):
            continue
        flag = "--" + name.replace("_", "-")
        words.append(flag if value is True else f"{flag} {value}")
    return " ".join(words)
