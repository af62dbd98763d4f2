"""Throughput (issue 10): batched vs one-at-a-time generation, and where a training iteration's wall time goes.

Part 1, generation. Real ReAct prompts of ALFWorld states (Crafting when the ALFWorld games are missing) through
the real :class:`~agentrl.policy.HFPolicy`, for a realistic small policy (``d256``: Llama, hidden 256, 4 layers,
a domain BPE tokenizer trained on the env's prompts; the size of the planned CPU default) and the ``tiny-random``
default (hidden 64, 2 layers, generic 512-token BPE). Ways to act:

* ``generate`` (think=False): free generation, at most ``--gen-tokens`` new tokens (an <action> reply);
* ``generate-think`` (think=True): free generation, at most ``--think-tokens`` new tokens (<think> + <action>);
* ``prefill``: free generation of 1 token, i.e. the prompt encoding alone (tokens/s counts prompt tokens);
* ``score``: admissible-action scoring (each prompt packed with all its candidates; ``score_choices``' default
  chunking: on CPU one prompt per forward since issue 10, all prompts in one forward before); the
  ``score-chunk4`` row is the same call with ``batch_size=4`` (4 prompts per forward);
* ``generate-group`` (think=False) and ``generate-group-think``: free generation over the envs of a rollout, step
  by step, as the trainer calls the policy: 2 tasks x 8 envs playing random admissible moves, so that a group's
  step-0 prompts are identical and later ones share their instructions and task (``collect_group_states``);
  batched = one call per step over the first N envs, sequential = one call per env per step.

Batched = one call over N prompts; sequential = N calls of one prompt each, on the same N prompts. The weights are
random, so replies run to the token budget (the rare end-of-turn token ends one early); tokens/s counts the
tokens actually generated (scoring: prompt + candidate tokens scored) over the call's wall time, prefill included.
``targets`` also gives the bound of the batched/sequential ratio when prefill cannot be batched faster (one
compute-bound thread): sequential generate time / sequential prefill time, reached only if batched decoding
cost nothing.

Part 2, phase shares. Real :class:`~agentrl.trainer.Trainer` iterations (SCPO, scoring mode, as
``examples/configs/alfworld-cpu.yaml``, with the d256 model of each env) on the built-in ``crafting`` env and on
ALFWorld, sweeping group size and ``max_steps``; ALFWorld with 2 env workers, 1 and none, and with the env steps
overlapped with generation (``rollout.overlap_env_steps``, the default: two waves of episodes) or in lockstep
(``lockstep`` in the label; ``time/env_step`` is then all of the env's time), and with the next iteration's resets
sent to the workers before the learner runs (``rollout.prefetch_resets``, the default; ``no-prefetch`` in the
label: each iteration's resets, ALFWorld's grounding of its new games, are then waited for at its start). The
first config of each env runs one warm-up iteration (imports, first calls; other tasks; reported, not averaged);
env workers are started and warmed on an eval game before the first iteration (else their start-up competes for
the 2 cores). Every config then runs an unmeasured iteration 0 (whose learner step hides iteration 1's resets, as
in a run) and measures iterations 1..k, which draw the same tasks (ALFWorld tasks differ a lot in size: the
learner's cost follows the longest packed row). The phases are the trainer's own ``time/*`` metrics: generation
(prompt rendering included), env_step, env_reset, credit_assignment, learner, and any other ``time/*`` key the
trainer logs (kept apart); ``other`` = iteration - their sum (reply parsing, bookkeeping, trajectory logging).
A random policy never wins, and SCPO only runs its scorer on groups with a success, so each config also times
the credit assignment of the same trajectories with one winner per group (``credit_probe``: MiniLM loaded once
per process, ``cold`` includes that load). The ALFWorld config without workers profiles its env calls (cProfile,
one extra iteration, not in the shares). Last, ALFWorld env steps with and without a memoized parse of
textworld's text-generation templates: ``ALFWorldEnv(memoize_parses=False)`` against the default.

Targets (issue 10): batched >= 4x sequential tokens/s at 16 envs; env + credit assignment < 15% of the iteration
on ALFWorld. Runs at nice >= 5. Part 1 is measured at each of ``--generation-threads`` (default 1 and 2 torch
threads: the issue's "2 cores", batched and sequential alike); part 2 with one thread, as the trainer runs beside
its env workers (models.md threading trap). The machine may be shared, so the load average before and after is
recorded. Writes ``bench/results/throughput.json`` with the previous run's
headline numbers beside this run's.

    nice -n 5 python bench/throughput.py            # 10 min at load ~3.5 on 2 shared cores, 15 min at load ~6
    nice -n 5 python bench/throughput.py --quick    # 2-3 min: d256 only, N in {1, 4, 16}, one config per env

ALFWorld games: ``$ALFWORLD_DATA`` or ``~/.cache/alfworld``; when missing, the script prints the two
``agentrl data alfworld --archive ...`` commands and runs the Crafting parts only.
"""

