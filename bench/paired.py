"""Statistics of a paired comparison over seeds (bench/compare.py): means with 95% confidence intervals, and paired
differences between algorithms.

Runs of one seed are paired: every algorithm starts from the same policy, draws the same tasks (the first draw of
every iteration; dynamic sampling's further waves depend on the outcomes) and is evaluated on the same episodes
(same tasks, reset seeds and sampling seeds). A paired difference is taken seed by seed, so the seed's luck (its
tasks, its evaluation dice) cancels. Intervals are Student-t intervals over seeds: mean ± t(0.975, n−1)·s/√n, with s
the sample standard deviation; one seed gives a mean without an interval.

The power analysis (:func:`power`, :func:`seeds_needed`, :func:`detectable_difference`) is that of the paired
t-test at the 5% level: from the standard deviation of the paired differences a pilot measured, the chance that
``n`` seeds find a true difference ``delta`` (noncentral t), the seeds that give 80% power, and the smallest
difference ``n`` seeds find with 80% power.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from scipy import stats

#: The differences reported, ``a − b`` for each pair (a, b).
PAIRS = (("scpo", "gigpo"), ("gigpo", "grpo"), ("scpo", "grpo"))
#: The power a study is sized for, and the two-sided level of its tests and intervals.
POWER, ALPHA = 0.8, 0.05


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return float(stats.t.ppf(1 - ALPHA / 2, df))


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


def power(delta: float, std: float, n: int) -> float:
    """Power of the two-sided paired t-test at the 5% level with ``n`` seeds, when the true mean difference is
    ``delta`` and the differences' standard deviation ``std``."""
    if n < 2:
        return 0.0
    if std <= 0:
        return 1.0 if delta else ALPHA
    df, critical = n - 1, t975(n - 1)
    shift = abs(delta) * math.sqrt(n) / std  # the noncentrality
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def seeds_needed(delta: float, std: float, target: float = POWER, limit: int = 10_000) -> int | None:
    """The fewest seeds whose paired t-test finds ``delta`` with power ``target``; None beyond ``limit``."""
    if delta == 0:
        return None
    n = 2
    while power(delta, std, n) < target:
        n += 1
        if n > limit:
            return None
    return n


def detectable_difference(std: float, n: int, target: float = POWER) -> float | None:
    """The smallest true difference that ``n`` seeds find with power ``target`` (bisection on :func:`power`)."""
    if n < 2 or std is None:
        return None
    low, high = 0.0, std
    while power(high, std, n) < target:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if power(mid, std, n) < target else (low, mid)
    return high


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
