"""Typed configuration for training runs: dataclasses with the reference defaults, YAML/TOML files, ``--set`` overrides.

Defaults follow verl-agent's ALFWorld setup (docs/spec/algorithms.md §1.6) except where a CPU run needs smaller numbers, which
the field comments say. A config is built from nested dicts by :func:`from_dict`, which rejects unknown keys and
wrong types with one clear message naming the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from agentrl.errors import ConfigError

#: How scoring mode turns a candidate's token log-likelihoods into its score (docs/spec/algorithms.md §1.5.1):
#: ``"sum"``, the sequence log-likelihood log p(c | x), or ``"mean"``, that divided by the candidate's token count.
ChoiceRule = Literal["sum", "mean"]
CHOICE_RULES: tuple[str, ...] = typing.get_args(ChoiceRule)
DEFAULT_CHOICE_RULE: ChoiceRule = "sum"


# ------------------------------------------------------------------------------------------ generation, LoRA, learner
@dataclass
class GenerationConfig:
    """Sampling parameters for one turn. Defaults follow docs/spec/algorithms.md §1.6 (rollout)."""

    max_new_tokens: int = 512
    """Per-turn budget. A reply that reaches it without an end-of-turn token is flagged ``truncated``."""
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0  #: nucleus sampling: the smallest set of tokens holding this much probability (1: off)
    top_k: int = -1
    """-1 disables top-k."""
    max_prompt_tokens: int = 2048
    """Longer prompts keep their last ``max_prompt_tokens`` tokens and are flagged ``prompt_truncated``."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a reply, besides the tokenizer's and the model's end-of-sequence ids."""
    batch_size: int | None = None
    """Most prompts decoded together; ``None`` decodes all at once. Chunks group prompts of similar length."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ConfigError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 or None, got {self.batch_size}")
        self.stop_token_ids = tuple(int(i) for i in self.stop_token_ids)


@dataclass
class LoraSettings:
    """LoRA through ``peft``. The reference policy of the learner is then the base model with the adapter off."""

    r: int = 32  #: rank of the adapter matrices
    alpha: int = 32  #: scale: the update is multiplied by alpha / r
    dropout: float = 0.0  #: dropout on the adapter's input
    target_modules: str | tuple[str, ...] = "all-linear"
    """Module names to adapt, or ``"all-linear"`` (every linear layer except the output head)."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ConfigError(f"LoRA rank r must be >= 1, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not isinstance(self.target_modules, str):
            self.target_modules = tuple(self.target_modules)

    def to_peft_config(self):
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(task_type="CAUSAL_LM", r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=targets)


