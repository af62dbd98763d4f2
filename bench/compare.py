"""GRPO vs GiGPO vs SCPO (and SCPO on a GRPO base) at equal budget, paired by seed.

For each environment preset and each seed, every algorithm trains the same starting policy with the same config —
only ``algo.name`` differs — through the real :class:`~agentrl.trainer.Trainer`. The runs of a seed are paired:
same start, same task draws (the first wave of every iteration, with ``--filter-groups``), same evaluation
episodes (tasks, reset and sampling seeds), so differences are taken seed by seed (bench/paired.py). Writes:

- ``bench/results/compare.json``: per (env, algo, seed) the learning curve, the final evaluation (overall and per
  task type), for presets with a fixed training set the start and final policies' success on it (8 tasks × 32
  attempts at T=0.4, the low-noise measure of what RL fitted), SCPO's diagnostics per iteration, what the updates
  were made of (mixed groups, draws), wall times; per (env, algo) the final success as mean with its 95% t-interval
  over seeds; and the paired differences SCPO − GiGPO, GiGPO − GRPO, SCPO − GRPO with theirs;
- ``docs/results/compare-<env>.png``: train and eval success over iterations (and, for an env that reports a score,
  training reward and eval score), all algorithms on one plot (mean over seeds, 95% t-interval band);
- ``docs/results.md``'s generated block (between the ``compare:begin/end`` markers): both tables and the labels.

Presets (CPU-sized budgets; ``--iterations`` etc. override):

- ``crafting``: the built-in long-horizon env with ``bench/learning.py``'s recipe and defaults: short tasks
  (``max_plan_length=5``), its SFT warm start (the same model for every algorithm, built once and cached), a fixed
  training set of 8 tasks × group 8 per iteration, 10 iterations, eval on 100 held-out tasks;
- ``crafting-long``: Crafting's tasks with expert plans of 8-12 steps, from a tiny-random model's SFT on 1,200 expert
  episodes (wins ~23% of train episodes), a fixed training set of 32 tasks × group 8 with dynamic sampling on,
  10 iterations, eval on 100 held-out tasks;
- ``alfworld``: ALFWorld from the embedded default policy (``agentrl-tiny``): 20 iterations of 4 train games ×
  group 4, evaluated on all 134 valid_unseen games (about 77 minutes per run on one core);
- ``webshop``: WebShop from the embedded default policy after a short SFT on WebShop's scripted expert (400 train
  goals, 2 epochs; built once, cached: the policy itself wins none of the eval goals), rewarded with WebShop's own
  score of the purchase (10 × score) instead of the win alone; 8 iterations of 4 goals × group 4, evaluated on 50
  eval goals (success and mean score).

Runs are cached (``runs/compare/<env>/<algo>-s<seed>/result.json``): rerunning continues where it stopped. A run
writes a checkpoint every iteration, and an interrupted one (killed, or out of a session's time) resumes from its
latest checkpoint when its settings are unchanged, so a comparison of hour-long runs can be spread over several
sittings. A cached run is used only if it ran with the same settings (the config overrides) and from the same
starting weights (every run records their fingerprint): else it is run again, and the results of older starting
weights (a rebuilt default policy) are dropped from the table.

    python bench/compare.py --envs crafting --seeds 0,1,2          # the built-in env, 3 seeds
    python bench/compare.py --envs alfworld --seeds 0 --iterations 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from paired import PAIRS, band, format_ci, mean_ci, paired_differences

ALGOS = ("grpo", "gigpo", "scpo", "scpo_grpo")
SCPO_DIAGNOSTICS = ("algo/failed_steps_credited_frac", "algo/failed_steps_in_mixed_groups_credited_frac",
                    "algo/conflict_rate_before", "algo/conflict_rate_after", "algo/similar_pairs")


def scpo_diagnostics(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SCPO's diagnostics per iteration. A conflict rate is a share of similar (failed, successful) step pairs: in an
    iteration with none (no group had a success) it is undefined and left out, not counted as 0%."""
    rows = []
    for record in history:
        row = {k: record[k] for k in SCPO_DIAGNOSTICS if k in record}
        if row.get("algo/similar_pairs") == 0:
            row.pop("algo/conflict_rate_before", None)
            row.pop("algo/conflict_rate_after", None)
        rows.append(row)
    return rows


