"""Benchmark TextWorld-v0: tw-make generation time per game, reset and step latency (docs/spec/environments.md §4, §7).

For each generator at the env's default settings, generates ``games`` fresh games one at a time into a temporary
cache (seconds per game), then plays each: first reset (loads the game), a second reset of the same game, the
expert's walkthrough and 30 random admissible steps (ms per step). Finally it pre-builds a batch with all CPUs,
as ``agentrl data textworld`` does, to measure the parallel throughput. Default run: about two minutes on 2 cores.

    python bench/envs_textworld.py [games_per_generator]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from agentrl.envs.textworld import GENERATORS, TextWorldEnv
from agentrl.envs.textworld.env import split_seed


def _ms(samples: list[float]) -> dict[str, float]:
    array = np.asarray(samples) * 1000.0
    return {"mean_ms": float(array.mean()), "p95_ms": float(np.percentile(array, 95)), "n": int(array.size)}


def bench_generator(challenge: str, cache_dir: str, games: int) -> dict[str, object]:
    env = TextWorldEnv(challenge=challenge, cache_dir=cache_dir, expert=True, max_steps=200)
    generation_s, first_reset, again_reset, expert_steps, random_steps, walkthrough_lengths = [], [], [], [], [], []
    rng = np.random.default_rng(0)
    for index in range(games):
        task_id = env.task_ids("train")[index]
        generation_s.append(env.caches["train"].ensure(split_seed("train", index)).seconds)
        start = time.perf_counter()
        _, info = env.reset(options={"task_id": task_id})
        first_reset.append(time.perf_counter() - start)
        start = time.perf_counter()
        _, info = env.reset(options={"task_id": task_id})
        again_reset.append(time.perf_counter() - start)
        steps = 0
        while not info["won"]:
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(info["expert_action"])
            expert_steps.append(time.perf_counter() - start)
            steps += 1
            if terminated or truncated:
                break
        walkthrough_lengths.append(steps)
        _, info = env.reset(options={"task_id": task_id})
        for _ in range(30):
            action = info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            random_steps.append(time.perf_counter() - start)
            if terminated or truncated:
                _, info = env.reset(options={"task_id": task_id})
    env.close()
    return {
        "settings": env.caches["train"].config.describe(),
        "generation_s_per_game": float(np.mean(generation_s)),
        "first_reset": _ms(first_reset),
        "reset_same_game": _ms(again_reset),
        "step_expert": _ms(expert_steps),
        "step_random_admissible": _ms(random_steps),
        "walkthrough_length": float(np.mean(walkthrough_lengths)),
    }


def bench_parallel_build(cache_dir: str, games: int) -> dict[str, float]:
    """Wall time of pre-building ``games`` tw-cooking games with one tw-make process per CPU."""
    env = TextWorldEnv(challenge="tw-cooking", cache_dir=cache_dir)
    workers = os.cpu_count() or 1
    start = time.perf_counter()
    results = list(env.caches["eval_in_distribution"].build(
        [split_seed("eval_in_distribution", i) for i in range(games)], workers=workers))
    wall = time.perf_counter() - start
    failed = sum(isinstance(r, Exception) for r in results)
    return {"games": games, "workers": workers, "wall_s": wall, "games_per_minute": 60.0 * games / wall,
            "failed": failed}


def main(games: int = 2) -> dict[str, object]:
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-textworld-") as cache_dir:
        for challenge in GENERATORS:
            row = bench_generator(challenge, cache_dir, games)
            results[challenge] = row
            print(
                f"{challenge:20s} gen {row['generation_s_per_game']:5.1f} s/game | "
                f"reset {row['first_reset']['mean_ms']:6.0f} ms (again {row['reset_same_game']['mean_ms']:4.0f}) | "
                f"step expert {row['step_expert']['mean_ms']:5.1f} ms, "
                f"random {row['step_random_admissible']['mean_ms']:5.1f} ms "
                f"(p95 {row['step_random_admissible']['p95_ms']:5.1f}) | "
                f"walkthrough {row['walkthrough_length']:.1f} steps   [{row['settings']}]",
                flush=True,
            )
        parallel = bench_parallel_build(cache_dir, games=2 * (os.cpu_count() or 1))
        results["parallel_build_tw-cooking"] = parallel
        print(f"parallel pre-build: {parallel['games']} tw-cooking games with {parallel['workers']} workers in "
              f"{parallel['wall_s']:.1f} s ({parallel['games_per_minute']:.1f} games/min)", flush=True)
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
