"""Which scoring rule picks the right admissible action: summed or per-token mean log-likelihood (``agent.choice_rule``).

For each case (a model on an env), two paired measurements, both greedy:

- **expert states**: the env's expert plays ``--tasks`` tasks; in every state it reaches, the model scores the
  admissible actions once and each rule's top action is compared with the expert's (one forward gives both rules,
  so the comparison is exactly paired). Reported: the share right per rule, the paired difference (mean − sum) with a
  95% bootstrap CI over tasks (states of a task are not independent), and how often each rule picks the shortest
  admissible action (the symptom of the summed rule on a new env: fewer tokens, fewer nats to pay);
- **closed loop**: the model plays the same tasks under each rule (temperature 0); success per rule and the paired
  difference with its 95% bootstrap CI over tasks.

Cases: ``agentrl-tiny`` and SmolLM2-135M-Instruct (``agentrl models install smollm2``) on Crafting, ALFWorld
(``$ALFWORLD_DATA``) and ``examples/errands_env.py`` (a plain Gymnasium env, new to both). Each case is cached in
``bench/results/choice_rule/``; the table goes to ``bench/results/choice_rule.json``, stdout and docs/results.md's
block between the ``choice-rule:begin/end`` markers.

    python bench/choice_rule.py                                  # every case whose model and data are here
    python bench/choice_rule.py --cases errands-tiny,errands-smollm2 --tasks 50
    python bench/choice_rule.py --env mypkg.env:MyEnv --model PATH --split test --tasks 40   # your own case
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_block import replace_block

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "choice_rule.json"
CACHE = ROOT / "bench" / "results" / "choice_rule"
RULES = ("sum", "mean")
#: name -> (env, split, model, tasks for expert states, tasks for closed loop). SmolLM2's cases are small: ~1 s a
#: decision on one core (ALFWorld's long prompts: no closed loop).
CASES = {
    "crafting-tiny": ("crafting", "eval_in_distribution", "agentrl-tiny", 100, 100),
    "crafting-smollm2": ("crafting", "eval_in_distribution", "smollm2-135m", 30, 10),
    "alfworld-tiny": ("alfworld", "eval_out_of_distribution", "agentrl-tiny", 40, 40),
    "alfworld-smollm2": ("alfworld", "eval_out_of_distribution", "smollm2-135m", 10, 0),
    "errands-tiny": ("errands_env:Errands", "test", "agentrl-tiny", 100, 100),
    "errands-smollm2": ("errands_env:Errands", "test", "smollm2-135m", 40, 20),
}


def rule_scores(seq_logliks: list[float], lengths: list[int]) -> dict[str, np.ndarray]:
    """Each rule's candidate scores, by the function the policy itself uses."""
    import torch

    from agentrl.policy import choice_scores

    total = torch.tensor(seq_logliks, dtype=torch.float64)
    return {rule: choice_scores(total, lengths, rule).numpy() for rule in RULES}


def expert_states(env_name: str, split: str, model: str, tasks: int) -> dict:
    """Per task: for each rule, the number of expert states it got right and that picked the shortest action."""
    from agentrl.agents.react import ReActAgent

    from agentrl import envs
    from agentrl.config import resolve_agent_settings
    from agentrl.models import resolve_model
    from agentrl.policy import HFPolicy

    settings = resolve_agent_settings(model)
    policy = HFPolicy(resolve_model(model, ROOT / "runs" / "models"), device="cpu")
    agent = ReActAgent(env_family=ReActAgent.family_for_env(env_name), history_length=settings.history_length,
                       think=settings.think, action_memory=settings.action_memory, list_actions=settings.list_actions)
    env = envs.make(env_name, expert=True)
    per_task = []
    for task_id in list(env.unwrapped.task_ids(split))[:tasks]:
        obs, info = env.reset(options={"task_id": task_id})
        agent.reset(1)
        row = {"states": 0, **{f"{r}_right": 0 for r in RULES}, **{f"{r}_shortest": 0 for r in RULES}}
        while (expert := info.get("expert_action")) is not None:
            actions = agent.candidate_actions(info)
            if expert not in actions or len(actions) < 2:
                break
            prompt = policy.render(agent.messages(0, obs, info))
            (choice,) = policy.score_choices([prompt], [agent.candidates(info)], sample=False, rule="sum")
            lengths = [len(ids) for ids in choice.choice_ids]
            shortest = int(np.argmin(lengths))
            row["states"] += 1
            for rule, scores in rule_scores(choice.seq_logliks, lengths).items():
                best = int(np.argmax(scores))
                row[f"{rule}_right"] += actions[best] == expert
                row[f"{rule}_shortest"] += best == shortest
            agent.record(0, obs, expert)
            obs, _, terminated, truncated, info = env.step(expert)
            if terminated or truncated:
                break
        per_task.append(row)
    env.close()
    return {"per_task": per_task}