# Env workers are spawned processes that re-import this module as __mp_main__: keep the top level to the standard
# library so that they do not import torch (envpool.py: "workers import no torch").
from __future__ import annotations

import argparse
import collections
import cProfile
import dataclasses
import functools
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT = HERE / "results" / "throughput.json"
SHARED_ALFWORLD = REPO.parent / "shared" / "data" / "alfworld"
ALFWORLD_CONFIG = REPO / "examples" / "configs" / "alfworld-cpu.yaml"
TARGET_RATIO, TARGET_N, TARGET_SHARE = 4.0, 16, 0.15
PHASES = ("generation", "env_step", "env_reset", "credit_assignment", "learner")


# --------------------------------------------------------------------------------------------------- the machine
def machine() -> dict:
    import torch
    import transformers

    cpu, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = [f for f in value.split() if f.startswith(("avx", "amx"))]
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    try:
        def git(*cmd: str) -> str:
            return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=10,
                                  check=False).stdout

        commit = git("rev-parse", "--short", "HEAD").strip()
        modified = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines() if line]
    except (OSError, subprocess.SubprocessError):
        commit, modified = "", None
    return {
        "cpu": cpu, "cpu_flags": flags, "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": mem_gib, "platform": platform.platform(), "python": sys.version.split()[0],
        "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "transformers": transformers.__version__,
        "git_commit": commit, "git_modified_tracked_files": modified, "niceness": os.nice(0),
        "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
    }


def load_now() -> dict:
    running = None
    try:
        running = Path("/proc/loadavg").read_text().split()[3]  # running/total scheduling entities
    except OSError:
        pass
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "running_total": running, "time": time.time()}


# --------------------------------------------------------------------------------------------------- prompts
def alfworld_missing() -> str | None:
    """None when the trainer can find ALFWorld games, else what to unpack (and from where)."""
    try:
        from agentrl.envs.alfworld import data_status
    except ImportError as exc:  # the engine is not installed
        return f"ALFWorld cannot be imported ({exc})"
    problem = data_status()
    if problem is None:
        return None
    archives = [SHARED_ALFWORLD / f"json_2.1.1-{part}.tar.gz" for part in ("train", "eval")]
    commands = " && ".join(f"agentrl data alfworld --archive {a}" for a in archives)
    return (f"no ALFWorld games at $ALFWORLD_DATA or ~/.cache/alfworld. The trainer needs the train split and an "
            f"eval split: unpack both archives with `{commands}` (json_2.1.1/train and valid_train; json_2.1.1/"
            f"valid_seen and valid_unseen). Details: {problem}")


def collect_states(env_name: str, env_args: dict, split: str, tasks: int, steps: int, seed: int) -> list[tuple]:
    """(observation, info with the admissible actions, history) of the states met by random admissible moves (an
    untrained policy) on ``tasks`` tasks, shuffled (seeded) so that any first N mix tasks and steps. ``history`` is
    the (observation, action) steps before the state."""
    from agentrl import envs

    env = envs.make(env_name, **env_args)
    try:
        ids = list(env.unwrapped.task_ids(split))
        rng = random.Random(seed)
        states = []
        for task_id in rng.sample(ids, min(tasks, len(ids))):
            obs, info = env.reset(options={"task_id": task_id})
            history: list[tuple[str, str]] = []
            for _ in range(steps):
                actions = list(info["admissible_actions"])
                states.append((obs, {"admissible_actions": actions}, list(history)))
                action = rng.choice(actions)
                history.append((obs, action))
                obs, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
        rng.shuffle(states)
        return states
    finally:
        env.close()