def learning_curves(history: list[dict[str, Any]]) -> dict[str, list]:
    """A run's curves from its log (iterations ≥ 1): training success and mean episode reward per iteration, and
    each evaluation's success and, where the env reports one (WebShop), mean score, as ``(iteration, value)``."""
    evals = [r for r in history if "eval/success" in r]
    return {"train_success": [r.get("train/success") for r in history],
            "train_reward": [r.get("train/reward") for r in history],
            "eval_success": [(r["iteration"], r["eval/success"]) for r in evals],
            "eval_score": [(r["iteration"], r["eval/score"]) for r in evals if r.get("eval/score") is not None]}


def sampling_summary(history: list[dict[str, Any]]) -> dict[str, float | None]:
    """What a run's updates were made of (iterations >= 1): the share of iterations whose update had a mixed group
    and of those that made an update at all, tasks drawn and groups kept per iteration, and the generation spent on
    dropped groups (dynamic sampling) per kept group. None where the log predates the ``sampling/*`` metrics."""
    logged = [r for r in history if "sampling/task_draws" in r]
    if not logged:
        return {"mixed_share": None, "update_share": None, "draws": None, "kept": None,
                "extra_steps_per_kept_group": None, "extra_tokens_per_kept_group": None}
    kept = sum(r["sampling/kept_groups"] for r in logged)
    return {"mixed_share": statistics.fmean(r["sampling/mixed_groups"] > 0 for r in logged),
            "update_share": statistics.fmean(bool(r.get("learner/optimizer_steps")) for r in logged),
            "draws": statistics.fmean(r["sampling/task_draws"] for r in logged),
            "kept": statistics.fmean(r["sampling/kept_groups"] for r in logged),
            "extra_steps_per_kept_group": sum(r["sampling/dropped_steps"] for r in logged) / kept if kept else None,
            "extra_tokens_per_kept_group": sum(r["sampling/dropped_tokens"] for r in logged) / kept if kept else None}


def setting(row: dict[str, Any]) -> str:
    """A row's env preset, with its dynamic sampling mode when on (``crafting+outcome``): runs compare within one."""
    mode = row.get("filter_groups", "off")
    return row["env"] if mode == "off" else f"{row['env']}+{mode}"

#: Per env: config overrides shared by every algorithm (the budget), and where the starting model comes from.
LONG_CRAFTING = {"min_plan_length": 8, "max_plan_length": 12}
PRESETS: dict[str, dict[str, Any]] = {
    "crafting": {
        "model": "learning-warm-start",
        "config": "bench/learning.py",  # its recipe: warm start, fixed training set, budget (rl_overrides)
    },
    "crafting-long": {  # long horizon: plans of 8-12 steps, where credit should matter (issue 41)
        "model": "tiny-random",
        # Calibrated 2026-12-07: this SFT wins 23.4% of 64 train episodes at T=1 (400 tasks: 6.2%); 20 min on 2 cores.
        "warm_start": {"env": "crafting", "env_args": LONG_CRAFTING, "tasks": 1200, "epochs": 3, "lr": 3e-3,
                       "mode": "score", "seed": 0},
        "config": {"env.name": "crafting", "env.args": LONG_CRAFTING, "env.eval_split": "eval_in_distribution",
                   "env.train_tasks": 32, "agent.mode": "score", "agent.think": False,
                   "rollout.tasks_per_iteration": 8, "rollout.group_size": 8, "rollout.workers": 0,
                   "rollout.filter_groups": "outcome", "learner.lr": 2e-4, "learner.skip_zero_advantage": True,
                   "learner.mini_batch_size": 64, "learner.micro_batch_size": 16},
        "iterations": 10, "eval_every": 10, "eval_episodes": 100,
    },
    "alfworld": {
        "model": "agentrl-tiny",
        "config": {"env.name": "alfworld", "env.eval_split": "eval_out_of_distribution",
                   "agent.mode": "score", "agent.think": False, "rollout.tasks_per_iteration": 4,
                   "rollout.group_size": 4, "rollout.workers": 1, "learner.lr": 5e-5, "learner.kl_coef": 0.01,
                   "learner.skip_zero_advantage": True, "learner.mini_batch_size": 64,
                   "learner.micro_batch_size": 8},
        "iterations": 20, "eval_every": 20, "eval_episodes": 134,
        # The policy's card measured this very evaluation on the whole split (same env defaults, agent settings and
        # temperature): it is the start's held-out success when a run evaluates all 134 games.
        "start_eval_job": ("alfworld-unseen-score", 134),
    },
    "webshop": {
        "model": "agentrl-tiny",
        # The default policy wins none of the eval goals (its card: 0/100). Every algorithm starts from the same
        # short SFT of it on WebShop's scripted expert (built once and cached; its held-out success is the start),
        # which buys the right kind of product (mean score 48) but rarely exactly right (1 of 50 goals): under
        # verl-agent's reward (10 for a score of 1.0) every group of 4 was all-failed in all 8 iterations of a first
        # GRPO run (2026-12-06), so no algorithm could learn. The reward here is WebShop's own, 10 × the purchase's
        # score; success (and so SCPO's successful siblings) is still a score of 1.0.
        "warm_start": {"env": "webshop", "tasks": 400, "epochs": 2, "lr": 5e-4, "mode": "both", "seed": 0},
        "config": {"env.name": "webshop", "env.eval_split": "eval",
                   "env.args": {"success_reward": 0.0, "score_reward": 10.0}, "agent.mode": "score",
                   "agent.think": False, "rollout.tasks_per_iteration": 4, "rollout.group_size": 4,
                   "rollout.workers": 0, "learner.lr": 5e-5, "learner.kl_coef": 0.01,
                   "learner.skip_zero_advantage": True, "learner.mini_batch_size": 64,
                   "learner.micro_batch_size": 8},
        "iterations": 8, "eval_every": 8, "eval_episodes": 50,
    },
}


