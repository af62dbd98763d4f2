"""GRPO for multi-turn agents, as verl-agent computes it (docs/algorithms.md "GRPO"; docs/spec/algorithms.md §2).

Paper form [GiGPO paper arXiv:2505.10978, Eq. 3 with F_norm = std]: for a group of N rollouts of one task,

    A(τ_i) = (R(τ_i) − mean_j R(τ_j)) / std_j R(τ_j),   broadcast to every step of τ_i.

Code form (default; verl-agent ``core_algos.py::compute_grpo_outcome_advantage`` with
``compute_mean_std_cross_steps=True``), one value per step row:

    x_{i,t} = R(τ_i) − p·invalid_{i,t}                       p = invalid_penalty   (docs/spec/algorithms.md §1.3)
    μ_g, σ_g over all rows of the group (long rollouts weigh more); σ unbiased; a one-row group: μ=0, σ=1
    A_{i,t} = (x_{i,t} − μ_g) / (σ_g + ε)     or   x_{i,t} − μ_g   when norm_by_std=False

``pool="trajectories"`` takes μ_g, σ_g over one value R(τ_i) per trajectory instead (paper pooling).

:class:`EpisodeConfig` holds the options of this episode-level advantage, which GiGPO (its A^E) and SCPO (its base)
share; :class:`GRPOConfig` adds GRPO's normalisation switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentrl.algos.common import (
    BatchLayout,
    advantage_summary,
    batch_layout,
    episode_returns,
    flat_reward_valid,
    invalid_step_frac,
    outcome_summary,
    segment_mean_std,
)
from agentrl.algos.config import AlgoConfig, option, require
from agentrl.algos.spec import register_algorithm
from agentrl.algos.types import StepBatch
from agentrl.errors import ConfigError


@dataclass
class EpisodeConfig(AlgoConfig):
    """Options of the episode-level advantage: GRPO's, GiGPO's A^E and SCPO's base. Defaults: verl-agent example
    scripts (docs/spec/algorithms.md §1.6, §2.1)."""

    pool: Literal["steps", "trajectories"] = option(
        "steps", "episode-level statistics over all step rows (verl-agent code) or one value per trajectory (paper)"
    )
    invalid_penalty: float = option(
        0.1, "subtracted from the score of each format-invalid step (GiGPO: and from its step return; docs/spec/algorithms.md §1.3)"
    )
    epsilon: float = option(1e-6, "added to the std before dividing")

    def check(self) -> None:
        require(self.invalid_penalty >= 0, "invalid_penalty must be >= 0")
        require(self.epsilon > 0, "epsilon must be > 0")


@dataclass
class GRPOConfig(EpisodeConfig):
    """GRPO: the episode options and the normalisation (docs/spec/algorithms.md §1.6, §2.1)."""

    norm_by_std: bool = option(True, "divide by the group std + epsilon (verl norm_adv_by_std_in_grpo); else mean only")


def episode_advantages(
    layout: BatchLayout, reward: np.ndarray, valid: np.ndarray, config: EpisodeConfig, *, use_std: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Episode-level advantage A^E per row and the group normaliser F_g per row (docs/spec/algorithms.md §2.1, §3.2).

    This is GRPO's advantage and GiGPO's A^E (arXiv:2505.10978 Eq. 3, verl-agent ``episode_norm_reward``):
    ``A^E = (x − μ_g) / F_g`` with ``x = R(τ) − p·invalid`` and ``F_g = σ_g + ε`` (``use_std``) or 1.
    """
    outcome = episode_returns(reward, layout)  # R(τ_k), shape (K,)
    score = outcome[layout.traj] - config.invalid_penalty * (~valid)  # x_{i,t}
    if config.pool == "steps":
        mean, std, count = segment_mean_std(score, layout.group, layout.n_groups, layout.order)
    elif config.pool == "trajectories":
        mean, std, count = segment_mean_std(outcome, layout.traj_group, layout.n_groups)
    else:
        raise ConfigError(f"pool must be 'steps' or 'trajectories', got {config.pool!r}")
    mean = np.where(count == 1, 0.0, mean)  # a group with a single value: μ = 0, σ = 1 (verl)
    std = np.where(count == 1, 1.0, std)
    normaliser = (std + config.epsilon) if use_std else np.ones_like(std)
    return (score - mean[layout.group]) / normaliser[layout.group], normaliser[layout.group]


def grpo_parts(
    layout: BatchLayout, reward: np.ndarray, valid: np.ndarray, config: GRPOConfig
) -> tuple[np.ndarray, dict[str, float]]:
    """GRPO advantages on a prepared layout, and the diagnostics that need no success flags."""
    advantages, _ = episode_advantages(layout, reward, valid, config, use_std=config.norm_by_std)
    return advantages, {**advantage_summary(advantages), "invalid_step_frac": invalid_step_frac(valid)}


def grpo_advantages_flat(
    group_index: np.ndarray,
    traj_index: np.ndarray,
    step_index: np.ndarray,
    reward: np.ndarray,
    valid: np.ndarray | None = None,
    *,
    config: GRPOConfig | None = None,
    return_diagnostics: bool = False,
    **options: Any,
) -> np.ndarray | tuple[np.ndarray, dict[str, float]]:
    """GRPO advantage per step row, from flat arrays (one entry per row, rows in any order).

    ``A_{i,t} = (R(τ_i) − p·invalid_{i,t} − μ_g) / (σ_g + ε)`` (arXiv:2505.10978 Eq. 3, verl-agent's code
    form; docs/algorithms.md "GRPO", docs/spec/algorithms.md §2.1). ``valid=None`` means every step is valid. Options come from ``config``
    (default: :class:`GRPOConfig`'s defaults) with keyword ``options`` (its fields: ``norm_by_std``, ``pool``,
    ``invalid_penalty``, ``epsilon``) applied. Returns a float64 array in row order, or with
    ``return_diagnostics=True`` ``(advantages, diagnostics)``: the registry's diagnostics except the outcome
    counts, which need success flags.
    """
    config = GRPOConfig.from_dict(options, config)
    layout = batch_layout(group_index, traj_index, step_index)
    advantages, diagnostics = grpo_parts(layout, *flat_reward_valid(reward, valid, layout), config)
    return (advantages, diagnostics) if return_diagnostics else advantages


@register_algorithm(
    "grpo",
    "GRPO: group-normalised episode return per step, verl-agent multi-turn form (arXiv:2402.03300, 2505.10978)",
    GRPOConfig,
)
def compute_grpo(batch: StepBatch, config: GRPOConfig) -> tuple[np.ndarray, dict[str, float]]:
    """``A_{i,t} = (R(τ_i) − p·invalid_{i,t} − μ_g) / (σ_g + ε)`` (docs/spec/algorithms.md §2.1; arXiv:2505.10978 Eq. 3)."""
    layout = batch_layout(batch.group_index, batch.traj_index, batch.step_index)
    advantages, diagnostics = grpo_parts(layout, batch.reward, batch.valid, config)
    return advantages, {**outcome_summary(layout, batch.success), **diagnostics}