def collect_group_states(env_name: str, split: str, tasks: int, group: int, steps: int, seed: int) -> list[list[tuple]]:
    """What the trainer's policy sees, step by step, in a rollout of ``tasks`` tasks x ``group`` envs: per step, the
    (observation, info, history) of every env (members of a group play their own random admissible moves, so their
    prompts are identical at step 0 and diverge after). Episodes that end early are left out of later steps."""
    from agentrl import envs

    env = envs.make(env_name)
    try:
        ids = list(env.unwrapped.task_ids(split))
        rng = random.Random(seed)
        per_step: list[list[tuple]] = [[] for _ in range(steps)]
        for task_id in rng.sample(ids, min(tasks, len(ids))):
            for _ in range(group):
                obs, info = env.reset(options={"task_id": task_id})
                history: list[tuple[str, str]] = []
                for step in range(steps):
                    actions = list(info["admissible_actions"])
                    per_step[step].append((obs, {"admissible_actions": actions}, list(history)))
                    action = rng.choice(actions)
                    history.append((obs, action))
                    obs, _, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        break
        return per_step
    finally:
        env.close()


def messages(states: list[tuple], env_name: str, think: bool) -> list[list[dict]]:
    from agentrl.agents.react import ReActAgent

    agent = ReActAgent(ReActAgent.family_for_env(env_name), think=think)
    agent.reset(len(states))
    out = []
    for index, (obs, info, history) in enumerate(states):
        for past_obs, action in history:
            agent.record(index, past_obs, action)
        out.append(agent.messages(index, obs, info))
    return out


def build_model(root: Path, name: str, corpus: list[str], hidden: int, layers: int, vocab: int) -> dict:
    from agentrl.models import save_tiny_model
    from agentrl.policy import HFPolicy

    path = save_tiny_model(root / name, seed=0, vocab_size=vocab, hidden_size=hidden, num_layers=layers,
                           corpus=corpus)
    policy = HFPolicy(str(path), device="cpu")
    return {"path": str(path), "hidden": hidden, "layers": layers, "vocab": len(policy.tokenizer),
            "params": policy.num_parameters(), "dtype": str(next(policy.model.parameters()).dtype)}


# --------------------------------------------------------------------------------------------------- part 1
#: mode -> (think, batched variants as (row name, score_choices batch_size))
MODES = {
    "generate": (False, [("generate", None)]),
    "generate-think": (True, [("generate-think", None)]),
    "prefill": (False, [("prefill", None)]),
    "score": (False, [("score", None), ("score-chunk4", 4)]),
}


def _policy_call(policy, mode: str, prompts: list, candidates: list, config, idx: list[int], seed: int,
                 batch_size: int | None = None) -> int:
    """One policy call over the prompts ``idx``; returns the tokens it produced (prefill: the prompt tokens it
    encoded; scoring: the prompt and candidate tokens it scored)."""
    if mode == "score":
        choices = policy.score_choices([prompts[i] for i in idx], [candidates[i] for i in idx], temperature=1.0,
                                       seed=seed, batch_size=batch_size)
        return sum(len(c.prompt_ids) + sum(len(ids) for ids in c.choice_ids) for c in choices)
    generations = policy.generate([prompts[i] for i in idx], config, seed=seed)
    if mode == "prefill":
        return sum(len(g.prompt_ids) for g in generations)
    return sum(len(g.response_ids) for g in generations)