def _learning():
    import learning

    return learning


def starting_point(env_name: str, out_root: Path,
                   eval_episodes: int | None = None) -> tuple[str, dict[str, Any], dict[str, float | None]]:
    """The policy every algorithm starts from, the shared config overrides, and the policy's eval ``success`` (and
    WebShop ``score``) where known.

    The crafting preset is bench/learning.py's recipe with its defaults (its SFT warm start, built once and cached,
    and its RL settings), so that this comparison and the learning curve measure the same thing. A preset with a
    ``warm_start`` starts from its model fine-tuned on the env's expert (:func:`preset_warm_start`)."""
    preset = PRESETS[env_name]
    if preset["model"] != "learning-warm-start":
        shared = {**preset["config"], "run.iterations": preset["iterations"], "run.eval_every": preset["eval_every"],
                  "run.eval_episodes": preset["eval_episodes"]}
        if "warm_start" not in preset:
            return preset["model"], shared, {"success": None, "score": None}
        path, info = preset_warm_start(env_name, out_root, eval_episodes or preset["eval_episodes"])
        return str(path), shared, {"success": info["eval"]["success"], "score": info["eval"]["score"]}
    learning = _learning()
    args = learning.parse_args([])
    path, sft = learning.warm_start(args, learning.env_args_of(args))
    return str(path), learning.rl_overrides(args, path), {"success": sft.get("eval_success"), "score": None}


