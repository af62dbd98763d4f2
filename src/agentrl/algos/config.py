"""Config dataclasses for the algorithms: one ``option(default, help)`` per field, validated on creation.

Every algorithm's config subclasses :class:`AlgoConfig`. Field types drive validation (``Literal`` choices,
numbers, booleans, optional values) and :meth:`AlgoConfig.options` describes each field for
``agentrl algos``. :meth:`AlgoConfig.from_dict` builds a config from overrides, accepting strings as a
command line gives them ("0.5", "true", "none").
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from agentrl.errors import ConfigError


def option(default: Any, help: str) -> Any:
    """A config field with a default and a one-line help text (shown by ``agentrl algos``)."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class AlgoConfig:
    """Base class: checks every field against its annotation, then calls :meth:`check`."""

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _matches(value, hints[f.name]):
                raise ConfigError(
                    f"{type(self).__name__}.{f.name} = {value!r} is not a valid {_type_name(hints[f.name])}"
                )
        self.check()

    def check(self) -> None:
        """Range checks of a subclass; raise :class:`~agentrl.errors.ConfigError`."""

    @classmethod
    def options(cls) -> list[tuple[str, str, object, str]]:
        """(name, type, default, help) of every option, in declaration order."""
        hints = _type_hints(cls)
        return [(f.name, _type_name(hints[f.name]), f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, overrides: dict[str, Any] | None = None, base: AlgoConfig | None = None) -> AlgoConfig:
        """A config with ``overrides`` applied to ``base`` (default: the defaults); unknown names and bad values
        raise ConfigError. The flat functions take their options this way (a config and/or keywords)."""
        overrides = dict(overrides or {})
        target, values = cls, {}
        if base is not None:
            if not isinstance(base, cls):
                raise ConfigError(f"expected a {cls.__name__}, got {type(base).__name__}")
            if not overrides:
                return base
            target, values = type(base), {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        hints = _type_hints(target)
        unknown = sorted(set(overrides) - set(hints))
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(target))
            raise ConfigError(f"unknown option(s) {', '.join(unknown)} for {target.__name__}; known: {known}")
        return target(**{**values, **{k: _coerce(v, hints[k]) for k, v in overrides.items()}})

    def replace(self, **changes: Any) -> AlgoConfig:
        return dataclasses.replace(self, **changes)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a config class (computed once per class: configs are built per call)."""
    return typing.get_type_hints(cls)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _union_args(tp: Any) -> tuple | None:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return None


def _matches(value: Any, tp: Any) -> bool:
    union = _union_args(tp)
    if union is not None:
        return any(_matches(value, t) for t in union)
    if tp is type(None):
        return value is None
    if get_origin(tp) is Literal:
        return value in get_args(tp)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return True


def _type_name(tp: Any) -> str:
    union = _union_args(tp)
    if union is not None:
        return "|".join(_type_name(t) for t in union)
    if tp is type(None):
        return "None"
    if get_origin(tp) is Literal:
        return "|".join(str(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any) -> Any:
    """Turn a command-line string into the field's type; other values pass through unchanged."""
    if not isinstance(value, str):
        return value
    candidates = _union_args(tp) or (tp,)
    if type(None) in candidates and value.strip().lower() in ("none", "null", ""):
        return None
    for t in candidates:
        if t is str or (get_origin(t) is Literal and value in get_args(t)):
            return value
        if t is bool and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        try:
            if t is int:
                return int(value)
            if t is float:
                return float(value)
        except ValueError:
            continue
    return value  # let validation report it
