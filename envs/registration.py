"""Registering and making text environments.

Every agentrl environment lives in Gymnasium's own registry under the ``agentrl/`` namespace
(``gymnasium.make("agentrl/ALFWorld-v0")`` works) and also gets a short alias (``alfworld``) for the CLI.
:func:`make` accepts, in this order:

1. an alias (``alfworld``) or an agentrl id (``ALFWorld-v0`` / ``agentrl/ALFWorld-v0``);
2. a name from the ``agentrl.envs`` entry-point group of an installed third-party package
   (``[project.entry-points."agentrl.envs"] myenv = "mypkg.envs:MyEnv"``), registered on first use;
3. any Gymnasium id (``MyNamespace/MyEnv-v1``), or Gymnasium's ``package.module:MyEnv-v1`` (the module is imported
   first, so that it registers the id);
4. a ``package.module:ClassName`` path to an environment class.

An environment need not subclass :class:`~agentrl.envs.TextEnv`: a plain ``gymnasium.Env`` with string observations
and actions is wrapped in :class:`~agentrl.envs.plain.GymTextEnv`, which reads the ``info`` keys it provides and
documents the defaults for the rest.

An unknown name raises :class:`~agentrl.errors.UnknownNameError` naming the known envs and the closest match.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentrl.envs.core import TextEnv
from agentrl.envs.plain import ADAPTER_ARGS, GymTextEnv, is_text_env_class
from agentrl.errors import AgentRLError
from agentrl.registry import Registry

NAMESPACE = "agentrl"
ENTRY_POINT_GROUP = "agentrl.envs"


@dataclass(frozen=True)
class EnvEntry:
    """What ``agentrl envs`` shows about one registered environment."""

    alias: str
    gym_id: str
    entry_point: str | Callable[..., gym.Env]
    description: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Returns None when the env's data is found, else a one-line reason. None here: needs no data.
    data_check: Callable[[], str | None] | None = None

    def data_status(self) -> str | None:
        """None when the env can run now, else why not (for example, which data files are missing)."""
        if self.data_check is None:
            return None
        try:
            return self.data_check()
        except Exception as exc:  # a listing must never crash on one env
            return f"{type(exc).__name__}: {exc}"

    def build_problem(self) -> str | None:
        """None when the entry point imports and names an env class or factory, else why not (one line). Builds
        nothing: a plain Gymnasium class is wrapped when made, a factory is checked when called."""
        try:
            target = self.entry_point if callable(self.entry_point) else self.resolve_class()
        except AgentRLError as exc:
            return str(exc)
        if not callable(target):
            return f"{self.entry_point!r} is not a class or factory"
        return None

    def resolve_class(self) -> type | None:
        """The class the entry point names (importing its module), or None for a factory function."""
        ep = self.entry_point
        if isinstance(ep, str):
            module, _, attr = ep.partition(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise AgentRLError(f"cannot import {ep!r} for environment {self.alias!r}: {exc}") from exc
        return ep if isinstance(ep, type) else None


class _EnvRegistry(Registry[EnvEntry]):
    def _on_entry_point(self, name: str, obj: object) -> None:
        # An entry point names a TextEnv subclass (or any gymnasium.Env factory); register it under its alias.
        if isinstance(obj, EnvEntry):
            self.register(name, obj)
            return
        if not callable(obj):
            raise AgentRLError(f"entry point {name!r} of group {ENTRY_POINT_GROUP!r} must name an env class or factory")
        register(_id_from_alias(name), obj, alias=name, description=getattr(obj, "description", "") or "")


ENVS = _EnvRegistry("environment", ENTRY_POINT_GROUP)


def _id_from_alias(alias: str) -> str:
    return f"{alias}-v0" if not re.search(r"-v\d+$", alias) else alias


def _alias_from_id(env_id: str) -> str:
    return re.sub(r"-v\d+$", "", env_id.split("/")[-1]).lower()


def register(
    id: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    alias: str | None = None,
    description: str | None = None,
    data_check: Callable[[], str | None] | None = None,
    **kwargs: Any,
) -> EnvEntry:
    """Register a text environment with Gymnasium (as ``agentrl/<id>``) and agentrl (as ``alias``).

    Args:
        id: ``Name-vN`` (e.g. ``"ALFWorld-v0"``); the ``agentrl/`` namespace is added.
        entry_point: a ``"module:Class"`` string (imported lazily, as in Gymnasium) or a class / factory.
        alias: short name for the CLI; defaults to the lower-cased name without version (``alfworld``).
        description: one line for ``agentrl envs``; defaults to the class's ``description``.
        data_check: callable returning None when the env's data is present, else a one-line reason.
        **kwargs: default constructor arguments.
    """
    if "/" in id and not id.startswith(NAMESPACE + "/"):
        raise AgentRLError(f"agentrl env ids live in the {NAMESPACE!r} namespace; got {id!r}")
    gym_id = id if id.startswith(NAMESPACE + "/") else f"{NAMESPACE}/{id}"
    alias = alias or _alias_from_id(gym_id)
    entry = EnvEntry(
        alias=alias,
        gym_id=gym_id,
        entry_point=entry_point,
        description=description or "",
        kwargs=dict(kwargs),
        data_check=data_check,
    )
    previous = ENVS._items.get(alias)
    if previous is not None and previous.gym_id != gym_id:
        raise AgentRLError(f"alias {alias!r} is already used by {previous.gym_id}")
    # Gymnasium warns when an id is overridden; re-registering the same alias replaces it on purpose.
    gym.registry.pop(gym_id, None)
    gym.register(id=gym_id, entry_point=entry_point, kwargs=dict(kwargs), disable_env_checker=True)
    ENVS.register(alias, entry, overwrite=True)
    return entry


def resolve(name: str) -> EnvEntry:
    """Find the registry entry for an alias, an agentrl id, an entry-point name, a Gymnasium id or a class path."""
    if not isinstance(name, str) or not name.strip():
        raise AgentRLError("an environment name must be a non-empty string")
    name = name.strip()
    by_id = {e.gym_id: e for e in ENVS._items.values()}
    for key in (name, name.lower()):
        if key in ENVS._items:
            return ENVS._items[key]
    for key in (name, f"{NAMESPACE}/{name}"):
        if key in by_id:
            return by_id[key]
    ENVS.load_entry_points()
    if name in ENVS._items:
        return ENVS._items[name]
    if name in gym.registry:
        spec = gym.registry[name]
        return EnvEntry(alias=name, gym_id=name, entry_point=spec.entry_point, description="Gymnasium env")
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            raise AgentRLError(f"cannot import environment module {module!r} of {name!r}: {exc}") from exc
        if attr in gym.registry and not hasattr(imported, attr):  # Gymnasium's "module:EnvId"
            return EnvEntry(alias=name, gym_id=attr, entry_point=gym.registry[attr].entry_point,
                            description="Gymnasium env")
        cls = getattr(imported, attr, None)
        if cls is None:
            raise AgentRLError(f"cannot import environment class {name!r}: module {module!r} has no {attr!r} "
                               "(and imports no Gymnasium id of that name)")
        entry = register(f"{attr}-v0", cls, alias=name, description=getattr(cls, "description", "") or "")
        return entry
    raise ENVS.unknown(name, extra_known=[e.gym_id for e in ENVS._items.values()])


def make(name: str, **kwargs: Any) -> gym.Env:
    """Build an environment by any name :func:`resolve` accepts; ``kwargs`` override the registered defaults.

    Returns what ``gymnasium.make`` returns (wrapped); ``env.unwrapped`` is a :class:`TextEnv`: the env itself, or
    the :class:`~agentrl.envs.plain.GymTextEnv` around a plain Gymnasium env (which then gets the adapter's
    arguments, :data:`~agentrl.envs.plain.ADAPTER_ARGS`, and the env the others).
    """
    entry = resolve(name)
    target = entry.resolve_class()
    if target is not None and not is_text_env_class(target):
        adapter = {key: kwargs.pop(key) for key in ADAPTER_ARGS if key in kwargs}
        return GymTextEnv(gym.make(entry.gym_id, disable_env_checker=True, **kwargs), **adapter)
    env = gym.make(entry.gym_id, **kwargs)
    if not isinstance(env.unwrapped, TextEnv):  # a factory function that built a plain env
        return GymTextEnv(env)
    return env


def list_envs() -> list[EnvEntry]:
    """All registered environments, entry-point plugins included, sorted by alias."""
    return [entry for _, entry in ENVS.items()]
