"""Environment slots stepped in parallel worker processes, with crash recovery.

A rollout batch holds N tasks × G group members = N·G *slots*. Each slot is one environment instance living in
one worker process; all members of a group live in the same worker, so an env that caches per-game work (ALFWorld
grounds a game once per process) pays for it once per group. A batch of ``reset``/``step`` commands is sent to
every worker before any reply is read, so workers run concurrently. ``step_async`` sends a batch and returns at
once: the rollout loop steps one wave of episodes while the policy acts for the other
(:func:`agentrl.rollout.collect_rollouts`); replies are read in the order their batches were sent.

Faults lose nothing but the affected episode: an env that raises returns an :class:`EnvFailure` for its slot
(the trainer drops that trajectory and counts it); a worker that dies (killed, segfault) is restarted and every
slot it held fails the same way. ``workers=0`` runs the envs in the calling process (deterministic and simple,
used by tests and tiny runs).

Workers import no torch and limit BLAS/OpenMP threads to one: on a 2-core machine an env worker that spins
threads slows the learner tenfold (CPU threading trap: src/agentrl/hardware.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM")


@dataclass
class EnvFailure:
    """A slot whose env raised or whose worker died; ``error`` is the traceback or reason."""

    slot: int
    error: str


StepResult = tuple[str, float, bool, bool, dict[str, Any]]
ResetResult = tuple[str, dict[str, Any]]


class PendingReplies:
    """A batch of env commands sent to the workers; :meth:`result` waits for the replies (slot → the env's return
    value or :class:`EnvFailure`)."""

    def __init__(self, receive: Callable[[], dict[int, Any]]):
        self._receive = receive
        self._result: dict[int, Any] | None = None

    def result(self) -> dict[int, Any]:
        if self._result is None:
            self._result = self._receive()
        return self._result


class SlotPool:
    """What the rollout loop needs of an env pool: slots spread over ``workers``, and batches of ``reset``/``step``
    commands that block (:meth:`reset`, :meth:`step`) or return at once (:meth:`reset_async`, :meth:`step_async`).

    Slots ``g*G … g*G+G-1`` (G = ``slots_per_group``) share a worker. A subclass sends a batch to its workers
    (``_send``), restarts a dead one (counted in ``restarts``), names its workers' pids and closes them:
    :class:`EnvPool` with local processes, :class:`agentrl.raypool.RayEnvPool` with Ray actors.
    """

    workers: int
    slots_per_group: int
    restarts: int

    def worker_of(self, slot: int) -> int:
        return (slot // self.slots_per_group) % max(1, self.workers)

    def _send(self, commands: Sequence[tuple[int, str, Any]]) -> PendingReplies:
        """Send ``(slot, op, arg)`` commands to their workers now; the handle reads the replies when asked."""
        raise NotImplementedError

    def _run(self, commands: Sequence[tuple[int, str, Any]]) -> dict[int, Any]:
        return self._send(commands).result()

    def reset(self, requests: Sequence[tuple[int, int | None, dict[str, Any]]]) -> dict[int, ResetResult | EnvFailure]:
        """``requests``: (slot, seed, options) each; returns slot → (obs, info) or EnvFailure."""
        return self.reset_async(requests).result()

    def reset_async(self, requests: Sequence[tuple[int, int | None, dict[str, Any]]]) -> PendingReplies:
        """Send ``requests`` to the workers and return at once; ``.result()`` is what :meth:`reset` returns."""
        return self._send([(slot, "reset", (seed, options)) for slot, seed, options in requests])

    def step(self, actions: Sequence[tuple[int, str]]) -> dict[int, StepResult | EnvFailure]:
        """``actions``: (slot, action) each; returns slot → Gymnasium 5-tuple or EnvFailure."""
        return self._run([(slot, "step", action) for slot, action in actions])

    def step_async(self, actions: Sequence[tuple[int, str]]) -> PendingReplies:
        """Send ``actions`` to the workers and return at once; ``.result()`` is what :meth:`step` returns."""
        return self._send([(slot, "step", action) for slot, action in actions])

    def worker_pids(self) -> list[int]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Slots:
    """The envs of one worker, keyed by slot; built lazily with the pool's constructor arguments."""

    def __init__(self, env_name: str, env_kwargs: dict[str, Any]):
        import agentrl.envs as envs

        self._make = lambda: envs.make(env_name, **env_kwargs)
        self.envs: dict[int, Any] = {}

    def run(self, commands: list[tuple[int, str, Any]]) -> list[Any]:
        results = []
        for slot, op, arg in commands:
            try:
                env = self.envs.get(slot)
                if env is None:
                    env = self.envs[slot] = self._make()
                if op == "reset":
                    seed, options = arg
                    results.append(env.reset(seed=seed, options=options))
                elif op == "step":
                    results.append(env.step(arg))
                else:
                    raise ValueError(f"unknown env command {op!r}")
            except Exception:
                results.append(EnvFailure(slot, traceback.format_exc(limit=8)))
        return results

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:
                pass
        self.envs.clear()


