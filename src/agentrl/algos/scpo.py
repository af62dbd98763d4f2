"""SCPO: Semantic Consistency Policy Optimization as a plug-in on GiGPO or GRPO (docs/algorithms.md "SCPO"; docs/spec/algorithms.md §4).

Sourced [Xu et al., arXiv:2606.25852, abstract and summaries]: value-free reward shaping that scores each
failed step against a successful sibling of the same rollout group with a frozen semantic matcher and adds
positive step-level credit for new progress along that sibling, each reference position credited at most
once. The paper's full text is not public, so the concrete algorithm is the design of docs/spec/algorithms.md §4.2
(every item marked [I] there is ours):

    u_t      = "{action} -> {next_obs}"                                step text (docs/spec/algorithms.md §4.2.1)
    M[t, j]  = sim(u_t^i, v_j^k) if ≥ τ and step t valid, else 0        frozen scorer, threshold (docs/spec/algorithms.md §4.2.2–3)
    pairs    = max-weight monotone matching of M (or greedy frontier)   new progress (docs/spec/algorithms.md §4.2.4, alignment.py)
    k*       = the shortest successful sibling, or the one with the largest coverage Σ M[pairs]   (docs/spec/algorithms.md §4.2.5)
    c_t^i    = ρ · M[t, j] · G_j^{k*},  G_j = Σ_{m≥j} γ_c^{m−j} r_m^{k*}   credit in reward units (docs/spec/algorithms.md §4.2.6)
    A_t^i    = A_base(i, t) + c_t^i / F_g                               plug-in, F_g = σ_g + ε or 1 (docs/spec/algorithms.md §4.2.7)

Only groups with both outcomes are touched; successful trajectories' advantages never change (additive
combination). Our refinement for P6: a failed step whose step text equals an already-credited earlier step
of the same trajectory gets no credit (a loop repeat earns nothing even if the sibling has a similar later
step). The ``shaped_return`` combination (GiGPO base only) adds c_t to the step return before the
anchor-group statistics instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentrl.algos.alignment import (
    Alignment,
    dp_backtrack,
    dp_tables,
    effective_path,
    greedy_alignment,
    unordered_alignment,
)
from agentrl.algos.common import (
    BatchLayout,
    advantage_summary,
    batch_layout,
    discounted_returns,
    flat_reward_valid,
    outcome_summary,
    trajectory_success,
)
from agentrl.algos.config import option, require
from agentrl.algos.gigpo import GiGPOConfig, anchor_summary, gigpo_parts
from agentrl.algos.grpo import EpisodeConfig, GRPOConfig, episode_advantages
from agentrl.algos.scorers import DEFAULT_DEVICE, DEFAULT_PRECISION, SCORERS, Precision, Scorer, resolve_scorer
from agentrl.algos.spec import register_algorithm
from agentrl.algos.types import DEFAULT_STEP_TEXT_FORMAT, StepBatch, StepTextFormat, as_object_array
from agentrl.errors import ConfigError

_SEED_MASK = (1 << 63) - 1


@dataclass
class SCPOConfig(GiGPOConfig):
    """SCPO's options (docs/spec/algorithms.md §4.4) on top of its base estimator's, which it inherits: GiGPO's step level
    and the episode options GiGPO shares with GRPO (``pool``, ``invalid_penalty``, ``epsilon``)."""

    mode: Literal["mean_norm", "mean_std_norm"] | None = option(
        None, "base normalisation; None = the base's default (gigpo: mean_norm, grpo: mean_std_norm)"
    )
    base: Literal["gigpo", "grpo"] = option("gigpo", "base estimator SCPO adds its credit to")
    scorer: str = option(
        "bertscore", "step-similarity scorer: bertscore, minilm, cross_encoder or lexical (or a registered name)"
    )
    scorer_model_path: str | None = option(None, "local model folder for the scorer (required by cross_encoder)")
    scorer_device: str = option(DEFAULT_DEVICE, "torch device of the scorer model ('cpu', 'cuda', 'cuda:1', ...)")
    scorer_precision: Precision = option(
        DEFAULT_PRECISION, "scorer model precision; auto = bfloat16 autocast where the hardware has native bfloat16"
    )
    match_threshold: float | None = option(None, "τ: minimum similarity to match; None = the scorer's default")
    credit_scale: float = option(0.9, "ρ: share of the matched sibling step's return given as credit (< 1: P5)")
    credit_gamma: float = option(0.95, "γ_c: discount of the sibling return G_j used for the credit")
    step_text: StepTextFormat = option(
        DEFAULT_STEP_TEXT_FORMAT, "step text compared by the scorer: 'action -> next_obs' or 'obs || action'"
    )
    alignment: Alignment = option(
        "dp", "matching of failed steps to sibling steps: monotone DP, greedy frontier, or unordered (ablation)"
    )
    sibling: Literal["coverage", "shortest", "random"] = option(
        "shortest", "which successful sibling to align to: shortest, largest coverage, or random"
    )
    sibling_path: Literal["full", "effective"] = option(
        "full", "align to the sibling's whole path, or its effective path (loops back to an anchor state dropped)"
    )
    combination: Literal["additive", "shaped_return"] = option(
        "additive", "add c/F_g to the advantage, or add c to GiGPO's step return before anchor grouping"
    )
    seed: int = option(0, "seed for sibling=random")

    def check(self) -> None:
        SCORERS.get(self.scorer)  # unknown scorer names fail now, listing the known ones
        shaped_on_gigpo = self.combination != "shaped_return" or self.base == "gigpo"
        require(shaped_on_gigpo, "combination='shaped_return' needs base='gigpo'")
        require(self.match_threshold is None or 0.0 < self.match_threshold <= 1.0, "match_threshold must be in (0, 1]")
        require(self.credit_scale >= 0.0, "credit_scale must be >= 0")
        require(0.0 <= self.credit_gamma <= 1.0, "credit_gamma must be in [0, 1]")
        super().check()

    def base_config(self) -> GRPOConfig | GiGPOConfig:
        """The base estimator's own config: SCPO's base options, with ``mode=None`` resolved to the base's default."""
        episode = {f.name: getattr(self, f.name) for f in dataclasses.fields(EpisodeConfig)}
        if self.base == "grpo":
            norm_by_std = GRPOConfig.norm_by_std if self.mode is None else self.mode == "mean_std_norm"
            return GRPOConfig(**episode, norm_by_std=norm_by_std)
        gigpo = {f.name: getattr(self, f.name) for f in dataclasses.fields(GiGPOConfig)}
        return GiGPOConfig(**{**gigpo, "mode": self.mode or GiGPOConfig.mode})