def preset_warm_start(env_name: str, out_root: Path, eval_episodes: int) -> tuple[Path, dict[str, Any]]:
    """The preset's model after :func:`agentrl.sft.sft_from_expert` with the preset's ``warm_start`` settings (the
    SFT's own ``env_args``, if any, among them), and its record: ``warm-start.json`` (demonstrations, losses,
    minutes) with ``eval``, its success and score on the first ``eval_episodes`` of the preset's held-out split at
    T=0.4 with the preset's env args (the runs' own evaluation). The SFT is built once per setting and starting
    weights under ``<out>/<env>/warm-<hash>/`` (an interrupted build resumes from its checkpoint); the evaluation
    once per env args, split and episodes beside it (a preset that only changes the RL reward reuses the SFT)."""
    import hashlib

    from agentrl.evaluation import evaluate_model
    from agentrl.models import recommended_agent_settings
    from agentrl.sft import sft_from_expert

    def digest(data: dict[str, Any]) -> str:
        return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]

    preset = PRESETS[env_name]
    settings = preset["warm_start"]
    key = {**settings, "from": preset["model"], "from_weights": start_fingerprint(preset["model"])}
    root = out_root / env_name / f"warm-{digest(key)}"
    record_path, model = root / "warm-start.json", root / "sft"
    if not record_path.is_file():
        print(f"== {env_name}: warm start {settings} from {preset['model']} in {root}", flush=True)
        t0 = time.perf_counter()
        sft = sft_from_expert(settings["env"], preset["model"], str(model), mode=settings["mode"],
                              tasks=settings["tasks"], epochs=settings["epochs"], lr=settings["lr"],
                              seed=settings["seed"], env_args=settings.get("env_args"),
                              on_epoch=lambda e, loss: print(f"   sft epoch {e + 1}: loss {loss:.3f}", flush=True))
        record_path.write_text(json.dumps({**key, **{k: sft[k] for k in ("demonstrations", "prompt_tokens", "losses")},
                                           "sft_minutes": (time.perf_counter() - t0) / 60}, indent=1))
    record = json.loads(record_path.read_text())
    measure = {"env": preset["config"]["env.name"], "split": preset["config"].get("env.eval_split"),
               "env_args": preset["config"].get("env.args"), "episodes": eval_episodes}
    eval_path = root / f"eval-{digest(measure)}.json"
    if not eval_path.is_file():
        agent = {k: v for k, v in recommended_agent_settings(str(model)).items() if k != "mode"}
        report = evaluate_model(measure["env"], str(model), split=measure["split"], episodes=eval_episodes,
                                env_args=measure["env_args"], mode="score", temperature=0.4, seed=0, **agent)
        summary = report.by_type()["All"]
        eval_path.write_text(json.dumps({**measure, "split": report.split, "success": summary["success"],
                                         "score": summary.get("score"), "minutes": report.wall_time_s / 60}, indent=1))
    record["eval"] = json.loads(eval_path.read_text())
    print(f"   warm start {model}: {record['demonstrations']} demonstrations, {record['sft_minutes']:.0f} min; "
          f"held-out success {record['eval']['success']:.1f}% (score {record['eval']['score'] or 0:.1f})", flush=True)
    return model, record


def card_eval_success(env_name: str, eval_episodes: int) -> float | None:
    """The starting policy's held-out success as its model card measured it, where the preset names the card's
    measurement of the same evaluation (``start_eval_job``) and this run evaluates the same episodes; else None."""
    job = PRESETS[env_name].get("start_eval_job")
    if job is None or eval_episodes != job[1]:
        return None
    from agentrl.models import EMBEDDED_POLICY_DIR

    card = json.loads((EMBEDDED_POLICY_DIR / "agentrl.json").read_text())
    row = card.get("results", {}).get(job[0])
    return None if row is None else row["by_type"]["All"]["success"]


def start_fingerprint(model: str, cache_dir: Path = ROOT / "runs" / "models") -> str:
    """The first 16 hex digits of the SHA-256 of the starting policy's weights (a folder's ``*.safetensors`` or a
    registered name's), so that results from different starting weights are never mixed."""
    from agentrl.models import resolve_model, sha256_of_files

    folder = Path(resolve_model(model, cache_dir))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"no *.safetensors in {folder}: cannot fingerprint the starting policy {model!r}")
    return sha256_of_files(*files)[:16]


def _resumable(run_dir: Path, overrides: dict[str, Any]) -> bool:
    """Whether an unfinished run directory has a checkpoint and was started with these very settings."""
    from agentrl.checkpoint import find_latest

    settings = run_dir / "compare-settings.json"
    return (find_latest(run_dir) is not None and settings.is_file()
            and json.loads(settings.read_text()) == json.loads(json.dumps(overrides)))


