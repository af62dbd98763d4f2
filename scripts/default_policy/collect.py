"""Stage ``collect``: expert demonstrations of agentrl's own envs, rendered exactly as the ReAct agent prompts.

Every step is a row: the agent's prompt in that state, the expert's reply and the state's candidate replies.

* ALFWorld train games (the balanced first ``--alfworld-games``), by default two episodes per game: a *search*
  episode, which first looks for the task's object in the receptacles where that kind of object is most often
  found in the train games (:func:`~agentrl.envs.alfworld.experts.search_prefix`), then lets the engine's planner
  finish; and a *detour* episode, which plays a random harmless action now and then, every state labelled with the
  planner's way back. ``--alfworld-labels observable`` labels both with
  :class:`~agentrl.envs.alfworld.experts.SearchingExpert` instead; the walkthrough episode is the third kind
  (``--skip-kinds``).
* WebShop train goals with its scripted expert, TextWorld games with their walkthroughs (re-planned), and the
  built-in Crafting env with its solver (fewer steps: ALFWorld is what the policy is for).

Writes ``demos/<part>.jsonl`` and, once a part is complete, ``demos/<part>.done.json`` with its stats.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from agentrl.envs.alfworld.experts import SearchingExpert, search_prefix, search_prior, wanted_object

from .common import agent_settings, done_marker, log, without_games

#: Actions a detour may take instead of the expert's: they never spoil the game.
HARMLESS = ("go to ", "open ", "close ", "examine ")
#: The kinds of ALFWorld episodes played per train game (``--skip-kinds alfworld/<kind>`` leaves one out).
ALFWORLD_KINDS = ("walkthrough", "search", "detour")


def record_step(demos: list[dict], agent: Any, env_name: str, task_id: str, kind: str, obs: str, info: dict,
                action: str) -> bool:
    """Append the row of this state labelled with ``action``; False (nothing appended) if it is not admissible."""
    actions = agent.candidate_actions(info)
    if action not in actions:
        return False
    # The candidates too: the scoring-mode SFT loss is a softmax over them.
    candidates = agent.candidates(info)
    demos.append({"env": env_name, "task_id": task_id, "kind": kind,
                  "prompt": agent.messages(0, obs, info)[0]["content"], "reply": candidates[actions.index(action)],
                  "candidates": candidates})
    return True


def _expert_episode(env: Any, agent: Any, env_name: str, task_id: str, kind: str, demos: list[dict],
                    rng: random.Random, detour_prob: float = 0.0, prefix: list[str] | None = None,
                    max_steps: int = 60, labeller: Callable[[str, dict], str | None] | None = None) -> bool:
    """One episode labelled by the env's expert (``info["expert_action"]``), or by ``labeller(obs, info)``, called
    once per state in order (:class:`SearchingExpert`). ``prefix``: actions played first *as labels* (the search);
    ``detour_prob``: chance per step of playing a random harmless action instead (that step is still labelled
    with the expert's action: the state is what matters, DAgger-style)."""
    obs, info = env.reset(options={"task_id": task_id})
    agent.reset(1)
    prefix = list(prefix or [])
    for _ in range(max_steps):
        expert = labeller(obs, info) if labeller else info.get("expert_action")
        if expert is None:
            break
        if prefix:
            action = prefix.pop(0)
            if action not in info["admissible_actions"]:
                prefix = []
                action = expert
        else:
            action = expert
        record_step(demos, agent, env_name, task_id, kind, obs, info, action)
        if detour_prob and action == expert and rng.random() < detour_prob:
            harmless = [a for a in info["admissible_actions"] if a.startswith(HARMLESS) and a != expert]
            if harmless:
                action = rng.choice(harmless)
        agent.record(0, obs, action)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return bool(info.get("won"))
    return bool(info.get("won"))


def play_alfworld_games(task_ids: list[str], out_path: str, minutes: float | None,
                        play: Callable[[Any, Any, int, str, list[dict], Counter], None],
                        agent_settings: dict[str, Any]) -> dict[str, Any]:
    """The loop of an ALFWorld worker (collection and DAgger): ``play(env, agent, index, task_id, demos, stats)``
    for each game, its rows appended to ``out_path`` when the game is done. Resumable: games already in the file
    (written whole) are not played again. A game the engine cannot play is skipped and counted; no game is started
    after ``minutes``. Returns the stats with the games used."""
    from agentrl.agents.react import ReActAgent

    from agentrl import envs

    env = envs.make("alfworld", expert=True, max_steps=60)
    agent = ReActAgent("alfworld", **agent_settings)
    stats: Counter = Counter()
    done: list[str] = []
    if Path(out_path).is_file():
        with open(out_path) as f:
            done = list(dict.fromkeys(json.loads(line)["task_id"] for line in f))
    games_used: list[str] = list(done)
    start = time.perf_counter()
    with open(out_path, "a") as out:
        for index, task_id in enumerate(task_ids):
            if task_id in done:
                continue
            if minutes is not None and time.perf_counter() - start > 60 * minutes:
                break
            demos: list[dict] = []
            try:
                play(env, agent, index, task_id, demos, stats)
            except Exception as exc:  # noqa: BLE001 -- a game the engine cannot play is skipped, and counted
                stats["failed_games"] += 1
                print(f"skipping {task_id}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                continue
            games_used.append(task_id)
            out.writelines(json.dumps(demo) + "\n" for demo in demos)
            out.flush()
    env.close()
    return {**stats, "games": len(games_used), "demos": sum(1 for _ in open(out_path)),
            "seconds": time.perf_counter() - start, "games_used": games_used}


def collect_alfworld_shard(task_ids: list[str], prior: dict[str, dict[str, int]], seed: int,
                           out_path: str, minutes: float | None, kinds: Collection[str],
                           agent_settings: dict[str, Any], labels: str = "planner") -> dict[str, Any]:
    """Worker: demonstrations of ALFWorld games ``task_ids`` appended to ``out_path``, one episode of each of
    ``kinds`` per game (of :data:`ALFWORLD_KINDS`: the walkthrough, a search and a detour episode); stops taking
    games after ``minutes`` when given.

    ``labels``: ``"planner"``, the search episode searches at most 5 likely receptacles and the engine's planner
    labels every other state, the detour episode's included (the planner knows where the object is: before it is in
    sight, its "go to" is not a function of what the agent has seen); ``"observable"``, every state of both episodes
    is labelled by :class:`SearchingExpert` (search until the object is in sight, then the planner), as DAgger's
    states are."""
    import torch

    torch.set_num_threads(1)
    rng = random.Random(seed)

    def play(env: Any, agent: Any, index: int, task_id: str, demos: list[dict], stats: Counter) -> None:
        def episode(kind: str, **kwargs: Any) -> None:
            stats[f"{kind}_won"] += _expert_episode(env, agent, "alfworld", task_id, kind, demos, rng, **kwargs)

        if "walkthrough" in kinds:
            stats["walk_won"] += _expert_episode(env, agent, "alfworld", task_id, "walkthrough", demos, rng)
        if labels == "observable":
            wanted = wanted_object(env, task_id)
            for kind, detour_prob in (("search", 0.0), ("detour", 0.2)):
                if kind in kinds:
                    searching = SearchingExpert(wanted, prior, rng)
                    episode(kind, labeller=searching, detour_prob=detour_prob)
                    stats["search_labels"] += searching.search_labels
            return
        if "search" in kinds:
            episode("search", prefix=search_prefix(env, task_id, prior, rng))
        if "detour" in kinds:
            episode("detour", detour_prob=0.2)

    return {**play_alfworld_games(task_ids, out_path, minutes, play, agent_settings), "labels": labels}


def collect_simple(env_name: str, env_args: dict, split: str, tasks: int, seed: int, out_path: str,
                   detour_prob: float, agent_settings: dict[str, Any]) -> dict[str, Any]:
    """Demonstrations of a non-ALFWorld env from its expert (one episode per task, optional detours)."""
    if tasks <= 0:  # the part is turned off (e.g. --webshop-goals 0): make no env, so its data need not be installed
        Path(out_path).touch()
        return {"demos": 0}
    from agentrl.agents.react import ReActAgent

    from agentrl import envs

    env = envs.make(env_name, expert=True, **env_args)
    agent = ReActAgent(ReActAgent.family_for_env(env_name), **agent_settings)
    rng = random.Random(seed)
    ids = list(env.unwrapped.task_ids(split))
    rng.shuffle(ids)
    stats: Counter = Counter()
    with open(out_path, "a") as out:
        for task_id in ids[:tasks]:
            demos: list[dict] = []
            stats["won"] += _expert_episode(env, agent, env_name, task_id, "expert", demos, rng,
                                            detour_prob=detour_prob)
            stats["episodes"] += 1
            out.writelines(json.dumps(demo) + "\n" for demo in demos)
    env.close()
    return {**stats, "demos": sum(1 for _ in open(out_path))}


def skip_kinds(args: argparse.Namespace) -> set[str]:
    """The demonstration kinds not trained on (``--skip-kinds``); ALFWorld episode kinds among them are not even
    collected."""
    return {k for k in args.skip_kinds.split(",") if k}


def balanced_games(labels: dict[str, str], count: int, seed: int) -> list[str]:
    """About ``count`` of the games ``labels`` maps to their task type: the same number of each type (all of a type
    that has fewer), each type's drawn in a seeded order, interleaved over types so that a time-limited collection
    stays balanced. The order does not depend on ``count``: the games of a build of K are the first of a larger
    build's, which ``--alfworld-skip-games K`` leaves to the ``--init-from`` model that trained on them."""
    rng = random.Random(seed)
    by_type: dict[str, list[str]] = defaultdict(list)
    for task_id, label in labels.items():
        by_type[label].append(task_id)
    per_type = math.ceil(count / len(by_type))
    picks: list[list[str]] = []
    for label in sorted(by_type):
        ids = sorted(by_type[label])
        rng.shuffle(ids)
        picks.append(ids[:per_type])
    return [ids[i] for i in range(per_type) for ids in picks if i < len(ids)]


def _alfworld_games_and_prior(args: argparse.Namespace, demos_dir: Path) -> tuple[list[str], dict]:
    """The ALFWorld train games of this build (``demos/val_games.json``: the 5% held out for the validation loss)
    and the search prior counted over all train walkthroughs (``demos/search_prior.json``, counted once)."""
    from agentrl import envs

    env = envs.make("alfworld")
    base = env.unwrapped
    train_ids = list(base.task_ids("train"))
    labels = {task_id: base.task(task_id).label for task_id in train_ids}
    chosen = balanced_games(labels, args.alfworld_games, args.seed)[args.alfworld_skip_games:]
    val_games = set(chosen[::20])  # 5% of the games: validation loss only
    (demos_dir / "val_games.json").write_text(json.dumps(sorted(val_games)))
    prior_path = demos_dir / "search_prior.json"
    if not prior_path.is_file():
        log(f"collect: counting the search prior over {len(train_ids)} train walkthroughs")
        prior_path.write_text(json.dumps(search_prior(base.games_root, train_ids), indent=0, sort_keys=True))
    prior = json.loads(prior_path.read_text())
    env.close()
    return chosen, prior


def stage_collect(args: argparse.Namespace, work: Path) -> None:
    """Each part writes ``demos/<part>.jsonl`` and, when complete, ``demos/<part>.done.json`` with its stats; a
    rerun redoes only the parts without a marker. ALFWorld games go to ``--workers`` processes; with
    ``--collect-minutes`` a worker stops taking games after that long (the games used are in the stats)."""
    import multiprocessing as mp

    demos_dir = work / "demos"
    settings = agent_settings(args, work)
    demos_dir.mkdir(parents=True, exist_ok=True)
    (demos_dir / "agent.json").write_text(json.dumps(settings))
    t0 = time.perf_counter()
    chosen, prior = _alfworld_games_and_prior(args, demos_dir)

    kinds = [k for k in ALFWORLD_KINDS if f"alfworld/{k}" not in skip_kinds(args)]
    jobs: list[tuple[str, Any, tuple]] = []
    for i in range(args.workers):
        path = demos_dir / f"alfworld-{i}.jsonl"
        jobs.append((path.stem, collect_alfworld_shard,
                     (chosen[i:: args.workers], prior, args.seed + i, str(path), args.collect_minutes, kinds,
                      settings, args.alfworld_labels)))
    for name, count, detour in (("webshop", args.webshop_goals, 0.1), ("crafting", args.crafting_tasks, 0.1),
                                ("textworld", args.textworld_games, 0.1)):
        jobs.append((name, collect_simple, (name, {}, "train", count, args.seed, str(demos_dir / f"{name}.jsonl"),
                                            detour, settings)))
    todo = [(name, fn, fargs) for name, fn, fargs in jobs if not done_marker(demos_dir / f"{name}.jsonl").is_file()]
    for name, *_ in todo:  # a part that did not finish starts again, ALFWorld shards from their last whole game
        if not name.startswith("alfworld"):
            (demos_dir / f"{name}.jsonl").unlink(missing_ok=True)
    log(f"collect: {len(chosen)} ALFWorld games in {args.workers} processes, then WebShop, Crafting, TextWorld; "
        f"parts to do: {[name for name, *_ in todo] or 'none'}")
    with mp.get_context("spawn").Pool(max(1, min(args.workers, len(todo)))) as pool:
        results = [(name, pool.apply_async(fn, fargs)) for name, fn, fargs in todo]
        for name, result in results:
            stats = result.get()
            done_marker(demos_dir / f"{name}.jsonl").write_text(json.dumps(stats, indent=1))
            log(f"collect: {name} done: {without_games(stats)}")
    log(f"collect: {time.perf_counter() - t0:.0f} s")


def load_demos(work: Path) -> list[dict]:
    """Every collected row, part by part in name order."""
    demos = []
    for path in sorted((work / "demos").glob("*.jsonl")):
        with open(path) as f:
            demos += [json.loads(line) for line in f]
    return demos
