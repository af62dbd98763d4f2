"""Order-preserving alignment of a failed trajectory against a successful sibling (docs/spec/algorithms.md §4.2 item 4).

Input: a thresholded similarity matrix ``M`` of shape (T, L), ``M[t, j] = sim(u_t, v_j)`` if ≥ τ else 0,
where u are the failed trajectory's step texts and v the sibling's. Output: the sibling position matched to
each failed step (-1 if none) and the coverage Σ M over matched pairs.

``dp``  maximum-weight monotone matching (weighted LCS): matched pairs strictly increase in both t and j,
        so each sibling position is credited at most once and a step earns credit only by moving forward
        along the sibling. Among equally heavy matchings we take the one that credits the *earliest* failed
        steps (first visit, not a later repeat; our tie rule — the doc's reference backtrack prefers the
        latest).
``greedy``  online frontier: p = -1; for each t, j* = argmax_{j>p} M[t, j] (first on ties); if M[t, j*] > 0,
        match t → j* and set p = j*.
``unordered``  ablation without the "new progress" rule (docs/spec/algorithms.md §4.5): one-to-one matching, heaviest pairs first
        (ties: smaller t, then smaller j), ignoring order.

All three work on a stack of P zero-padded matrices (P, T, L); zero padding never changes a result.

:func:`effective_path` marks the steps of a successful sibling that survive loop erasure: a segment that starts
and ends in the same anchor state (a detour the sibling undid) is dropped, so ``sibling_path="effective"`` never
credits a failed step for repeating it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

Alignment = Literal["dp", "greedy", "unordered"]


def dp_tables(M: np.ndarray) -> np.ndarray:
    """DP value tables D of shape (P, T+1, L+1) for a stack M of shape (P, T, L).

    ``D[t, j]`` = best weight aligning the first t failed steps with the first j sibling steps:
    ``D[t, j] = max(D[t−1, j], D[t, j−1], D[t−1, j−1] + M[t−1, j−1])``. Row by row this is an element-wise
    max followed by a running max along j, so each row is two vector ops over all P matrices.
    (The diagonal term with M = 0 never wins because D is non-decreasing in j.)
    """
    P, T, L = M.shape
    D = np.zeros((P, T + 1, L + 1))
    for t in range(1, T + 1):
        previous = D[:, t - 1]
        best = np.maximum(previous[:, 1:], previous[:, :-1] + M[:, t - 1])
        D[:, t, 1:] = np.maximum.accumulate(best, axis=1)
    return D


def dp_backtrack(D: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Matched sibling position per failed step (-1 = unmatched) from one table ``D`` (T+1, L+1) and ``M`` (T, L).

    Moves are tried in the order up (leave failed step t−1 unmatched), diagonal (match), left, so that among
    optimal matchings the earliest failed steps are the ones credited. Comparisons are exact: each D entry
    is one of the three candidates it was computed from.
    """
    T, L = M.shape
    D_rows, M_rows = D.tolist(), M.tolist()
    matched = [-1] * T
    t, j = T, L
    while t > 0 and j > 0:
        value = D_rows[t][j]
        if value == D_rows[t - 1][j]:
            t -= 1
        elif M_rows[t - 1][j - 1] > 0 and value == D_rows[t - 1][j - 1] + M_rows[t - 1][j - 1]:
            matched[t - 1] = j - 1
            t -= 1
            j -= 1
        else:
            j -= 1
    return np.asarray(matched, dtype=np.int64)


def monotone_alignment(M: np.ndarray) -> tuple[np.ndarray, float]:
    """Max-weight order-preserving matching of one (T, L) matrix: (matched position per step, coverage)."""
    M = np.asarray(M, dtype=np.float64)
    D = dp_tables(M[None])[0]
    return dp_backtrack(D, M), float(D[-1, -1])


def greedy_alignment(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy frontier alignment of a stack (P, T, L): matched positions (P, T) and coverage (P,)."""
    P, T, L = M.shape
    matched = np.full((P, T), -1, np.int64)
    coverage = np.zeros(P)
    frontier = np.full(P, -1, np.int64)
    positions = np.arange(L)
    for t in range(T):
        ahead = np.where(positions[None, :] > frontier[:, None], M[:, t, :], 0.0)
        best = np.argmax(ahead, axis=1) if L else np.zeros(P, np.int64)
        value = ahead[np.arange(P), best] if L else np.zeros(P)
        hit = value > 0
        matched[hit, t] = best[hit]
        coverage += np.where(hit, value, 0.0)
        frontier = np.where(hit, best, frontier)
    return matched, coverage


def unordered_alignment(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one matching ignoring order (ablation), heaviest pairs first: (P, T) positions, (P,) coverage."""
    P, T, _ = M.shape
    matched = np.full((P, T), -1, np.int64)
    coverage = np.zeros(P)
    for p in range(P):
        ts, js = np.nonzero(M[p] > 0)
        weights = M[p, ts, js]
        used_j: set[int] = set()
        for k in np.lexsort((js, ts, -weights)).tolist():
            t, j = int(ts[k]), int(js[k])
            if matched[p, t] < 0 and j not in used_j:
                matched[p, t] = j
                used_j.add(j)
                coverage[p] += weights[k]
    return matched, coverage


def effective_path(anchors: Sequence[Hashable]) -> np.ndarray:
    """Loop erasure of a path given the anchor state before each step: True for the steps that are kept.

    From position i, jump to the last position k ≥ i with the same anchor: steps i..k−1 went from that state back
    to it (a loop) and are dropped; step k is kept and the walk goes on from k+1.
    """
    last: dict[Hashable, int] = {}
    for k, key in enumerate(anchors):
        last[key] = k
    keep = np.zeros(len(anchors), bool)
    i = 0
    while i < len(anchors):
        k = last[anchors[i]]
        keep[k] = True
        i = k + 1
    return keep
