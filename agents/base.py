"""The two kinds of agent, by who drives them.

- A :class:`ScriptedAgent` decides by itself: observations and infos in, one action per episode out (``act``). The
  env's expert and the random agent are scripted; ``agentrl eval --agent`` and
  :func:`agentrl.evaluation.evaluate` play them in a plain Gymnasium loop.
- A :class:`PromptAgent` decides nothing: it writes each episode's prompt, lists the candidate actions, parses the
  model's reply into an env action and remembers the history. The rollout loop (:func:`agentrl.rollout.
  collect_rollouts`) drives it, with a policy answering the prompts; :class:`agentrl.agents.ReActAgent` is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ScriptedAgent(Protocol):
    """Plays an environment on its own: ``reset(n)`` starts ``n`` episodes, ``act`` returns one action string per
    active episode for their current observations and infos (same order)."""

    def reset(self, n: int) -> None: ...

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]: ...


#: The old name of :class:`ScriptedAgent`.
Agent = ScriptedAgent


@runtime_checkable
class PromptAgent(Protocol):
    """Turns episode ``index``'s state into a chat prompt and the model's reply into an env action."""

    def reset(self, n: int) -> None:
        """Start ``n`` episodes with empty histories."""

    def messages(self, index: int, observation: str, info: Mapping[str, Any]) -> list[dict[str, str]]:
        """The chat messages the policy answers for episode ``index`` now."""

    def candidates(self, info: Mapping[str, Any]) -> list[str]:
        """The replies a scoring policy chooses among (empty: the env lists no admissible actions)."""

    def parse(self, reply: str) -> Any:
        """The reply as an object with ``action`` (the env action string) and ``valid`` (well-formed or not)."""

    def record(self, index: int, observation: str, action: str) -> None:
        """Add the step just taken to episode ``index``'s history."""
