"""The run's headline numbers and targets, compared with the previous run's, and the results file."""

from __future__ import annotations

import json
import time
from pathlib import Path

from throughput_parts import TARGET_N, TARGET_RATIO, TARGET_SHARE
from throughput_parts.machine import load_now


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



def write_report(report: dict, out: Path, started: float) -> None:
    """Finish ``report`` (load after, wall time, targets, summary, the previous run's headline numbers from ``out``),
    write it to ``out`` and print the summary."""
    report["load_after"] = load_now()
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["targets"] = targets(report)
    report["summary"] = summary(report)
    previous = None
    if out.is_file():
        try:
            previous = json.loads(out.read_text())
        except (OSError, json.JSONDecodeError):
            previous = None
    if previous:
        report["previous"] = {k: previous.get(k) for k in ("date", "mode", "wall_s", "load_before", "load_after",
                                                           "summary", "targets")}
        report["previous"]["git_commit"] = previous.get("machine", {}).get("git_commit")
        before = previous.get("summary", {})
        report["compared"] = {k: {"now": v, "previous": before.get(k)} for k, v in report["summary"].items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(out)

    print("\n== summary" + (f" (previous run: {previous.get('date')}, {previous.get('mode')})" if previous else ""))
    for key, value in report["summary"].items():
        if key.endswith(("ratio", "env_plus_credit_share", "iteration_s", "speedup")):
            old = (previous or {}).get("summary", {}).get(key)
            print(f"  {key:<62} {value:>9}" + (f"   (previous {old})" if old is not None else ""))
    for name, target in report["targets"].items():
        print(f"  target {name} {target['target']}: {target['met']}")
    print(f"wall {report['wall_s']:.0f} s; load {report['load_before']['loadavg']} -> "
          f"{report['load_after']['loadavg']}; wrote {out}")
