"""agentrl: reinforcement learning of LLM agents on long-horizon, multi-turn text tasks."""

__version__ = "0.1.0"