@dataclass
class SCPOCredit:
    """Per-row SCPO credit and how it was found (row order of the input)."""

    credit: np.ndarray  # c_t >= 0, reward units; 0 on successful, unmatched and invalid steps
    sibling: np.ndarray  # traj_index of the sibling a credited step matched, else -1
    sibling_step: np.ndarray  # 0-based position of the matched step in that sibling, else -1
    similarity: np.ndarray  # M[t, j] of the match, else 0
    failed_in_mixed_group: np.ndarray  # bool: a step of a failed trajectory whose group has a success
    threshold: float  # τ used
    #: per mixed group: (valid failed rows, successful rows, thresholded similarity between them)
    similar_pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)


#: (advantages, base advantages, the credit and how it was matched, base diagnostics), see :func:`scpo_parts`
SCPOParts = tuple[np.ndarray, np.ndarray, SCPOCredit, dict[str, float]]


@dataclass(frozen=True)
class _MixedGroup:
    """One rollout group with both outcomes: its failed and successful trajectories and their rows (-1: padding)."""

    index: int  # dense group number
    failed: np.ndarray  # (|F|,) dense trajectory numbers
    winners: np.ndarray  # (|S|,)
    failed_rows: np.ndarray  # (|F|, T)
    winner_rows: np.ndarray  # (|S|, L)

    @classmethod
    def of(cls, layout: BatchLayout, g: int, traj_success: np.ndarray) -> _MixedGroup:
        trajs = np.flatnonzero(layout.traj_group == g)
        failed, winners = trajs[~traj_success[trajs]], trajs[traj_success[trajs]]
        failed_rows = layout.traj_rows[failed][:, : int(layout.traj_length[failed].max())]
        winner_rows = layout.traj_rows[winners][:, : int(layout.traj_length[winners].max())]
        return cls(g, failed, winners, failed_rows, winner_rows)