def _worker_main(conn, env_name: str, env_kwargs: dict[str, Any]) -> None:
    slots = _Slots(env_name, env_kwargs)
    try:
        while True:
            message = conn.recv()
            if message is None:
                break
            conn.send(slots.run(message))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        slots.close()


class EnvPool(SlotPool):
    """Run the envs of many slots in ``workers`` processes (0: in this process).

    Args:
        env_name: anything :func:`agentrl.envs.make` accepts.
        env_kwargs: constructor arguments, identical for every slot.
        workers: number of worker processes.
        slots_per_group: slots ``g*G … g*G+G-1`` share a worker (G = group size).
    """

    def __init__(self, env_name: str, env_kwargs: dict[str, Any] | None = None, workers: int = 0,
                 slots_per_group: int = 1):
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self.workers = workers
        self.slots_per_group = max(1, slots_per_group)
        self.restarts = 0
        self._local: _Slots | None = _Slots(env_name, self.env_kwargs) if workers == 0 else None
        self._ctx = mp.get_context("spawn")
        self._procs: list[Any] = [None] * workers
        self._conns: list[Any] = [None] * workers
        self._incarnation = [0] * workers  # bumped by each restart: batches sent before it are lost
        self._died: dict[int, str] = {}
        self._next_ticket = 0
        self._unread: dict[int, tuple[dict[int, list], dict[int, tuple[int, bool]], PendingReplies]] = {}
        for w in range(workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        saved = {k: os.environ.get(k) for k in _THREAD_VARS}
        os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                           "TOKENIZERS_PARALLELISM": "false"})
        try:
            proc = self._ctx.Process(target=_worker_main, args=(child, self.env_name, self.env_kwargs),
                                     daemon=True, name=f"agentrl-env-{w}")
            proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self._procs[w], self._conns[w] = proc, parent

    def _send(self, commands: Sequence[tuple[int, str, Any]]) -> PendingReplies:
        """Send ``commands`` to their workers now; the returned handle reads the replies when asked."""
        if self._local is not None:
            done = {slot: r for (slot, _, _), r in zip(commands, self._local.run(list(commands)))}
            return PendingReplies(lambda: done)
        by_worker: dict[int, list] = defaultdict(list)
        for command in commands:
            by_worker[self.worker_of(command[0])].append(command)
        sent: dict[int, tuple[int, bool]] = {}  # worker → (its incarnation at sending, whether the send went through)
        for w, batch in by_worker.items():
            try:
                self._conns[w].send(batch)
                sent[w] = (self._incarnation[w], True)
            except (BrokenPipeError, OSError):
                sent[w] = (self._incarnation[w], False)
        ticket = self._next_ticket
        self._next_ticket += 1
        pending = PendingReplies(lambda: self._receive(ticket))
        self._unread[ticket] = (by_worker, sent, pending)
        return pending

    def _receive(self, ticket: int) -> dict[int, Any]:
        # A worker answers its batches in the order they came: read every earlier batch first and keep its replies.
        while True:
            oldest = min(self._unread)
            by_worker, sent, pending = self._unread.pop(oldest)
            replies = self._read(by_worker, sent)
            if oldest == ticket:
                return replies
            pending._result = replies

    def _read(self, by_worker: dict[int, list], sent: dict[int, tuple[int, bool]]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for w, batch in by_worker.items():
            incarnation, delivered = sent[w]
            replies = None
            if incarnation == self._incarnation[w]:
                if delivered:
                    try:
                        replies = self._conns[w].recv()
                    except (EOFError, OSError, ConnectionResetError):
                        replies = None
                if replies is None:  # the worker died: restart it; every slot it held loses its episode
                    self._died[w] = f"env worker {w} died (exit code {self._procs[w].exitcode}); restarted"
                    self._restart(w)
            if replies is None:  # this batch's worker died (found now or while reading an earlier batch)
                replies = [EnvFailure(slot, self._died[w]) for slot, _, _ in batch]
            for (slot, _, _), reply in zip(batch, replies):
                out[slot] = reply
        return out

    def _restart(self, w: int) -> None:
        proc = self._procs[w]
        if proc is not None and proc.is_alive():
            proc.kill()
        if proc is not None:
            proc.join(timeout=5)
        self.restarts += 1
        self._incarnation[w] += 1
        self._start(w)

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None]

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        for w, conn in enumerate(self._conns):
            if conn is None:
                continue
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._procs[w].join(timeout=5)
            if self._procs[w].is_alive():
                self._procs[w].kill()
            conn.close()
        self._conns = [None] * self.workers
