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
its env workers (the CPU threading trap, src/agentrl/hardware.py). The machine may be shared, so the load average
before and after is recorded. Writes ``bench/results/throughput.json`` with the previous run's headline numbers
beside this run's.

    nice -n 5 python bench/throughput.py            # 10 min at load ~3.5 on 2 shared cores, 15 min at load ~6
    nice -n 5 python bench/throughput.py --quick    # 2-3 min: d256 only, N in {1, 4, 16}, one config per env

ALFWorld games: ``$ALFWORLD_DATA`` or ``~/.cache/alfworld``; when missing, the script prints the two
``agentrl data alfworld --archive ...`` commands and runs the Crafting parts only.
"""

# Env workers are spawned processes that re-import this module as __mp_main__: keep the top level to the standard
# library so that they do not import torch (envpool.py: "workers import no torch"). The same holds for the parts in
# bench/throughput_parts/, imported from this script's folder.
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from throughput_parts import ALFWORLD_CONFIG, REPO, RESULT
from throughput_parts.generation import bench_generation, bench_group_generation
from throughput_parts.machine import load_now, machine
from throughput_parts.phases import run_config, textgen_cache_experiment
from throughput_parts.prompts import alfworld_missing, build_model, collect_group_states, collect_states, messages
from throughput_parts.report import write_report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
    return parser.parse_args(argv)


def env_model(models: dict[str, dict], models_dir: Path, env_name: str) -> dict:
    """The d256 model of ``env_name`` with the prompt states its tokenizer was trained on: built in ``models_dir``
    on first use, then kept in ``models``."""
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


def generation_part(args: argparse.Namespace, model_of: Callable[[str], dict], prompt_env: str) -> dict:
    """Part 1 (module docstring) at each of ``--generation-threads``: the report's ``generation``."""
    import torch

    print("\n== generation: batched (one call over N prompts) vs sequential (N calls of one prompt)", flush=True)
    ns = [1, 4, 16] if args.quick else [1, 4, 16, 32]
    repeats = args.repeats or (1 if args.quick else 2)
    main_model = model_of(prompt_env)
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

        tiny_path = save_tiny_model(args.models / "tiny-random")  # the registered tiny-random default
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
    return {
        "prompt_env": prompt_env, "prompts": f"ReActAgent prompts of {len(main_model['states'])} {prompt_env} "
                                             "states (random admissible moves, 8 steps on each of 6 tasks, shuffled)",
        "models": {"d256": {k: v for k, v in main_model.items() if k != "states"}, "tiny": tiny_info},
        "rows": rows,
    }


def crafting_phases(args: argparse.Namespace, model_of: Callable[[str], dict]) -> list[dict]:
    """Part 2 on the built-in Crafting env (SCPO, scoring mode, no env workers): one result per config."""
    print("\n== phase shares: crafting (SCPO, scoring mode, workers 0)", flush=True)
    model = model_of("crafting")
    base = {"algo.name": "scpo", "model.path": model["path"], "agent.mode": "score", "agent.think": False,
            "rollout.tasks_per_iteration": args.tasks, "rollout.workers": 0, "learner.lr": 1e-4,
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
    return configs


def alfworld_phases(args: argparse.Namespace, model_of: Callable[[str], dict], report: dict) -> None:
    """Part 2 on ALFWorld (``examples/configs/alfworld-cpu.yaml`` with the d256 model): the sweep's results into
    ``report["phases"]["alfworld"]``, then the parse-memo experiment's into ``report``."""
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

    model = model_of("alfworld")
    # The example runs the embedded policy with the agent settings its agentrl.json recommends (no <think>,
    # scoring mode, history 2); the d256 model recommends none, so they are set here.
    agent = {f"agent.{k}": v for k, v in recommended_agent_settings(EMBEDDED_POLICY).items()}
    # A random policy never wins: every advantage is 0 and the example's skip_zero_advantage would leave
    # the learner nothing to do; a real run (some groups with a success) updates on its rows.
    base = {"model.path": model["path"], "rollout.tasks_per_iteration": args.tasks, "learner.bf16": "auto",
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


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    if os.nice(0) < 5:
        os.nice(5 - os.nice(0))  # be a polite neighbour on a shared machine
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)  # the CPU threading trap (agentrl.hardware); the trainer runs use one thread too
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
    model_of = functools.partial(env_model, {}, args.models)

    # -- part 1
    if "generation" not in args.skip:
        report["generation"] = generation_part(args, model_of, prompt_env)

    # -- part 2
    report["phases"] = {}
    if "crafting" not in args.skip:
        report["phases"]["crafting"] = crafting_phases(args, model_of)
    if "alfworld" not in args.skip:
        if missing:
            report["phases"]["alfworld"] = {"skipped": missing}
        else:
            alfworld_phases(args, model_of, report)

    # -- results
    write_report(report, args.out, started)
    return report


if __name__ == "__main__":
    main()
