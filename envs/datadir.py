"""Finding an environment's data on disk: an explicit path, else an environment variable, else a cache folder.

One rule for every env that needs files (ALFWorld games, the WebShop catalogue, generated TextWorld games), so
that a missing file always gives the same kind of error: where we looked and how to get the data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agentrl.errors import MissingDataError


def candidate_dirs(explicit: str | os.PathLike | None, env_var: str, default: str | os.PathLike) -> list[Path]:
    """The folders to look in, in priority order: ``explicit``, then ``$env_var``, then ``default``."""
    if explicit is not None:
        return [Path(explicit).expanduser()]
    found = [Path(os.environ[env_var]).expanduser()] if os.environ.get(env_var) else []
    return list(dict.fromkeys(found + [Path(default).expanduser()]))  # $VAR may name the default folder


def find_data_dir(
    explicit: str | os.PathLike | None,
    env_var: str,
    default: str | os.PathLike,
    is_complete: Callable[[Path], str | None],
    how_to_get: str,
    what: str,
) -> Path:
    """Return the first candidate folder for which ``is_complete(folder)`` returns None.

    ``is_complete`` returns None when the folder holds the data, else a short reason (such as the missing file
    names). When no folder qualifies, raise :class:`MissingDataError` listing every place looked and why it was
    rejected, followed by ``how_to_get``.
    """
    reasons = []
    for folder in candidate_dirs(explicit, env_var, default):
        problem = is_complete(folder) if folder.is_dir() else "no such folder"
        if problem is None:
            return folder
        reasons.append(f"{folder} ({problem})")
    source = "the path you gave" if explicit is not None else f"data_dir, ${env_var} and {default}"
    raise MissingDataError(f"{what} not found; looked in {source}: {'; '.join(reasons)}. {how_to_get}")