def run_one(env_name: str, algo: str, seed: int, args: argparse.Namespace, out_root: Path) -> dict[str, Any]:
    """Train one (env, algo, seed); cached in its run directory, resumed from its latest checkpoint if interrupted."""
    from rich.console import Console

    from agentrl.config import build_config
    from agentrl.trainer import Trainer

    model, shared, start = starting_point(env_name, out_root, args.eval_episodes)
    if getattr(args, "filter_groups", None):
        shared = {**shared, "rollout.filter_groups": args.filter_groups}
    filtering = shared.get("rollout.filter_groups", "off")
    run_dir = out_root / env_name / (f"{algo}-s{seed}" + ("" if filtering == "off" else f"-{filtering}"))
    done = run_dir / "result.json"
    start_success = start["success"]
    fingerprint = start_fingerprint(model)
    iterations = args.iterations or shared["run.iterations"]
    eval_episodes = args.eval_episodes or shared["run.eval_episodes"]
    overrides = {
        **shared, "algo.name": algo, "model.path": model,
        "run.iterations": iterations, "run.eval_every": args.eval_every or shared["run.eval_every"],
        "run.eval_episodes": eval_episodes, "run.seed": seed,
        "run.save_every": 1, "run.torch_threads": 1,
    }
    if algo.startswith("scpo") and args.scorer:
        overrides["algo.options"] = {"scorer": args.scorer}
    if done.is_file():
        cached = json.loads(done.read_text())
        if cached.get("start_model") != fingerprint:
            print(f"   {run_dir} started from other weights than {model} ({fingerprint}) has now: running it again",
                  flush=True)
            done.unlink()
        elif cached["config"] != json.loads(json.dumps(overrides)):
            print(f"   {run_dir} ran with other settings: running it again", flush=True)
            done.unlink()
    if done.is_file():
        row = json.loads(done.read_text())
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file():  # a run cached before a curve or a diagnostic was recorded
            history = [r for r in map(json.loads, metrics.read_text().splitlines()) if r["iteration"] >= 1]
            row.update(learning_curves(history), sampling=sampling_summary(history))
            if algo.startswith("scpo"):
                row["scpo_diagnostics"] = scpo_diagnostics(history)
        if row.get("start_eval_success") is None:
            row["start_eval_success"] = card_eval_success(env_name, row["config"]["run.eval_episodes"])
        return with_train_set_success(row, run_dir, out_root)
    if start_success is None:
        start_success = card_eval_success(env_name, eval_episodes)
    config = build_config(None, overrides)
    resume = run_dir.exists() and _resumable(run_dir, overrides)
    if run_dir.exists() and not resume:  # no checkpoint, or other settings: start again (metrics would mix runs)
        import shutil

        shutil.rmtree(run_dir)
    if resume:
        print(f"   resuming {run_dir} from its latest checkpoint", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "compare-settings.json").write_text(json.dumps(overrides, indent=1))
    result = Trainer(config, run_dir=run_dir, resume=resume, console=Console(stderr=True)).train()
    if result.stopped_early:
        raise SystemExit(f"{run_dir} stopped at iteration {result.iterations_done}; run the same command again to "
                         "resume it")
    start_eval = [r for r in result.history if r["iteration"] == 0]  # run.eval_before_train
    if start_eval:
        start_success = start_eval[0]["eval/success"]
        start["score"] = start_eval[0].get("eval/score", start["score"])
    history = [r for r in result.history if r["iteration"] >= 1]
    evals = [r for r in history if "eval/success" in r]
    last = evals[-1] if evals else {}
    # Compute time from the run's own log, so that a run resumed over several sittings counts each iteration once.
    seconds = sum(r.get("time/iteration", 0.0) + r.get("time/eval", 0.0) for r in result.history)
    row = {
        "env": env_name, "algo": algo, "seed": seed, "filter_groups": filtering, "iterations": iterations,
        "seconds": seconds, "sampling": sampling_summary(history),
        "start_model": fingerprint, "start_eval_success": start_success,
        "start_eval_score": start["score"], "final_eval_score": last.get("eval/score"),
        **learning_curves(history),
        "final_eval_success": last.get("eval/success"),
        "final_eval_by_type": {k.removeprefix("eval/success/"): v for k, v in last.items()
                               if k.startswith("eval/success/")},
        "scpo_diagnostics": scpo_diagnostics(history) if algo.startswith("scpo") else [],
        "time_per_iteration": statistics.mean(r["time/iteration"] for r in history) if history else None,
        "eval_seconds": [(r["iteration"], r["time/eval"]) for r in start_eval + evals if "time/eval" in r],
        "config": overrides,
    }
    done.write_text(json.dumps(row, indent=1))
    return with_train_set_success(row, run_dir, out_root)


