"""Statistics of a paired comparison over seeds (bench/compare.py): means with 95% confidence intervals, and paired
differences between algorithms.

Runs of one seed are paired: every algorithm starts from the same policy, draws the same tasks (the first draw of
every iteration; dynamic sampling's further waves depend on the outcomes) and is evaluated on the same episodes
(same tasks, reset seeds and sampling seeds). A paired difference is taken seed by seed, so the seed's luck (its
tasks, its evaluation dice) cancels. Intervals are Student-t intervals over seeds: mean ± t(0.975, n−1)·s/√n, with s
the sample standard deviation; one seed gives a mean without an interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

#: The differences reported, ``a − b`` for each pair (a, b).
PAIRS = (("scpo", "gigpo"), ("gigpo", "grpo"), ("scpo", "grpo"))
#: Student t 0.975 quantiles for 1..30 degrees of freedom (three decimals, as printed in the usual tables).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (table up to 30, then the Cornish-Fisher
    expansion around the normal quantile, within 0.001 of the exact value there)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """``n``, ``mean``, ``std`` and the 95% t-interval (``half``, ``low``, ``high``; None below two values)."""
    values = [float(v) for v in values]
    if not values:
        return {"n": 0, "mean": None, "std": None, "half": None, "low": None, "high": None}
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"n": 1, "mean": mean, "std": None, "half": None, "low": None, "high": None}
    std = statistics.stdev(values)
    half = t975(len(values) - 1) * std / math.sqrt(len(values))
    return {"n": len(values), "mean": mean, "std": std, "half": half, "low": mean - half, "high": mean + half}


def paired_differences(by_seed: dict[str, dict[int, float]],
                       pairs: Sequence[tuple[str, str]] = PAIRS) -> dict[str, dict[str, Any]]:
    """``"a-b"`` → :func:`mean_ci` of ``by_seed[a][s] − by_seed[b][s]`` over the seeds both have, with those
    ``seeds``; pairs missing an algorithm are left out. ``by_seed``: algorithm → seed → value."""
    out = {}
    for a, b in pairs:
        seeds = sorted(set(by_seed.get(a, {})) & set(by_seed.get(b, {})))
        if seeds:
            diffs = [by_seed[a][s] - by_seed[b][s] for s in seeds]
            out[f"{a}-{b}"] = {**mean_ci(diffs), "seeds": seeds}
    return out


def band(series: Sequence[Sequence[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per position over equally long ``series`` (one per seed): mean, and the 95% t-interval's low and high (the
    mean itself where a single series gives no interval)."""
    means, lows, highs = [], [], []
    for column in zip(*series):
        ci = mean_ci(column)
        means.append(ci["mean"])
        lows.append(ci["mean"] if ci["low"] is None else ci["low"])
        highs.append(ci["mean"] if ci["high"] is None else ci["high"])
    return means, lows, highs


def format_ci(ci: dict[str, Any], digits: int = 1) -> str:
    """``mean [low, high]``, ``mean (1 seed)`` or ``–``."""
    if ci.get("mean") is None:
        return "–"
    if ci.get("half") is None:
        return f"{ci['mean']:.{digits}f} (1 seed)"
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"
