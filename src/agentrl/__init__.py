"""agentrl: reinforcement learning of LLM agents on long-horizon, multi-turn text tasks.

>>> import agentrl
>>> result = agentrl.train(env="crafting", algo="scpo", model="tiny-random", run={"iterations": 2})

``agentrl.envs`` (environments), ``agentrl.agents`` (agents) and ``agentrl.algos`` (credit assignment) are the
building blocks; ``train`` and ``evaluate_model`` run the whole pipeline. The heavy parts (torch, transformers) are
imported on first use, so ``import agentrl.envs`` stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "train": "agentrl.trainer",
    "Trainer": "agentrl.trainer",
    "TrainResult": "agentrl.trainer",
    "evaluate_model": "agentrl.evaluation",
    "TrainConfig": "agentrl.config",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentrl' has no attribute {name!r}")