def scpo_credit(
    layout: BatchLayout,
    reward: np.ndarray,
    valid: np.ndarray,
    traj_success: np.ndarray,
    texts: list[str],
    scorer: Scorer,
    config: SCPOConfig,
    anchor: np.ndarray | None = None,
) -> SCPOCredit:
    """SCPO credit c_t per row on a prepared :class:`BatchLayout` (docs/spec/algorithms.md §4.2 items 2–6).

    Only groups with both outcomes are scored. ``anchor`` is needed by ``sibling_path="effective"`` only.
    """
    if config.sibling_path == "effective" and anchor is None:
        raise ConfigError("sibling_path='effective' needs anchor keys (one per row) to find the sibling's loops")
    threshold = scorer.default_threshold if config.match_threshold is None else config.match_threshold
    n = len(reward)
    out = SCPOCredit(
        credit=np.zeros(n),
        sibling=np.full(n, -1, np.int64),
        sibling_step=np.full(n, -1, np.int64),
        similarity=np.zeros(n),
        failed_in_mixed_group=np.zeros(n, bool),
        threshold=float(threshold),
    )
    wins = np.bincount(layout.traj_group, weights=traj_success, minlength=layout.n_groups)
    sizes = np.bincount(layout.traj_group, minlength=layout.n_groups)
    mixed_groups = np.flatnonzero((wins > 0) & (wins < sizes))
    if len(mixed_groups) == 0:
        return out
    in_mixed = np.isin(layout.traj_group, mixed_groups)
    out.failed_in_mixed_group[:] = (in_mixed & ~traj_success)[layout.traj]

    # Every text SCPO will compare, encoded once for the whole batch.
    compared = np.flatnonzero(in_mixed[layout.traj] & (valid | traj_success[layout.traj]))
    scorer.prepare(list(dict.fromkeys(texts[r] for r in compared.tolist())))
    sibling_return = discounted_returns(reward, layout, config.credit_gamma)  # G_j of every row
    loop_anchor = anchor if config.sibling_path == "effective" else None

    for g in mixed_groups.tolist():
        group = _MixedGroup.of(layout, g, traj_success)
        stack = _similarity_stack(group, valid, texts, scorer, threshold, loop_anchor)
        if stack is None:
            continue
        M, similar_pairs = stack
        out.similar_pairs.append(similar_pairs)
        _credit_group(out, layout, group, M, texts, sibling_return, config)
    return out


