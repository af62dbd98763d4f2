"""Stage ``train``: a small Llama (tied embeddings) trained from scratch on the demonstrations by SFT.

The loss (:func:`agentrl.sft.sft`, ``--sft-mode both``) is the choice of the expert's action among the state's
candidate replies plus the reply's own tokens; the choice is made among the expert's action and 8 others drawn at
random (``--max-candidates 9``), one epoch, cosine learning rate, validation loss on held-out games. Checkpointed
every ``--checkpoint-every`` steps: an interrupted build resumes the epoch where it stopped. Writes ``base/`` (the
untrained model) and ``sft/`` (the trained one, with ``train.json``). :func:`fit` is DAgger's fine-tuning too.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .collect import load_demos, skip_kinds
from .common import CHOICE_RULE, log, validation_games


def build_model(tokenizer: Any, args: argparse.Namespace) -> Any:
    """A small Llama from config: tied embeddings (half the size on disk), head size 64 (what fast attention
    kernels and vLLM expect)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 64,
        max_position_embeddings=2048, tie_word_embeddings=True, rope_theta=10_000.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _verb(reply: str) -> str:
    """The command word of a candidate reply (``take`` of ``<action>take bowl 1 from desk 1</action>``)."""
    from agentrl.agents.react import parse_reply

    return next(iter(parse_reply(reply, require_think=False).action.split()), "")


def _demonstrations(policy: Any, demos: list[dict], max_prompt_tokens: int, max_candidates: int = 0,
                    seed: int = 0, hard_negatives: bool = False) -> list[Any]:
    """Demonstrations with the state's candidate replies (the scoring loss needs them), the expert's marked.

    ``max_candidates > 0`` keeps the expert's reply and ``max_candidates - 1`` others drawn at random (seeded, in
    their original order): a sampled softmax. An ALFWorld state has ~30 admissible actions, whose tokens cost
    more than half of a packed scoring row; the sample keeps the comparison within the state at a third of it.
    A DAgger row's ``played`` reply (what the policy chose there) is always kept: it is the mistake to unlearn, and
    drawn at random it would be left out of two rows in three.

    ``hard_negatives``: the others are drawn first among the candidates with the expert's command word, then among
    the rest (where the expert takes the task's object, the other objects at the same place: the comparison that
    teaches which object the task names). Not the default: docs/experiments.md.
    """
    from agentrl.sft import Demonstration

    rng = random.Random(seed)
    rows = []
    for d in demos:
        candidates = d.get("candidates") or [d["reply"]]
        expert = candidates.index(d["reply"])
        if 0 < max_candidates < len(candidates):
            kept = [expert]
            if d.get("played") in candidates and d["played"] != d["reply"]:
                kept.append(candidates.index(d["played"]))
            pool = [i for i in range(len(candidates)) if i not in kept]
            wanted = max_candidates - len(kept)
            if hard_negatives:
                verb = _verb(d["reply"])
                similar = [i for i in pool if _verb(candidates[i]) == verb]
                others = rng.sample(similar, min(wanted, len(similar)))
                others += rng.sample([i for i in pool if i not in others], wanted - len(others))
            else:
                others = rng.sample(pool, wanted)
            keep = sorted(others + kept)
            candidates, expert = [candidates[i] for i in keep], keep.index(expert)
        rows.append(Demonstration(policy.render([{"role": "user", "content": d["prompt"]}])[-max_prompt_tokens:],
                                  [policy.choice_token_ids(c) for c in candidates], expert))
    return rows


_TAKE = re.compile(r"^<action>take (\S+) (\d+) from (.+)</action>$")
_TASK_LINE = re.compile(r"Your task is to: [^\n']*")


