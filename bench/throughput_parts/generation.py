"""Part 1: tokens/s of batched against one-at-a-time generation and scoring through ``HFPolicy``."""

from __future__ import annotations

import collections
import functools
import statistics
import time

from throughput_parts.prompts import messages

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

