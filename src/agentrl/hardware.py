"""What this machine can do: CPU threads, bfloat16 support, CUDA. Every hardware probe of the library lives here.

Importing this module is cheap: torch is imported inside the probes, not at import time.

The CPU threading trap
    On a machine with few cores, PyTorch's default of one OpenMP thread per core makes a forward pass several times
    slower as soon as another process (an environment worker, a second evaluation, another job) takes a core,
    because the OpenMP threads spin-wait on each other. Measured on the 2-core development machine: 2 threads ran
    a forward pass 3-4x slower than 1 once an env worker took a core, and up to ~10x slower with a busy neighbour.
    Hence :func:`default_cpu_threads` (1 thread beside env workers or on <= 2 cores), and benches start with
    ``GOMP_SPINCOUNT=0`` (read when the OpenMP runtime starts, so it cannot be set from inside the process).
"""

from __future__ import annotations

import os
from typing import Literal

from agentrl.errors import ConfigError

__all__ = ["bf16_support", "configure_cpu_threads", "cuda_available", "default_cpu_threads"]


def default_cpu_threads(env_workers: int = 0, cores: int | None = None) -> int:
    """Intra-op threads for a model with ``env_workers`` environment processes beside it on ``cores`` cores
    (default: this machine's): 1 when env workers share the cores or there are 2 cores or fewer, else all cores.
    The trainer and ``agentrl eval`` follow this rule (the threading trap, module docstring)."""
    cores = cores or os.cpu_count() or 1
    return 1 if env_workers > 0 or cores <= 2 else cores


def configure_cpu_threads(n: int | None) -> int:
    """Set PyTorch's intra-op CPU threads to ``n`` (``None`` leaves it alone); returns the previous count.

    The library never calls this by itself; the trainer and ``agentrl eval`` do (:func:`default_cpu_threads`)."""
    import torch

    previous = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ConfigError(f"the number of CPU threads must be >= 1, got {n}")
        torch.set_num_threads(int(n))
    return previous


def cuda_available() -> bool:
    """Whether a CUDA GPU is visible to torch."""
    import torch

    return torch.cuda.is_available()


def bf16_support(device: str = "cpu") -> Literal["native", "emulated"] | None:
    """How ``device`` runs bfloat16: ``"native"`` (CUDA with bf16, or a CPU with AVX512-BF16 or AMX), ``"emulated"``
    (a CPU where oneDNN runs bf16 kernels through AVX-512 conversions), or ``None``.

    The learner's ``bf16="auto"`` accepts either (measured faster for hidden sizes >= 128 on the 2-core AVX-512
    development machine, which is "emulated"); SCPO's scorers' ``precision="auto"`` wants ``"native"``.
    """
    import torch

    kind = str(device).split(":")[0]
    if kind == "cuda":
        return "native" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else None
    if kind != "cpu":
        return None
    cpu = torch.cpu
    if any(getattr(cpu, probe, lambda: False)() for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")):
        return "native"
    try:
        return "emulated" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
    except (AttributeError, RuntimeError):
        return None