def bench_generation(model: dict, states: list[tuple], env_name: str, plan: dict[str, list[int]], repeats: int,
                     gen_tokens: int, think_tokens: int) -> list[dict]:
    """Batched vs sequential tokens/s for each mode and N (module docstring); ``plan``: mode -> the Ns."""
    from agentrl.policy import GenerationConfig, HFPolicy

    policy = HFPolicy(model["path"], device="cpu")
    rows = []
    for mode, ns in plan.items():
        think, variants = MODES[mode]
        top = max(ns)
        t0 = time.perf_counter()
        prompts = [policy.render(m) for m in messages(states[:top], env_name, think)]
        render_ms = 1000 * (time.perf_counter() - t0) / len(prompts)
        candidates = [list(s[1]["admissible_actions"]) for s in states[:top]]
        budget = 1 if mode == "prefill" else think_tokens if think else gen_tokens
        config = GenerationConfig(max_new_tokens=budget, temperature=1.0)
        call = functools.partial(_policy_call, policy, mode, prompts, candidates, config)

        call([0, 1], 0)  # warm-up: first-call allocations, lazy imports
        call([0], 0)
        batched: dict[tuple, list[tuple[int, float]]] = collections.defaultdict(list)
        sequential: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
        for rep in range(repeats):
            # Alternate which goes first, so that a change of machine load over the run hits both alike.
            for kind in (("seq", "batch") if rep % 2 == 0 else ("batch", "seq")):
                if kind == "seq":
                    per_call = []
                    for i in range(top):
                        t = time.perf_counter()
                        tokens = call([i], seed=rep * 10_000 + i)
                        per_call.append((tokens, time.perf_counter() - t))
                    for n in ns:  # N calls of one prompt each = the first N calls of this pass
                        sequential[n].append((sum(k for k, _ in per_call[:n]), sum(s for _, s in per_call[:n])))
                    continue
                for name, batch_size in variants:
                    for n in ns:
                        t = time.perf_counter()
                        tokens = call(list(range(n)), seed=rep * 10_000 + n, batch_size=batch_size)
                        batched[name, n].append((tokens, time.perf_counter() - t))
        for name, batch_size in variants:
            for n in ns:
                b_rate = statistics.median(k / s for k, s in batched[name, n])
                s_rate = statistics.median(k / s for k, s in sequential[n])
                row = {
                    "model": model["name"], "mode": name, "n": n,
                    "batched_tok_s": round(b_rate, 1), "sequential_tok_s": round(s_rate, 1),
                    "ratio": round(b_rate / s_rate, 2),
                    "batched_s": round(statistics.median(s for _, s in batched[name, n]), 3),
                    "sequential_s": round(statistics.median(s for _, s in sequential[n]), 3),
                    "tokens_per_call": statistics.median(k for k, _ in batched[name, n]),
                    "mean_prompt_tokens": round(sum(len(prompts[i]) for i in range(n)) / n, 1),
                    "max_prompt_tokens": max(len(prompts[i]) for i in range(n)),
                    "max_new_tokens": None if mode == "score" else budget, "score_batch_size": batch_size,
                    "render_ms_per_prompt": round(render_ms, 2), "repeats": repeats,
                }
                if mode == "score":
                    row["mean_candidates"] = round(sum(len(candidates[i]) for i in range(n)) / n, 1)
                    row["batched_decisions_s"] = round(n / row["batched_s"], 2)
                    row["sequential_decisions_s"] = round(n / row["sequential_s"], 2)
                rows.append(row)
                print(f"  {model['name']:<5} {name:<15} N={n:<3} batched {b_rate:8.0f} tok/s   sequential "
                      f"{s_rate:8.0f} tok/s   x{b_rate / s_rate:5.2f}   ({row['batched_s']:.2f} s vs "
                      f"{row['sequential_s']:.2f} s; prompts ~{row['mean_prompt_tokens']:.0f} tok)", flush=True)
    return rows