def object_swaps(rows: list[dict], per_row: int, seed: int) -> list[dict]:
    """Counterfactual copies of the ALFWorld states where the expert takes the task's object, with the task naming
    another object in sight there instead, labelled with taking that one (kind ``swap``; ``--object-swaps``).

    In such a state the prompt's task line is the only thing that says which of the objects in sight to take. A
    copy changes the object word in every task line of the prompt (the header, the first observation in the
    history) to another object type the state offers to take, and the reply to taking its first-listed instance,
    the one the planner would take; the other instances of that type leave the candidates, since taking them would
    be as right. ``per_row`` copies at most per state, types drawn at random (seeded). States whose history already
    took something (the second object of a pick-two task) are left out: their history would contradict the new
    task. Not the default: docs/experiments.md.
    """
    from agentrl.envs.alfworld.tasks import object_of_task_dir

    rng = random.Random(seed)
    copies = []
    for d in rows:
        take = _TAKE.match(d["reply"]) if d["env"] == "alfworld" else None
        if take is None or re.search(r"take \S+ \d+ from ", d["prompt"]):
            continue
        obj, _, place = take.groups()
        if object_of_task_dir(d["task_id"].split("/")[-2]) != obj:
            continue
        offered: dict[str, list[str]] = {}
        for reply in d["candidates"]:
            other = _TAKE.match(reply)
            if other and other.group(3) == place and other.group(1) != obj:
                offered.setdefault(other.group(1), []).append(reply)
        seen_order = d["prompt"][d["prompt"].rfind("observation is: "):]  # objects in the order listed
        for new_obj in rng.sample(sorted(offered), min(per_row, len(offered))):
            instances = sorted(offered[new_obj], key=lambda r: seen_order.find(f" {new_obj} {_TAKE.match(r).group(2)}"))
            reply = instances[0]
            prompt = _TASK_LINE.sub(lambda m: re.sub(rf"\b{re.escape(obj)}\b", new_obj, m.group(0)), d["prompt"])
            candidates = [c for c in d["candidates"] if c == reply or c not in instances]
            copies.append({**d, "kind": "swap", "prompt": prompt, "reply": reply, "candidates": candidates})
    return copies


def training_rows(args: argparse.Namespace, work: Path) -> tuple[list[dict], list[dict]]:
    """The collected demonstrations trained on, split into train and validation rows (held-out games)."""
    # ALFWorld's walkthrough episodes go straight to where the object is, which the policy cannot know; the search
    # and detour episodes cover the same games with what it can know (and the way back), so by default they are
    # neither collected nor trained on (--skip-kinds).
    skipped = skip_kinds(args)
    demos = [d for d in load_demos(work) if f"{d['env']}/{d['kind']}" not in skipped]
    rng = random.Random(args.seed)
    caps = {"webshop": args.webshop_demos, "crafting": args.crafting_demos}
    kept: list[dict] = []
    for env_name in sorted({d["env"] for d in demos}):
        rows = [d for d in demos if d["env"] == env_name]
        if env_name in caps and len(rows) > caps[env_name]:
            rows = rng.sample(rows, caps[env_name])  # WebShop pages are long: a share, not all, of the tokens
        kept += rows
    demos = kept
    val_games = validation_games(work)
    train_rows = [d for d in demos if d["task_id"] not in val_games]
    val_rows = [d for d in demos if d["task_id"] in val_games]
    if args.object_swaps:
        train_rows += object_swaps(train_rows, args.object_swaps, args.seed)
    return train_rows, val_rows


def _init_from(args: argparse.Namespace) -> dict[str, Any] | None:
    """What ``--init-from`` started from, for the model card: its path and, for a packaged policy, its own build
    record (``agentrl.json``) without its results, and its results apart (those of its own weights: the results
    before DAgger of a build that keeps them, ``--epochs 0``). Read at training time: the folder may be the one
    the package stage then replaces."""
    if not args.init_from:
        return None
    path = Path(args.init_from) / "agentrl.json"
    build = json.loads(path.read_text()) if path.is_file() else {}
    return {"path": str(args.init_from),
            "build": {k: v for k, v in build.items() if not k.startswith("results")} or None,
            "results": build.get("results", {})}


