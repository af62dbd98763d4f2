"""Errors a user can act on.

Every error that comes from bad input (an unknown name, a missing data file, a malformed config) is an
:class:`AgentRLError`. The CLI prints its message as one line and exits with code 2; library callers can
catch it. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class AgentRLError(Exception):
    """Base class for errors caused by the user's input or environment, with an actionable message."""


class UnknownNameError(AgentRLError, KeyError):
    """A name (env, algorithm, scorer, model, ...) that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingDataError(AgentRLError, FileNotFoundError):
    """Data files (games, catalogues, model weights) that are not where we looked."""


class ConfigError(AgentRLError, ValueError):
    """An invalid configuration value or file."""
