"""GiGPO: Group-in-Group Policy Optimization (Feng et al., arXiv:2505.10978; docs/algorithms.md "GiGPO"; docs/spec/algorithms.md §3).

Two levels of relative advantage, composed like verl-agent ``gigpo/core_gigpo.py``:

    A^E(τ_i)     = (R(τ_i) − mean_g) / F_norm                        episode level, Eq. 3 (= GRPO, docs/spec/algorithms.md §2)
    G^S(s̃)       = {(a_t^(i), R_t^(i)) : anchor(s_t^(i)) = s̃}         anchor-state groups, Eq. 6
    R_t^(i)      = Σ_{k≥t} γ^{k−t} r_k^(i)  (− p if step t invalid)     discounted step return, Eq. 5
    A^S(a_t^(i)) = (R_t^(i) − mean G^S(s̃)) / F_norm(G^S(s̃))          step level, Eq. 7
    A            = A^E + ω·A^S                                        Eq. 8

``mode="mean_norm"``: F_norm = 1 at both levels; ``"mean_std_norm"``: F_norm = std + ε at both levels. A
singleton anchor group has A^S = 0. Anchor groups live inside one rollout group and are keyed by exact
equality of the anchor (the raw observation by default), or, with ``anchor_match="similarity"``, by greedy
first-fit on ``difflib.SequenceMatcher.ratio() ≥ anchor_similarity_threshold`` against each cluster's
first member (docs/spec/algorithms.md §3.2). If no anchor repeats, A^S ≡ 0 and GiGPO equals GRPO.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentrl.algos.common import (
    BatchLayout,
    advantage_summary,
    batch_layout,
    discounted_returns,
    flat_reward_valid,
    invalid_step_frac,
    outcome_summary,
    segment_mean_std,
)
from agentrl.algos.config import option, require
from agentrl.algos.grpo import EpisodeConfig, episode_advantages
from agentrl.algos.spec import register_algorithm
from agentrl.algos.types import StepBatch, as_object_array
from agentrl.errors import ConfigError


@dataclass
class GiGPOConfig(EpisodeConfig):
    """GRPO's episode options (A^E) plus the step level. Defaults: verl-agent ``algorithm.gigpo`` and the example
    scripts (docs/spec/algorithms.md §1.6, §3.2)."""

    gamma: float = option(0.95, "discount γ of the step return R_t (Eq. 5)")
    step_weight: float = option(1.0, "weight ω of the step-level advantage A^S (Eq. 8)")
    mode: Literal["mean_norm", "mean_std_norm"] = option(
        "mean_norm", "F_norm = 1 (mean_norm, code default) or std + ε (mean_std_norm) at both levels"
    )
    anchor_match: Literal["exact", "similarity"] = option(
        "exact", "anchor groups by exact anchor equality or by difflib similarity to a cluster's first member"
    )
    anchor_similarity_threshold: float = option(0.95, "difflib ratio for anchor_match=similarity, in (0, 1)")

    def check(self) -> None:
        require(0.0 <= self.gamma <= 1.0, "gamma must be in [0, 1]")
        require(0.0 < self.anchor_similarity_threshold < 1.0, "anchor_similarity_threshold must be in (0, 1)")
        super().check()


def step_returns(
    layout: BatchLayout, reward: np.ndarray, valid: np.ndarray, *, gamma: float, invalid_penalty: float
) -> np.ndarray:
    """Discounted step return R_t (Eq. 5), minus the invalid penalty on the invalid step itself.

    As in verl-agent (``compute_step_discounted_returns`` then ``apply_invalid_action_penalty``), the
    penalty is applied after discounting and is not propagated to earlier steps.
    """
    return discounted_returns(reward, layout, gamma) - invalid_penalty * (~valid)


def build_anchor_groups(
    layout: BatchLayout, anchor: np.ndarray, *, match: str, similarity_threshold: float
) -> np.ndarray:
    """Anchor-state group id per row (Eq. 6), groups never crossing rollout groups.

    ``exact``: rows of one rollout group with equal anchor keys share a group (a hash table, as in the code).
    ``similarity``: greedy first-fit, each row joining the first cluster of its rollout group whose first
    member has ``SequenceMatcher(None, anchor, first).ratio() >= similarity_threshold`` (verl-agent
    ``enable_similarity``). Rows are visited in (group, trajectory, step) order, not batch order, so the
    result does not depend on how the batch is shuffled.
    """
    if match == "exact":
        ids: dict[tuple[int, Hashable], int] = {}
        return np.fromiter(
            (ids.setdefault(key, len(ids)) for key in zip(layout.group.tolist(), anchor.tolist())),
            dtype=np.int64,
            count=len(anchor),
        )
    if match != "similarity":
        raise ConfigError(f"anchor_match must be 'exact' or 'similarity', got {match!r}")
    cluster = np.empty(len(anchor), np.int64)
    n_clusters = 0
    for g in range(layout.n_groups):
        group_rows = layout.traj_rows[layout.traj_group == g].ravel()
        representatives: list[tuple[difflib.SequenceMatcher, int]] = []  # matcher with seq2 = first member
        seen: dict[str, int] = {}  # exact repeats of a member always land in that member's cluster
        for row in group_rows[group_rows >= 0].tolist():
            text = str(anchor[row])
            cid = seen.get(text)
            if cid is None:
                cid = _first_similar(representatives, text, similarity_threshold)
                if cid is None:
                    cid = n_clusters
                    n_clusters += 1
                    representatives.append((difflib.SequenceMatcher(None, text, text, autojunk=True), cid))
                seen[text] = cid
            cluster[row] = cid
    return cluster


def _first_similar(
    representatives: list[tuple[difflib.SequenceMatcher, int]], text: str, threshold: float
) -> int | None:
    """The first cluster whose first member has a difflib ratio ≥ ``threshold`` with ``text`` (cheap bounds first)."""
    for matcher, cid in representatives:
        matcher.set_seq1(text)
        if (
            matcher.real_quick_ratio() >= threshold
            and matcher.quick_ratio() >= threshold
            and matcher.ratio() >= threshold
        ):
            return cid
    return None


def step_advantages(
    returns: np.ndarray, anchor_group: np.ndarray, *, use_std: bool, epsilon: float, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A^S = (R_t − mean G^S) / F_norm(G^S) per row (Eq. 7, verl-agent ``step_norm_reward``).

    A singleton anchor group has mean = its own return and std = 1, so A^S = 0. Also returns each row's
    anchor-group size.
    """
    n_groups = int(anchor_group.max()) + 1 if len(anchor_group) else 0
    mean, std, count = segment_mean_std(returns, anchor_group, n_groups, order)
    std = np.where(count == 1, 1.0, std)
    deviation = returns - mean[anchor_group]
    advantage = deviation / (std[anchor_group] + epsilon) if use_std else deviation
    return advantage, count[anchor_group]


