"""bench/compare.py's report: what a run's log says (curves, SCPO's diagnostics, what the updates were made of), the
per-algorithm table with 95% t-intervals over seeds, the paired differences, the plots and docs/results.md's block.

Pure functions of result rows (``runs/compare/<env>/<algo>-s<seed>/result.json``); bench/compare.py runs and caches.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from docs_block import replace_block
from paired import PAIRS, band, detectable_difference, format_ci, mean_ci, paired_differences, seeds_needed

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


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per (setting, algo): final eval success (and training-set success) as mean, std and 95% t-interval over
    seeds (:func:`paired.mean_ci`), the start's success (the mean over seeds where each seed evaluated its own), per
    task type, SCPO's diagnostics and what the updates were made of."""
    table: dict[str, dict[str, Any]] = {}
    for row in rows:
        cell = table.setdefault(f"{setting(row)}/{row['algo']}", {"final": [], "by_type": {}, "credited": [],
                                                                  "conflict_before": [], "conflict_after": [],
                                                                  "train_set": [], "score": [], "mixed_share": [],
                                                                  "start": [], "start_score": [],
                                                                  "start_train_set": []})
        for key, value in (("start", row.get("start_eval_success")), ("start_score", row.get("start_eval_score")),
                           ("start_train_set", row.get("start_train_set_success"))):
            if value is not None:  # one start for all seeds, or one per seed (run.eval_before_train)
                cell[key].append(value)
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
        for key in ("start", "start_score", "start_train_set"):
            cell[key] = statistics.mean(cell[key]) if cell[key] else None
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


#: The difference (points of success) a power analysis sizes a study for, besides the one observed.
TARGET_DIFFERENCE = 5.0


def power_analysis(differences: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per setting, measure and pair of :func:`paired`'s differences: the differences' standard deviation over the
    ``seeds`` run, the smallest true difference those seeds find with 80% power (``detectable``), and the seeds a
    paired t-test needs for 80% power at the observed mean difference and at :data:`TARGET_DIFFERENCE` points, with
    this standard deviation (None: below two seeds or a zero spread)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, measures in differences.items():
        for measure, found in measures.items():
            for pair, ci in found.items():
                std = ci["std"]
                usable = std is not None and std > 0
                out.setdefault(name, {}).setdefault(measure, {})[pair] = {
                    "seeds": ci["n"], "std": std, "mean": ci["mean"],
                    "detectable": detectable_difference(std, ci["n"]) if usable else None,
                    "seeds_for_observed": seeds_needed(ci["mean"], std) if usable else None,
                    "seeds_for_5_points": seeds_needed(TARGET_DIFFERENCE, std) if usable else None}
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
    for name in ("train_success", "eval_success"):  # a success rate's band (few seeds: wide) stays within 0-100
        low, high = ax[name].get_ylim()
        ax[name].set_ylim(max(low, 0.0), min(high, 100.0))
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


def _difference_cell(ci: dict[str, Any]) -> str:
    """A paired difference for the table: ``mean [low, high], n seeds``, or ``mean (1 seed)``."""
    return format_ci(ci) + (f", {ci['n']} seeds" if ci["n"] > 1 else "")


def write_markdown(table: dict[str, dict[str, Any]], rows: list[dict[str, Any]], path: Path, label: str,
                   differences: dict[str, dict[str, dict[str, Any]]] | None = None,
                   analysis: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
    """The generated block of docs/results.md: per (setting, algorithm) means with 95% t-intervals over seeds, then
    the paired differences (:func:`paired`) and their power analysis (:func:`power_analysis`)."""
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
                cells = [_difference_cell(found[f"{a}-{b}"]) if f"{a}-{b}" in found else "–" for a, b in PAIRS]
                lines.append(f"| {env_name} | {measure.removeprefix('final_').replace('_', ' ')} | "
                             + " | ".join(cells) + " |")
    if analysis:
        lines += ["", ("Power (paired t-test, 5% level, 80% power, with the spread of the differences above): the "
                       "smallest difference these seeds find, and the seeds needed to find the observed difference "
                       f"and one of {TARGET_DIFFERENCE:.0f} points:"), "",
                  ("| env | measure | pair | seeds | s.d. of differences | detectable difference | seeds for the "
                   f"observed | seeds for {TARGET_DIFFERENCE:.0f} points |"), "|---|---|---|---|---|---|---|---|"]
        for env_name, measures in sorted(analysis.items()):
            for measure, pairs in measures.items():
                for pair, row in pairs.items():
                    cells = ["–" if row[k] is None else (f"{row[k]:.1f}" if isinstance(row[k], float) else str(row[k]))
                             for k in ("std", "detectable", "seeds_for_observed", "seeds_for_5_points")]
                    lines.append(f"| {env_name} | {measure.removeprefix('final_').replace('_', ' ')} | "
                                 f"{pair.replace('-', ' − ')} | {row['seeds']} | " + " | ".join(cells) + " |")
    replace_block(path, "compare", "\n".join(lines))
