"""Scripted agents that need no model: the env's expert, and uniform random admissible actions.

They validate a whole pipeline (an expert should reach ~100% success) and give the floor a policy must beat.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.errors import AgentRLError


class ExpertAgent:
    """Plays ``info["expert_action"]``: the env's walkthrough, planner or solver.

    The env must be built with ``expert=True`` (``agentrl eval --agent expert`` does this).
    """

    name = "expert"
    needs_expert_env = True

    def reset(self, n: int) -> None:
        pass

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        actions = []
        for info in infos:
            if "expert_action" not in info:
                raise AgentRLError("the expert agent needs an env built with expert=True (no info['expert_action'])")
            # An env with no expert move left (or none at all) gets a harmless no-op.
            actions.append(info["expert_action"] or "look")
        return actions


class RandomAgent:
    """Picks a uniformly random admissible action (``look`` when the env lists none)."""

    name = "random"
    needs_expert_env = False

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)

    def reset(self, n: int) -> None:
        pass

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        out = []
        for info in infos:
            actions = info.get("admissible_actions") or ["look"]
            out.append(actions[int(self.rng.integers(len(actions)))])
        return out
