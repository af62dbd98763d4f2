"""Environment slots on Ray actors: :class:`~agentrl.envpool.EnvPool`'s interface across the nodes of a Ray cluster.

Chosen by the trainer when ``run.ray_address`` is set (``agentrl train --ray-address auto``). Each of
``rollout.workers`` actors holds the envs of its slots exactly as an EnvPool worker process does (the same
:class:`~agentrl.envpool._Slots` code, the same slot-to-worker assignment: a group's slots share an actor), so a
rollout with a fixed seed gives the same trajectories as with :class:`EnvPool` (tested). Actors are spread over
the cluster's nodes (``SPREAD``), and every ``reset``/``step`` batch is sent to all actors before any reply is
awaited, so env stepping scales with the nodes; ``step_async`` returns before the replies, as EnvPool's does.

Faults cost only the affected episodes, as in :class:`EnvPool`: an env that raises returns an
:class:`~agentrl.envpool.EnvFailure` for its slot; an actor that dies (killed, node lost, segfault) is replaced by
a fresh one, every slot it held fails with an EnvFailure (the rollout drops and counts those trajectories), and
:attr:`RayEnvPool.restarts` counts the replacements.

Requirements: ``pip install 'agentrl[ray]'`` on the driver and on every node, and the env's module importable on
every node (an installed package; a module on the driver's ``sys.path`` alone is not shipped).
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agentrl.envpool import EnvFailure, PendingReplies, SlotPool, _Slots
from agentrl.errors import ConfigError

__all__ = ["RayEnvPool", "connect", "shutdown_if_started"]

RAY_INSTALL_HINT = "install the Ray extra: `pip install 'agentrl[ray]'` (on the driver and on every node)"

#: Env workers limit BLAS/OpenMP to one thread, as EnvPool's processes do (CPU threading trap: src/agentrl/hardware.py).
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "TOKENIZERS_PARALLELISM": "false"}

_started_here = False


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--ray-address needs the ray package, which is not installed: {RAY_INSTALL_HINT}") from exc
    return ray


def connect(address: str) -> Any:
    """Connect this process to Ray once and return the ``ray`` module.

    ``address``: ``"auto"`` joins the cluster running on this machine (``ray start --head`` / ``ray start
    --address``); ``"local"`` starts a private single-machine instance that ends with this process; anything else
    (``"10.0.0.5:6379"``, ``"ray://head:10001"``) is passed to ``ray.init(address=...)``. Already connected: a no-op.
    """
    global _started_here
    ray = _ray()
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"include_dashboard": False, "configure_logging": False}
    if address == "local":
        ray.init(**kwargs)
        _started_here = True
    else:
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            raise ConfigError(f"cannot join the Ray cluster at {address!r} ({exc}); start one with `ray start --head` "
                              "or pass --ray-address local for a private instance") from exc
    return ray


def shutdown_if_started() -> None:
    """End the private instance :func:`connect` started for ``"local"`` (a joined cluster is left alone)."""
    global _started_here
    if _started_here:
        _ray().shutdown()
        _started_here = False


class _EnvActor:
    """The Ray actor: one :class:`_Slots` (made into a remote class by :class:`RayEnvPool`)."""

    def __init__(self, env_name: str, env_kwargs: dict[str, Any]):
        self.slots = _Slots(env_name, env_kwargs)

    def run(self, commands: list[tuple[int, str, Any]]) -> list[Any]:
        return self.slots.run(commands)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.slots.close()


class RayEnvPool(SlotPool):
    """Run the envs of many slots in ``workers`` Ray actors; the interface of :class:`~agentrl.envpool.EnvPool`.

    Args:
        env_name: anything :func:`agentrl.envs.make` accepts (importable on every node).
        env_kwargs: constructor arguments, identical for every slot.
        workers: number of actors (at least 1).
        slots_per_group: slots ``g*G … g*G+G-1`` share an actor (G = group size).
        num_cpus: CPUs Ray reserves for each actor.
    """

    def __init__(self, env_name: str, env_kwargs: dict[str, Any] | None = None, workers: int = 1,
                 slots_per_group: int = 1, num_cpus: float = 1.0):
        ray = _ray()
        if not ray.is_initialized():
            raise ConfigError("RayEnvPool needs a Ray connection: call agentrl.raypool.connect(address) first")
        if workers < 1:
            raise ConfigError(f"a Ray env pool needs at least 1 worker, got {workers}")
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self.workers = workers
        self.slots_per_group = max(1, slots_per_group)
        self.restarts = 0
        self._ray = ray
        self._actor_class = ray.remote(_EnvActor).options(
            num_cpus=num_cpus, max_restarts=0, scheduling_strategy="SPREAD",
            runtime_env={"env_vars": dict(_WORKER_ENV)})
        self._actors: list[Any] = [self._new_actor() for _ in range(workers)]
        self._incarnation = [0] * workers  # bumped by each replacement
        self._died: dict[int, str] = {}

    def _new_actor(self) -> Any:
        return self._actor_class.remote(self.env_name, self.env_kwargs)

    def _send(self, commands: Sequence[tuple[int, str, Any]]) -> PendingReplies:
        by_worker: dict[int, list] = defaultdict(list)
        for command in commands:
            by_worker[self.worker_of(command[0])].append(command)
        sent = {w: (self._incarnation[w], self._actors[w].run.remote(batch)) for w, batch in by_worker.items()}
        return PendingReplies(lambda: self._read(by_worker, sent))

    def _read(self, by_worker: dict[int, list], sent: dict[int, tuple[int, Any]]) -> dict[int, Any]:
        ray = self._ray
        out: dict[int, Any] = {}
        for w, batch in by_worker.items():
            incarnation, ref = sent[w]
            try:
                replies = ray.get(ref)
            except ray.exceptions.RayActorError as exc:  # the actor died: replace it; its slots lose their episodes
                if incarnation == self._incarnation[w]:  # not yet replaced (by an earlier batch that found it dead)
                    self._died[w] = f"env actor {w} died ({type(exc).__name__}); restarted"
                    self._restart(w)
                replies = [EnvFailure(slot, self._died[w]) for slot, _, _ in batch]
            except ray.exceptions.RayError as exc:  # e.g. a reply that cannot be serialised; the actor lives on
                replies = [EnvFailure(slot, f"env actor {w}: {exc}") for slot, _, _ in batch]
            for (slot, _, _), reply in zip(batch, replies):
                out[slot] = reply
        return out

    def _restart(self, w: int) -> None:
        self._kill(self._actors[w])
        self.restarts += 1
        self._incarnation[w] += 1
        self._actors[w] = self._new_actor()

    def worker_pids(self) -> list[int]:
        return list(self._ray.get([actor.pid.remote() for actor in self._actors]))

    def close(self) -> None:
        ray = self._ray
        actors, self._actors = self._actors, []
        if not actors:
            return
        # Each actor closes its envs; one that died has nothing to close.
        refs = [actor.close.remote() for actor in actors]
        for ref in refs:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(ref, timeout=30)
        for actor in actors:
            self._kill(actor)

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(ValueError, self._ray.exceptions.RayError):  # already gone
            self._ray.kill(actor, no_restart=True)