def bench_group_generation(model: dict, per_step: list[list[tuple]], env_name: str, ns: list[int], repeats: int,
                           modes: list[str], gen_tokens: int, think_tokens: int) -> list[dict]:
    """Batched vs sequential tokens/s over the steps of a rollout group (:func:`collect_group_states`): batched =
    one call per step over the first N envs, sequential = N calls of one prompt per step; totals over the steps."""
    from agentrl.policy import GenerationConfig, HFPolicy

    policy = HFPolicy(model["path"], device="cpu")
    rows = []
    for mode in modes:
        think = mode.endswith("think")
        prompts = [[policy.render(m) for m in messages(states, env_name, think)] for states in per_step]
        config = GenerationConfig(max_new_tokens=think_tokens if think else gen_tokens, temperature=1.0)
        policy.generate(prompts[0][:2], config, seed=0)  # warm-up
        batched: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
        sequential: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
        top = max(ns)

        def timed(call: list, seed: int, config: GenerationConfig = config) -> tuple[int, float]:
            t = time.perf_counter()
            generations = policy.generate(call, config, seed=seed)
            return sum(len(g.response_ids) for g in generations), time.perf_counter() - t

        for rep in range(repeats):
            for kind in (("seq", "batch") if rep % 2 == 0 else ("batch", "seq")):
                if kind == "seq":  # every env alone; N envs = the first N of each step
                    per_call = [[timed([p], rep * 10_000 + step * 100 + i) for i, p in enumerate(step_prompts[:top])]
                                for step, step_prompts in enumerate(prompts)]
                    for n in ns:
                        sequential[n].append((sum(k for calls in per_call for k, _ in calls[:n]),
                                              sum(t for calls in per_call for _, t in calls[:n])))
                    continue
                for n in ns:
                    results = [timed(step_prompts[:n], rep * 10_000 + step * 100 + n)
                               for step, step_prompts in enumerate(prompts)]
                    batched[n].append((sum(k for k, _ in results), sum(t for _, t in results)))
        for n in ns:
            b_rate = statistics.median(k / t for k, t in batched[n])
            s_rate = statistics.median(k / t for k, t in sequential[n])
            firsts = [p[:n] for p in prompts]
            row = {
                "model": model["name"], "mode": mode, "n": n, "batched_tok_s": round(b_rate, 1),
                "sequential_tok_s": round(s_rate, 1), "ratio": round(b_rate / s_rate, 2),
                "batched_s": round(statistics.median(t for _, t in batched[n]), 3),
                "sequential_s": round(statistics.median(t for _, t in sequential[n]), 3),
                "steps": len(prompts), "distinct_prompts_per_step": [len({tuple(p) for p in f}) for f in firsts],
                "mean_prompt_tokens": round(sum(len(p) for f in firsts for p in f) / sum(len(f) for f in firsts), 1),
                "max_new_tokens": config.max_new_tokens, "repeats": repeats,
            }
            rows.append(row)
            print(f"  {model['name']:<5} {mode:<21} N={n:<3} batched {b_rate:8.0f} tok/s   sequential "
                  f"{s_rate:8.0f} tok/s   x{b_rate / s_rate:5.2f}   ({row['batched_s']:.2f} s vs "
                  f"{row['sequential_s']:.2f} s over {len(prompts)} steps; distinct prompts per step "
                  f"{row['distinct_prompts_per_step']})", flush=True)
    return rows


# --------------------------------------------------------------------------------------------------- part 2
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
                iterations.append(row)
                more = "".join(f" + {p} {row[p]:.2f}" for p in extra)
                print(f"    {label} it{it}{' (warm-up)' if is_warmup else ''}: {row['iteration_s']:.1f} s = gen "
                      f"{row['generation']:.1f} + env {row['env_step']:.1f} + reset {row['env_reset']:.1f} + credit "
                      f"{row['credit_assignment']:.2f} + learner {row['learner']:.1f}{more} + other {row['other']:.2f}"
                      f"  ({row['steps']} steps, learner {row.get('learner_tok_s', 0):.0f} tok/s)", flush=True)
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


# --------------------------------------------------------------------------------------------------- report
def summary(report: dict) -> dict:
    """Flat headline numbers, compared run to run."""
    out = {}
    for row in report.get("generation", {}).get("rows", []):
        threads = row.get("threads", 1)  # runs before 2026-12-05 measured one thread only, under the plain keys
        key = f"gen/{row['model']}/{row['mode']}/N{row['n']}" + ("" if threads == 1 else f"/threads{threads}")
        out[f"{key}/ratio"] = row["ratio"]
        out[f"{key}/batched_tok_s"] = row["batched_tok_s"]
    for configs in report.get("phases", {}).values():
        if not isinstance(configs, list):
            continue
        for c in configs:
            out[f"phases/{c['label']}/iteration_s"] = c["mean_s"]["iteration_s"]
            out[f"phases/{c['label']}/env_plus_credit_share"] = c["env_plus_credit_share"]
            for p, share in c["shares"].items():
                out[f"phases/{c['label']}/{p}_share"] = share
    if "textgen_cache_experiment" in report:
        out["alfworld/textgen_memo_speedup"] = report["textgen_cache_experiment"]["speedup"]
    return out


