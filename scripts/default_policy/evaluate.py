"""Stage ``eval``: success per task type of the build's final policy, and of the random and expert agents.

ALFWorld on ``eval_out_of_distribution`` (valid_unseen, all 134 games) and ``eval_in_distribution`` (valid_seen,
140), choosing the highest-scoring admissible action (``greedy``, as the issue's reference was measured), sampling
it at temperature 0.4 as the trainer evaluates (``score``), and by greedy free generation (``generate``); plus
WebShop, TextWorld and Crafting. One job per (env, split, agent), ``--workers`` at a time; each result is a JSON file
beside the model it measured (:func:`results_dir`), so a rerun runs only the missing jobs. ``--eval-packaged``
measures the packaged policy in ``--out`` instead, for the ``card`` stage.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .common import CHOICE_RULE, agent_settings, log
from .dagger import final_model

#: (job name, env, split, episodes (None: all), agent). Agents: "greedy" (the highest-scoring admissible action,
#: as the issue's reference numbers were measured), "score" (sampled from the scoring policy at temperature 0.4, as
#: the trainer evaluates), "generate" (free generation, greedy), "random" and "expert" (scripted).
EVAL_JOBS = (  # in the order they start: the measurements the issue names first, the longest last
    ("alfworld-unseen-greedy", "alfworld", "eval_out_of_distribution", None, "greedy"),
    ("alfworld-seen-greedy", "alfworld", "eval_in_distribution", None, "greedy"),
    # A random agent plays all 50 steps of every game: about 1.4 s a game, engine time only.
    ("alfworld-unseen-random", "alfworld", "eval_out_of_distribution", None, "random"),
    ("alfworld-seen-random", "alfworld", "eval_in_distribution", None, "random"),
    ("alfworld-unseen-expert", "alfworld", "eval_out_of_distribution", None, "expert"),
    ("alfworld-seen-expert", "alfworld", "eval_in_distribution", None, "expert"),
    ("webshop-score", "webshop", "eval", 100, "score"),
    ("webshop-random", "webshop", "eval", 100, "random"),
    ("crafting-score", "crafting", "eval_in_distribution", 100, "score"),
    ("crafting-random", "crafting", "eval_in_distribution", 100, "random"),
    ("textworld-score", "textworld", None, 5, "score"),
    ("textworld-random", "textworld", None, 5, "random"),
    ("alfworld-unseen-score", "alfworld", "eval_out_of_distribution", None, "score"),
    ("alfworld-seen-score", "alfworld", "eval_in_distribution", None, "score"),
    ("alfworld-unseen-generate", "alfworld", "eval_out_of_distribution", None, "generate"),
)
#: How each model-driven agent of EVAL_JOBS is run: (agent.mode, temperature).
MODEL_AGENTS = {"greedy": ("score", 0.0), "score": ("score", 0.4), "generate": ("generate", 0.0)}


def run_eval_job(name: str, env_name: str, split: str | None, episodes: int | None, agent: str, model: str,
                 seed: int, workers: int, agent_settings: dict[str, Any]) -> dict[str, Any]:
    """Worker: one job of :data:`EVAL_JOBS` on ``model``; its success per task type."""
    import torch

    torch.set_num_threads(1)
    from agentrl.agents.scripted import ExpertAgent, RandomAgent

    from agentrl import envs, evaluate_model
    from agentrl.evaluation import evaluate

    t0 = time.perf_counter()
    if agent in MODEL_AGENTS:
        mode, temperature = MODEL_AGENTS[agent]
        report = evaluate_model(env_name, model, split=split, episodes=episodes, mode=mode,
                                **{"choice_rule": CHOICE_RULE, **agent_settings},
                                temperature=temperature, workers=workers, seed=seed)
    else:
        env = envs.make(env_name, expert=agent == "expert")
        split = split or env.unwrapped.splits[-1]
        scripted = ExpertAgent() if agent == "expert" else RandomAgent(seed=seed)
        report = evaluate(env, scripted, split=split, episodes=episodes, env_name=env_name, agent_name=agent)
        env.close()
    return {"job": name, "env": env_name, "split": report.split, "agent": agent, "by_type": report.by_type(),
            "seconds": time.perf_counter() - t0}


def results_dir(work: Path, model: Path, agent: str) -> Path:
    """Where an eval job's result goes: beside the model it measured (``<work>/eval`` for the SFT model,
    ``<work>/dagger/round-N/eval`` after DAgger); the scripted agents' results do not depend on the model and are
    kept in ``<work>/eval``."""
    return (model.parent if agent in MODEL_AGENTS else work) / "eval"


def packaged_results_dir(work: Path) -> Path:
    """Where ``--eval-packaged`` puts the results of every job it runs on the packaged policy."""
    return work / "eval-packaged"


def eval_rows(folder: Path, model_agents: bool) -> dict[str, dict]:
    """The eval results in ``folder`` by job name: the model-driven agents' or the scripted ones'."""
    rows = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    return {name: row for name, row in rows.items() if (row["agent"] in MODEL_AGENTS) == model_agents}


def _packaged_agent_settings(out: Path) -> dict[str, Any]:
    """The agent settings a packaged policy is driven with (its ``agentrl.json``), as :func:`run_eval_job` takes
    them."""
    from agentrl.models import AGENT_SETTINGS_FILE, recommended_agent_settings

    settings = recommended_agent_settings(str(out))
    if not settings:
        raise SystemExit(f"--eval-packaged: no packaged policy in {out} (no agent settings in its "
                         f"{AGENT_SETTINGS_FILE}); run the package stage first or pass --out")
    return {k: v for k, v in settings.items() if k != "mode"}


def stage_eval(args: argparse.Namespace, work: Path) -> None:
    import multiprocessing as mp

    model = args.out if args.eval_packaged else final_model(work, args.dagger_rounds)

    def folder_of(agent: str) -> Path:
        return packaged_results_dir(work) if args.eval_packaged else results_dir(work, model, agent)

    wanted = [j for j in EVAL_JOBS if not args.eval_jobs or j[0] in args.eval_jobs.split(",")]
    todo = [j for j in wanted if not (folder_of(j[4]) / f"{j[0]}.json").is_file()]
    log(f"eval: {model}: {len(todo)} of {len(wanted)} jobs to run in {args.workers} processes")
    with mp.get_context("spawn").Pool(args.workers) as pool:
        settings = (_packaged_agent_settings(args.out) if args.eval_packaged else agent_settings(args, work))
        pending = [(job, pool.apply_async(run_eval_job, (*job, str(model), args.seed, 0, settings))) for job in todo]
        for (name, *_, agent), result in pending:
            row = result.get()
            folder = folder_of(agent)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.json").write_text(json.dumps(row, indent=1))
            summary = row["by_type"]["All"]
            log(f"eval: {name}: success {summary['success']:.1f}% over {summary['n']:.0f} episodes "
                f"({row['seconds']:.0f} s)")
