"""Agents: turn observations into actions (scripted agents) or into prompts and model replies into env actions."""

from __future__ import annotations

from agentrl.agents.base import Agent
from agentrl.agents.scripted import ExpertAgent, RandomAgent

__all__ = ["Agent", "ExpertAgent", "RandomAgent"]
