"""Credit assignment for group-based RL of LLM agents: GRPO, GiGPO and SCPO behind one registry.

Each algorithm is a pure function from grouped trajectories to one scalar advantage per step, with a
config dataclass whose defaults follow docs/algorithms.md. Two input forms give identical results:

    from agentrl.algos import get_algorithm, Step, Trajectory
    result = get_algorithm("gigpo").compute(trajectories)        # list[np.ndarray], one per trajectory
    result = get_algorithm("scpo").compute(trajectories, {"scorer": "lexical"})

    from agentrl.algos import scpo_advantages_flat               # flat NumPy arrays, no agentrl objects
    adv = scpo_advantages_flat(group, traj, step, reward, valid, success, step_text, anchor)
    adv, diagnostics = scpo_advantages_flat(..., scorer="lexical", credit_scale=0.5, return_diagnostics=True)

Every option and default lives in one config dataclass: :class:`GRPOConfig` and :class:`GiGPOConfig` share the
episode options of :class:`EpisodeConfig`, and :class:`SCPOConfig` extends :class:`GiGPOConfig`. The flat functions
take a ``config=`` and/or its fields as keywords.

New algorithms register with :func:`register_algorithm` or the entry-point group ``agentrl.algos``.
This package imports no model, trainer, agent or environment; the SCPO scorers load
sentence-transformers lazily, on first use.
"""

from agentrl.algos.config import AlgoConfig, option
from agentrl.algos.spec import (
    ALGORITHMS,
    AdvantageResult,
    AlgorithmSpec,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)
from agentrl.algos.types import Step, StepBatch, Trajectory, from_flat, step_text, to_flat

# Built-in algorithms register themselves on import.
from agentrl.algos.grpo import EpisodeConfig, GRPOConfig, grpo_advantages_flat  # noqa: E402  isort: skip
from agentrl.algos.gigpo import GiGPOConfig, gigpo_advantages_flat  # noqa: E402  isort: skip
from agentrl.algos.scpo import (  # noqa: E402  isort: skip
    SCPOConfig,
    scpo_advantages_flat,
    scpo_credit_flat,
)
from agentrl.algos.scorers import SCORERS, Scorer, get_scorer  # noqa: E402  isort: skip

__all__ = [
    "ALGORITHMS",
    "SCORERS",
    "AdvantageResult",
    "AlgoConfig",
    "AlgorithmSpec",
    "EpisodeConfig",
    "GRPOConfig",
    "GiGPOConfig",
    "SCPOConfig",
    "Scorer",
    "Step",
    "StepBatch",
    "Trajectory",
    "from_flat",
    "get_algorithm",
    "get_scorer",
    "gigpo_advantages_flat",
    "grpo_advantages_flat",
    "list_algorithms",
    "option",
    "register_algorithm",
    "scpo_advantages_flat",
    "scpo_credit_flat",
    "step_text",
    "to_flat",
]
