"""Benchmark ALFWorld-v0 on the real games: load, first and repeated reset, step latency by room type, wrapper
overhead, and steps/s with 1 and 2 worker processes (docs/spec/environments.md §3.7, §7).

Per room type (kitchen, living room, bedroom, bathroom: AI2-THOR FloorPlan ranges), for ``games_per_room`` eval games:

* ``first_reset_s``: the first ``reset()`` of a game in the process: textworld's ``load()`` (grammar parse, PDDL
  translation, grounding) plus the first reset.
* ``textworld_reset_s``: what textworld's own ``PddlEnv.reset()`` costs on a loaded game (it translates again), from
  an env built with ``fast_reset=False``.
* ``repeated_reset_s``: later resets of the same game (a rollout group's G = 8), after random steps dirtied the state.
* ``step_ms``: ``env.step`` over the walkthrough and 20 random admissible steps; ``engine_step_ms`` is the part spent
  inside the engine, and ``overhead_pct`` is our wrapper's share relative to it.

Then steps/s of the same workload (G = 8 episodes of 10 random steps on each of 4 games) in 1 and 2 worker processes
built from constructor arguments only, with ``torch.set_num_threads(1)`` in each. Default run: a few minutes.

    python bench/envs_alfworld.py [games_per_room] [--no-memoize-parses] [--rooms-only]

``--no-memoize-parses`` runs the engine with textworld's own grammar, which re-parses every text template on every
step (``ALFWorldEnv(memoize_parses=False)``), to compare step times; ``--rooms-only`` skips the worker runs.

Data: ``$ALFWORLD_DATA`` / ``~/.cache/alfworld`` when they hold games, else ../shared/data/alfworld's eval archive
unpacked into a temporary folder.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agentrl.envs.alfworld import ALFWorldEnv, data_status, unpack_archive
from agentrl.envs.alfworld.tasks import ROOM_TYPES

SHARED_ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld" / "json_2.1.1-eval.tar.gz"
SPLITS = ("eval_in_distribution", "eval_out_of_distribution")
GROUP_SIZE = 8


def _data_dir(tmp: str) -> str | None:
    if data_status() is None:
        return None  # the default locations hold games
    if not SHARED_ARCHIVE.is_file():
        raise SystemExit(f"no ALFWorld games: {data_status()}")
    unpack_archive(SHARED_ARCHIVE, tmp)
    return tmp


def _games_by_room(env: ALFWorldEnv, per_room: int) -> dict[str, list[str]]:
    rng = np.random.default_rng(0)
    out = {}
    for room in ROOM_TYPES:
        ids = [t for s in SPLITS for t in env.task_ids(s) if env.task(t).room_type == room]
        picks = rng.choice(len(ids), size=min(per_room, len(ids)), replace=False)
        out[room] = [ids[int(i)] for i in sorted(picks)]
    return out


class _EngineTimer:
    """Accumulates the time ``env.step`` spends inside the engine (textworld + alfworld wrappers)."""

    def __init__(self, env: ALFWorldEnv):
        self.seconds = 0.0
        engine = env._engine
        inner_step = engine.step

        def timed_step(command: str):
            start = time.perf_counter()
            try:
                return inner_step(command)
            finally:
                self.seconds += time.perf_counter() - start

        engine.step = timed_step


def bench_room(env: ALFWorldEnv, textworld_env: ALFWorldEnv, task_ids: list[str]) -> dict[str, float]:
    first, textworld_reset, repeated, step_s, engine_s = [], [], [], [], []
    rng = np.random.default_rng(1)
    for task_id in task_ids:
        start = time.perf_counter()
        _, info = env.reset(options={"task_id": task_id})
        first.append(time.perf_counter() - start)
        if not hasattr(env, "_bench_timer"):  # the engine exists from the first reset on
            env._bench_timer = _EngineTimer(env)
        timer = env._bench_timer
        textworld_env.reset(options={"task_id": task_id})  # load (not timed); textworld's reset is timed next
        start = time.perf_counter()
        textworld_env.reset(options={"task_id": task_id})
        textworld_reset.append(time.perf_counter() - start)
        for _ in range(GROUP_SIZE - 1):  # the rest of a rollout group, each episode dirtying the state first
            for _ in range(2):
                env.step(info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))])
            start = time.perf_counter()
            _, info = env.reset(options={"task_id": task_id})
            repeated.append(time.perf_counter() - start)
        walkthrough = [*env._engine.walkthrough]
        actions = iter(walkthrough)
        for _ in range(len(walkthrough) + 20):
            admissible = info["admissible_actions"]
            action = next(actions, None) or admissible[int(rng.integers(len(admissible)))]
            timer.seconds = 0.0
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            step_s.append(time.perf_counter() - start)
            engine_s.append(timer.seconds)
            if terminated or truncated:
                _, info = env.reset(options={"task_id": task_id})
    step, engine = np.asarray(step_s), np.asarray(engine_s)
    return {
        "games": len(task_ids),
        "first_reset_s": float(np.mean(first)),
        "textworld_reset_s": float(np.mean(textworld_reset)),
        "repeated_reset_s": float(np.mean(repeated)),
        "repeated_reset_speedup": float(np.mean(first) / np.mean(repeated)),
        "step_ms": float(step.mean() * 1e3),
        "step_p95_ms": float(np.percentile(step, 95) * 1e3),
        "engine_step_ms": float(engine.mean() * 1e3),
        "overhead_pct": float(100.0 * (step.sum() - engine.sum()) / engine.sum()),
        "steps": int(step.size),
    }


# ------------------------------------------------------------------------------------------------ worker processes
def _worker(job: tuple[dict, list[str], int], results) -> None:
    """One worker process: play G episodes of ``steps`` random admissible steps on each game of its shard, then
    put (steps, seconds, CPU seconds) on ``results``."""
    import torch

    from agentrl.envs.alfworld import engine

    torch.set_num_threads(1)
    engine.GROUNDINGS.clear()  # forked from the parent: ground the games again, as a fresh worker must
    kwargs, task_ids, steps_per_episode = job
    start, cpu_start = time.perf_counter(), time.process_time()
    env = ALFWorldEnv(**kwargs)
    rng = np.random.default_rng(2)
    done_steps = 0
    for task_id in task_ids:
        for _ in range(GROUP_SIZE):
            _, info = env.reset(options={"task_id": task_id})
            for _ in range(steps_per_episode):
                actions = info["admissible_actions"]
                _, _, terminated, truncated, info = env.step(actions[int(rng.integers(len(actions)))])
                done_steps += 1
                if terminated or truncated:
                    break
    env.close()
    results.put((done_steps, time.perf_counter() - start, time.process_time() - cpu_start))


def bench_workers(kwargs: dict, task_ids: list[str], workers: int, steps_per_episode: int = 10) -> dict[str, float]:
    # fork, and Process rather than Pool: the target is not pickled, so this works when bench/envs.py loads this file
    # under a module name other interpreters could not import. Each worker builds its env from constructor
    # arguments only.
    context = mp.get_context("fork")
    queue = context.Queue()
    shards = [task_ids[i::workers] for i in range(workers)]
    processes = [context.Process(target=_worker, args=((kwargs, shard, steps_per_episode), queue)) for shard in shards]
    start = time.perf_counter()
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    wall = time.perf_counter() - start
    for process in processes:
        process.join()
    steps = sum(r[0] for r in results)
    busiest_cpu = max(r[2] for r in results)
    # On a shared machine the wall clock also counts time waiting for a core; the busiest worker's CPU time is what
    # the batch would take with one free core per worker.
    return {"workers": workers, "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
            "cpu_s": [r[2] for r in results], "steps_per_s_one_core_each": steps / busiest_cpu}


def main(games_per_room: int = 3, memoize_parses: bool = True, with_workers: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = _data_dir(tmp)
        kwargs = {"split": "eval_out_of_distribution", "data_dir": data_dir, "memoize_parses": memoize_parses}
        print(f"memoize_parses={memoize_parses}")
        env = ALFWorldEnv(**kwargs)
        textworld_env = ALFWorldEnv(**kwargs, fast_reset=False)
        rooms = _games_by_room(env, games_per_room)
        results: dict = {"rooms": {}}
        header = (f"{'room':<12} {'games':>5} {'first reset':>11} {'textworld reset':>15} {'repeated':>9} "
                  f"{'speedup':>7} {'step ms':>8} {'p95':>6} {'engine ms':>9} {'overhead':>8}")
        print(header)
        for room, task_ids in rooms.items():
            row = bench_room(env, textworld_env, task_ids)
            results["rooms"][room] = row
            print(f"{room:<12} {row['games']:>5} {row['first_reset_s']:>10.2f}s {row['textworld_reset_s']:>14.2f}s "
                  f"{row['repeated_reset_s'] * 1e3:>7.1f}ms {row['repeated_reset_speedup']:>6.0f}x "
                  f"{row['step_ms']:>8.1f} {row['step_p95_ms']:>6.0f} {row['engine_step_ms']:>9.1f} "
                  f"{row['overhead_pct']:>7.2f}%", flush=True)
        env.close()
        textworld_env.close()
        if not with_workers:
            return results

        mixed = [ids[0] for ids in rooms.values()]
        results["workers"] = {}
        for workers in (1, 2):
            row = bench_workers(kwargs, mixed, workers)
            results["workers"][workers] = row
            print(f"{workers} worker process(es): {row['steps']} steps (resets included) in {row['wall_s']:.1f} s "
                  f"= {row['steps_per_s']:.1f} steps/s; with a free core per worker "
                  f"{row['steps_per_s_one_core_each']:.1f} steps/s (CPU s per worker: "
                  f"{', '.join(f'{c:.1f}' for c in row['cpu_s'])})", flush=True)
        one, two = results["workers"][1], results["workers"][2]
        results["workers"]["scaling_2_over_1"] = two["steps_per_s"] / one["steps_per_s"]
        results["workers"]["scaling_2_over_1_one_core_each"] = (
            two["steps_per_s_one_core_each"] / one["steps_per_s_one_core_each"])
        print(f"2 workers / 1 worker: {results['workers']['scaling_2_over_1']:.2f}x wall clock, "
              f"{results['workers']['scaling_2_over_1_one_core_each']:.2f}x with a free core per worker")
    return results


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(numbers[0]) if numbers else 3, memoize_parses="--no-memoize-parses" not in sys.argv,
         with_workers="--rooms-only" not in sys.argv)
