"""Agents: turn observations into prompts and model replies into environment actions."""
