"""The algorithm registry: :class:`AlgorithmSpec`, :func:`register_algorithm` and the lookups.

An algorithm is a pure function ``fn(batch: StepBatch, config) -> (advantages, diagnostics)`` that maps a
flat batch to one float advantage per row (in row order) plus a dict of floats for logging, together
with a config dataclass (a subclass of :class:`~agentrl.algos.config.AlgoConfig`). Register one with::

    @register_algorithm("my_algo", "one-line description", MyConfig)
    def compute_my_algo(batch, config): ...

Third-party packages can also publish an :class:`AlgorithmSpec` (or a function decorated as above) under
the entry-point group ``agentrl.algos``; it is loaded the first time a name is looked up or listed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl.algos.config import AlgoConfig
from agentrl.algos.types import DEFAULT_STEP_TEXT_FORMAT, StepBatch, Trajectory, to_flat
from agentrl.errors import AgentRLError, ConfigError
from agentrl.registry import Registry

AlgorithmFn = Callable[[StepBatch, Any], "tuple[np.ndarray, dict[str, float]]"]


@dataclass
class AdvantageResult:
    """One float array per trajectory (one value per step, input order) and scalar diagnostics."""

    advantages: list[np.ndarray]
    diagnostics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered credit-assignment algorithm."""

    name: str
    description: str  # one line
    config_cls: type[AlgoConfig]
    fn: AlgorithmFn

    def make_config(self, config: AlgoConfig | dict[str, Any] | None = None) -> AlgoConfig:
        """``None`` → defaults; a dict → defaults with overrides; a config instance → itself."""
        if config is None or isinstance(config, dict):
            try:
                return self.config_cls.from_dict(config)
            except ConfigError:
                raise
            except (ValueError, TypeError, AssertionError) as exc:  # a plug-in's check() raising its own error
                raise ConfigError(f"invalid options for algorithm {self.name!r}: {exc}") from exc
        if not isinstance(config, self.config_cls):
            raise ConfigError(
                f"algorithm {self.name!r} takes a {self.config_cls.__name__}, got {type(config).__name__}"
            )
        return config

    def compute(
        self, trajectories: Sequence[Trajectory], config: AlgoConfig | dict[str, Any] | None = None
    ) -> AdvantageResult:
        """Advantages for framework-free dataclasses, one array per trajectory in input order."""
        config = self.make_config(config)
        batch = to_flat(trajectories, getattr(config, "step_text", DEFAULT_STEP_TEXT_FORMAT))
        advantages, diagnostics = self.compute_flat(batch, config)
        lengths = [len(tr.steps) for tr in trajectories]
        return AdvantageResult(np.split(advantages, np.cumsum(lengths)[:-1]) if lengths else [], diagnostics)

    def compute_flat(
        self, batch: StepBatch, config: AlgoConfig | dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, float]]:
        """Advantages for a flat batch: a float64 array in row order, and the diagnostics."""
        config = self.make_config(config)
        advantages, diagnostics = self.fn(batch, config)
        advantages = np.asarray(advantages, dtype=np.float64)
        if advantages.shape != (len(batch),):
            raise AgentRLError(
                f"algorithm {self.name!r} returned {advantages.shape} advantages for a batch of {len(batch)} rows"
            )
        return advantages, {k: float(v) for k, v in diagnostics.items()}

    def options(self) -> list[tuple[str, str, object, str]]:
        """(name, type, default, one-line help) for each config option, for ``agentrl algos``."""
        return self.config_cls.options()


class AlgorithmRegistry(Registry[AlgorithmSpec]):
    """A :class:`~agentrl.registry.Registry` whose entry points may name a spec or a registered function."""

    def _on_entry_point(self, name: str, obj: object) -> None:
        spec = obj if isinstance(obj, AlgorithmSpec) else getattr(obj, "spec", None)
        if isinstance(spec, AlgorithmSpec):
            self.register(name, spec if spec.name == name else dataclasses.replace(spec, name=name))
        elif name not in self._items:  # a module that registered itself on import is fine
            raise AgentRLError(
                f"entry point {name!r} of group {self.entry_point_group!r} must name an AlgorithmSpec or a "
                f"function decorated with @register_algorithm, got {type(obj).__name__}"
            )


ALGORITHMS: AlgorithmRegistry = AlgorithmRegistry("algorithm", "agentrl.algos")


def register_algorithm(
    name: str, description: str, config_cls: type[AlgoConfig]
) -> Callable[[AlgorithmFn], AlgorithmFn]:
    """Decorator: register ``fn(batch, config) -> (advantages, diagnostics)`` under ``name``.

    The function is returned unchanged, with its :class:`AlgorithmSpec` attached as ``fn.spec``.
    """
    if not (isinstance(config_cls, type) and issubclass(config_cls, AlgoConfig)):
        raise AgentRLError(f"config_cls of algorithm {name!r} must subclass agentrl.algos.AlgoConfig")
    if "\n" in description:
        raise AgentRLError(f"the description of algorithm {name!r} must be one line")

    def decorate(fn: AlgorithmFn) -> AlgorithmFn:
        spec = AlgorithmSpec(name=name, description=description, config_cls=config_cls, fn=fn)
        ALGORITHMS.register(name, spec)
        fn.spec = spec  # type: ignore[attr-defined]
        return fn

    return decorate


def get_algorithm(name: str) -> AlgorithmSpec:
    """The spec registered as ``name``, or named by ``module:function`` (a function decorated with
    :func:`register_algorithm`, or an :class:`AlgorithmSpec`); unknown names raise UnknownNameError listing the
    known ones."""
    if ":" in name and name not in ALGORITHMS:
        import importlib

        module, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise AgentRLError(f"cannot import algorithm {name!r}: {exc}") from exc
        spec = obj if isinstance(obj, AlgorithmSpec) else getattr(obj, "spec", None)
        if not isinstance(spec, AlgorithmSpec):
            raise AgentRLError(f"{name!r} must name an AlgorithmSpec or a function decorated with "
                               "@agentrl.algos.register_algorithm")
        return spec
    return ALGORITHMS.get(name)


def list_algorithms() -> list[AlgorithmSpec]:
    """All registered algorithms (built-in and entry points), sorted by name."""
    return [spec for _, spec in ALGORITHMS.items()]
