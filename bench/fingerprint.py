"""Fingerprints of what the code computes, to show a refactor changed nothing.

Prints SHA-256 digests of (1) every algorithm's advantages on bench/credit.py's ALFWorld batch and (2) the
weights after short seeded training runs (Crafting, the tiny random model; full weights and LoRA; score and
generate mode). Run it before and after a change and compare the two JSON files:

    python bench/fingerprint.py --out /tmp/before.json
    python bench/fingerprint.py --out /tmp/after.json && diff /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GOMP_SPINCOUNT", "0")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit import DEFAULT_TAR, load_batch  # noqa: E402

from agentrl.algos import get_algorithm  # noqa: E402

ALGORITHMS = {  # name -> options
    "grpo": {},
    "gigpo": {},
    "gigpo_similarity": {"anchor_match": "similarity"},
    "scpo_lexical": {"scorer": "lexical"},
    "scpo_lexical_effective": {"scorer": "lexical", "sibling_path": "effective"},
    "scpo": {},
    "scpo_grpo": {"scorer": "lexical"},
}
RUNS = [  # (algo, agent mode, LoRA)
    ("grpo", "score", False), ("gigpo", "score", False), ("scpo", "score", True), ("scpo_grpo", "score", False),
    ("gigpo", "generate", False),
]


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.float64).tobytes()).hexdigest()[:16]


def advantages() -> dict[str, str]:
    trajectories = load_batch(DEFAULT_TAR, 16, 8, 50, 0)
    out = {}
    for name, options in ALGORITHMS.items():
        algo = name.split("_")[0] if name != "scpo_grpo" else name
        result = get_algorithm(algo).compute(trajectories, options)
        flat = np.concatenate([np.asarray(a, dtype=np.float64) for a in result.advantages])
        out[name] = digest(flat)
        print(f"advantages {name:<24} {out[name]}", flush=True)
    return out


def weights(root: Path) -> dict[str, str]:
    from safetensors.numpy import load_file

    from agentrl.config import build_config
    from agentrl.models import save_tiny_model
    from agentrl.trainer import Trainer

    from agentrl.models import default_model

    tiny = save_tiny_model(root / "tiny", seed=0)
    out = {}
    for algo, mode, lora in RUNS:
        overrides = {
            "env.name": "crafting", "env.args": {"max_steps": 12, "max_plan_length": 5}, "env.eval_split": "train", "algo.name": algo, "model.path": str(tiny if mode == "generate" else default_model()),
            "agent.mode": mode, "agent.think": False, "rollout.tasks_per_iteration": 4, "rollout.group_size": 4,
            "rollout.workers": 0, "generation.max_new_tokens": 8, "generation.max_prompt_tokens": 192,
            "learner.lr": 1e-3, "learner.mini_batch_size": 8, "learner.micro_batch_size": 4, "learner.bf16": False,
            "run.iterations": 2, "run.eval_every": 0, "run.seed": 3, "run.torch_threads": 1,
        }
        if algo.startswith("scpo"):
            overrides["algo.options"] = {"scorer": "lexical"}
        if lora:
            overrides["model.lora"] = {"r": 4, "alpha": 8}
        run_dir = root / f"{algo}-{mode}-{lora}"
        Trainer(build_config(None, overrides), run_dir=run_dir).train()
        files = sorted((run_dir / "checkpoints").glob("*/model/*.safetensors"))[-1:]
        tensors = load_file(str(files[0]))
        h = hashlib.sha256()
        for key in sorted(tensors):
            h.update(key.encode())
            h.update(np.ascontiguousarray(tensors[key]).tobytes())
        name = f"{algo}-{mode}{'-lora' if lora else ''}"
        if name.endswith("generate"):
            name += " (no update: a random model's replies are all invalid)"
        out[name] = h.hexdigest()[:16]
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        wins = [round(m.get("train/success", -1), 1) for m in lines if "train/success" in m]
        print(f"weights    {name:<24} {out[name]}   train success per iteration {wins}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the digests here as JSON")
    parser.add_argument("--only", choices=["advantages", "weights"], default=None, help="compute one part only")
    args = parser.parse_args()
    result = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-fingerprint-") as tmp:
        if args.only != "weights":
            result["advantages"] = advantages()
        if args.only != "advantages":
            result["weights"] = weights(Path(tmp))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