def _similarity_stack(
    group: _MixedGroup,
    valid: np.ndarray,
    texts: list[str],
    scorer: Scorer,
    threshold: float,
    loop_anchor: np.ndarray | None,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """The thresholded similarity M of every (failed, successful) trajectory pair of one group, stacked as
    (|F|·|S|, T, L), and the group's similar pairs for the conflict diagnostics (docs/spec/algorithms.md §4.2 items 2–3); None when no
    failed step is valid. With ``loop_anchor``, the sibling steps inside a loop (its effective path) read a zero."""
    failed_rows, winner_rows = group.failed_rows, group.winner_rows
    # Unique texts of valid failed steps (U) and successful steps (V); one similarity matrix S per group.
    usable = (failed_rows >= 0) & valid[np.maximum(failed_rows, 0)]
    u_texts = list(dict.fromkeys(texts[r] for r in failed_rows[usable].tolist()))
    v_texts = list(dict.fromkeys(texts[r] for r in winner_rows[winner_rows >= 0].tolist()))
    if not u_texts:
        return None
    S = np.asarray(scorer.similarity(u_texts, v_texts, min_score=threshold), dtype=np.float64)
    S = np.where(S >= threshold, S, 0.0)
    S = np.pad(S, ((0, 1), (0, 1)))  # index -1 (invalid step or padding) reads a zero
    u_id, v_id = {t: i for i, t in enumerate(u_texts)}, {t: j for j, t in enumerate(v_texts)}
    u_index = np.full(failed_rows.shape, -1, np.int64)
    u_index[usable] = [u_id[texts[r]] for r in failed_rows[usable].tolist()]
    v_index = np.full(winner_rows.shape, -1, np.int64)
    v_index[winner_rows >= 0] = [v_id[texts[r]] for r in winner_rows[winner_rows >= 0].tolist()]
    if loop_anchor is not None:
        for b, rows in enumerate(winner_rows.tolist()):
            rows = [r for r in rows if r >= 0]
            v_index[b, : len(rows)][~effective_path([loop_anchor[r] for r in rows])] = -1
    present = winner_rows >= 0
    similar_pairs = (failed_rows[usable], winner_rows[present], S[u_index[usable]][:, v_index[present]])
    M = S[u_index[:, None, :, None], v_index[None, :, None, :]]
    return M.reshape(len(group.failed) * len(group.winners), *M.shape[2:]), similar_pairs


def _credit_group(
    out: SCPOCredit,
    layout: BatchLayout,
    group: _MixedGroup,
    M: np.ndarray,
    texts: list[str],
    sibling_return: np.ndarray,
    config: SCPOConfig,
) -> None:
    """Align each failed trajectory of ``group`` with its chosen sibling and write the credit of its matched steps
    into ``out`` (docs/spec/algorithms.md §4.2 items 4–6), a repeat of an already credited step text earning nothing (P6)."""
    coverage, matched_steps = _align(M, config.alignment)
    coverage = coverage.reshape(len(group.failed), len(group.winners))
    # Candidates in tie-break order: shorter sibling first, then lower trajectory index.
    candidates = np.lexsort((layout.traj_label[group.winners], layout.traj_length[group.winners]))
    for a, traj in enumerate(group.failed.tolist()):
        b = _choose_sibling(coverage[a], candidates, config.sibling, config.seed, group.index,
                            int(layout.traj_label[traj]))
        p = a * len(group.winners) + b
        matched = matched_steps(p)
        credited_texts: set[str] = set()
        for t in np.flatnonzero(matched >= 0).tolist():
            row, j = int(group.failed_rows[a, t]), int(matched[t])
            if texts[row] in credited_texts:  # P6: a repeat of a credited step earns nothing
                continue
            credited_texts.add(texts[row])
            sibling_row = int(group.winner_rows[b, j])
            out.credit[row] = config.credit_scale * M[p, t, j] * sibling_return[sibling_row]
            out.sibling[row] = layout.traj_label[group.winners[b]]
            out.sibling_step[row] = j
            out.similarity[row] = M[p, t, j]


def _align(M: np.ndarray, alignment: str) -> tuple[np.ndarray, Callable[[int], np.ndarray]]:
    """Coverage of each stacked matrix of M, and a function giving the matched sibling position of every failed
    step (-1: none) for matrix p (docs/spec/algorithms.md §4.2 item 4; alignment.py). The DP backtracks only the pairs asked for."""
    if alignment == "dp":
        tables = dp_tables(M)
        return tables[:, -1, -1], lambda p: dp_backtrack(tables[p], M[p])
    if alignment == "greedy":
        matched, coverage = greedy_alignment(M)
    elif alignment == "unordered":
        matched, coverage = unordered_alignment(M)
    else:
        raise ConfigError(f"alignment must be dp, greedy or unordered, got {alignment!r}")
    return coverage, lambda p: matched[p]


def _choose_sibling(
    coverage: np.ndarray, candidates: np.ndarray, rule: str, seed: int, group: int, traj_label: int
) -> int:
    """Index (into the group's successful trajectories) of the sibling to align with (docs/spec/algorithms.md §4.2 item 5)."""
    if rule == "shortest":
        return int(candidates[0])
    if rule == "random":
        rng = np.random.default_rng([seed & _SEED_MASK, group & _SEED_MASK, traj_label & _SEED_MASK])
        return int(rng.integers(len(candidates)))
    best = int(candidates[0])
    for b in candidates[1:].tolist():  # keep the first of (nearly) equal coverages, as the doc's loop does
        if coverage[b] > coverage[best] + 1e-12:
            best = b
    return best


def _scpo(
    layout: BatchLayout,
    reward: np.ndarray,
    valid: np.ndarray,
    success: np.ndarray,
    texts: list[str],
    anchor: np.ndarray | None,
    config: SCPOConfig,
    scorer: Scorer | Callable | None = None,
) -> SCPOParts:
    """SCPO in parts (see :func:`scpo_parts`): A = A_base + c / F_g, or GiGPO on the shaped return (docs/spec/algorithms.md §4.2 item 7).
    ``scorer`` (a Scorer or a function) replaces the one ``config`` names."""
    traj_success = trajectory_success(layout, success)
    scorer_obj = resolve_scorer(
        config.scorer if scorer is None else scorer, config.scorer_model_path, config.scorer_device,
        config.scorer_precision,
    )
    credit = scpo_credit(layout, reward, valid, traj_success, texts, scorer_obj, config, anchor)
    base = config.base_config()
    if isinstance(base, GRPOConfig):
        base_adv, normaliser = episode_advantages(layout, reward, valid, base, use_std=base.norm_by_std)
        return base_adv + credit.credit / normaliser, base_adv, credit, {}
    if anchor is None:
        raise ConfigError("SCPO with base='gigpo' needs anchor keys (one per row); pass anchor=... or base='grpo'")
    base_adv, parts = gigpo_parts(layout, reward, valid, anchor, base)
    if config.combination == "shaped_return":
        advantages, parts = gigpo_parts(layout, reward, valid, anchor, base, extra_return=credit.credit)
    else:
        advantages = base_adv + credit.credit / parts["normaliser"]
    return advantages, base_adv, credit, anchor_summary(parts)


def scpo_parts(batch: StepBatch, config: SCPOConfig, layout: BatchLayout | None = None) -> SCPOParts:
    """SCPO on a flat batch, kept in parts: (advantages, base advantages, the credit and how it was matched,
    base diagnostics). For tools that look inside the credit (``agentrl.diagnostics``)."""
    layout = layout or batch_layout(batch.group_index, batch.traj_index, batch.step_index)
    texts = [str(t) for t in batch.step_text]
    return _scpo(layout, batch.reward, batch.valid, batch.success, texts, batch.anchor, config)


def scpo_diagnostics(layout: BatchLayout, success: np.ndarray, texts: list[str], parts: SCPOParts) -> dict[str, float]:
    """The diagnostics of SCPO (docs/algorithms.md "Diagnostics"): outcome counts, advantage statistics, the base's,
    the credited share, mean credit, and conflict rates before/after."""
    advantages, base_adv, credit, base_diagnostics = parts
    diagnostics = {**outcome_summary(layout, success), **advantage_summary(advantages), **base_diagnostics}
    failed = ~success
    credited = credit.credit > 0
    diagnostics.update(
        {
            "failed_steps": float(failed.sum()),
            "failed_steps_credited_frac": float(credited.sum() / failed.sum()) if failed.any() else 0.0,
            "failed_steps_in_mixed_groups_credited_frac": (
                float(credited.sum() / credit.failed_in_mixed_group.sum()) if credit.failed_in_mixed_group.any() else 0.0
            ),
            "mean_credit": float(credit.credit[credited].mean()) if credited.any() else 0.0,
            "mean_credit_advantage": float((advantages - base_adv)[credited].mean()) if credited.any() else 0.0,
            "match_threshold": credit.threshold,
            **conflict_rates(credit, base_adv, advantages),
            **identical_text_conflict_rates(layout, texts, base_adv, advantages),
        }
    )
    return diagnostics


def _flat_config(
    config: SCPOConfig | None, scorer: str | Scorer | Callable | None, options: dict[str, Any]
) -> tuple[SCPOConfig, Scorer | Callable | None]:
    """The config of a flat call (``config`` with ``options`` applied), and the scorer object that replaces the
    config's scorer, if any (a scorer name goes into the config)."""
    if isinstance(scorer, str):
        options, scorer = {**options, "scorer": scorer}, None
    return SCPOConfig.from_dict(options, config), scorer


def scpo_credit_flat(
    group_index: np.ndarray,
    traj_index: np.ndarray,
    step_index: np.ndarray,
    reward: np.ndarray,
    valid: np.ndarray | None,
    success: np.ndarray,
    step_text: np.ndarray,
    anchor: np.ndarray | None = None,
    *,
    scorer: str | Scorer | Callable | None = None,
    config: SCPOConfig | None = None,
    **options: Any,
) -> SCPOCredit:
    """SCPO credit c_t per row (docs/spec/algorithms.md §4.2 items 1–6), before it is combined with a base estimator.
    Arguments as :func:`scpo_advantages_flat`; ``anchor`` is needed by ``sibling_path="effective"`` only."""
    config, scorer = _flat_config(config, scorer, options)
    layout = batch_layout(group_index, traj_index, step_index)
    reward, valid = flat_reward_valid(reward, valid, layout)
    scorer_obj = resolve_scorer(
        config.scorer if scorer is None else scorer, config.scorer_model_path, config.scorer_device,
        config.scorer_precision,
    )
    anchor = None if anchor is None else as_object_array(anchor)
    texts = [str(t) for t in step_text]
    return scpo_credit(layout, reward, valid, trajectory_success(layout, success), texts, scorer_obj, config, anchor)


def scpo_advantages_flat(
    group_index: np.ndarray,
    traj_index: np.ndarray,
    step_index: np.ndarray,
    reward: np.ndarray,
    valid: np.ndarray | None,
    success: np.ndarray,
    step_text: np.ndarray,
    anchor: np.ndarray | None = None,
    *,
    scorer: str | Scorer | Callable | None = None,
    config: SCPOConfig | None = None,
    return_diagnostics: bool = False,
    **options: Any,
) -> np.ndarray | tuple[np.ndarray, dict[str, float]]:
    """SCPO advantage per step row from flat arrays (rows in any order), no agentrl objects needed.

    ``A_t^i = A_base(i, t) + ρ·M[t, j]·G_j^{k*} / F_g`` (see the module docstring; docs/algorithms.md "SCPO",
    docs/spec/algorithms.md §4.2–§4.4, arXiv:2606.25852). ``step_text`` is the text compared per row (use
    ``"{action} -> {next_obs}"``), ``success`` the trajectory's outcome on each of its rows, ``anchor`` the GiGPO
    anchor key per row (needed when ``base="gigpo"``); ``valid=None`` means every step is valid. ``scorer`` is a
    registered name (``minilm``, ``cross_encoder``, ``bertscore``, ``lexical``), a
    :class:`~agentrl.algos.scorers.Scorer`, or a function ``(queries, references) -> similarity matrix in [0, 1]``;
    default: the config's. Options come from ``config`` (default: :class:`SCPOConfig`'s defaults) with keyword
    ``options`` (its fields) applied. Returns a float64 array in row order, or with ``return_diagnostics=True``
    ``(advantages, diagnostics)``, the registry's diagnostics.
    """
    config, scorer = _flat_config(config, scorer, options)
    layout = batch_layout(group_index, traj_index, step_index)
    reward, valid = flat_reward_valid(reward, valid, layout)
    success = np.asarray(success, dtype=bool)
    texts = [str(t) for t in step_text]
    anchor = None if anchor is None else as_object_array(anchor)
    parts = _scpo(layout, reward, valid, success, texts, anchor, config, scorer)
    return (parts[0], scpo_diagnostics(layout, success, texts, parts)) if return_diagnostics else parts[0]


def conflict_rates(
    credit: SCPOCredit, before: np.ndarray, after: np.ndarray
) -> dict[str, float]:
    """Semantic credit inconsistency before and after SCPO (the quantity SCPO targets, docs/spec/algorithms.md §4.1, §4.5).

    ``conflict_rate_*``: over all pairs (valid step of a failed trajectory, step of a successful sibling in
    the same group) whose similarity is ≥ τ under the SCPO scorer, the share whose advantages have strictly
    opposite signs (a·b < 0). ``similar_pairs`` is the number of such pairs.
    """
    pairs, opposite = 0, {"before": 0, "after": 0}
    for failed_rows, winner_rows, S in credit.similar_pairs:
        similar = S > 0
        pairs += int(similar.sum())
        for name, advantages in (("before", before), ("after", after)):
            opposite_sign = np.sign(advantages[failed_rows])[:, None] * np.sign(advantages[winner_rows])[None, :] < 0
            opposite[name] += int(np.sum(similar & opposite_sign))
    return {
        "similar_pairs": float(pairs),
        **{f"conflict_rate_{name}": count / pairs if pairs else 0.0 for name, count in opposite.items()},
    }


def identical_text_conflict_rates(
    layout: BatchLayout, texts: list[str], before: np.ndarray, after: np.ndarray
) -> dict[str, float]:
    """Like :func:`conflict_rates` but over all pairs of rows of one group with *identical* step text
    (any trajectories, failed or not), so that conflicts SCPO may create between failed steps show too."""
    keys: dict[tuple[int, str], int] = {}
    cluster = np.fromiter(
        (keys.setdefault(k, len(keys)) for k in zip(layout.group.tolist(), texts)), dtype=np.int64, count=len(texts)
    )
    size = np.bincount(cluster, minlength=len(keys)).astype(np.float64)
    pairs = float(np.sum(size * (size - 1) / 2))
    result = {"identical_text_pairs": pairs}
    for name, advantages in (("before", before), ("after", after)):
        positive = np.bincount(cluster, weights=advantages > 0, minlength=len(keys))
        negative = np.bincount(cluster, weights=advantages < 0, minlength=len(keys))
        result[f"identical_text_conflict_rate_{name}"] = float(np.sum(positive * negative) / pairs) if pairs else 0.0
    return result


@register_algorithm(
    "scpo",
    "SCPO: GiGPO/GRPO plus positive credit for failed steps matching new progress of a successful sibling "
    "(arXiv:2606.25852)",
    SCPOConfig,
)
def compute_scpo(batch: StepBatch, config: SCPOConfig) -> tuple[np.ndarray, dict[str, float]]:
    """``A_t^i = A_base(i, t) + ρ·M[t, j]·G_j^{k*} / F_g`` (docs/spec/algorithms.md §4.2; Xu et al., arXiv:2606.25852),
    with the SCPO diagnostics (credited share, mean credit, mixed groups, conflict rates before/after)."""
    layout = batch_layout(batch.group_index, batch.traj_index, batch.step_index)
    texts = [str(t) for t in batch.step_text]
    parts = scpo_parts(batch, config, layout)
    return parts[0], scpo_diagnostics(layout, batch.success, texts, parts)


@dataclass
class SCPOGRPOConfig(SCPOConfig):
    """SCPO on GRPO: the same options with ``base="grpo"``."""

    base: Literal["gigpo", "grpo"] = option("grpo", "base estimator SCPO adds its credit to")


@register_algorithm(
    "scpo_grpo", "SCPO on a GRPO base (shorthand for scpo with base=grpo; arXiv:2606.25852)", SCPOGRPOConfig
)
def compute_scpo_grpo(batch: StepBatch, config: SCPOGRPOConfig) -> tuple[np.ndarray, dict[str, float]]:
    """SCPO with A_base = GRPO (docs/spec/algorithms.md §4.4 "base estimator"); see :func:`compute_scpo`."""
    return compute_scpo(batch, config)
