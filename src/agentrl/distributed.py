"""Data-parallel training with ``torch.distributed``: one process per GPU (or CPU process with gloo).

Launch with ``torchrun --nproc_per_node N -m agentrl.cli train ...`` (or any launcher that sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``). The trainer then, on every rank:

1. draws the same N tasks of the iteration and plays its share (whole groups, ``tasks[rank::world]``, so
   group-relative credit assignment sees exactly the same groups as on one process) with its own env pool and
   generator (one vLLM engine per GPU when ``--generator vllm``);
2. gathers every rank's trajectories (:func:`gather_rollouts`), so all ranks hold the same rows in the same order
   and compute the same advantages;
3. updates with :class:`DistributedLearner`: each mini-batch's micro-batches are dealt round-robin to the ranks,
   each rank back-propagates its share with the single-process scaling, the gradients are summed with one
   all-reduce, and every rank applies the same clipped AdamW step, so the replicas never drift apart.

What "the same result" means
    For the same rows and the same starting weights, a ``DistributedLearner`` update equals the single-process
    :class:`~agentrl.learner.Learner` update up to float summation order: the single process adds micro-batch
    gradients one after another into ``.grad``, the all-reduce adds per-rank partial sums, and float addition is
    not associative. Gradients agree to about 1e-7 relative (float32), and the weights after the step to within
    ``1e-6`` relative per tensor (``tests/test_distributed.py`` checks both with two gloo processes). All ranks
    end bitwise identical to *each other*, since they apply one reduced gradient. The rollouts of a 2-rank run
    are not those of a 1-rank run: each rank samples its share with its own seed (reproducible for a fixed seed
    and world size), as in every data-parallel RL trainer.

Scope: plain data parallelism (DDP-style gradient all-reduce; every rank holds the whole model). FSDP/ZeRO
sharding is not implemented; for models that do not fit one GPU with their optimizer state, train LoRA adapters.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.learner import LOSS_STATS, Learner
from agentrl.records import RolloutBatch

__all__ = ["DistInfo", "DistributedLearner", "all_ranks_agree", "gather_objects", "gather_rollouts",
           "init_distributed"]

#: Gradients are all-reduced in flat buckets of at most this many elements (float32: 4 bytes each).
BUCKET_ELEMENTS = 2**24


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size``, ``local_rank`` on its node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group described by the launcher's environment (``torchrun``), once.

    Single process (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``): nothing happens. Backend: NCCL when CUDA is available
    (each rank takes GPU ``LOCAL_RANK``), else gloo.
    """
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_available():  # pragma: no cover - torch builds without distributed
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, initialized_here=True)


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (pickled; for rollouts and metrics, not tensors)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_rollouts(batch: RolloutBatch) -> RolloutBatch:
    """Merge every rank's :class:`~agentrl.records.RolloutBatch` into one, identical on every rank.

    Trajectories are concatenated in rank order; counts (dropped trajectories, tokens, steps) are summed and times
    are the slowest rank's (the ranks work in parallel).
    """
    batches = gather_objects(batch)
    stats: dict[str, float] = {}
    for b in batches:
        for key, value in b.stats.items():
            stats[key] = max(stats.get(key, 0.0), value) if key.startswith("time/") else stats.get(key, 0.0) + value
    return RolloutBatch(trajectories=[t for b in batches for t in b.trajectories],
                        dropped=sum(b.dropped for b in batches),
                        failures=[f for b in batches for f in b.failures], stats=stats)


def all_ranks_agree(flag: bool) -> bool:
    """True on every rank if ``flag`` is true on any rank (e.g. a stop request that reached one rank only)."""
    import torch.distributed as dist

    value = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def _collective_device() -> torch.device:
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _buckets(tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    buckets: list[list[torch.Tensor]] = [[]]
    size = 0
    for t in tensors:
        if buckets[-1] and size + t.numel() > BUCKET_ELEMENTS:
            buckets.append([])
            size = 0
        buckets[-1].append(t)
        size += t.numel()
    return buckets


class DistributedLearner(Learner):
    """:class:`~agentrl.learner.Learner` whose optimizer steps are shared by the ranks of the default process group.

    Every rank must call :meth:`update` with the same rows in the same order (the trainer gathers them). The
    module docstring says how the work is split and in what sense the result equals the single-process one. The
    weights are broadcast from rank 0 when the learner is built, so all replicas start identical.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import torch.distributed as dist

        super().__init__(*args, **kwargs)
        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        with torch.no_grad():
            for tensor in self.model.state_dict().values():
                dist.broadcast(tensor, src=0)

    def _own_micro_batches(self, micro_batches: list[list[int]]) -> list[list[int]]:
        """Every ``world_size``-th micro-batch, from this rank's index; the scaling stays the single-process one."""
        return micro_batches[self.rank::self.world_size]

    def _reduce_gradients(self, finite: bool, weight: float,
                          sums: dict[str, float]) -> tuple[bool, float, dict[str, float]]:
        """One all-reduce of the gradients (in buckets) and one of the loss statistics: the same step everywhere."""
        dist = self._dist
        device = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        grads = []
        for p in self.parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        for bucket in _buckets(grads):
            flat = torch.cat([g.reshape(-1).to(device, torch.float32) for g in bucket])
            dist.all_reduce(flat)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        tail = torch.tensor([0.0 if finite else 1.0, weight, *(sums[key] for key in LOSS_STATS)],
                            dtype=torch.float64, device=device)
        dist.all_reduce(tail)
        bad_total, weight_total, *stat_sums = tail.tolist()
        return bad_total == 0, weight_total, dict(zip(LOSS_STATS, stat_sums))
