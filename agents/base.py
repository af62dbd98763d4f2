"""The agent interface: a batch of observations and infos in, one environment action per episode out."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Agent(Protocol):
    """Anything with ``act`` can play an environment in ``agentrl eval`` and the rollout loop.

    ``act`` receives the current observation and info of each active episode (same order) and returns one
    action string per episode. ``reset(n)`` starts ``n`` new episodes (agents with memory clear it here).
    """

    def reset(self, n: int) -> None: ...

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]: ...
