"""Agents: turn observations into actions (scripted agents) or into prompts and model replies into env actions."""

from __future__ import annotations

from agentrl.agents.base import Agent, PromptAgent, ScriptedAgent
from agentrl.agents.scripted import ExpertAgent, RandomAgent

__all__ = ["Agent", "ExpertAgent", "PromptAgent", "RandomAgent", "ScriptedAgent"]

from agentrl.agents.prompts import PROMPT_FAMILIES, PromptFamily, WebShopFamily  # noqa: E402
from agentrl.agents.react import ParsedReply, ReActAgent, parse_reply  # noqa: E402

__all__ += ["PROMPT_FAMILIES", "ParsedReply", "PromptFamily", "ReActAgent", "WebShopFamily", "parse_reply"]
