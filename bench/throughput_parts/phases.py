"""Part 2: where a real trainer iteration's wall time goes, per phase; and ALFWorld env steps with and without the
engine's memoized template parses."""

from __future__ import annotations

import collections
import cProfile
import dataclasses
import os
import pstats
import random
import tempfile
import time
from pathlib import Path

from throughput_parts import PHASES, REPO
from throughput_parts.machine import load_now


class _RecordingAlgorithm:
    """Wraps the trainer's algorithm to keep the last batch of trajectories (for the credit probe)."""

    def __init__(self, inner):
        self.inner = inner
        self.last: list = []

    def compute(self, trajectories, config):
        self.last = list(trajectories)
        return self.inner.compute(trajectories, config)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _with_winners(trajectories: list, reward: float) -> list:
    """The same trajectories with the first member of each group made a winner (last step rewarded)."""
    seen, out = set(), []
    for traj in trajectories:
        if traj.group_id in seen or not traj.steps:
            out.append(traj)
            continue
        seen.add(traj.group_id)
        steps = list(traj.steps)
        steps[-1] = dataclasses.replace(steps[-1], reward=reward, done=True)
        out.append(dataclasses.replace(traj, success=True, steps=steps))
    return out


_SCORER_LOADED = False


def credit_probe(trainer, trajectories: list) -> dict:
    """Credit assignment of ``trajectories`` with one winner per group: ``cold_s`` (first time in this process:
    loads the scorer model), ``uncached_s`` (the scorer's text-embedding cache emptied first: every step text is
    embedded, as for a batch of new texts) and ``cached_s`` (the same call again: every text already embedded)."""
    global _SCORER_LOADED
    if not trajectories:
        return {}
    probe = _with_winners(trajectories, 10.0)
    algo, config = trainer.algorithm.inner, trainer.algo_config

    def timed() -> float:
        t = time.perf_counter()
        algo.compute(probe, config)
        return round(time.perf_counter() - t, 4)

    out = {"algo": trainer.config.algo.name, "rows": sum(len(t.steps) for t in probe)}
    if not _SCORER_LOADED:
        out["cold_s"] = timed()
        _SCORER_LOADED = True
    scorer = None
    if isinstance(getattr(config, "scorer", None), str):
        from agentrl.algos.scorers import get_scorer

        scorer = get_scorer(config.scorer, config.scorer_model_path, config.scorer_device, config.scorer_precision)
    if isinstance(getattr(scorer, "_cache", None), dict):
        scorer._cache.clear()  # a private cache of the shared scorer: emptied so that every text is embedded again
        out["uncached_s"] = timed()
    out["cached_s"] = timed()
    return out


def prewarm_workers(trainer) -> float:
    """Start the env workers' engines (imports, one eval game reset and stepped) before the first iteration, so
    that worker start-up does not compete with the measured iteration for the cores. Training never draws eval
    tasks, so no training game is grounded ahead."""
    pool = trainer.pool
    if not pool.workers:
        return 0.0
    t = time.perf_counter()
    slots, seen = [], set()
    for slot in range(pool.workers * max(pool.slots_per_group, 1)):
        if pool.worker_of(slot) not in seen:
            seen.add(pool.worker_of(slot))
            slots.append(slot)
    pool.reset([(slot, 0, {"task_id": trainer.eval_tasks[0]}) for slot in slots])
    pool.step([(slot, "look") for slot in slots])
    return round(time.perf_counter() - t, 2)


