"""Stage ``package``: the final policy as bf16 safetensors, its tokenizer, ``agentrl.json`` and model card in ``--out``.

``agentrl.json`` is the build record: how the policy is meant to be driven (read back by the trainer), its
architecture, data, training and DAgger reports, the eval results, and the command that reproduces it
(:func:`~default_policy.options.build_command`). ``README.md`` is rendered from it (:mod:`default_policy.card`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from .card import card_result, model_card
from .common import CHOICE_RULE, agent_settings, done_stats, log, without_games
from .dagger import dagger_rounds, final_model
from .evaluate import MODEL_AGENTS, eval_rows
from .options import build_command

#: The most the packaged policy may weigh on disk: it ships inside the Python package.
SIZE_BUDGET = 16 * 2**20


def _results(work: Path, final: Path, train: dict, dagger: list[dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """The eval results of the final model (and of the scripted agents), and those of the model DAgger started
    from (empty without DAgger)."""
    rows = {**eval_rows(work / "eval", model_agents=False), **eval_rows(final.parent / "eval", model_agents=True)}
    # The SFT model's own results, when DAgger came after it: the card shows what DAgger changed.
    before = eval_rows(work / "eval", model_agents=True) if dagger else {}
    if not train["epochs"]:  # the model started from was kept (--epochs 0): its results are those of these weights
        started = (train.get("init_from") or {}).get("results", {})
        before = before or {name: r for name, r in started.items() if r["agent"] in MODEL_AGENTS}
        # Scripted agents do not depend on the model: carried over where this build did not measure them again.
        rows = {**{name: r for name, r in started.items() if r["agent"] not in MODEL_AGENTS}, **rows}
    return rows, before


def stage_package(args: argparse.Namespace, work: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = final_model(work, args.dagger_rounds)
    train = json.loads((work / "sft" / "train.json").read_text())
    dagger = []  # each round's fine-tuning report with its collection's stats
    for folder in dagger_rounds(work, args.dagger_rounds):
        report = json.loads((folder / "sft" / "train.json").read_text())
        report["collect"] = {name: without_games(stats) for name, stats in done_stats(folder).items()}
        dagger.append(report)
    rows, before = _results(work, final, train, dagger)
    collect = done_stats(work / "demos")
    staging = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.bfloat16)
    model.save_pretrained(staging, safe_serialization=True)
    AutoTokenizer.from_pretrained(final).save_pretrained(staging)
    games = len({g for k, v in collect.items() if k.startswith("alfworld") for g in v.get("games_used", [])})
    earlier = (train.get("init_from") or {}).get("build")  # the build this one continued, if any
    config = model.config
    build = {
        # How the policy is meant to be driven: written next to the weights (agentrl.json), read by the trainer.
        "name": "agentrl-tiny", "agent": {**agent_settings(args, work), "mode": "score", "choice_rule": CHOICE_RULE},
        "seed": args.seed,
        "architecture": {"hidden": config.hidden_size, "intermediate": config.intermediate_size,
                         "layers": config.num_hidden_layers, "vocab": config.vocab_size,
                         "parameters": train["parameters"], "tied_embeddings": bool(config.tie_word_embeddings)},
        "data": {name: without_games(stats) for name, stats in collect.items()},
        "alfworld_train_games": games + (earlier or {}).get("alfworld_train_games", 0),
        "train": train, "dagger": dagger,
        "results": {name: card_result(r) for name, r in rows.items()},
        "results_before_dagger": {name: card_result(r) for name, r in before.items()},
        "built": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores",
        "command": build_command(args),
    }
    if earlier:
        build["continued_from"] = earlier
    (staging / "agentrl.json").write_text(json.dumps(build, indent=1))
    (staging / "README.md").write_text(model_card(build, rows, before))
    shutil.rmtree(args.out, ignore_errors=True)
    staging.rename(args.out)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    log(f"package: {args.out} ({size / 2**20:.1f} MiB)")
    if size > SIZE_BUDGET:
        raise SystemExit(f"the packaged policy is {size / 2**20:.1f} MiB, over the 16 MiB budget")