def closed_loop(env_name: str, split: str, model: str, tasks: int) -> dict:
    from agentrl.evaluation import evaluate_model

    out: dict = {rule: {"won": [], "wall_s": 0.0} for rule in RULES}
    for rule in RULES if tasks else ():
        report = evaluate_model(env_name, model, split=split, episodes=tasks, temperature=0.0, choice_rule=rule,
                                mode="score", cache_dir=ROOT / "runs" / "models")
        out[rule] = {"won": [bool(e.won) for e in report.episodes], "wall_s": report.wall_time_s}
    return out


def paired_ci(a: np.ndarray, b: np.ndarray, weights: np.ndarray | None = None, n_boot: int = 2000,
              seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``b − a`` (a ratio of sums when ``weights`` count items per cluster) and its 95% bootstrap CI,
    resampling the clusters (tasks)."""
    weights = np.ones_like(a, dtype=np.float64) if weights is None else np.asarray(weights, dtype=np.float64)
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(diff), size=(n_boot, len(diff)))
    boot = diff[index].sum(1) / np.maximum(weights[index].sum(1), 1e-12)
    return float(diff.sum() / weights.sum()), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def summarise(name: str, data: dict) -> dict:
    tasks = data["expert"]["per_task"]
    states = np.array([t["states"] for t in tasks], dtype=np.float64)
    row: dict = {"case": name, "env": data["env"], "model": data["model"], "tasks": len(tasks),
                 "states": int(states.sum())}
    for rule in RULES:
        row[f"expert_{rule}"] = 100 * sum(t[f"{rule}_right"] for t in tasks) / states.sum()
        row[f"shortest_{rule}"] = 100 * sum(t[f"{rule}_shortest"] for t in tasks) / states.sum()
    diff, lo, hi = paired_ci(np.array([t["sum_right"] for t in tasks]), np.array([t["mean_right"] for t in tasks]),
                             weights=states)
    row["expert_diff"] = [100 * diff, 100 * lo, 100 * hi]
    loop = data["closed_loop"]
    won = {rule: np.array(loop[rule]["won"], dtype=np.float64) for rule in RULES}
    row["closed_loop_tasks"] = len(won["sum"])
    if not len(won["sum"]):
        return {**row, "success_sum": float("nan"), "success_mean": float("nan"), "success_diff": [float("nan")] * 3}
    for rule in RULES:
        row[f"success_{rule}"] = 100 * won[rule].mean()
    diff, lo, hi = paired_ci(won["sum"], won["mean"])
    row["success_diff"] = [100 * diff, 100 * lo, 100 * hi]
    return row


def available(model: str, env: str) -> str | None:
    """Why a case cannot run here, or None."""
    from agentrl.models.registry import list_models

    if env == "alfworld" and not os.environ.get("ALFWORLD_DATA"):
        return "ALFWORLD_DATA is not set"
    ready = {info.name: info for info in list_models()}
    if model in ready and not ready[model].available:
        return f"{model} is not ready: {ready[model].how}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="Comma-separated case names (default: all).")
    parser.add_argument("--tasks", type=int, default=None, help="Override every case's task count.")
    parser.add_argument("--env", default=None, help="Measure one case of your own: this env (with --model).")
    parser.add_argument("--model", default=None, help="The model of your own case.")
    parser.add_argument("--split", default=None, help="The split of your own case (default: the env's last).")
    args = parser.parse_args()
    if args.env or args.model:
        if not (args.env and args.model):
            parser.error("--env and --model go together")
        from agentrl import envs

        split = args.split or envs.make(args.env).unwrapped.splits[-1]
        name = f"{args.env}-{Path(args.model).name}".replace(":", "_").replace("/", "_")
        CASES[name] = (args.env, split, args.model, args.tasks or 40, args.tasks or 20)
        args.cases = name
    sys.path.insert(0, str(ROOT / "examples"))  # errands_env
    from agentrl.hardware import configure_cpu_threads

    configure_cpu_threads(1)
    CACHE.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.cases.split(","):
        env_name, split, model, n_expert, n_loop = CASES[name]
        n_expert, n_loop = (args.tasks, args.tasks) if args.tasks else (n_expert, n_loop)
        path = CACHE / f"{name}-{n_expert}-{n_loop}.json"
        if not path.is_file():
            reason = available(model, env_name)
            if reason:
                print(f"skip {name}: {reason}", flush=True)
                continue
            t0 = time.perf_counter()
            data = {"env": env_name, "split": split, "model": model,
                    "expert": expert_states(env_name, split, model, n_expert),
                    "closed_loop": closed_loop(env_name, split, model, n_loop)}
            data["wall_s"] = time.perf_counter() - t0
            path.write_text(json.dumps(data))
            print(f"{name}: {data['wall_s']:.0f} s", flush=True)
        rows.append(summarise(name, json.loads(path.read_text())))
    print(f"{'case':18} {'states':>6} {'expert sum':>10} {'mean':>6} {'mean-sum [95% CI]':>24} {'shortest s/m':>13} "
          f"{'tasks':>5} {'success sum':>11} {'mean':>6} {'mean-sum [95% CI]':>24}")
    for r in rows:
        d, s = r["expert_diff"], r["success_diff"]
        print(f"{r['case']:18} {r['states']:>6} {r['expert_sum']:>10.1f} {r['expert_mean']:>6.1f} "
              f"{d[0]:>+7.1f} [{d[1]:+6.1f}, {d[2]:+6.1f}] {r['shortest_sum']:>6.0f}/{r['shortest_mean']:<6.0f} "
              f"{r['closed_loop_tasks']:>5} {r['success_sum']:>11.1f} {r['success_mean']:>6.1f} "
              f"{s[0]:>+7.1f} [{s[1]:+6.1f}, {s[2]:+6.1f}]")
    if not (args.env or args.model):  # the shipped cases: the repository's record
        RESULTS.write_text(json.dumps({"rows": rows, "rules": RULES}, indent=1))
        write_block(rows)


def write_block(rows: list[dict]) -> None:
    """docs/results.md's generated table (between the ``choice-rule:begin/end`` markers)."""
    def ci(d: list[float]) -> str:
        return "–" if math.isnan(d[0]) else f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]"

    def pct(x: float) -> str:
        return "–" if math.isnan(x) else f"{x:.1f}"

    header = ("| model | env | expert states (tasks) | right: sum | right: mean | mean − sum [95% CI] | shortest "
              "picked: sum / mean | closed-loop tasks | success: sum | success: mean | mean − sum [95% CI] |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['env']} | {r['states']} ({r['tasks']}) | {pct(r['expert_sum'])} | "
                     f"{pct(r['expert_mean'])} | {ci(r['expert_diff'])} | {r['shortest_sum']:.0f}% / "
                     f"{r['shortest_mean']:.0f}% | {r['closed_loop_tasks'] or '–'} | {pct(r['success_sum'])} | "
                     f"{pct(r['success_mean'])} | {ci(r['success_diff'])} |")
    replace_block(ROOT / "docs" / "results.md", "choice-rule", "\n".join(lines))


if __name__ == "__main__":
    main()
