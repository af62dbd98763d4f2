"""Checkpoints that resume exactly and are written atomically.

Layout of ``<run>/checkpoints/iter-000010/``:

- ``model/``: the policy in Hugging Face ``save_pretrained`` form (safetensors), or the PEFT adapter when LoRA is on,
  plus the tokenizer;
- ``trainer.pt``: optimizer state and torch RNG state, loaded back with ``torch.load(weights_only=True)`` (never an
  arbitrary pickle);
- ``state.json``: iteration, Python RNG state, counters;
- ``COMPLETE``: written last. A folder without it is an interrupted write and is never loaded.

The folder is written under a temporary name and renamed into place, and ``latest`` (a one-line pointer file) is
replaced atomically after that, so a crash at any moment leaves the previous checkpoint intact and pointed to.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.errors import AgentRLError

COMPLETE_MARKER = "COMPLETE"


class CheckpointError(AgentRLError):
    """A checkpoint that is missing, incomplete or corrupted."""


@dataclass
class LoadedCheckpoint:
    path: Path
    iteration: int
    trainer_state: dict[str, Any]
    state: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        return self.path / "model"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path, iteration: int, policy: Any, learner: Any, state: dict[str, Any],
                    keep: int = 2, model_files: dict[str, str] | None = None) -> Path:
    """Write checkpoint ``iteration`` of ``run_dir`` atomically and point ``latest`` at it; keep the newest ``keep``.
    ``model_files``: text files (name → content) written beside the weights in ``model/``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter-{iteration:06d}"
    tmp = root / f".iter-{iteration:06d}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    policy.model.save_pretrained(tmp / "model", safe_serialization=True)
    policy.tokenizer.save_pretrained(tmp / "model")
    for name, text in (model_files or {}).items():
        (tmp / "model" / name).write_text(text)
    torch.save({"learner": learner.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / "trainer.pt")
    full_state = {"iteration": iteration, "python_rng": _encode_python_rng(random.getstate()), **state}
    (tmp / "state.json").write_text(json.dumps(full_state, indent=1))
    (tmp / COMPLETE_MARKER).write_text("ok\n")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _atomic_write_text(root / "latest", final.name + "\n")
    complete = sorted(p for p in root.glob("iter-*") if (p / COMPLETE_MARKER).exists())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def find_latest(run_dir: Path) -> Path | None:
    """The checkpoint ``latest`` points to, or None when the run has none."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    return pointer.parent / pointer.read_text().strip()


def load_checkpoint(path: Path) -> LoadedCheckpoint:
    """Read a checkpoint folder's trainer state and metadata (the model is loaded by the policy from ``model/``)."""
    path = Path(path)
    if not (path / COMPLETE_MARKER).is_file():
        raise CheckpointError(f"checkpoint {path} is incomplete (no {COMPLETE_MARKER} marker); it was never finished")
    try:
        state = json.loads((path / "state.json").read_text())
        trainer_state = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
        iteration = int(state["iteration"])
        if not isinstance(trainer_state, dict) or "learner" not in trainer_state:
            raise ValueError("trainer.pt does not hold a trainer state")
    except (OSError, ValueError, RuntimeError, EOFError, KeyError, TypeError, pickle.UnpicklingError) as exc:
        # pickle.UnpicklingError: weights_only=True refusing a non-tensor pickle (never executed)
        raise CheckpointError(f"checkpoint {path} is corrupted: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    if not (path / "model").is_dir():
        raise CheckpointError(f"checkpoint {path} has no model/ folder")
    return LoadedCheckpoint(path=path, iteration=iteration, trainer_state=trainer_state, state=state)


def restore_rng(checkpoint: LoadedCheckpoint) -> None:
    random.setstate(_decode_python_rng(checkpoint.state["python_rng"]))
    torch.set_rng_state(checkpoint.trainer_state["torch_rng"])


def _encode_python_rng(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _decode_python_rng(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