def stage_train(args: argparse.Namespace, work: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    from agentrl.policy import HFPolicy
    from agentrl.sft import checkpoint_dir_for

    out = work / "sft"
    if (out / "train.json").is_file():
        log(f"train: cached ({out})")
        return
    torch.set_num_threads(args.threads)
    if args.init_from:
        policy = HFPolicy(str(args.init_from), device="cpu")  # float32 master weights, even from bf16 files
    else:
        tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
        base = work / "base"
        build_model(tokenizer, args).save_pretrained(base)
        tokenizer.save_pretrained(base)
        policy = HFPolicy(str(base), device="cpu")
    if args.epochs == 0:  # the model as it is, the start of DAgger (--init-from with --epochs 0)
        report = {"parameters": policy.num_parameters(), "epochs": [], "seconds": 0.0}
    else:
        train_rows, val_rows = training_rows(args, work)
        report = fit(policy, train_rows, val_rows, args, args.lr, args.epochs, "train", out)
    report["init_from"] = _init_from(args)
    policy.save_pretrained(out)
    (out / "train.json").write_text(json.dumps(report, indent=1))
    shutil.rmtree(checkpoint_dir_for(out), ignore_errors=True)
    log(f"train: done in {report['seconds']:.0f} s")


def fit(policy: Any, train_rows: list[dict], val_rows: list[dict], args: argparse.Namespace, lr: float,
        epochs: int, stage: str, out: Path) -> dict[str, Any]:
    """SFT of ``policy`` on demonstration rows (``--sft-mode``, sampled candidates, cosine schedule); returns the
    report written next to the weights (losses per epoch, data, time). Checkpoints go to ``<out>-checkpoints``
    every ``--checkpoint-every`` steps and after each epoch, and a rerun resumes from the latest (an epoch here
    takes about half an hour); the folder is removed once the caller has saved the model."""
    from agentrl.learner import bf16_autocast_pays
    from agentrl.sft import checkpoint_dir_for, sft, sft_loss

    t0 = time.perf_counter()
    train_demos = _demonstrations(policy, train_rows, args.max_prompt_tokens, args.max_candidates, args.seed,
                                  args.hard_negatives)
    val_demos = _demonstrations(policy, val_rows, args.max_prompt_tokens, args.max_candidates, args.seed,
                                args.hard_negatives)
    tokens = sum(len(d.prompt_ids) + len(d.choice_ids[d.expert_index]) for d in train_demos)
    log(f"{stage}: {policy.num_parameters() / 1e6:.2f}M parameters; {len(train_demos)} train demos "
        f"({tokens / len(train_demos):.0f} tokens each), {len(val_demos)} validation; {epochs} epochs at lr {lr:g}")
    checkpoints = checkpoint_dir_for(out)
    history_path = checkpoints / "history.json"
    # Epochs finished by an earlier, interrupted run of this stage, and the training time it had spent.
    earlier = json.loads(history_path.read_text()) if history_path.is_file() else {"epochs": [], "seconds": 0.0}
    history: list[dict[str, float]] = earlier["epochs"]
    if (checkpoints / "checkpoints" / "latest").is_file():
        log(f"{stage}: resuming from {checkpoints}")
    started = time.perf_counter()
    first_step: list[int] = []

    def on_step(step: int, total: int, loss: float) -> None:
        first_step[:] = first_step or [step]
        if step % 50 == 0 or step == total:
            done = step - first_step[0] + 1
            rate = done * args.batch_size * tokens / len(train_demos) / (time.perf_counter() - started)
            log(f"{stage}: step {step}/{total} loss {loss:.3f} ({rate:.0f} tok/s)")

    def on_epoch(epoch: int, loss: float) -> None:
        val = sft_loss(policy, val_demos, mode=args.sft_mode, choice_rule=CHOICE_RULE) if val_demos else float("nan")
        # An epoch whose end was interrupted before its checkpoint is finished again on resume: one entry each.
        history[:] = [h for h in history if h["epoch"] != epoch + 1]
        history.append({"epoch": epoch + 1, "train_loss": loss, "val_loss": val,
                        "seconds": earlier["seconds"] + time.perf_counter() - started})
        checkpoints.mkdir(parents=True, exist_ok=True)
        history_path.write_text(json.dumps({"epochs": history, "seconds": history[-1]["seconds"]}, indent=1))
        log(f"{stage}: epoch {epoch + 1}: train loss {loss:.4f}, validation loss {val:.4f}")

    sft(policy, train_demos, mode=args.sft_mode, choice_rule=CHOICE_RULE, epochs=epochs, lr=lr,
        batch_size=args.batch_size,
        seed=args.seed, weight_decay=0.01, lr_schedule="cosine", on_epoch=on_epoch, on_step=on_step,
        checkpoint_dir=checkpoints, checkpoint_every=args.checkpoint_every,
        micro_batch_tokens=args.micro_batch_tokens)
    return {"parameters": policy.num_parameters(), "train_demos": len(train_demos), "val_demos": len(val_demos),
            "tokens_per_epoch": tokens, "epochs": history,
            "seconds": earlier["seconds"] + time.perf_counter() - t0,
            "threads": args.threads, "kinds": Counter(f"{d['env']}/{d['kind']}" for d in train_rows),
            "mode": args.sft_mode, "max_candidates": args.max_candidates, "hard_negatives": args.hard_negatives,
            # No prompt loss (the retired --prompt-loss-weight, docs/experiments.md); recorded as before.
            "prompt_loss_weight": 0.0,
            "lr": lr,
            "batch_size": args.batch_size, "micro_batch_tokens": args.micro_batch_tokens,
            "bf16_autocast": bf16_autocast_pays(policy.model)}
