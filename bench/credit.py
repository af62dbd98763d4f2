"""Speed of the credit-assignment algorithms on a realistic ALFWorld batch (issue 3).

The batch has the shape of one verl-agent iteration (docs/spec/algorithms.md §1.1): 16 groups × 8 rollouts of up
to 50 steps. Each group is one real ALFWorld game (the eval split in ../shared/data/alfworld), played by
the real TextWorld engine. A rollout mixes three kinds of step, with a per-group and per-rollout skill:
the game's walkthrough command (re-navigating after detours), a random admissible
command, a repeat of a recent command (agents loop), and a format-invalid response (the env then gets
garbage text and answers "Nothing happens.", docs/spec/algorithms.md §1.3). Success is the engine's ``won`` flag, reward 10 on
the winning step. Generated once and cached under /tmp (a few minutes); data never enters the repository.

    python bench/credit.py                       # prints a table, writes bench/results/credit.json
    python bench/credit.py --cross-encoder DIR   # also time a local CrossEncoder

Targets on the 2-core dev CPU: GRPO and GiGPO < 50 ms, SCPO lexical < 200 ms, SCPO MiniLM < 2 s with
encoding (model loading is timed separately: it happens once per process). Runs with GOMP_SPINCOUNT=0
unless set (CPU threading trap: src/agentrl/hardware.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tarfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the CPU threading trap (src/agentrl/hardware.py): spinning OpenMP threads slow torch down ~10x when another process
# holds a core (env workers beside the learner; other jobs on a shared dev box).
os.environ.setdefault("GOMP_SPINCOUNT", "0")

import numpy as np  # noqa: E402

from agentrl.algos import Step, Trajectory, get_algorithm, to_flat  # noqa: E402
from agentrl.algos.gigpo import gigpo_advantages_flat  # noqa: E402
from agentrl.algos.grpo import grpo_advantages_flat  # noqa: E402
from agentrl.algos.scorers import BERTScoreScorer, BiEncoderScorer, CrossEncoderScorer, LexicalScorer  # noqa: E402
from agentrl.algos.scorers import bfloat16_is_native, load_sentence_transformer  # noqa: E402
from agentrl.algos.scpo import scpo_advantages_flat  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TAR = REPO.parent / "shared" / "data" / "alfworld" / "json_2.1.1-eval.tar.gz"
CACHE_DIR = Path(os.environ.get("AGENTRL_BENCH_CACHE", "/tmp/agentrl_bench"))
INVALID_RESPONSES = ["<think>i should look around", "i will go to the", "<action>go to</actio", "the answer is clear"]


# ------------------------------------------------------------------------------------------------ batch


def game_files(tar_path: Path) -> list[Path]:
    root = CACHE_DIR / "alfworld"
    if not (root / "json_2.1.1").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar_path) as tar:
            tar.extractall(root, filter="data")
    return sorted(root.glob("json_2.1.1/*/*/*/game.tw-pddl"))


def play(env, walkthrough: list[str], rng: random.Random, skill: float, max_steps: int) -> tuple[bool, list[Step]]:
    """One rollout: the expert move with probability ``skill``, else a loop, a random command or an invalid reply.

    The expert follows the game's walkthrough; when its next command fails ("Nothing happens.", e.g. after a
    detour moved the agent), it goes back to the walkthrough's last "go to" before that command.
    """
    state = env.reset()
    obs, steps, recent, cursor = state.feedback, [], [], 0
    for _ in range(max_steps):
        draw, valid, expert = rng.random(), True, False
        if draw < skill:
            action, expert = walkthrough[min(cursor, len(walkthrough) - 1)], True
        elif draw < skill + 0.08:
            action, valid = rng.choice(INVALID_RESPONSES)[-30:], False
        elif draw < skill + 0.3 and recent:
            action = rng.choice(recent[-4:])
        else:
            action = rng.choice([a for a in state["admissible_commands"] if a != "help"])
        state, _, done = env.step(action)
        won = bool(state["won"])
        steps.append(Step(obs, action, 10.0 if won else 0.0, bool(done or won), valid, state.feedback))
        obs = state.feedback
        if valid:
            recent.append(action)
        if expert:
            if state.feedback.strip() == "Nothing happens.":
                cursor = max((i for i in range(cursor) if walkthrough[i].startswith("go to")), default=0)
            else:
                cursor += 1
        if done or won:
            return won, steps
    return False, steps


def generate(tar_path: Path, groups: int, group_size: int, max_steps: int, seed: int) -> list[dict]:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    rng = random.Random(seed)
    files = rng.sample(game_files(tar_path), groups)
    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    batch = []
    for g, path in enumerate(files):
        env = AlfredDemangler(textworld.envs.PddlEnv(infos))
        env.load(str(path))
        walkthrough = json.loads(path.read_text())["walkthrough"]
        group_skill = rng.uniform(0.1, 0.6)
        for i in range(group_size):
            skill = min(max(group_skill + rng.gauss(0.0, 0.1), 0.02), 0.95)
            won, steps = play(env, walkthrough, rng, skill, max_steps)
            batch.append({"group": g, "traj": g * group_size + i, "game": str(path.parent.parent.name),
                          "success": won, "steps": [s.__dict__ for s in steps]})
        print(f"  game {g + 1}/{groups}: {path.parent.parent.name}", file=sys.stderr, flush=True)
    return batch


def load_batch(tar_path: Path, groups: int, group_size: int, max_steps: int, seed: int) -> list[Trajectory]:
    cache = CACHE_DIR / f"credit_batch_v2_g{groups}_n{group_size}_t{max_steps}_s{seed}.json"
    if not cache.is_file():
        print(f"generating the ALFWorld batch (cached at {cache}) ...", file=sys.stderr)
        cache.parent.mkdir(parents=True, exist_ok=True)
        data = generate(tar_path, groups, group_size, max_steps, seed)
        cache.write_text(json.dumps(data))
    data = json.loads(cache.read_text())
    return [Trajectory(d["group"], d["traj"], d["success"], [Step(**s) for s in d["steps"]]) for d in data]


# ------------------------------------------------------------------------------------------------ timing


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median wall time in seconds over ``repeats`` calls, and the last result. The median process CPU time
    (all threads) is kept in ``timed.cpu``: on a machine shared with other jobs it shows how much of the
    wall time was this process computing."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    timed.cpu = statistics.median(cpus)
    return statistics.median(walls), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alfworld-tar", type=Path, default=DEFAULT_TAR)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=10, help="repeats of the fast measurements (median)")
    parser.add_argument("--cross-encoder", type=str, default=None, help="local CrossEncoder folder to time")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "credit.json")
    args = parser.parse_args()

    trajectories = load_batch(args.alfworld_tar, args.groups, args.group_size, args.max_steps, args.seed)
    batch = to_flat(trajectories)
    f = batch  # flat arrays, as another framework would hold them
    success = np.array([t.success for t in trajectories])
    groups_won = np.array([[t.success for t in trajectories if t.group_id == g] for g in range(args.groups)])
    info = {
        "rows": len(batch),
        "trajectories": len(trajectories),
        "success_rate": float(success.mean()),
        "mixed_groups": int(np.sum(groups_won.any(1) & ~groups_won.all(1))),
        "mean_length": float(np.mean([len(t.steps) for t in trajectories])),
        "unique_step_texts": len(set(f.step_text.tolist())),
        "invalid_step_frac": float(np.mean(~f.valid)),
    }
    results: dict[str, dict] = {}

    def record(name: str, seconds: float, target: float | None = None, **extra) -> None:
        cpu = getattr(timed, "cpu", None)
        timed.cpu = None
        results[name] = {"ms": round(seconds * 1000, 2), "cpu_ms": cpu and round(cpu * 1000, 2),
                         "target_ms": target and target * 1000, **extra}
        flag = "" if target is None else ("  ok" if seconds < target else "  OVER TARGET")
        cpu_text = f"  (cpu {cpu * 1000:8.1f} ms)" if cpu is not None else ""
        print(f"{name:<44} {seconds * 1000:9.1f} ms{cpu_text}{flag}", flush=True)

    print(f"batch: {json.dumps(info)}")
    flat = (f.group_index, f.traj_index, f.step_index, f.reward, f.valid)
    record("grpo (flat arrays)", timed(lambda: grpo_advantages_flat(*flat), args.repeats)[0], 0.05)
    record("grpo (dataclasses, incl. conversion)", timed(lambda: get_algorithm("grpo").compute(trajectories),
                                                         args.repeats)[0], 0.05)
    record("gigpo exact anchors (flat arrays)", timed(lambda: gigpo_advantages_flat(*flat, f.anchor),
                                                      args.repeats)[0], 0.05)
    record("gigpo (dataclasses, incl. conversion)", timed(lambda: get_algorithm("gigpo").compute(trajectories),
                                                          args.repeats)[0], 0.05)
    record("gigpo similarity anchors (difflib 0.95)", timed(
        lambda: gigpo_advantages_flat(*flat, f.anchor, anchor_match="similarity"), 3)[0])

    scpo_args = (*flat, f.success, f.step_text, f.anchor)
    for alignment in ("dp", "greedy"):
        seconds, _ = timed(lambda: scpo_advantages_flat(*scpo_args, scorer=LexicalScorer(), alignment=alignment),
                           args.repeats)
        record(f"scpo lexical {alignment} (cold pair cache)", seconds, 0.2)
    lexical = LexicalScorer()
    record("scpo lexical dp (warm pair cache)", timed(lambda: scpo_advantages_flat(*scpo_args, scorer=lexical),
                                                      args.repeats)[0])
    spec = get_algorithm("scpo")
    seconds, (_, diag) = timed(lambda: spec.compute_flat(batch, {"scorer": "lexical"}), 3)
    record("scpo lexical (registry, with diagnostics)", seconds, None, diagnostics=diag)

    start = time.perf_counter()
    load_sentence_transformer()
    record("minilm model load (once per process)", time.perf_counter() - start)
    for precision in ("auto", "float32"):
        resolved = "bfloat16" if precision == "auto" and bfloat16_is_native() else "float32"
        seconds, _ = timed(lambda: scpo_advantages_flat(*scpo_args, scorer=BiEncoderScorer(precision=precision)), 3)
        record(f"scpo minilm {precision} ({resolved}), cold: encodes", seconds, 2.0)
    minilm = BiEncoderScorer()
    scpo_advantages_flat(*scpo_args, scorer=minilm)
    record("scpo minilm (warm embedding cache)", timed(lambda: scpo_advantages_flat(*scpo_args, scorer=minilm),
                                                       3)[0])
    seconds, (_, diag) = timed(lambda: spec.compute_flat(batch, {}), 1)
    record("scpo minilm (registry, default config)", seconds, None, diagnostics=diag)
    seconds, _ = timed(lambda: scpo_advantages_flat(*scpo_args, scorer=BERTScoreScorer()), 1)
    record("scpo bertscore auto, cold", seconds)
    if args.cross_encoder:
        seconds, _ = timed(lambda: scpo_advantages_flat(
            *scpo_args, scorer=CrossEncoderScorer(args.cross_encoder)), 1)
        record("scpo cross_encoder (cold)", seconds)

    import torch

    out = {
        "load_average": os.getloadavg(),
        "batch": info,
        "timings": results,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