@dataclass
class LearnerConfig:
    """Optimizer and loss settings. Defaults: docs/spec/algorithms.md §1.4 and §1.6 (ALFWorld column)."""

    lr: float = 1e-6  #: AdamW learning rate
    weight_decay: float = 0.01  #: AdamW weight decay
    betas: tuple[float, float] = (0.9, 0.999)  #: AdamW betas
    adam_eps: float = 1e-8  #: AdamW epsilon
    grad_clip: float | None = 1.0
    """Max global gradient norm; ``None`` disables clipping (the norm is still reported)."""
    clip_low: float = 0.2  #: PPO ratio clip below 1 (1 - clip_low)
    clip_high: float = 0.2
    """PPO ratio clip above 1 (1 + clip_high); 0.28 gives the DAPO-style "clip-higher" variant."""
    dual_clip: float | None = 3.0  #: bound on the loss of negative-advantage tokens whose ratio grew (None: off)
    kl_coef: float = 0.01
    """β of the low-variance KL to the reference policy; 0 skips the reference entirely (no copy, no forward)."""
    entropy_coef: float = 0.001  #: weight of the entropy bonus
    temperature: float | None = None
    """The rollout temperature: new log-probs are computed from ``logits / temperature`` (scoring mode: from
    ``seq_logliks / temperature``) so that they match the sampled ones. 0 and ``None`` are read as 1; in a
    :class:`TrainConfig`, ``None`` means ``generation.temperature`` and any other value must equal it."""
    mini_batch_size: int = 256
    """Rows per optimizer step."""
    micro_batch_size: int = 32
    """Rows per forward/backward pass (a memory knob)."""
    ppo_epochs: int = 1  #: passes over an iteration's rows
    shuffle: bool = True  #: shuffle the rows into mini-batches (seeded)
    seed: int = 0  #: seed of the shuffle
    bf16: bool | Literal["auto"] = "auto"
    """bf16 autocast for the learner's forward passes; ``"auto"``: where the hardware supports it natively and,
    on a CPU, only for models wide enough to gain (:func:`agentrl.learner.bf16_autocast_pays`)."""
    recompute_old_logprobs: bool | Literal["auto"] = "auto"
    """Recompute the old log-probs with one no-grad pass before the first step instead of using the sampled ones
    (verl always does). ``"auto"``: only when bf16 autocast is on, since generation runs in the model's own dtype
    and the ratio would otherwise start away from 1, or when a vLLM generator samples with ``top_p``/``top_k``
    truncation (it reports the truncated distribution's log-probs)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about a third more compute)."""
    skip_zero_advantage: bool = False
    """Leave rows whose advantage is exactly 0 out of the update. They carry no policy-gradient signal, only the
    entropy and KL terms, and with step-level credit on sparse rewards they are most rows (every step of a group
    whose attempts all failed): skipping them cuts the learner's time several-fold. It changes the loss only
    through those regularisers and the token mean's denominator. Related: DAPO's dynamic sampling
    (arXiv:2503.14476), which drops groups whose outcomes are all equal."""
    token_mean_scope: Literal["micro_batch", "mini_batch"] = "micro_batch"
    """``"micro_batch"`` (verl at the pinned commit, docs/spec/algorithms.md §1.4): each micro-batch's token mean, divided by the number
    of micro-batches. ``"mini_batch"``: one token mean over the whole mini-batch, so the step does not depend on
    ``micro_batch_size``."""

    def __post_init__(self) -> None:
        checks = [
            (self.lr >= 0, f"lr must be >= 0, got {self.lr}"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}"),
            (self.grad_clip is None or self.grad_clip > 0, f"grad_clip must be > 0 or None, got {self.grad_clip}"),
            (0 <= self.clip_low < 1, f"clip_low must be in [0, 1), got {self.clip_low}"),
            (self.clip_high >= 0, f"clip_high must be >= 0, got {self.clip_high}"),
            (self.dual_clip is None or self.dual_clip > 1, f"dual_clip must be > 1 or None, got {self.dual_clip}"),
            (self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef}"),
            (self.temperature is None or self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}"),
            (self.mini_batch_size >= 1, f"mini_batch_size must be >= 1, got {self.mini_batch_size}"),
            (self.micro_batch_size >= 1, f"micro_batch_size must be >= 1, got {self.micro_batch_size}"),
            (self.ppo_epochs >= 1, f"ppo_epochs must be >= 1, got {self.ppo_epochs}"),
            (self.bf16 in (True, False, "auto"), f"bf16 must be true, false or 'auto', got {self.bf16!r}"),
            (self.recompute_old_logprobs in (True, False, "auto"),
             f"recompute_old_logprobs must be true, false or 'auto', got {self.recompute_old_logprobs!r}"),
            (self.token_mean_scope in ("micro_batch", "mini_batch"),
             f"token_mean_scope must be 'micro_batch' or 'mini_batch', got {self.token_mean_scope!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self.betas = (float(self.betas[0]), float(self.betas[1]))


@dataclass
class SFTConfig:
    """Supervised fine-tuning on demonstrations (:func:`agentrl.sft.sft`)."""

    mode: str = "score"
    """``"score"`` (choice among the admissible actions), ``"generate"`` (the reply's tokens) or ``"both"``."""
    choice_rule: ChoiceRule = DEFAULT_CHOICE_RULE
    """How the score-mode loss ranks candidates (:data:`CHOICE_RULES`); recorded as the model's agent setting."""
    epochs: int = 1
    lr: float = 1e-3
    batch_size: int = 16
    seed: int = 0
    weight_decay: float = 0.0
    bf16: bool | Literal["auto"] = "auto"
    """Autocast the forward passes to bf16; ``"auto"`` follows the learner's rule
    (:func:`agentrl.learner.bf16_autocast_pays`)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """``"cosine"``: linear warm-up over ``warmup_fraction`` of the steps, then a cosine decay to
    ``min_lr_ratio × lr`` (the usual recipe for training a small model from scratch)."""
    warmup_fraction: float = 0.02
    min_lr_ratio: float = 0.1
    length_buckets: bool = False
    """Batch prompts of similar length (less padding). Random batches fit better: in an episode's demonstrations
    length follows the step number, so buckets correlate a batch's rows (on Crafting the loss stayed at 0.98 after
    3 epochs where random batches reach 0.67; bench/learning.py's warm start: 6% against 15% eval success)."""
    micro_batch_tokens: int = 2048
    """At most this many padded tokens per micro-batch of rows of similar width (0: the whole batch in one pass)."""
    prompt_loss_weight: float = 0.0
    """Add this weight times the mean next-token NLL of each prompt's own tokens (``score``/``both`` modes). A
    reply carries ~10 supervised tokens and its prompt ~350 more, full of copies; the weight trains the heads that
    copy a word from earlier in the prompt. Validation with :func:`agentrl.sft.sft_loss` leaves it out."""
    checkpoint_every: int = 0
    """Also checkpoint every this many steps (0: after every epoch only), when a checkpoint folder is given."""


@dataclass
class EnvSection:
    name: str = "alfworld"  #: env alias, Gymnasium id, entry point or module:Class
    args: dict[str, Any] = field(default_factory=dict)  #: constructor arguments (e.g. data_dir, max_steps)
    train_split: str | None = None  #: default: the env's first split
    eval_split: str | None = None  #: default: the env's last split
    train_tasks: int | None = None  #: train on the first N tasks of the train split only (None: all of them)


@dataclass
class AlgoSection:
    name: str = "scpo"  #: a name from `agentrl algos`
    options: dict[str, Any] = field(default_factory=dict)  #: fields of the algorithm's config dataclass


@dataclass
class AgentSection:
    history_length: int = 2  #: past (observation, action) steps in the prompt (docs/spec/algorithms.md §1.5)
    action_memory: int = 0  #: env actions of up to this many older steps, one line in the prompt (0: the reference)
    list_actions: bool = True  #: list the admissible actions in the prompt (the reference); a scoring policy need not
    think: bool = True  #: ask for <think>…</think> before <action>; off for tiny models
    mode: Literal["generate", "score"] = "generate"  #: free generation, or softmax over admissible actions' likelihoods
    choice_rule: ChoiceRule = DEFAULT_CHOICE_RULE  #: score mode: rank actions by summed or mean token log-likelihood


@dataclass
class ModelSection:
    path: str | None = None  #: local folder or model name (loaded offline); None: agentrl-tiny on a CPU
    dtype: str = "auto"  #: "auto", "float32" or "bfloat16"
    device: str = "auto"  #: "auto" (this rank's CUDA GPU if there is one, else "cpu"), "cpu", "cuda", "cuda:1"
    lora: LoraSettings | None = None  #: train a LoRA adapter instead of all weights


@dataclass
class RolloutSection:
    tasks_per_iteration: int = 16  #: N distinct tasks per iteration (docs/spec/algorithms.md §1.1)
    group_size: int = 8  #: G attempts per task from the same initial state (docs/spec/algorithms.md §1.1)
    workers: int = 2  #: env worker processes; 0 runs envs in the trainer's process
    overlap_env_steps: bool = True  #: two waves of episodes: envs step one while the policy acts for the other
    prefetch_resets: bool = True  #: send the next iteration's resets before the learner runs: workers reset meanwhile
    max_trajectory_tokens: int | None = None  #: total response-token budget per trajectory (None: unlimited)
    max_consecutive_failures: int = 3  #: a task whose env fails this many times in a row stops the run
    generator: Literal["auto", "hf", "vllm"] = "auto"  #: generation backend; auto: vLLM if installed and a GPU is present
    filter_groups: Literal["off", "outcome", "advantage"] = "off"
    """Dynamic sampling (DAPO, verl's filter_groups): drop groups whose outcomes (or all advantages) are equal and
    draw further tasks until ``tasks_per_iteration`` groups remain or ``max_task_draws`` is reached."""
    max_task_draws: int | None = None
    """Most tasks drawn in one iteration with ``filter_groups`` on (None: 4 × ``tasks_per_iteration``)."""

    @property
    def task_draw_cap(self) -> int:
        """``max_task_draws``, or 4 × ``tasks_per_iteration`` when unset."""
        return self.max_task_draws if self.max_task_draws is not None else 4 * self.tasks_per_iteration


@dataclass
class RunSection:
    output_dir: str | None = None  #: default: runs/<env>-<algo>-<timestamp>
    iterations: int = 150  #: training iterations (docs/spec/algorithms.md §1.6)
    seed: int = 0  #: seed of task draws, sampling and initialisation
    eval_every: int = 5  #: iterations between evaluations (0: never)
    eval_episodes: int = 32  #: tasks of the eval split, one episode each; every evaluation plays the same episodes
    eval_temperature: float = 0.4  #: docs/spec/algorithms.md §1.6
    eval_before_train: bool = False  #: evaluate the starting policy first, logged as iteration 0 (verl's val_before_train)
    save_every: int = 1  #: iterations between checkpoints
    keep_checkpoints: int = 2  #: newest checkpoints kept on disk
    sample_trajectories: int = 4  #: trajectories per iteration written to trajectories.jsonl
    sample_groups: int = 2  #: whole rollout groups per iteration (mixed first) in groups.jsonl, for `agentrl inspect`
    torch_threads: int | None = None  #: None: 1 with env workers or <= 2 cores, else all cores (CPU threading trap: src/agentrl/hardware.py)
    max_nonfinite_updates: int = 3  #: consecutive NaN/inf updates before the run stops
    ray_address: str | None = None  #: env workers as Ray actors: "auto" joins a running cluster, "local" starts one


@dataclass
class VLLMSection:
    """Engine settings for ``rollout.generator=vllm`` (see :class:`agentrl.vllm_generator.VLLMGenerator`)."""

    gpu_memory_utilization: float = 0.3  #: share of the GPU the engine takes; the learner shares the GPU
    dtype: str = "auto"  #: "auto": bfloat16 on CUDA, the checkpoint's dtype on a CPU
    max_model_len: int | None = None  #: longest prompt + reply (default: the model's limit)
    tensor_parallel_size: int = 1  #: GPUs one engine spans
    enforce_eager: bool = False  #: no CUDA graphs (faster start, slower decoding)
    engine_args: dict[str, Any] = field(default_factory=dict)  #: any other vllm.LLM keyword arguments


@dataclass
class TrainConfig:
    env: EnvSection = field(default_factory=EnvSection)
    algo: AlgoSection = field(default_factory=AlgoSection)
    agent: AgentSection = field(default_factory=AgentSection)
    model: ModelSection = field(default_factory=ModelSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    run: RunSection = field(default_factory=RunSection)
    vllm: VLLMSection = field(default_factory=VLLMSection)

    def validate(self) -> TrainConfig:
        checks = [
            (self.rollout.tasks_per_iteration >= 1, "rollout.tasks_per_iteration must be >= 1"),
            (self.rollout.group_size >= 1, "rollout.group_size must be >= 1"),
            (self.rollout.max_task_draws is None or self.rollout.max_task_draws >= self.rollout.tasks_per_iteration,
             "rollout.max_task_draws must be >= rollout.tasks_per_iteration (or unset)"),
            (self.env.train_tasks is None or self.env.train_tasks >= 1, "env.train_tasks must be >= 1 (or unset)"),
            (self.rollout.workers >= 0, "rollout.workers must be >= 0"),
            (self.run.iterations >= 0, "run.iterations must be >= 0"),
            (self.run.save_every >= 1, "run.save_every must be >= 1"),
            (self.run.keep_checkpoints >= 1, "run.keep_checkpoints must be >= 1"),
            (self.agent.history_length >= 0, "agent.history_length must be >= 0"),
            (self.agent.action_memory >= 0, "agent.action_memory must be >= 0"),
            (self.generation.temperature >= 0, "generation.temperature must be >= 0"),
            (0 < self.vllm.gpu_memory_utilization <= 1, "vllm.gpu_memory_utilization must be in (0, 1]"),
            (self.vllm.tensor_parallel_size >= 1, "vllm.tensor_parallel_size must be >= 1"),
            (self.run.ray_address is None or self.run.ray_address.strip() != "",
             "run.ray_address must be an address, 'auto' or 'local' (or unset)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        # The learner's ratio compares the tempered distribution the rollouts sampled from.
        if self.learner.temperature is None:
            self.learner.temperature = self.generation.temperature
        elif self.learner.temperature != self.generation.temperature:
            raise ConfigError(f"learner.temperature ({self.learner.temperature}) must equal generation.temperature "
                              f"({self.generation.temperature}), the distribution the rollouts sampled from; leave "
                              "it unset")
        return self


# ---------------------------------------------------------------------------------------------------- conversion
def from_dict(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build dataclass ``cls`` from nested dicts, checking keys and types; errors name the dotted key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config key(s) {', '.join(_join(where, k) for k in unknown)}; "
                          f"known in {where or 'the top level'}: {', '.join(fields)}")
    kwargs = {name: _convert(hints[name], value, _join(where, name)) for name, value in data.items()}
    return cls(**kwargs)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {tp}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, typing.get_args(tp)))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else from_dict(tp, value, where)
    if origin in (dict,) or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return dict(value)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        (item_type, *_) = typing.get_args(tp) or (Any,)
        return (tuple if (origin or tp) is tuple else list)(_convert(item_type, v, where) for v in value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    return value


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``), TOML (``.toml``) or JSON config file into nested dicts."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)  # YAML: say where, in one line (its own text spans several)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"cannot parse config file {path}{where}: {' '.join(str(problem).split())}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (``{"rollout.group_size": 4}``) in nested dicts, creating levels as needed."""
    data = json.loads(json.dumps(data, default=str)) if data else {}
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"cannot set {dotted}: {key} is not a section")
            node = child
        node[leaf] = value
    return data


def build_config(file: str | Path | None = None, overrides: dict[str, Any] | None = None,
                 base: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults ← the model's recommended agent settings ← ``base`` ← config file ← overrides, validated.

    No model given: the default for this machine (:func:`agentrl.models.default_model`: the embedded policy on a
    CPU). A model folder's ``agentrl.json`` may recommend agent settings (the embedded policy was trained without
    ``<think>``); anything set explicitly wins over them.
    """
    from agentrl.models.registry import default_model, recommended_agent_settings

    data: dict[str, Any] = dict(base or {})
    if file is not None:
        data = _deep_merge(data, load_config_file(file))
    data = apply_overrides(data, overrides or {})
    model = data.get("model") or {}
    if isinstance(model, dict) and model.get("path") is None:
        chosen = default_model()
        if chosen is not None:
            data = _deep_merge(data, {"model": {"path": chosen}})
    path = (data.get("model") or {}).get("path") if isinstance(data.get("model"), dict) else None
    recommended = recommended_agent_settings(path)
    if recommended:
        data = _deep_merge({"agent": recommended}, data)
    return from_dict(TrainConfig, data).validate()


def resolve_agent_settings(model: str | None, given: dict[str, Any] | None = None) -> AgentSection:
    """How ``model`` is driven: :class:`AgentSection`'s defaults ← the model folder's ``agentrl.json`` ← ``given``
    (``None`` values ignored). The rule :func:`build_config` applies to training, here for one model."""
    from agentrl.models.registry import recommended_agent_settings

    chosen = {key: value for key, value in (given or {}).items() if value is not None}
    return from_dict(AgentSection, {**recommended_agent_settings(model), **chosen}, "agent")


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def save_config(config: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


# ---------------------------------------------------------------------------------------------------- reference
def describe_config(cls: type = None, prefix: str = "") -> list[tuple[str, Any, str]]:
    """Every key of ``cls`` (default :class:`TrainConfig`) as ``(dotted key, default, description)``, nested
    sections flattened; the description is the field's comment (``#:``) or docstring in this module, first line."""
    cls = cls or TrainConfig
    notes = _field_notes()
    hints = typing.get_type_hints(cls)
    rows: list[tuple[str, Any, str]] = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        key = _join(prefix, f.name)
        nested = next((t for t in _options(hints[f.name]) if dataclasses.is_dataclass(t)), None)
        if nested is not None:
            rows.extend(describe_config(nested, key))
            if default is None:  # an optional section (model.lora): off unless set
                rows.append((key, None, notes.get((cls.__name__, f.name), "")))
            continue
        rows.append((key, default, notes.get((cls.__name__, f.name), "")))
    return rows


def _options(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


@functools.lru_cache(maxsize=1)
def _field_notes() -> dict[tuple[str, str], str]:
    """(class, field) → the first line of the ``#:`` comment on the field's line or of the docstring after it."""
    import ast

    source = Path(__file__).read_text()
    lines = source.splitlines()
    notes: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement, following in zip(node.body, [*node.body[1:], None]):
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            _, hash_, comment = lines[statement.lineno - 1].partition("#:")
            text = comment.strip() if hash_ else ""
            if not text and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) \
                    and isinstance(following.value.value, str):
                text = " ".join(following.value.value.split())
            notes[node.name, statement.target.id] = text
    return notes
