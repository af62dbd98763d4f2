"""The machine a throughput run measured on, and its load."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from throughput_parts import REPO


def machine() -> dict:
    import torch
    import transformers

    cpu, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = [f for f in value.split() if f.startswith(("avx", "amx"))]
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    try:
        def git(*cmd: str) -> str:
            return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=10,
                                  check=False).stdout

        commit = git("rev-parse", "--short", "HEAD").strip()
        modified = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines() if line]
    except (OSError, subprocess.SubprocessError):
        commit, modified = "", None
    return {
        "cpu": cpu, "cpu_flags": flags, "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": mem_gib, "platform": platform.platform(), "python": sys.version.split()[0],
        "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "transformers": transformers.__version__,
        "git_commit": commit, "git_modified_tracked_files": modified, "niceness": os.nice(0),
        "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
    }


def load_now() -> dict:
    running = None
    try:
        running = Path("/proc/loadavg").read_text().split()[3]  # running/total scheduling entities
    except OSError:
        pass
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "running_total": running, "time": time.time()}

