"""What the stages share: where things go, how the agent prompts, logging, and the cache's completion markers."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORK = ROOT / "runs" / "default-policy"
DEFAULT_OUT = ROOT / "src" / "agentrl" / "assets" / "policies" / "tiny"
#: How the ReAct agent prompts the policy, in collection and evaluation alike (the trainer reads it back from
#: agentrl.json): no <think>, the last 2 steps in full, and the actions of up to 12 older steps in one line, so
#: that the policy can see which receptacles it has searched already. Without ``--list-actions`` the prompts have
#: no list of admissible actions (``list_actions: False``); the settings a cache was collected with are kept in
#: ``demos/agent.json`` (:func:`agent_settings`).
AGENT = {"think": False, "history_length": 2, "action_memory": 12}
#: The scoring rule the policy is trained and driven with: the summed sequence log-likelihood (what it was built
#: with; agentrl's default for other models may differ, so the recipe and the packaged agentrl.json say it).
CHOICE_RULE = "sum"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def agent_settings(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The ReAct agent settings of this build: those the cache's demonstrations were rendered with
    (``demos/agent.json``; a cache from before that file used :data:`AGENT`), else those the arguments ask for.
    Training, DAgger, evaluation and the packaged ``agentrl.json`` must all prompt as collection did."""
    asked = {**AGENT, "list_actions": args.list_actions}
    path = work / "demos" / "agent.json"
    if path.is_file():
        cached = json.loads(path.read_text())
    elif (work / "demos").is_dir():
        cached = {**AGENT, "list_actions": True}
    else:
        return asked
    if cached != asked:
        raise SystemExit(f"{work} was collected with agent settings {cached}, not {asked}: pass the same "
                         f"--list-actions or another --work")
    return cached


def done_marker(path: Path) -> Path:
    """The file that says a part of the cache (``demos/<part>.jsonl``) is complete; it holds the part's stats."""
    return path.with_suffix(".done.json")


def done_stats(folder: Path) -> dict[str, dict]:
    """The stats of the finished collection parts in ``folder`` (their done markers), by part name."""
    return {p.name.removesuffix(".done.json"): json.loads(p.read_text()) for p in sorted(folder.glob("*.done.json"))}


def without_games(stats: dict[str, Any]) -> dict[str, Any]:
    """A part's stats without its list of games (for logs and the model card)."""
    return {k: v for k, v in stats.items() if k != "games_used"}


def validation_games(work: Path) -> set[str]:
    """The games held out for the validation loss (chosen by the collect stage)."""
    return set(json.loads((work / "demos" / "val_games.json").read_text()))
