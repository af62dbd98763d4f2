"""GPU check (run by bench/gpu_check.sh): the learner on CUDA in bf16, generation and training tokens/s.

Phases, each timed and written to ``bench/results/gpu_check.json`` (or ``--out``):

1. build a Llama from config (no download: ``--hidden``/``--layers``; default ~150M parameters, head_dim 64, a
   4k-token BPE trained in memory) and save it, so every backend loads the same folder;
2. HF generation on the GPU (:meth:`HFPolicy.generate`): ``--prompts`` prompts of ``--prompt-tokens`` tokens,
   ``--new-tokens`` new tokens each; tokens/s of generated tokens;
3. the learner (:class:`~agentrl.learner.Learner`) on those rows with bf16 autocast over float32 master weights:
   ``--updates`` PPO updates (the first is warm-up); tokens/s = (prompt + response) tokens through forward and
   backward per second, and response (loss) tokens per second;
4. with vllm installed: the same prompts on a vLLM engine in bf16 (tokens/s), a weight push after the updates
   (seconds), and the mean |vLLM − learner| log-prob of the sampled tokens (bf16 engine vs. recomputation under
   bf16 autocast: reported, not checked; the CPU check in float32 is the tight one);
5. ``agentrl train`` end to end for 2 iterations on Crafting with ``--generator auto`` (the trainer's own device,
   generator and weight-sync wiring on CUDA).

Exits 1 (loudly) if CUDA is missing or a phase fails; budget: under 8 minutes on one H200 with the defaults.
``--smoke`` runs tiny sizes on the CPU to check this script itself; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def build_model(folder: Path, hidden: int, layers: int, vocab: int, seed: int = 0) -> Path:
    """A random-weight Llama from config with head_dim 64 and a BPE tokenizer trained in memory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.models import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(vocab)
    heads = max(1, hidden // 64)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=int(hidden * 2.75) // 64 * 64,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                         max_position_embeddings=4096, tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpu_check.json")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the script only")
    args = parser.parse_args()

    import torch

    if args.smoke:
        args.hidden, args.layers, args.prompts, args.prompt_tokens, args.new_tokens, args.updates = 64, 2, 4, 32, 8, 2
        device = "cpu"
        torch.set_num_threads(1)
    else:
        if not torch.cuda.is_available():
            print(f"ERROR: no CUDA GPU is visible to torch {torch.__version__} (CUDA build: {torch.version.cuda}); "
                  "this check needs one. Install a CUDA torch, check nvidia-smi and CUDA_VISIBLE_DEVICES.",
                  file=sys.stderr)
            return 1
        device = "cuda"
    from agentrl.learner import Learner, LearnerConfig, TrainingSample
    from agentrl.policy import GenerationConfig, HFPolicy, token_log_probs

    result: dict = {"machine": {"python": platform.python_version(), "torch": torch.__version__,
                                "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke)",
                                "smoke": args.smoke},
                    "phases_s": {}}
    started = time.perf_counter()

    def phase(name: str, t0: float) -> None:
        result["phases_s"][name] = round(time.perf_counter() - t0, 2)
        print(f"[{time.perf_counter() - started:6.1f} s] {name} done in {result['phases_s'][name]:.1f} s", flush=True)

    # 1. model from config ------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    folder = build_model(Path(tempfile.mkdtemp(prefix="agentrl-gpu-check-")) / "model", args.hidden, args.layers,
                         args.vocab)
    policy = HFPolicy(folder, device=device)
    result["model"] = {"hidden": args.hidden, "layers": args.layers, "vocab": len(policy.tokenizer),
                       "parameters": policy.num_parameters(), "master_dtype": str(next(policy.model.parameters()).dtype)}
    print(f"model: {policy.num_parameters() / 1e6:.0f}M parameters on {device}", flush=True)
    phase("build_model", t0)

    # 2. HF generation -------------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    rng = random.Random(0)
    vocab = len(policy.tokenizer)
    prompts = [[rng.randrange(3, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]
    config = GenerationConfig(max_new_tokens=args.new_tokens, max_prompt_tokens=args.prompt_tokens, temperature=1.0,
                              stop_token_ids=())
    policy.generate(prompts[:2], GenerationConfig(max_new_tokens=4), seed=0)  # warm-up (kernels, allocator)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    g0 = time.perf_counter()
    generations = policy.generate(prompts, config, seed=1)
    sync()
    seconds = time.perf_counter() - g0
    tokens = sum(len(g.response_ids) for g in generations)
    result["hf_generation"] = {"prompts": len(prompts), "prompt_tokens": args.prompt_tokens, "new_tokens": tokens,
                               "seconds": seconds, "tokens_per_s": tokens / seconds}
    print(f"HF generate: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tok/s", flush=True)
    phase("hf_generation", t0)

    # 3. the learner in bf16 autocast ----------------------------------------------------------------------------
    t0 = time.perf_counter()
    learner = Learner(policy, LearnerConfig(lr=1e-6, bf16=True, mini_batch_size=len(generations),
                                            micro_batch_size=16, kl_coef=0.01))
    if device == "cuda" and not learner.autocast:
        print("ERROR: the learner did not turn bf16 autocast on for CUDA", file=sys.stderr)
        return 1
    samples = [TrainingSample.from_generation(g, advantage=rng.choice([-1.0, 1.0])) for g in generations]
    per_update = []
    for i in range(args.updates):
        sync()
        u0 = time.perf_counter()
        stats = learner.update(samples)
        sync()
        per_update.append(time.perf_counter() - u0)
        if not (math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])):
            print(f"ERROR: update {i} gave a NaN loss/gradient: {stats}", file=sys.stderr)
            return 1
    timed = per_update[1:] or per_update
    mean_s = sum(timed) / len(timed)
    all_tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    loss_tokens = sum(len(s.response_ids) for s in samples)
    result["learner"] = {"rows": len(samples), "tokens_per_update": all_tokens, "loss_tokens_per_update": loss_tokens,
                         "update_s": per_update, "tokens_per_s": all_tokens / mean_s,
                         "loss_tokens_per_s": loss_tokens / mean_s, "bf16_autocast": learner.autocast,
                         "recompute_old_logprobs": learner.recompute_old, "last_stats": stats,
                         "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}
    print(f"learner: {all_tokens / mean_s:.0f} tok/s through forward+backward ({loss_tokens / mean_s:.0f} loss "
          f"tok/s), {mean_s:.2f} s per update of {len(samples)} rows", flush=True)
    phase("learner", t0)

    # 4. vLLM, when installed ------------------------------------------------------------------------------------
    from agentrl.generators import vllm_installed

    if vllm_installed() and not args.smoke:
        t0 = time.perf_counter()
        from agentrl.vllm_generator import VLLMGenerator

        engine = VLLMGenerator.from_policy(policy, folder, dtype="bfloat16", gpu_memory_utilization=0.3,
                                           max_model_len=args.prompt_tokens + args.new_tokens + 64, device_index=0)
        engine.generate(prompts[:2], GenerationConfig(max_new_tokens=4), seed=0)
        g0 = time.perf_counter()
        outs = engine.generate(prompts, config, seed=1)
        seconds = time.perf_counter() - g0
        tokens = sum(len(g.response_ids) for g in outs)
        p0 = time.perf_counter()
        engine.load_weights(policy.state_dict_for_inference())
        push_s = time.perf_counter() - p0
        check = engine.generate(prompts[:16], config, seed=2)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            recomputed, _, _ = token_log_probs(policy.model, [g.prompt_ids for g in check],
                                               [g.response_ids for g in check], pad_id=policy.pad_token_id)
        diffs = [abs(v - float(recomputed[r, t])) for r, g in enumerate(check) for t, v in enumerate(g.logprobs)]
        result["vllm"] = {"engine_start_s": engine.start_seconds, "new_tokens": tokens, "seconds": seconds,
                          "tokens_per_s": tokens / seconds, "weight_push_s": push_s,
                          "mean_abs_logprob_diff_bf16": sum(diffs) / len(diffs), "max_abs_logprob_diff_bf16": max(diffs)}
        print(f"vLLM generate: {tokens / seconds:.0f} tok/s; weight push {push_s:.2f} s; mean |dlogp| "
              f"{sum(diffs) / len(diffs):.3f} (bf16)", flush=True)
        engine.close()
        del engine
        phase("vllm", t0)
    else:
        result["vllm"] = "not installed" if not vllm_installed() else "skipped (--smoke)"
        print(f"vLLM: {result['vllm']}", flush=True)

    # 5. the trainer end to end ------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    del learner, policy
    if device == "cuda":
        torch.cuda.empty_cache()
    run_dir = Path(tempfile.mkdtemp(prefix="agentrl-gpu-check-run-"))
    command = [sys.executable, "-m", "agentrl.cli", "train", "--env", "crafting", "--algo", "grpo", "--model",
               str(folder), "--generator", "auto", "--run-dir", str(run_dir / "run"),
               "--set", "run.iterations=2", "--set", "run.eval_every=0", "--set", "rollout.tasks_per_iteration=8",
               "--set", "rollout.group_size=4", "--set", "rollout.workers=2", "--set", "agent.think=false",
               "--set", "generation.max_new_tokens=32", "--set", "env.args={max_steps: 4}",
               "--set", f"model.device={device}", "--set", "vllm.gpu_memory_utilization=0.3",
               "--set", "vllm.enforce_eager=true"]  # a wiring check: skip CUDA-graph capture at engine start
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    if done.returncode != 0:
        print(f"ERROR: agentrl train failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}",
              file=sys.stderr)
        return 1
    records = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    result["train"] = {"iterations": len(records), "metrics": {k: v for k, v in records[-1].items()
                                                             if k.startswith(("time/", "throughput/", "learner/loss",
                                                                              "rollout/"))}}
    print(f"agentrl train: {len(records)} iterations, last {records[-1]['time/iteration']:.1f} s "
          f"({records[-1]['throughput/tokens_per_s']:.0f} generated tok/s)", flush=True)
    phase("train_end_to_end", t0)

    result["total_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"PASSED in {result['total_s']} s; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