def with_train_set_success(row: dict[str, Any], run_dir: Path, out_root: Path) -> dict[str, Any]:
    """Add the start and final policies' training-set success to a finished run of a preset with a fixed training
    set (measured once, cached in result.json; the start's in ``<env>/start-train-set.json``)."""
    config = row["config"]
    if not config.get("env.train_tasks") or "final_train_set_success" in row:
        return row
    from agentrl.checkpoint import find_latest

    train_set_success = _learning().train_set_success  # the one measurement, with bench/learning.py's defaults
    start_file = out_root / row["env"] / "start-train-set.json"
    if not start_file.is_file():
        start_file.write_text(json.dumps({"model": config["model.path"],
                                          "success": train_set_success(config["model.path"], config)}))
    row["start_train_set_success"] = json.loads(start_file.read_text())["success"]
    row["final_train_set_success"] = train_set_success(find_latest(run_dir) / "model", config)
    (run_dir / "result.json").write_text(json.dumps(row, indent=1))
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per (setting, algo): final eval success (and training-set success) as mean, std and 95% t-interval over
    seeds (:func:`paired.mean_ci`), per task type, SCPO's diagnostics and what the updates were made of."""
    table: dict[str, dict[str, Any]] = {}
    for row in rows:
        cell = table.setdefault(f"{setting(row)}/{row['algo']}", {"final": [], "by_type": {}, "credited": [],
                                                                  "conflict_before": [], "conflict_after": [],
                                                                  "train_set": [], "score": [], "mixed_share": [],
                                                                  "start_score": row.get("start_eval_score"),
                                                                  "start_train_set": row.get("start_train_set_success"),
                                                                  "start": row.get("start_eval_success")})
        if row["final_eval_success"] is not None:
            cell["final"].append(row["final_eval_success"])
        if row.get("final_train_set_success") is not None:
            cell["train_set"].append(row["final_train_set_success"])
        if row.get("final_eval_score") is not None:
            cell["score"].append(row["final_eval_score"])
        if (row.get("sampling") or {}).get("mixed_share") is not None:
            cell["mixed_share"].append(row["sampling"]["mixed_share"])
        for task_type, value in row["final_eval_by_type"].items():
            cell["by_type"].setdefault(task_type, []).append(value)
        credited = [d.get("algo/failed_steps_credited_frac") for d in row["scpo_diagnostics"]]
        cell["credited"] += [c for c in credited if c is not None]
        for when in ("before", "after"):
            rates = [d.get(f"algo/conflict_rate_{when}") for d in row["scpo_diagnostics"]]
            cell[f"conflict_{when}"] += [r for r in rates if r is not None]
    for cell in table.values():
        final = mean_ci(cell.pop("final"))
        cell.update(mean=final["mean"], std=final["std"] or (0.0 if final["n"] else None), ci=final,
                    seeds=final["n"])
        train_set = mean_ci(cell.pop("train_set"))
        cell.update(train_set_mean=train_set["mean"], train_set_ci=train_set,
                    train_set_std=train_set["std"] or (0.0 if train_set["n"] else None))
        scores = cell.pop("score")
        cell["score_mean"] = statistics.mean(scores) if scores else None
        shares = cell.pop("mixed_share")
        cell["mixed_share_mean"] = statistics.mean(shares) if shares else None
        cell["by_type"] = {t: statistics.mean(v) for t, v in cell["by_type"].items()}
        for key in ("credited", "conflict_before", "conflict_after"):
            series = cell.pop(key)
            cell[f"{key}_mean"] = statistics.mean(series) if series else None
    return table