def _package(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if filename.startswith(str(REPO)):
        return "agentrl:" + Path(filename).relative_to(REPO).parts[0]
    if filename.startswith(("~", "<")):
        return "builtins"
    return "stdlib:" + Path(filename).stem


def profile_env_calls(trainer, iteration: int) -> dict:
    """cProfile of the env calls (``pool.step`` / ``pool.reset``, in-process envs) during one extra iteration."""
    profiler = cProfile.Profile()
    pool = trainer.pool

    def wrap(method):
        def timed(*args, **kwargs):
            profiler.enable()
            try:
                return method(*args, **kwargs)
            finally:
                profiler.disable()
        return timed

    pool.step, pool.reset = wrap(pool.step), wrap(pool.reset)
    try:
        metrics = trainer.run_iteration(iteration)
    finally:
        del pool.step, pool.reset  # back to the class's methods
    stats = pstats.Stats(profiler).stats
    total = sum(v[2] for v in stats.values()) or 1e-9  # tottime over every function = profiled time
    by_package: collections.Counter = collections.Counter()
    for (filename, _, _), v in stats.items():
        by_package[_package(filename)] += v[2]
    named = {
        "textworld pddl _gather_infos (admissible commands + infos)": ("textworld/envs/pddl/pddl.py", "_gather_infos"),
        "textworld textgen derive (template text)": ("textworld/envs/pddl/textgen/__init__.py", "derive"),
        "agentrl MemoizedGrammar derive (template text)": ("envs/alfworld/engine.py", "derive"),
        "tatsu parse (templates re-parsed every call)": ("tatsu/contexts.py", "parse"),
        "copy.deepcopy": ("copy.py", "deepcopy"),
        "fast-downward / pddl state (applicable actions)": ("textworld/envs/pddl/logic/__init__.py",
                                                            "all_applicable_actions"),
    }
    cumulative = {}
    for label, (suffix, func) in named.items():
        # cumtime of the outermost calls: take the largest cumtime among matching entries (recursion-safe)
        values = [v[3] for (f, _, fn), v in stats.items() if f.endswith(suffix) and fn == func]
        if values:
            cumulative[label] = round(max(values) / total, 3)
    return {
        "iteration": iteration, "profiled_env_s": round(total, 2),
        "env_s_in_iteration_with_profiler": round(metrics.get("time/env_step", 0) + metrics.get("time/env_reset", 0), 2),
        "self_time_share_by_package": {k: round(v / total, 3) for k, v in by_package.most_common(10)},
        "cumulative_share": cumulative,
    }


def _iteration_row(label: str, it: int, is_warmup: bool, m: dict, extra: list[str], learner_rows: list[dict]) -> dict:
    """One iteration's phases (seconds) from the trainer's metrics ``m``, printed; time/* keys beyond the known phases
    are appended to ``extra``. ``learner_rows``: the learner's input of this iteration."""
    # Phases the trainer times beyond the five known ones (a newer trainer may add some): kept apart.
    for key in m:
        name = key.removeprefix("time/")
        if key.startswith("time/") and name not in (*PHASES, "iteration") and name not in extra:
            extra.append(name)
    row = {"iteration": it, "warmup": is_warmup,
           **{p: round(m.get(f"time/{p}", 0.0), 3) for p in (*PHASES, *extra)},
           "iteration_s": round(m["time/iteration"], 3),
           "steps": int(m.get("rollout/steps", 0)), "trajectories_dropped": m["train/dropped_trajectories"],
           "episode_length": round(m["train/episode_length"], 2), "success": m["train/success"],
           "generated_tokens": m.get("rollout/generated_tokens", 0.0),
           "learner_input": learner_rows[0] if learner_rows else None}
    row["other"] = round(row["iteration_s"] - sum(row[p] for p in (*PHASES, *extra)), 3)
    if learner_rows and row["learner"] > 0:
        row["learner_tok_s"] = round(learner_rows[0]["tokens"] / row["learner"], 1)
    more = "".join(f" + {p} {row[p]:.2f}" for p in extra)
    print(f"    {label} it{it}{' (warm-up)' if is_warmup else ''}: {row['iteration_s']:.1f} s = gen "
          f"{row['generation']:.1f} + env {row['env_step']:.1f} + reset {row['env_reset']:.1f} + credit "
          f"{row['credit_assignment']:.2f} + learner {row['learner']:.1f}{more} + other {row['other']:.2f}"
          f"  ({row['steps']} steps, learner {row.get('learner_tok_s', 0):.0f} tok/s)", flush=True)
    return row


def run_config(label: str, env_name: str, overrides: dict, *, base_file: Path | None, warmup: int, measured: int,
               profile: bool = False) -> dict:
    """Trainer iterations of one config: ``warmup`` unmeasured ones (the first config of a process pays its
    one-time costs there), then iterations ``1..measured``; env workers are pre-warmed (:func:`prewarm_workers`)."""
    from agentrl.config import build_config
    from agentrl.trainer import Trainer

    if env_name == "alfworld" and overrides.get("rollout.workers", 2) == 0:
        from agentrl.envs.alfworld.engine import GROUNDINGS

        GROUNDINGS.clear()  # in-process envs: games grounded by an earlier config must not make resets free
    # run.iterations: every measured iteration is mid-run (the last one of a run sends no resets ahead).
    config = build_config(base_file, {"env.name": env_name, "run.torch_threads": 1, "run.eval_every": 0,
                                      "run.sample_trajectories": 0, "run.iterations": 1000, **overrides})
    load_before = load_now()["loadavg"][0]
    with tempfile.TemporaryDirectory(prefix="throughput-", dir=os.environ.get("TMPDIR")) as run_dir:
        t0 = time.perf_counter()
        trainer = Trainer(config, run_dir=run_dir)
        setup_s = time.perf_counter() - t0
        prewarm_s = prewarm_workers(trainer)
        trainer.algorithm = _RecordingAlgorithm(trainer.algorithm)
        learner_rows: list[dict] = []
        learner_update = trainer.learner.update

        def recording_update(samples):  # the learner's input size per iteration (its cost follows row widths)
            widths = [len(x.prompt_ids) + (sum(map(len, x.choice_ids)) if x.choice_ids else len(x.response_ids))
                      for x in samples]
            learner_rows.append({"rows": len(widths), "tokens": sum(widths), "max_row_tokens": max(widths, default=0)})
            return learner_update(samples)

        trainer.learner.update = recording_update
        iterations = []
        extra: list[str] = []
        try:
            # Warm-up iterations draw other tasks (iteration numbers 1001, ...): every config measures iterations
            # 1..measured, i.e. the same tasks, whose sizes differ a lot on ALFWorld. Each config first runs an
            # unmeasured iteration 0, so that iteration 1 starts as every later one does in a run: with
            # rollout.prefetch_resets, its resets were sent while iteration 0's learner ran.
            schedule = ([(1000 + k, True) for k in range(1, warmup + 1)] + [(0, True)]
                        + [(k, False) for k in range(1, measured + 1)])
            for it, is_warmup in schedule:
                learner_rows.clear()
                m = trainer.run_iteration(it)
                iterations.append(_iteration_row(label, it, is_warmup, m, extra, learner_rows))
            probe = credit_probe(trainer, trainer.algorithm.last)
            env_profile = profile_env_calls(trainer, 2000) if profile else None
        finally:
            del trainer.learner.update
            trainer.close()
    for row in iterations:
        for p in extra:
            row.setdefault(p, 0.0)
    done = [r for r in iterations if not r["warmup"]] or iterations
    total = sum(r["iteration_s"] for r in done)
    phases = (*PHASES, *extra, "other")
    seconds = {p: sum(r[p] for r in done) / len(done) for p in (*phases, "iteration_s")}
    shares = {p: sum(r[p] for r in done) / total for p in phases}
    steps = sum(r["steps"] for r in done) / len(done)
    result = {
        "label": label, "env": env_name, "overrides": overrides, "setup_s": round(setup_s, 2),
        "prewarm_workers_s": prewarm_s, "warmup_iterations": warmup, "extra_phases": extra,
        "iterations": iterations, "mean_s": {k: round(v, 3) for k, v in seconds.items()},
        "shares": {k: round(v, 4) for k, v in shares.items()},
        "env_plus_credit_share": round(shares["env_step"] + shares["env_reset"] + shares["credit_assignment"], 4),
        "ms_per_step": {p: round(1000 * seconds[p] / max(steps, 1), 1) for p in (*phases, "iteration_s")},
        "steps_per_iteration": steps, "credit_probe": probe,
        "load_before": load_before, "load_after": load_now()["loadavg"][0],
    }
    probe_s = probe.get("uncached_s", probe.get("cached_s"))
    if probe_s is not None:
        # The share env + credit would have if the batch had one winner per group (SCPO's scorer then runs).
        it_s = seconds["iteration_s"] - seconds["credit_assignment"] + probe_s
        result["env_plus_credit_share_with_winners"] = round(
            (seconds["env_step"] + seconds["env_reset"] + probe_s) / it_s, 4)
    if env_profile is not None:
        result["env_profile"] = env_profile
    s = result["shares"]
    print(f"  {label:<34} {seconds['iteration_s']:6.1f} s/it  gen {s['generation']:5.1%}  env {s['env_step']:5.1%}  "
          f"reset {s['env_reset']:5.1%}  credit {s['credit_assignment']:5.1%}  learner {s['learner']:5.1%}  "
          f"other {s['other']:5.1%}  | env+credit {result['env_plus_credit_share']:5.1%}", flush=True)
    return result


# --------------------------------------------------------------------------------------------------- experiment
def textgen_cache_experiment(tasks: int, steps: int) -> dict:
    """ALFWorld env steps (in this process) with textworld's own grammar, which re-parses every text template on
    every step (``ALFWorldEnv(memoize_parses=False)``), and with the engine's memoized parses (the default); checks
    that observations and admissible actions stay identical. (Before the memo was built into the engine, this
    patched ``textgen._parse_and_convert`` in this process; the key in the results kept its name.)"""
    from agentrl import envs

    def play(seed: int, memoize: bool) -> tuple[list, float, int]:
        env = envs.make("alfworld", memoize_parses=memoize)
        try:
            ids = list(env.unwrapped.task_ids("train"))
            rng, seen, spent, n = random.Random(seed), [], 0.0, 0
            for task_id in rng.sample(ids, tasks):
                _, info = env.reset(options={"task_id": task_id})
                for _ in range(steps):
                    t = time.perf_counter()
                    obs, _, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
                    spent += time.perf_counter() - t
                    n += 1
                    seen.append((obs, tuple(info["admissible_actions"])))
                    if terminated or truncated:
                        break
            return seen, spent, n
        finally:
            env.close()

    runs = {"as_is": [], "memoized": []}
    outputs = {}
    for variant in ("as_is", "memoized", "as_is", "memoized"):  # interleaved against load drift
        seen, spent, n = play(seed=5, memoize=variant == "memoized")
        runs[variant].append(1000 * spent / n)
        outputs.setdefault(variant, seen)
    as_is, memo = min(runs["as_is"]), min(runs["memoized"])
    result = {"steps_per_run": len(outputs["as_is"]), "ms_per_step_as_is": [round(x, 1) for x in runs["as_is"]],
              "ms_per_step_memoized": [round(x, 1) for x in runs["memoized"]], "speedup": round(as_is / memo, 2),
              "identical_observations_and_actions": outputs["as_is"] == outputs["memoized"],
              "how": "ALFWorldEnv(memoize_parses=False) vs the default (engine.MemoizedGrammar)"}
    print(f"  ALFWorld env step: {as_is:.1f} ms with textworld's grammar, {memo:.1f} ms with memoized parses "
          f"(x{result['speedup']:.2f}; identical outputs: {result['identical_observations_and_actions']})", flush=True)
    return result

