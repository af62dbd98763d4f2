"""agentrl's SCPO, GiGPO and GRPO in SkyRL's ``AdvantageEstimatorRegistry`` (one row per trajectory).

    import agentrl.integrations.skyrl as agentrl_skyrl
    agentrl_skyrl.register({"scorer": "minilm"})   # then trainer.algorithm.advantage_estimator=scpo

SkyRL keeps a multi-turn episode as one row: model tokens (``loss_mask`` 1) alternate with observation tokens, and
a turn's reward sits on one of its tokens. The estimators split each row into turns (runs of ``loss_mask``), run
agentrl's estimator on the turns and give every token of a turn its turn's advantage. SkyRL's trainer passes token
rewards, ``response_mask`` and ``uids`` only; the per-turn fields come as keywords (:data:`KEYWORDS`), which a
trainer subclass adds with :func:`passing_step_kwargs` (docs/integrations.md). SkyRL's step-wise mode
(``generator.step_wise_trajectories``) hands the estimator only each trajectory's last step, so it cannot carry
per-step credit: use the default one-row-per-trajectory mode.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

try:  # skyrl >= 0.3 (the SkyRL monorepo package); skyrl-train <= 0.3.1 kept the same module at skyrl_train.utils
    from skyrl.backends.skyrl_train.utils import ppo_utils
except ImportError:  # pragma: no cover - depends on the installed SkyRL
    from skyrl_train.utils import ppo_utils
except Exception as error:  # noqa: BLE001  skyrl 0.3.0's skyrl/backends needs Python 3.12 (pydantic)
    raise ImportError(f"SkyRL's skyrl.backends does not import on Python {sys.version_info[0]}.{sys.version_info[1]} "
                      f"({type(error).__name__}); SkyRL runs on Python 3.12 (docs/integrations.md)") from None

from agentrl.algos.types import BatchError
from agentrl.integrations.steps import step_advantages, token_advantages, trajectory_columns, turns_from_mask

#: SkyRL estimator name → agentrl estimator ("grpo" is SkyRL's own).
NAMES = {"scpo": "scpo", "agentrl_gigpo": "gigpo", "agentrl_grpo": "grpo"}
#: Keyword arguments the estimators read, one entry per row: the model-token mask, the trajectory's outcome, and
#: per turn the "action -> next_obs" text and the anchor state.
KEYWORDS = ("loss_mask", "success", "step_texts", "anchors")


def _estimator(name: str, defaults: dict[str, Any]):
    def estimate(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                 loss_mask: torch.Tensor | None = None, success: Any = None, step_texts: list | None = None,
                 anchors: list | None = None, agentrl_options: dict | None = None,
                 **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        mask = response_mask if loss_mask is None else loss_mask
        step_ids = turns_from_mask(mask.detach().cpu().numpy())
        rewards = token_level_rewards.detach().cpu().double().numpy()
        if loss_mask is None and name != "agentrl_grpo":
            raise BatchError(f"{name} needs loss_mask (model tokens per turn) and the per-turn keywords "
                             f"{', '.join(KEYWORDS[1:])}: pass them with agentrl.integrations.skyrl.step_kwargs")
        columns, row, turn = trajectory_columns(np.asarray(index).astype(str), step_ids, rewards, success,
                                                step_texts, anchors)
        advantages = step_advantages(NAMES[name], columns, {**defaults, **(agentrl_options or {})})
        tokens = torch.as_tensor(token_advantages(step_ids, row, turn, advantages), dtype=torch.float32)
        tokens = tokens.to(response_mask.device) * response_mask
        return tokens, tokens

    estimate.__name__ = estimate.__qualname__ = f"compute_{name}_advantage"
    return estimate


def register(options: dict[str, Any] | None = None) -> None:
    """Register :data:`NAMES` in SkyRL's registry, with agentrl ``options`` (e.g. ``{"scorer": "minilm"}``) for scpo."""
    for name in NAMES:
        if name in ppo_utils.AdvantageEstimatorRegistry.list_available():
            ppo_utils.AdvantageEstimatorRegistry.unregister(name)
        defaults = dict(options or {}) if name == "scpo" else {}
        ppo_utils.AdvantageEstimatorRegistry.register(name, _estimator(name, defaults))


def step_kwargs(data: Any) -> dict[str, Any]:
    """The keywords of :data:`KEYWORDS` from a SkyRL ``TrainingInputBatch``: ``loss_mask`` from the batch, the rest
    from ``data.metadata`` where the generator put them (absent ones are left out)."""
    out: dict[str, Any] = {"loss_mask": data["loss_mask"]}
    for key in KEYWORDS[1:]:
        if key in data.metadata:
            out[key] = data.metadata[key]
    return out


@contextmanager
def passing_step_kwargs(data: Any) -> Iterator[None]:
    """Inside, SkyRL's ``ppo_utils.compute_advantages_and_returns`` (what its trainer calls) also gets
    :func:`step_kwargs` of ``data``. In a ``RayPPOTrainer`` subclass::

        def compute_advantages_and_returns(self, data):
            with passing_step_kwargs(data):
                return super().compute_advantages_and_returns(data)
    """
    original, extra = ppo_utils.compute_advantages_and_returns, step_kwargs(data)

    def with_steps(**kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return original(**kwargs, **extra)

    ppo_utils.compute_advantages_and_returns = with_steps
    try:
        yield
    finally:
        ppo_utils.compute_advantages_and_returns = original