def gigpo_parts(
    layout: BatchLayout,
    reward: np.ndarray,
    valid: np.ndarray,
    anchor: np.ndarray,
    config: GiGPOConfig,
    extra_return: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """GiGPO advantages (Eqs. 3–8) with their per-row parts: ``episode_advantage``, ``step_advantage``,
    ``normaliser``, ``anchor_group``, ``anchor_group_size``. SCPO's shaped-return variant passes
    ``extra_return``, added to R_t before the step-level statistics."""
    if config.mode not in ("mean_norm", "mean_std_norm"):
        raise ConfigError(f"mode must be 'mean_norm' or 'mean_std_norm', got {config.mode!r}")
    if len(anchor) != len(reward):
        raise ConfigError(f"anchor has {len(anchor)} rows, reward has {len(reward)}")
    use_std = config.mode == "mean_std_norm"
    episode_adv, normaliser = episode_advantages(layout, reward, valid, config, use_std=use_std)  # Eq. 3
    returns = step_returns(layout, reward, valid, gamma=config.gamma, invalid_penalty=config.invalid_penalty)  # Eq. 5
    if extra_return is not None:
        returns = returns + extra_return
    anchor_group = build_anchor_groups(  # Eq. 6
        layout, anchor, match=config.anchor_match, similarity_threshold=config.anchor_similarity_threshold
    )
    step_adv, anchor_group_size = step_advantages(  # Eq. 7
        returns, anchor_group, use_std=use_std, epsilon=config.epsilon, order=layout.order
    )
    advantages = episode_adv + config.step_weight * step_adv  # Eq. 8
    parts = {
        "episode_advantage": episode_adv,
        "step_advantage": step_adv,
        "normaliser": normaliser,
        "anchor_group": anchor_group,
        "anchor_group_size": anchor_group_size,
    }
    return advantages, parts


#: |advantage| at or below this counts as zero in the diagnostics.
NONZERO_TOLERANCE = 1e-9


def anchor_summary(parts: dict[str, np.ndarray]) -> dict[str, float]:
    """Step-group statistics the GiGPO paper tracks (share of size-1 groups, sizes)."""
    sizes = np.bincount(parts["anchor_group"]) if len(parts["anchor_group"]) else np.zeros(0, np.int64)
    sizes = sizes[sizes > 0]
    if len(sizes) == 0:
        return {"anchor_groups": 0.0, "anchor_singleton_frac": 0.0, "anchor_group_size_mean": 0.0,
                "step_adv_nonzero_frac": 0.0}
    return {
        "anchor_groups": float(len(sizes)),
        "anchor_singleton_frac": float(np.mean(sizes == 1)),
        "anchor_group_size_mean": float(np.mean(sizes)),
        # Identical returns normalised within a step group differ by float rounding (~1e-16), not by credit.
        "step_adv_nonzero_frac": float(np.mean(np.abs(parts["step_advantage"]) > NONZERO_TOLERANCE)),
    }


def _gigpo_with_diagnostics(
    layout: BatchLayout, reward: np.ndarray, valid: np.ndarray, anchor: np.ndarray, config: GiGPOConfig
) -> tuple[np.ndarray, dict[str, float]]:
    """GiGPO advantages and the diagnostics that need no success flags."""
    advantages, parts = gigpo_parts(layout, reward, valid, anchor, config)
    return advantages, {
        **advantage_summary(advantages),
        **anchor_summary(parts),
        "invalid_step_frac": invalid_step_frac(valid),
    }


def gigpo_advantages_flat(
    group_index: np.ndarray,
    traj_index: np.ndarray,
    step_index: np.ndarray,
    reward: np.ndarray,
    valid: np.ndarray | None,
    anchor: np.ndarray,
    *,
    config: GiGPOConfig | None = None,
    return_diagnostics: bool = False,
    **options: Any,
) -> np.ndarray | tuple[np.ndarray, dict[str, float]]:
    """GiGPO advantage per step row, from flat arrays (rows in any order): ``A = A^E + ω·A^S``
    (arXiv:2505.10978 Eqs. 3–8; docs/algorithms.md "GiGPO", docs/spec/algorithms.md §3).

    ``anchor`` holds a hashable anchor-state key per row (verl-agent: the raw observation before acting;
    strings for ``anchor_match="similarity"``); ``valid=None`` means every step is valid. Options come from
    ``config`` (default: :class:`GiGPOConfig`'s defaults) with keyword ``options`` (its fields) applied. Returns a
    float64 array in row order, or with ``return_diagnostics=True`` ``(advantages, diagnostics)``: the registry's
    diagnostics except the outcome counts, which need success flags.
    """
    config = GiGPOConfig.from_dict(options, config)
    layout = batch_layout(group_index, traj_index, step_index)
    reward, valid = flat_reward_valid(reward, valid, layout)
    advantages, diagnostics = _gigpo_with_diagnostics(layout, reward, valid, as_object_array(anchor), config)
    return (advantages, diagnostics) if return_diagnostics else advantages


@register_algorithm(
    "gigpo",
    "GiGPO: episode-level GRPO advantage plus step-level advantage within anchor-state groups (arXiv:2505.10978)",
    GiGPOConfig,
)
def compute_gigpo(batch: StepBatch, config: GiGPOConfig) -> tuple[np.ndarray, dict[str, float]]:
    """``A = A^E + ω·A^S`` (docs/spec/algorithms.md §3; arXiv:2505.10978 Eqs. 3–8), with step-group diagnostics."""
    layout = batch_layout(batch.group_index, batch.traj_index, batch.step_index)
    advantages, diagnostics = _gigpo_with_diagnostics(layout, batch.reward, batch.valid, batch.anchor, config)
    return advantages, {**outcome_summary(layout, batch.success), **diagnostics}
