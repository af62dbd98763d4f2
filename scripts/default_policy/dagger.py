"""Stage ``dagger``: ``--dagger-rounds`` rounds of DAgger (Ross et al. 2011) on ALFWorld train games; 0 by default.

SFT teaches only the states the expert reaches; after one wrong move the SFT policy repeats it to the step limit.
Each round the current policy plays the train games itself (once greedily, once sampled at T=0.4), every state it
reaches is labelled by :class:`~agentrl.envs.alfworld.experts.SearchingExpert` (what an expert that sees only what
the agent sees would do), and it is fine-tuned on those rows plus a replay of the demonstrations. Writes
``dagger/round-N/`` (the rows played and ``sft/``). Why it is off by default: docs/experiments.md.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.envs.alfworld.experts import SearchingExpert, wanted_object

from .collect import play_alfworld_games, record_step
from .common import CHOICE_RULE, agent_settings, done_marker, done_stats, log, validation_games, without_games
from .train import fit, training_rows

#: The temperatures each game is played at per round: greedy, then sampled.
TEMPERATURES = [0.0, 0.4]


def _policy_episode(env: Any, agent: Any, policy: Any, task_id: str, kind: str, demos: list[dict],
                    temperature: float, seed: int, max_steps: int = 30, stuck_after: int = 3,
                    expert: Callable[[str, dict, str], str | None] | None = None) -> tuple[bool, list[str]]:
    """One episode played by ``policy`` (choosing among the admissible actions, as the shipped agent does), every
    state it reaches labelled with ``expert``'s action (Ross et al. 2011, DAgger; default: the planner's,
    ``info["expert_action"]``; the build uses :class:`SearchingExpert`). The episode ends early once the
    policy has made the same move from the same observation ``stuck_after`` times: it is in a loop (repeating one
    move, or taking an object and putting it back), the states after that differ only in the prompt's list of
    earlier actions, and the first few of them carry the lesson. Returns whether it won and the actions played."""
    obs, info = env.reset(options={"task_id": task_id})
    agent.reset(1)
    moves: Counter = Counter()
    played: list[str] = []
    label = expert or (lambda obs, info, proposed: info.get("expert_action"))
    for step in range(max_steps):
        prompt = policy.render(agent.messages(0, obs, info))
        (choice,) = policy.score_choices([prompt], [agent.candidates(info)], temperature=max(temperature, 1e-6),
                                         sample=temperature > 0, seed=seed * 1_000_003 + step, rule=CHOICE_RULE)
        action = agent.parse(choice.text).action
        expert_action = label(obs, info, action)
        if expert_action is None:
            break
        if record_step(demos, agent, "alfworld", task_id, kind, obs, info, expert_action):
            demos[-1]["played"] = choice.text  # the reply the policy chose: always a candidate of the SFT loss
        agent.record(0, obs, action)
        played.append(action)
        next_obs, _, terminated, truncated, info = env.step(action)
        moves[obs, action] += 1
        if terminated or truncated:
            return bool(info.get("won")), played
        if moves[obs, action] >= stuck_after:
            break
        obs = next_obs
    return False, played


def dagger_alfworld_shard(model: str, task_ids: list[str], prior: dict[str, dict[str, int]],
                          temperatures: list[float], seed: int, out_path: str, minutes: float | None,
                          agent_settings: dict[str, Any]) -> dict[str, Any]:
    """Worker: one episode of policy ``model`` per game and temperature (:func:`_policy_episode`), labelled by
    :class:`SearchingExpert`, appended to ``out_path`` game by game (resumable); stops taking games after
    ``minutes``."""
    import torch

    torch.set_num_threads(1)
    from agentrl.policy import HFPolicy

    policy = HFPolicy(model, device="cpu")

    def play(env: Any, agent: Any, index: int, task_id: str, demos: list[dict], stats: Counter) -> None:
        wanted = wanted_object(env, task_id)
        for temperature in temperatures:
            won, _ = _policy_episode(env, agent, policy, task_id, f"dagger-T{temperature:g}", demos, temperature,
                                     seed + index, expert=SearchingExpert(wanted, prior))
            stats[f"won_T{temperature:g}"] += won

    return play_alfworld_games(task_ids, out_path, minutes, play, agent_settings)


def dagger_rounds(work: Path, rounds: int) -> list[Path]:
    """The folders of DAgger rounds 1..``rounds`` that finished, in order (a cache may hold more rounds than the
    build asks for: they are not used)."""
    folders = [work / "dagger" / f"round-{r}" for r in range(1, rounds + 1)]
    return [folder for folder in folders if (folder / "sft" / "train.json").is_file()]


def final_model(work: Path, rounds: int) -> Path:
    """The policy the build ends with: the last finished DAgger round's (of the first ``rounds``), else the SFT
    model."""
    finished = dagger_rounds(work, rounds)
    return finished[-1] / "sft" if finished else work / "sft"


def _play_round(args: argparse.Namespace, r: int, previous: Path, games: list[str], prior: dict,
                settings: dict[str, Any], folder: Path) -> list[dict]:
    """Round ``r``'s play: policy ``previous`` on ``games`` in ``--workers`` processes for ``--dagger-minutes``
    (the shards not finished yet); returns every row of the round."""
    import multiprocessing as mp

    jobs = [(folder / f"alfworld-{i}.jsonl",
             (str(previous), games[i:: args.workers], prior, TEMPERATURES, args.seed + 100 * r + i))
            for i in range(args.workers)]
    todo = [(path, fargs) for path, fargs in jobs if not done_marker(path).is_file()]
    if todo:
        log(f"dagger {r}: playing {previous} on up to {len(games)} train games in {args.workers} processes "
            f"for {args.dagger_minutes:g} min")
        with mp.get_context("spawn").Pool(len(todo)) as pool:
            pending = [(path, pool.apply_async(dagger_alfworld_shard,
                                               (*fargs, str(path), args.dagger_minutes, settings)))
                       for path, fargs in todo]
            for path, result in pending:
                stats = result.get()
                done_marker(path).write_text(json.dumps(stats, indent=1))
                log(f"dagger {r}: {path.stem}: {without_games(stats)}")
    rows: list[dict] = []
    for path, _ in jobs:
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    return rows


def _fine_tune_round(args: argparse.Namespace, work: Path, r: int, previous: Path, dagger_rows: list[dict],
                     train_rows: list[dict], val_rows: list[dict], out: Path) -> None:
    """Round ``r``'s fine-tuning of ``previous`` on all rounds' rows so far plus ``--dagger-replay`` demonstrations,
    one epoch at ``--dagger-lr``; the model and its report go to ``out``."""
    import torch

    from agentrl.policy import HFPolicy
    from agentrl.sft import checkpoint_dir_for

    torch.set_num_threads(args.threads)
    policy = HFPolicy(str(previous), device="cpu")
    replay = random.Random(args.seed + r).sample(train_rows, min(args.dagger_replay, len(train_rows)))
    report = fit(policy, dagger_rows + replay, val_rows, args, args.dagger_lr, 1, f"dagger {r}", out)
    report["round"], report["from"] = r, str(previous.relative_to(work))
    report["dagger_rows"], report["replay_rows"] = len(dagger_rows), len(replay)
    policy.save_pretrained(out)
    (out / "train.json").write_text(json.dumps(report, indent=1))
    shutil.rmtree(checkpoint_dir_for(out))
    log(f"dagger {r}: fine-tuned in {report['seconds']:.0f} s")


def stage_dagger(args: argparse.Namespace, work: Path) -> None:
    """Round r plays the previous round's policy (the SFT model first) on the train games the collection used (not
    the validation ones), each game once greedily and once sampled at T=0.4, every state reached labelled by
    :class:`SearchingExpert` (:func:`_policy_episode`); it then fine-tunes that policy on all rounds' rows so far
    plus a replay of the original demonstrations (so that WebShop, Crafting and the expert's own states are not
    forgotten)."""
    if args.dagger_rounds <= 0:
        return
    settings = agent_settings(args, work)
    val_games = validation_games(work)
    games = [g for name, stats in done_stats(work / "demos").items() if name.startswith("alfworld")
             for g in stats["games_used"] if g not in val_games]
    random.Random(args.seed).shuffle(games)
    prior = json.loads((work / "demos" / "search_prior.json").read_text())
    train_rows, val_rows = training_rows(args, work)
    previous = work / "sft"
    dagger_rows: list[dict] = []
    for r in range(1, args.dagger_rounds + 1):
        folder = work / "dagger" / f"round-{r}"
        folder.mkdir(parents=True, exist_ok=True)
        dagger_rows += _play_round(args, r, previous, games, prior, settings, folder)
        out = folder / "sft"
        if not (out / "train.json").is_file():
            _fine_tune_round(args, work, r, previous, dagger_rows, train_rows, val_rows, out)
        previous = out
