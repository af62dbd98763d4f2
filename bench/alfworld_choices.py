"""Which ALFWorld decisions a scoring policy gets right, on the expert's own states (teacher forcing).

The engine's planner plays every game of a split; in each state it reaches, the policy scores the admissible actions
as it does when it acts (the agent settings of its ``agentrl.json``; those of ``agentrl-tiny`` for a
model folder without one) and its highest-scoring one is compared with the
planner's. The share it gets right is reported per command word of the planner's action (``take``, ``heat``, ...),
with ``take (object)`` counting a take of another instance of the right object as right (the planner's choice
between ``apple 1`` and ``apple 2`` is arbitrary). The planner goes straight to where the object is, which the
policy cannot know, so ``go`` is low by design; ``take`` says whether the policy reads the task's object: in those
states the object is in sight among others, and the task line is the only thing that says which to take.

Closed-loop success (scripts/build_default_policy.py's eval stage, ~15 minutes for 134 games) mixes every
decision with the states the policy's own mistakes lead to; this runs in ~4 minutes on one core and points at the
decision that fails. It prints a table and writes JSON (default ``bench/results/alfworld-choices.json``, with the
previous run's numbers beside this one's)::

    python bench/alfworld_choices.py --model agentrl-tiny [--split eval_out_of_distribution] [--games N]
    python bench/alfworld_choices.py --closed-loop [--temperature 0]    # + why the policy's own episodes fail
    python bench/alfworld_choices.py --model runs/X/sft --agent runs/X/demos/agent.json   # a build's model

``--closed-loop`` also lets the policy play every game itself, as the build's eval stage does (the same rollout
code, one episode per game, greedy by default), and sorts each failed episode by the first thing that went wrong:
the task's object never came into sight (search); it came into sight but the policy only took other objects;
it took another object first and the right one later; it took the right one and failed after that (the
placing, cleaning, heating, cooling or lamp). It also counts the failed episodes whose last 10 actions repeat at
most two distinct actions (a loop). ~15 more minutes for 134 games on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "alfworld-choices.json"


def agent_settings_for(model: str, settings_file: Path | None = None) -> dict:
    """The agent settings ``model`` is driven with: ``settings_file`` (a build's ``demos/agent.json``) when given,
    else its ``agentrl.json``, else those of ``agentrl-tiny`` (a build's unpackaged model folder has none)."""
    from agentrl.models import recommended_agent_settings

    if settings_file is not None:
        return json.loads(settings_file.read_text())
    return recommended_agent_settings(model) or recommended_agent_settings("agentrl-tiny")


def expert_state_choices(model: str, split: str, games: int | None = None, settings_file: Path | None = None) -> dict:
    """Right choices per command word of the planner's action over the planner's states of ``split``."""
    import agentrl.envs as envs
    from agentrl.agents.react import ReActAgent
    from agentrl.models import resolve_model
    from agentrl.policy import HFPolicy, configure_cpu_threads

    configure_cpu_threads(1)
    policy = HFPolicy(resolve_model(model, Path("runs/models")), device="cpu")
    settings = {k: v for k, v in agent_settings_for(model, settings_file).items() if k != "mode"}
    rule = settings.pop("choice_rule", "sum")  # how the model is driven; the agent only renders prompts
    agent = ReActAgent(env_family="alfworld", **settings)
    env = envs.make("alfworld", expert=True)
    task_ids = list(env.unwrapped.task_ids(split))[:games]
    right, total, confusions = Counter(), Counter(), Counter()
    for task_id in task_ids:
        obs, info = env.reset(options={"task_id": task_id})
        agent.reset(1)
        while (expert := info.get("expert_action")) is not None:
            actions = agent.candidate_actions(info)
            if expert not in actions:
                break
            prompt = policy.render(agent.messages(0, obs, info))
            (choice,) = policy.score_choices([prompt], [agent.candidates(info)], temperature=1.0, sample=False,
                                             rule=rule)
            chosen, command = actions[choice.index], expert.split()[0]
            total[command] += 1
            right[command] += chosen == expert
            if command == "take":
                total["take (object)"] += 1
                right["take (object)"] += chosen.split()[:2] == expert.split()[:2]
            if chosen != expert:
                confusions[f"{command} -> {chosen.split()[0]}"] += 1
            agent.record(0, obs, expert)
            obs, _, terminated, truncated, info = env.step(expert)
            if terminated or truncated:
                break
    env.close()
    return {"by_command": {c: {"right": right[c], "states": n, "share": round(100 * right[c] / n, 1)}
                           for c, n in total.most_common()},
            "confusions": dict(confusions.most_common(12)), "games": len(task_ids), "agent": settings}


FAILURES = ("the object never in sight", "saw the object, took only others", "took another object first",
            "took the object, failed later")


def first_failure(task_id: str, steps: list[tuple[str, str, str]]) -> str:
    """Which of :data:`FAILURES` a failed episode of (observation, action, next observation) steps shows first."""
    from agentrl.envs.alfworld.tasks import object_of_task_dir

    obj = re.escape(object_of_task_dir(task_id.split("/")[-2]))
    in_sight = re.compile(rf"\b{obj} \d")
    if not any(in_sight.search(obs) or in_sight.search(next_obs) for obs, _, next_obs in steps):
        return FAILURES[0]
    takes = [action for _, action, _ in steps if action.startswith("take ")]
    right = [bool(re.match(rf"take {obj} \d", action)) for action in takes]
    if not any(right):
        return FAILURES[1]
    return FAILURES[3] if right[0] else FAILURES[2]


def closed_loop_failures(model: str, split: str, games: int | None = None, temperature: float = 0.0,
                         settings_file: Path | None = None) -> dict:
    """The policy plays one episode of each game (the build's eval stage's rollout code); failed episodes by
    :func:`first_failure`, overall and per task type, and how many end in a loop."""
    from agentrl.config import AgentSection, GenerationConfig, from_dict
    from agentrl.evaluation import play_model
    from agentrl.hardware import configure_cpu_threads

    configure_cpu_threads(1)
    settings = from_dict(AgentSection, {**agent_settings_for(model, settings_file), "mode": "score"}, "agent")
    _, batch = play_model("alfworld", model, settings, split=split, episodes=games,
                          generation=GenerationConfig(temperature=temperature))
    overall, by_type, loops = Counter(), {}, 0
    for rollout in batch.trajectories:
        steps = rollout.trajectory.steps
        outcome = "won" if rollout.trajectory.success else first_failure(
            rollout.task_id, [(step.obs, step.action, step.next_obs) for step in steps])
        overall[outcome] += 1
        by_type.setdefault(rollout.task_type, Counter())[outcome] += 1
        loops += outcome != "won" and len({step.action for step in steps[-10:]}) <= 2
    return {"temperature": temperature, "episodes": len(batch.trajectories), "dropped": batch.dropped,
            "outcomes": {k: overall[k] for k in ("won", *FAILURES)},
            "by_type": {t: {k: c[k] for k in ("won", *FAILURES)} for t, c in sorted(by_type.items())},
            "failed_in_a_loop": loops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="agentrl-tiny", help="a named offline model or a model folder")
    parser.add_argument("--split", default="eval_out_of_distribution")
    parser.add_argument("--games", type=int, default=None, help="the first N games of the split (default: all)")
    parser.add_argument("--closed-loop", action="store_true",
                        help="also play the policy itself and sort its failed episodes (closed_loop_failures)")
    parser.add_argument("--temperature", type=float, default=0.0, help="of --closed-loop (0: greedy)")
    parser.add_argument("--agent", type=Path, default=None,
                        help="a JSON of agent settings (a build's demos/agent.json) for a model folder without "
                             "agentrl.json; default: the model's own, else agentrl-tiny's")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    start = time.perf_counter()
    result = expert_state_choices(args.model, args.split, args.games, args.agent)
    if args.closed_loop:
        result["closed_loop"] = closed_loop_failures(args.model, args.split, args.games, args.temperature,
                                                     args.agent)
    result.update(model=args.model, split=args.split, seconds=round(time.perf_counter() - start, 1),
                  machine=f"{platform.machine()}, {os.cpu_count()} CPU cores",
                  date=time.strftime("%Y-%m-%d %H:%M"))
    previous = json.loads(args.out.read_text()) if args.out.is_file() else None
    if previous:
        result["previous"] = {k: previous.get(k) for k in ("model", "split", "date", "by_command", "closed_loop")}
    print(f"{args.model} on the planner's states of {args.split} ({result['games']} games, {result['seconds']:.0f} s)")
    for command, row in result["by_command"].items():
        before = (previous or {}).get("by_command", {}).get(command)
        was = f"   (previous run: {before['share']:.0f}%)" if before else ""
        print(f"  {command:15s} {row['right']:4d}/{row['states']:<4d} {row['share']:5.1f}%{was}")
    print("  most frequent wrong choices:", ", ".join(f"{k} ({v})" for k, v in result["confusions"].items()))
    if args.closed_loop:
        loop = result["closed_loop"]
        print(f"closed loop at T={loop['temperature']}: {loop['episodes']} episodes "
              f"({loop['dropped']} dropped to env failures)")
        for outcome, n in loop["outcomes"].items():
            print(f"  {outcome:36s} {n:4d}  {100 * n / max(loop['episodes'], 1):5.1f}%")
        print(f"  failed in a loop (last 10 actions: at most 2 distinct) {loop['failed_in_a_loop']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
