"""Does training raise success? SFT warm start from the expert, then RL, on the built-in Crafting env (CPU, minutes).

Pipeline (what a user on a laptop runs, at a small scale):

1. build a small random Llama with a domain BPE tokenizer trained on Crafting prompts;
2. SFT it briefly on expert demonstrations (scoring mode: softmax over admissible actions), so that it succeeds
   sometimes — RL from a random policy on a sparse multi-step task sees almost no successes;
3. RL with the chosen algorithm (``--algo``) through the real :class:`~agentrl.trainer.Trainer` on a fixed training
   set (``--train-tasks 8``, every iteration attempts all 8 tasks × group 8, so train success is comparable across
   iterations), evaluating on 100 held-out ``eval_in_distribution`` tasks (T=0.4, the trainer's eval) during training;
4. measure the start and the final policy on the training set with many attempts per task (8 × 32 at T=0.4): the
   low-noise before/after.

To fit minutes of a 2-core CPU, the tasks are the short ones (``max_plan_length=5``: expert plans of 5 steps, a
difficulty option of the Crafting env that keeps task ids and observations; 10 steps allowed). Steps 1-2 depend only
on the model, SFT and env settings, not on the algorithm: they are cached under ``--out`` and shared by runs of
different algos (and by ``bench/compare.py``).

Prints the learning curve and writes it as JSON next to this script (``bench/results/learning-<algo><tag>.json``);
the run directory holds metrics.jsonl, TensorBoard events and the PNG.

Measured (2-core CPU, SCPO, defaults; bench/results/learning-scpo.json): SFT warm start 14 min; RL 10 iterations in
12 min; train success per iteration (T=1) 12.5 16 12.5 12.5 20 23 23 14 22 22; training set at T=0.4 9.8% → 28.9%
(two tasks go from 0/32 and 2/32 to 32/32, two others fall to 0/32); held-out eval 15% → 17% (it 5) → 14% (it 10):
RL fits the tasks it trains on and, at this scale, does not transfer to unseen ones.

    python bench/learning.py --algo scpo            # ~30 min on 2 cores the first time (SFT cached after)
    python bench/learning.py --algo grpo            # reuses the SFT model of the first run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from agentrl.agents.react import ReActAgent

from agentrl.config import build_config
from agentrl.models import save_tiny_model
from agentrl.sft import sft_from_expert
from agentrl.evaluation import evaluate_model
from agentrl.trainer import Trainer

HERE = Path(__file__).resolve().parent


def crafting_corpus(tasks: int = 300, env_args: dict | None = None) -> list[str]:
    """Prompts and replies of expert episodes on train tasks: the text the tokenizer will see."""
    from agentrl import envs

    env = envs.make("crafting", expert=True, **(env_args or {}))
    agent = ReActAgent("crafting", think=False)
    lines = []
    for index in range(tasks):
        obs, info = env.reset(options={"task_index": index})
        agent.reset(1)
        while True:
            lines.append(agent.messages(0, obs, info)[0]["content"])
            action = info["expert_action"]
            lines.append(f"<action>{action}</action>")
            agent.record(0, obs, action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    return lines


def held_out_success(model: str | os.PathLike, args: argparse.Namespace) -> float:
    """Success of ``model`` on the first ``--eval-episodes`` held-out eval_in_distribution tasks (T=0.4)."""
    return evaluate_model("crafting", str(model), split="eval_in_distribution", episodes=args.eval_episodes,
                          mode="score", think=False, env_args=env_args_of(args),
                          seed=args.seed).by_type()["All"]["success"]


def warm_start(args: argparse.Namespace, env_args: dict) -> tuple[Path, dict]:
    """The base model and its SFT warm start, built once per setting (shared across algos)."""
    keys = ("seed", "vocab", "hidden", "layers", "sft_tasks", "sft_epochs", "sft_lr", "max_steps", "max_plan_length")
    setting = {k: getattr(args, k) for k in keys}
    setting["sft_batches"] = "random"  # not length-bucketed (see agentrl.sft.sft); part of the cache key
    tag = hashlib.sha1(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:10]
    root = args.out / f"warm-{tag}"
    info_path = root / "sft.json"
    if info_path.is_file():
        print(f"reusing the SFT model in {root / 'sft'}", flush=True)
        return root / "sft", json.loads(info_path.read_text())
    t0 = time.perf_counter()
    base = save_tiny_model(root / "base", seed=args.seed, vocab_size=args.vocab, hidden_size=args.hidden,
                           num_layers=args.layers, corpus=crafting_corpus(300, env_args))
    sft = sft_from_expert("crafting", str(base), str(root / "sft"), mode="score", tasks=args.sft_tasks,
                          epochs=args.sft_epochs, lr=args.sft_lr, env_args=env_args, seed=args.seed,
                          on_epoch=lambda e, loss: print(f"sft epoch {e}: loss {loss:.3f}", flush=True))
    sft["seconds"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    sft["eval_success"] = held_out_success(root / "sft", args)
    sft["eval_seconds"] = time.perf_counter() - t1
    sft["setting"] = setting
    info_path.write_text(json.dumps(sft, indent=1))
    return root / "sft", sft


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="scpo")
    parser.add_argument("--model", default=None,
                        help="start RL from this policy (e.g. agentrl-tiny) instead of building the SFT warm start")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--sft-tasks", type=int, default=300)
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--tasks-per-iteration", type=int, default=8)
    parser.add_argument("--train-tasks", type=int, default=8,
                        help="train on the first N train tasks only (env.train_tasks; 0: all 10,000); with N = "
                             "--tasks-per-iteration every iteration attempts the same tasks, so train success is "
                             "comparable across iterations")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--train-set-attempts", type=int, default=32,
                        help="episodes per training task when measuring the start and final policies on the fixed "
                             "training set (T=0.4); 0 skips it")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-plan-length", type=int, default=5)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--kl", type=float, default=0.0)
    parser.add_argument("--mini-batch", type=int, default=64, help="rows per optimizer step (learner.mini_batch_size)")
    parser.add_argument("--keep-zero-advantage", action="store_true",
                        help="train on rows of advantage 0 too (slower; see LearnerConfig.skip_zero_advantage)")
    parser.add_argument("--tag", default="", help="suffix of the result file (bench/results/learning-<algo><tag>.json)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    return parser.parse_args(argv)


def env_args_of(args: argparse.Namespace) -> dict:
    return {"max_steps": args.max_steps, "max_plan_length": args.max_plan_length}


def rl_overrides(args: argparse.Namespace, start_model: str | os.PathLike) -> dict:
    """The RL run's config overrides (the recipe; bench/compare.py's crafting preset uses it too)."""
    return {
        "env.name": "crafting", "env.args": env_args_of(args), "env.eval_split": "eval_in_distribution",
        "env.train_tasks": args.train_tasks or None,
        "algo.name": args.algo, "model.path": str(start_model),
        "agent.mode": "score", "agent.think": False,
        "rollout.tasks_per_iteration": args.tasks_per_iteration, "rollout.group_size": args.group_size,
        "rollout.workers": 0, "learner.lr": args.lr, "learner.bf16": "auto", "learner.kl_coef": args.kl,
        "learner.skip_zero_advantage": not args.keep_zero_advantage,
        "learner.mini_batch_size": args.mini_batch, "learner.micro_batch_size": 16,
        "run.iterations": args.iterations, "run.eval_every": args.eval_every, "run.eval_episodes": args.eval_episodes,
        "run.seed": args.seed, "run.save_every": args.iterations, "run.torch_threads": 1,
    }


def train_set_success(model: str | os.PathLike, overrides: dict, attempts: int = 32, seed: int = 0) -> float:
    """Success of ``model`` on the fixed training set of a recipe (``rl_overrides``' ``env.train_tasks`` first train
    tasks), ``attempts`` episodes per task at the eval temperature: the low-noise before/after of what RL fitted."""
    return evaluate_model(
        overrides["env.name"], str(model), split="train", episodes=overrides["env.train_tasks"], attempts=attempts,
        mode=overrides["agent.mode"], think=overrides["agent.think"], env_args=overrides["env.args"],
        seed=seed).by_type()["All"]["success"]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)  # the CPU threading trap (src/agentrl/hardware.py): 2 threads on 2 shared cores run several times slower
    env_args = env_args_of(args)
    t0 = time.perf_counter()
    if args.model:  # start from a given policy (e.g. the embedded agentrl-tiny) instead of this script's warm start
        t_eval = time.perf_counter()
        before = held_out_success(args.model, args)
        sft_path, sft = args.model, {"eval_success": before, "eval_seconds": time.perf_counter() - t_eval}
        print(f"starting policy {args.model}: eval success {before:.1f}%", flush=True)
    else:
        sft_path, sft = warm_start(args, env_args)
        before = sft["eval_success"]
        print(f"after SFT ({sft['demonstrations']} demos, {sft['seconds']:.0f} s): eval success {before:.1f}%",
              flush=True)
    overrides = rl_overrides(args, sft_path)
    config = build_config(None, overrides)
    from rich.console import Console

    t1 = time.perf_counter()
    # A fresh run directory each time: the curve is read back from its metrics.jsonl, which must hold this run only.
    run_dir = args.out / f"{args.algo}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    result = Trainer(config, run_dir=run_dir, console=Console()).train()
    rl_seconds = time.perf_counter() - t1
    train_set = {}
    if args.train_tasks and args.train_set_attempts:
        from agentrl.checkpoint import find_latest

        for name, path in (("start", sft_path), ("final", find_latest(result.run_dir) / "model")):
            train_set[name] = train_set_success(path, overrides, args.train_set_attempts, args.seed)
    keys = ("iteration", "train/success", "eval/success", "time/iteration", "time/learner")
    curve = [{k: r[k] for k in keys if k in r} for r in result.history]
    evals = [(r["iteration"], r["eval/success"]) for r in result.history if "eval/success" in r]
    report = {
        "algo": args.algo, "args": {k: str(v) for k, v in vars(args).items()}, "env_args": env_args,
        "sft": {k: sft[k] for k in ("demonstrations", "losses", "seconds", "collect_s", "train_s", "eval_seconds")
                if k in sft},
        "eval_success_before_rl": before, "eval_success_during_rl": evals, "curve": curve,
        "train_set_success": train_set,
        "rl_seconds": rl_seconds, "total_seconds": time.perf_counter() - t0,
        "run_dir": str(result.run_dir),
    }
    (HERE / "results").mkdir(exist_ok=True)
    path = HERE / "results" / f"learning-{args.algo}{args.tag}.json"
    path.write_text(json.dumps(report, indent=1))
    print("train success per iteration: " + " ".join(f"{r['train/success']:.0f}" for r in curve))
    print(f"eval success ({args.eval_episodes} eval_in_distribution tasks, T=0.4): before RL {before:.1f}% -> "
          + " -> ".join(f"it{i} {e:.1f}%" for i, e in evals))
    if train_set:
        print(f"training set ({args.train_tasks} tasks × {args.train_set_attempts} attempts, T=0.4): "
              f"start {train_set['start']:.1f}% -> final {train_set['final']:.1f}%")
    print(f"RL {rl_seconds:.0f} s; wrote {path}")
    return report


if __name__ == "__main__":
    main()