def targets(report: dict) -> dict:
    out = {}
    rows = [r for r in report.get("generation", {}).get("rows", []) if r["n"] == TARGET_N and r["model"] == "d256"]
    for threads in sorted({r.get("threads", 1) for r in rows}):
        same = [r for r in rows if r.get("threads", 1) == threads]
        name = "batched_vs_sequential_at_16" + ("" if threads == 1 else f"_threads{threads}")
        out[name] = {
            "target": f">= {TARGET_RATIO}x", "threads": threads, "by_mode": {r["mode"]: r["ratio"] for r in same},
            "met": {r["mode"]: r["ratio"] >= TARGET_RATIO for r in same},
        }
        by_mode = {r["mode"]: r for r in same}
        if "prefill" in by_mode:
            prefill_s = by_mode["prefill"]["sequential_s"]
            out[name]["bound_if_batched_decoding_were_free"] = {
                m: round(by_mode[m]["sequential_s"] / prefill_s, 2) for m in ("generate", "generate-think")
                if m in by_mode}
    alf = report.get("phases", {}).get("alfworld")
    if isinstance(alf, list) and alf:
        out["alfworld_env_plus_credit_share"] = {
            "target": f"< {TARGET_SHARE:.0%}", "by_config": {c["label"]: c["env_plus_credit_share"] for c in alf},
            "met": {c["label"]: c["env_plus_credit_share"] < TARGET_SHARE for c in alf},
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~3 minutes: fewer rows, configs and repeats")
    parser.add_argument("--skip", nargs="*", default=[], choices=["generation", "crafting", "alfworld", "experiment"])
    parser.add_argument("--tasks", type=int, default=2, help="rollout.tasks_per_iteration of the trainer runs")
    parser.add_argument("--measured", type=int, default=None,
                        help="measured iterations per config (default: crafting 1, ALFWorld 2; quick: 1)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="warm-up iterations of the first config of each env (later configs: none)")
    parser.add_argument("--repeats", type=int, default=None, help="generation repeats (default 2, quick 1)")
    parser.add_argument("--gen-tokens", type=int, default=32, help="max new tokens, think=False")
    parser.add_argument("--think-tokens", type=int, default=128, help="max new tokens, think=True")
    parser.add_argument("--alfworld-configs", nargs="*", default=None,
                        help='only these ALFWorld phase configs, by label: "G4 steps10 workers2" "G4 steps10 '
                             'workers2 lockstep" (default: the whole sweep)')
    parser.add_argument("--generation-threads", type=int, nargs="+", default=[1, 2],
                        help="torch threads of part 1, each measured in turn (the phase runs use one: env workers "
                             "share the cores)")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--models", type=Path, default=REPO / "runs" / "bench-throughput",
                        help="where the benchmark's models are built (cached)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if os.nice(0) < 5:
        os.nice(5 - os.nice(0))  # be a polite neighbour on a shared machine
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)  # models.md threading trap; the trainer runs use run.torch_threads=1 too
    report: dict = {"script": "bench/throughput.py", "argv": sys.argv[1:] if argv is None else argv,
                    "mode": "quick" if args.quick else "full", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load_before": load_now(), "machine": machine(),
                    "note": "2-core machine shared with other jobs (tests, other benchmarks) while this ran: "
                            "absolute times carry their load (see load_before/after); ratios and shares less so"}
    print(f"machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, torch "
          f"{report['machine']['torch']} ({report['machine']['torch_threads']} thread), load "
          f"{report['load_before']['loadavg']}", flush=True)

    missing = alfworld_missing()
    if missing:
        print(f"ALFWorld parts skipped: {missing}", flush=True)
        report["alfworld_skipped"] = missing
    prompt_env = "crafting" if missing else "alfworld"
    models_dir = args.models
    models: dict[str, dict] = {}

    def env_model(env_name: str) -> dict:
        if env_name not in models:
            t = time.perf_counter()
            split = "eval_out_of_distribution" if env_name == "alfworld" else "train"
            states = collect_states(env_name, {}, split, tasks=6, steps=8, seed=0)
            corpus = [m[0]["content"] for think in (False, True) for m in messages(states, env_name, think)]
            corpus += [f"<think>I should {a} now.</think><action>{a}</action>" for s in states
                       for a in s[1]["admissible_actions"][:3]]
            models[env_name] = {"name": "d256", **build_model(models_dir, f"{env_name}-d256", corpus, 256, 4, 4096),
                                "states": states}
            print(f"model {env_name}-d256: {models[env_name]['params'] / 1e6:.2f}M params, vocab "
                  f"{models[env_name]['vocab']}, {len(states)} prompt states ({time.perf_counter() - t:.0f} s)",
                  flush=True)
        return models[env_name]

    # -- part 1
    if "generation" not in args.skip:
        print("\n== generation: batched (one call over N prompts) vs sequential (N calls of one prompt)", flush=True)
        ns = [1, 4, 16] if args.quick else [1, 4, 16, 32]
        repeats = args.repeats or (1 if args.quick else 2)
        main_model = env_model(prompt_env)
        states = main_model["states"]
        if len(states) < max(ns):
            raise SystemExit(f"only {len(states)} prompt states for N up to {max(ns)}")
        plan = {"generate": ns, "score": ns} if args.quick else {
            "generate": ns, "generate-think": [1, 4, 16], "prefill": ns, "score": ns}
        # The same N envs as a rollout sees them: 2 tasks x 8 envs, step by step (identical step-0 prompts in a group).
        group_split = "eval_out_of_distribution" if prompt_env == "alfworld" else "train"
        group_steps = collect_group_states(prompt_env, group_split, tasks=2, group=8, steps=3 if args.quick else 4,
                                           seed=1)
        group_modes = ["generate-group"] if args.quick else ["generate-group", "generate-group-think"]
        tiny_info = None
        if not args.quick:
            from agentrl.models import save_tiny_model
            from agentrl.policy import HFPolicy

            tiny_path = save_tiny_model(models_dir / "tiny-random")  # the registered tiny-random default
            tiny_policy = HFPolicy(str(tiny_path), device="cpu")
            tiny_info = {"name": "tiny", "path": str(tiny_path), "hidden": 64, "layers": 2,
                         "vocab": len(tiny_policy.tokenizer), "params": tiny_policy.num_parameters()}
        rows = []
        for threads in args.generation_threads:
            torch.set_num_threads(threads)  # batched and sequential alike: the same cores for both
            print(f"-- torch threads: {threads}", flush=True)
            part = bench_generation(main_model, states, prompt_env, plan, repeats, args.gen_tokens, args.think_tokens)
            part += bench_group_generation(main_model, group_steps, prompt_env, ns[:3], repeats, group_modes,
                                           args.gen_tokens, args.think_tokens)
            if tiny_info:
                part += bench_generation(tiny_info, states, prompt_env, {"generate": ns, "score": ns}, repeats,
                                         args.gen_tokens, args.think_tokens)
            rows += [{**row, "threads": threads} for row in part]
        torch.set_num_threads(1)
        report["generation"] = {
            "prompt_env": prompt_env, "prompts": f"ReActAgent prompts of {len(main_model['states'])} {prompt_env} "
                                                 "states (random admissible moves, 8 steps on each of 6 tasks, shuffled)",
            "models": {"d256": {k: v for k, v in main_model.items() if k != "states"}, "tiny": tiny_info},
            "rows": rows,
        }

    # -- part 2
    report["phases"] = {}
    tasks = args.tasks
    if "crafting" not in args.skip:
        print("\n== phase shares: crafting (SCPO, scoring mode, workers 0)", flush=True)
        model = env_model("crafting")
        base = {"algo.name": "scpo", "model.path": model["path"], "agent.mode": "score", "agent.think": False,
                "rollout.tasks_per_iteration": tasks, "rollout.workers": 0, "learner.lr": 1e-4,
                "learner.mini_batch_size": 64, "learner.micro_batch_size": 16, "learner.bf16": "auto",
                "generation.max_prompt_tokens": 1024}
        sweep = [(4, 10, "score")] if args.quick else [(2, 10, "score"), (4, 10, "score"), (8, 10, "score"),
                                                       (4, 20, "score"), (4, 10, "generate")]
        configs = []
        for g, steps, mode in sweep:
            over = {**base, "rollout.group_size": g, "env.args": {"max_steps": steps}}
            if mode == "generate":
                over.update({"agent.mode": "generate", "generation.max_new_tokens": args.gen_tokens})
            configs.append(run_config(f"crafting G{g} steps{steps} {mode}", "crafting", over, base_file=None,
                                      warmup=0 if configs else args.warmup, measured=args.measured or 1))
        report["phases"]["crafting"] = configs
    if "alfworld" not in args.skip:
        if missing:
            report["phases"]["alfworld"] = {"skipped": missing}
        else:
            # (group size, max steps, env workers, profile the env calls, overlap env steps with generation,
            # send the next iteration's resets before the learner runs)
            sweep = [(2, 5, 2, False, True, True), (2, 5, 2, False, False, True)] if args.quick else [
                (2, 10, 2, False, True, True), (4, 10, 2, False, True, True), (8, 10, 2, False, True, True),
                (4, 20, 2, False, True, True), (4, 10, 0, True, True, True), (4, 10, 2, False, False, True),
                (4, 10, 2, False, True, False), (4, 10, 1, False, True, True), (4, 10, 1, False, False, True),
                (4, 10, 1, False, True, False)]
            names = [f"G{g} steps{steps} workers{workers}" + ("" if overlap else " lockstep")
                     + ("" if prefetch else " no-prefetch") for g, steps, workers, _, overlap, prefetch in sweep]
            unknown = sorted(set(args.alfworld_configs or []) - set(names))
            if unknown:
                raise SystemExit(f"--alfworld-configs: unknown {unknown}; the sweep has {names}")
            print(f"\n== phase shares: ALFWorld ({ALFWORLD_CONFIG.relative_to(REPO)} with the d256 model; SCPO, "
                  "scoring mode)", flush=True)
            from agentrl.models import EMBEDDED_POLICY, recommended_agent_settings

            model = env_model("alfworld")
            # The example runs the embedded policy with the agent settings its agentrl.json recommends (no <think>,
            # scoring mode, history 2); the d256 model recommends none, so they are set here.
            agent = {f"agent.{k}": v for k, v in recommended_agent_settings(EMBEDDED_POLICY).items()}
            # A random policy never wins: every advantage is 0 and the example's skip_zero_advantage would leave
            # the learner nothing to do; a real run (some groups with a success) updates on its rows.
            base = {"model.path": model["path"], "rollout.tasks_per_iteration": tasks, "learner.bf16": "auto",
                    "learner.skip_zero_advantage": False, **agent}
            configs = []
            for name, (g, steps, workers, profile, overlap, prefetch) in zip(names, sweep):
                if args.alfworld_configs and name not in args.alfworld_configs:
                    continue
                over = {**base, "rollout.group_size": g, "rollout.workers": workers, "env.args": {"max_steps": steps},
                        "rollout.overlap_env_steps": overlap, "rollout.prefetch_resets": prefetch}
                label = f"alfworld {name}"
                configs.append(run_config(label, "alfworld", over,
                                          base_file=ALFWORLD_CONFIG, warmup=0 if configs else args.warmup,
                                          measured=args.measured or (1 if args.quick else 2), profile=profile))
            report["phases"]["alfworld"] = configs
            if "experiment" not in args.skip:
                print("\n== ALFWorld env steps: textworld's grammar vs the engine's memoized parses", flush=True)
                report["textgen_cache_experiment"] = textgen_cache_experiment(tasks=2 if args.quick else 3,
                                                                              steps=10 if args.quick else 15)

    # -- results
    report["load_after"] = load_now()
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["targets"] = targets(report)
    report["summary"] = summary(report)
    previous = None
    if args.out.is_file():
        try:
            previous = json.loads(args.out.read_text())
        except (OSError, json.JSONDecodeError):
            previous = None
    if previous:
        report["previous"] = {k: previous.get(k) for k in ("date", "mode", "wall_s", "load_before", "load_after",
                                                           "summary", "targets")}
        report["previous"]["git_commit"] = previous.get("machine", {}).get("git_commit")
        before = previous.get("summary", {})
        report["compared"] = {k: {"now": v, "previous": before.get(k)} for k, v in report["summary"].items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(args.out)

    print("\n== summary" + (f" (previous run: {previous.get('date')}, {previous.get('mode')})" if previous else ""))
    for key, value in report["summary"].items():
        if key.endswith(("ratio", "env_plus_credit_share", "iteration_s", "speedup")):
            old = (previous or {}).get("summary", {}).get(key)
            print(f"  {key:<62} {value:>9}" + (f"   (previous {old})" if old is not None else ""))
    for name, target in report["targets"].items():
        print(f"  target {name} {target['target']}: {target['met']}")
    print(f"wall {report['wall_s']:.0f} s; load {report['load_before']['loadavg']} -> "
          f"{report['load_after']['loadavg']}; wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