def paired(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per setting and measure (final held-out success, and training-set success where measured): the paired
    differences between algorithms over the seeds both ran (:func:`paired.paired_differences`). Only runs from the
    same starting weights are paired (the newest start of each setting, as the table keeps)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sorted({setting(r) for r in rows}):
        for measure in ("final_eval_success", "final_train_set_success"):
            by_seed: dict[str, dict[int, float]] = {}
            for row in rows:
                if setting(row) == name and row.get(measure) is not None:
                    by_seed.setdefault(row["algo"], {})[row["seed"]] = row[measure]
            differences = paired_differences(by_seed)
            if differences:
                out.setdefault(name, {})[measure] = differences
    return out


def plot(rows: list[dict[str, Any]], env_name: str, path: Path) -> None:
    """All algorithms on one figure, mean over seeds with its 95% t-interval as a band: training success and held-out
    success over iterations (from the start's evaluation, iteration 0, where known), SCPO's diagnostics, and, for an
    env that reports a score (WebShop, whose success can stay flat while purchases improve), training reward and eval
    score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    env_rows = [r for r in rows if setting(r) == env_name]
    scored = any(r.get("eval_score") for r in env_rows)
    panels = ["train_success", "train_reward", "eval_success", "eval_score", "scpo"] if scored else \
        ["train_success", "eval_success", "scpo"]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.3 * len(panels), 4))
    ax = dict(zip(panels, axes))

    def per_iteration(axis, runs, key, label):
        series = [r[key] for r in runs if r.get(key) and None not in r[key]]
        if series:
            mean, low, high = band([s[:min(map(len, series))] for s in series])
            x = np.arange(1, len(mean) + 1)
            axis.plot(x, mean, label=label)
            axis.fill_between(x, low, high, alpha=0.15)

    def per_evaluation(axis, runs, key, start_key, label):
        evals = [([(0, r[start_key])] if r.get(start_key) is not None else []) + [tuple(e) for e in r[key]]
                 for r in runs if r.get(key)]
        if evals:
            its = [i for i, _ in evals[0]]
            mean, low, high = band([[v for _, v in e] for e in evals if [i for i, _ in e] == its])
            axis.plot(its, mean, marker="o", label=label)
            axis.fill_between(its, low, high, alpha=0.15)

    for algo in ALGOS:
        runs = [r for r in env_rows if r["algo"] == algo]
        if not runs:
            continue
        per_iteration(ax["train_success"], runs, "train_success", algo)
        per_evaluation(ax["eval_success"], runs, "eval_success", "start_eval_success", algo)
        if scored:
            per_iteration(ax["train_reward"], runs, "train_reward", algo)
            per_evaluation(ax["eval_score"], runs, "eval_score", "start_eval_score", algo)
        if algo.startswith("scpo"):  # SCPO's diagnostics over training, mean over seeds
            for key, style in (("algo/failed_steps_credited_frac", "-"), ("algo/conflict_rate_before", ":"),
                               ("algo/conflict_rate_after", "--")):
                # Undefined values (a conflict rate in an iteration without similar pairs) are gaps, not zeros.
                series = [[np.nan if d.get(key) is None else d[key] for d in r["scpo_diagnostics"]] for r in runs
                          if r["scpo_diagnostics"]]
                if series:
                    values = 100 * np.array([s[:min(map(len, series))] for s in series], dtype=float)
                    defined = ~np.isnan(values).all(0)
                    x = np.arange(1, values.shape[1] + 1)[defined]
                    ax["scpo"].plot(x, np.nanmean(values[:, defined], 0), style, marker=".",
                                    label=f"{algo}: {key.removeprefix('algo/')}")
    seeds = len({r["seed"] for r in env_rows})
    ax["train_success"].set(title=f"{env_name}: train success (T=1); {seeds} seeds, band: 95% CI", xlabel="iteration",
                            ylabel="success %")
    ax["eval_success"].set(title=f"{env_name}: eval success (T=0.4), same episodes", xlabel="iteration",
                           ylabel="success %")
    ax["eval_success"].set_ylim(bottom=0)
    if scored:
        ax["train_reward"].set(title=f"{env_name}: train reward per episode (T=1)", xlabel="iteration",
                               ylabel="reward")
        ax["eval_score"].set(title=f"{env_name}: eval score (T=0.4)", xlabel="iteration", ylabel="mean score 0-100")
    ax["scpo"].set(title="SCPO: failed steps credited, conflict rate before/after", xlabel="iteration", ylabel="%")
    for axis in axes:
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_markdown(table: dict[str, dict[str, Any]], rows: list[dict[str, Any]], path: Path, label: str,
                   differences: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
    """The generated block of docs/results.md: per (setting, algorithm) means with 95% t-intervals over seeds, then
    the paired differences (:func:`paired`)."""
    header = ("| env | algorithm | seeds | training set: start → final (mean [95% CI]) | held-out eval: start → final "
              "(mean [95% CI]) | per task type | iterations with a mixed group | SCPO: failed steps credited | "
              "SCPO: conflict rate before → after | minutes per run |")
    lines = [f"_{label}_", "", header, "|---|---|---|---|---|---|---|---|---|---|"]
    for key, cell in sorted(table.items()):
        env_name, algo = key.split("/")
        minutes = [r["seconds"] / 60 for r in rows if setting(r) == env_name and r["algo"] == algo]
        mean = format_ci(cell["ci"])
        by_type = ", ".join(f"{t} {v:.0f}" for t, v in sorted(cell["by_type"].items())) or "–"
        credited = "–" if cell["credited_mean"] is None else f"{100 * cell['credited_mean']:.1f}%"
        conflict = ("–" if cell["conflict_before_mean"] is None else
                    f"{100 * cell['conflict_before_mean']:.1f}% → {100 * cell['conflict_after_mean']:.1f}%")
        mixed = "–" if cell.get("mixed_share_mean") is None else f"{100 * cell['mixed_share_mean']:.0f}%"
        start = "–" if cell["start"] is None else f"{cell['start']:.1f}"
        if cell.get("score_mean") is not None:  # WebShop: the mean score of the purchases, 0-100
            start_score = "–" if cell["start_score"] is None else f"{cell['start_score']:.1f}"
            mean += f" (score {start_score} → {cell['score_mean']:.1f})"
        train_set = ("–" if cell["train_set_mean"] is None else
                     f"{cell['start_train_set']:.1f} → {format_ci(cell['train_set_ci'])}")
        lines.append(f"| {env_name} | {algo} | {cell['seeds']} | {train_set} | {start} → {mean} | {by_type} | "
                     f"{mixed} | {credited} | {conflict} | {statistics.mean(minutes):.1f} |")
    if differences:
        lines += ["", ("Paired differences (seed by seed: same start, same first task draws, same evaluation "
                       "episodes), mean [95% t-interval over seeds], in points of success:"), "",
                  "| env | measure | " + " | ".join(f"{a} − {b}" for a, b in PAIRS) + " |",
                  "|---|---|" + "---|" * len(PAIRS)]
        for env_name, measures in sorted(differences.items()):
            for measure, found in measures.items():
                cells = [f"{format_ci(found[f'{a}-{b}'])}, {found[f'{a}-{b}']['n']} seeds"
                         if f"{a}-{b}" in found else "–" for a, b in PAIRS]
                lines.append(f"| {env_name} | {measure.removeprefix('final_').replace('_', ' ')} | "
                             + " | ".join(cells) + " |")
    block = "\n".join(lines)
    begin, end = "<!-- compare:begin -->", "<!-- compare:end -->"
    text = path.read_text() if path.is_file() else f"# Results\n\n{begin}\n{end}\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{block}\n{end}{tail}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="crafting", help=f"comma-separated subset of {list(PRESETS)}")
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--scorer", default=None, help="SCPO's scorer (default: the algorithm's, MiniLM)")
    parser.add_argument("--filter-groups", choices=("off", "outcome", "advantage"), default=None,
                        help="rollout.filter_groups for every run (default: the preset's, off); runs with it on are "
                             "kept apart (run folders <algo>-s<seed>-<mode>, table rows <env>+<mode>)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "compare")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    envs = [e for e in args.envs.split(",") if e]
    unknown = [e for e in envs if e not in PRESETS]
    if unknown:
        raise SystemExit(f"unknown env preset(s) {unknown}; known: {', '.join(PRESETS)}")
    rows = []
    for env_name in envs:
        for seed in (int(s) for s in args.seeds.split(",")):
            for algo in args.algos.split(","):
                print(f"== {env_name} / {algo} / seed {seed}", flush=True)
                rows.append(run_one(env_name, algo, seed, args, args.out))
    results_path = HERE / "results" / "compare.json"
    previous = json.loads(results_path.read_text()) if results_path.is_file() else {"runs": []}
    replaced = {(setting(x), x["algo"], x["seed"]) for x in rows}
    starts = {x["env"]: x.get("start_model") for x in rows}
    # An older row stays unless this call reran it or started its env from other weights (a rebuilt policy).
    keep = [r for r in previous.get("runs", []) if (setting(r), r["algo"], r["seed"]) not in replaced
            and (r["env"] not in starts or r.get("start_model") == starts[r["env"]])]
    all_rows = keep + rows
    table, differences = summarize(all_rows), paired(all_rows)
    label = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, torch 1 thread; "
             f"budgets per env in bench/compare.py PRESETS; {time.strftime('%Y-%m-%d')}")
    report = {"label": label, "summary": table, "paired_differences": differences, "runs": all_rows}
    results_path.write_text(json.dumps(report, indent=1))
    for name in sorted({setting(r) for r in all_rows}):
        plot(all_rows, name, ROOT / "docs" / "results" / f"compare-{name}.png")
    write_markdown(table, all_rows, ROOT / "docs" / "results.md", label, differences)
    for key, cell in sorted(table.items()):
        print(f"{key:24s} final eval success {format_ci(cell['ci'])} (95% CI) over {cell['seeds']} seed(s)")
    for name, measures in sorted(differences.items()):
        for measure, found in measures.items():
            for pair, ci in found.items():
                print(f"{name:24s} {measure}: {pair} {format_ci(ci)} (paired, {ci['n']} seeds)")
    print(f"wrote {results_path}, docs/results.md and docs/results/compare-*.png")
    return report


if __name__ == "__main__":
    main()
