"""Shared test fixtures. Tests never reach a model hub: HF offline mode is forced before anything imports it."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_configure(config):
    # One intra-op thread: on 2 cores, torch's default threads spin against env workers and pytest itself
    # and make model tests many times slower (CPU threading trap: src/agentrl/hardware.py).
    import torch

    torch.set_num_threads(1)


REPO_ROOT = Path(__file__).resolve().parents[1]
#: Real data for tests, CI and benchmarks: ../shared/data relative to the repository root.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
#: The default policy's build script; its recipe is the package scripts/default_policy beside it.
DEFAULT_POLICY_SCRIPT = REPO_ROOT / "scripts" / "build_default_policy.py"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (tests read ../shared/data beside the repository)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def agentrl_cli() -> list[str]:
    """The installed ``agentrl`` console script (the real entry point, as a user runs it)."""
    exe = shutil.which("agentrl", path=str(Path(sys.executable).parent)) or shutil.which("agentrl")
    if exe is None:
        pytest.fail("the agentrl console script is not installed; run `pip install -e .`")
    return [exe]


def put_module_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    """Write ``source`` as module ``name`` where this process and spawned env workers (via PYTHONPATH) import it."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))


@pytest.fixture(scope="module")
def build():
    """The script's recipe, the package scripts/default_policy, imported by name from scripts/ as the script and
    its spawned workers import it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(DEFAULT_POLICY_SCRIPT.parent))
        importlib.import_module("default_policy.stages")  # the stages, and every module of the recipe with them
        yield importlib.import_module("default_policy")
