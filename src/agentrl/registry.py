"""A small name registry shared by environments, algorithms and scorers.

One way to register things: ``Registry.register(name, obj)`` from code, or a Python entry point in the
registry's group (``[project.entry-points."agentrl.algos"]`` in a third-party ``pyproject.toml``), loaded
lazily the first time a name is looked up or the registry is listed. Unknown names raise
:class:`~agentrl.errors.UnknownNameError` listing the known names and the closest match.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from agentrl.errors import AgentRLError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; ``kind`` ("environment", "algorithm", ...) only shapes error messages."""

    def __init__(self, kind: str, entry_point_group: str | None = None):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, T] = {}
        self._entry_points_loaded = False

    def register(self, name: str, obj: T, *, overwrite: bool = False) -> T:
        if not name or not isinstance(name, str):
            raise AgentRLError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._items and not overwrite and self._items[name] is not obj:
            raise AgentRLError(f"{self.kind} {name!r} is already registered; pass overwrite=True to replace it")
        self._items[name] = obj
        return obj

    def load_entry_points(self) -> None:
        """Import third-party plugins of this registry's entry-point group (once)."""
        if self._entry_points_loaded or self.entry_point_group is None:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._items:
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not hide the others
                raise AgentRLError(
                    f"could not load {self.kind} {ep.name!r} from entry point {ep.value!r} "
                    f"(group {self.entry_point_group!r}): {type(exc).__name__}: {exc}"
                ) from exc
            self._on_entry_point(ep.name, obj)

    def _on_entry_point(self, name: str, obj: object) -> None:
        """Hook for registries whose entry points need more than a plain ``register``."""
        self.register(name, obj)  # type: ignore[arg-type]

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        self.load_entry_points()
        if name in self._items:
            return self._items[name]
        raise self.unknown(name)

    def unknown(self, name: str, extra_known: list[str] | None = None) -> UnknownNameError:
        known = sorted(set(self._items) | set(extra_known or []))
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return UnknownNameError(
            f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(known) if known else '(none)'}."
        )

    def names(self) -> list[str]:
        self.load_entry_points()
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._items[n]) for n in self.names()]

    def __contains__(self, name: object) -> bool:
        self.load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
