"""agentrl's SCPO, GiGPO and GRPO as verl advantage estimators, for verl and verl-agent (one row per step).

    import agentrl.integrations.verl as agentrl_verl
    agentrl_verl.install()          # in the trainer's process: registers the names below, passes them the batch
    # then algorithm.adv_estimator=scpo (or agentrl_gigpo, agentrl_grpo); options: +algorithm.agentrl.scorer=lexical

verl's ``register_adv_est`` registry hands an estimator token tensors and ``uid`` only; step credit also needs the
batch's non-tensor fields (``traj_uid``, ``step_index``, ``anchor_obs``, ``success``, ``step_text``), so
:func:`install` also wraps ``verl.trainer.ppo.ray_trainer.compute_advantage`` to pass them to these names (other
estimators run unchanged). Fields and the rollout-loop lines that add them: docs/integrations.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos

from agentrl.algos.types import BatchError, as_object_array
from agentrl.integrations.steps import StepColumns, step_advantages, step_order

#: verl estimator name → agentrl estimator. "grpo" and "gigpo" are taken in verl / verl-agent, hence the prefix.
NAMES = {"scpo": "scpo", "agentrl_gigpo": "gigpo", "agentrl_grpo": "grpo"}
#: Non-tensor fields read per step row (docs/integrations.md has the table).
FIELDS = {"group": "uid", "traj": "traj_uid", "step": "step_index", "reward": "rewards", "valid": "is_action_valid",
          "anchor": "anchor_obs", "success": "success", "text": "step_text"}


def options_of(config: Any) -> dict[str, Any]:
    """agentrl options from verl's algorithm config: its ``agentrl`` entry (SCPOConfig/GiGPOConfig fields)."""
    if config is None:
        return {}
    entry = config.get("agentrl") if hasattr(config, "get") else getattr(config, "agentrl", None)
    if entry is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(entry):
            entry = OmegaConf.to_container(entry, resolve=True)
    except ImportError:
        pass
    return dict(entry)


def step_columns(token_level_rewards: torch.Tensor, non_tensor_batch: dict[str, np.ndarray]) -> StepColumns:
    """The step rows of a verl-agent batch. The reward of a row is its raw step reward ``rewards`` (verl-agent keeps
    it; its token-level rewards hold the episode return on every step row), else the row's token rewards summed."""
    nt = non_tensor_batch
    for name in ("group", "traj"):
        if FIELDS[name] not in nt:
            raise BatchError(f"the batch has no {FIELDS[name]!r} field (non_tensor_batch keys: {sorted(nt)})")
    if FIELDS["step"] not in nt:
        raise BatchError("the batch has no 'step_index' field: add it in the rollout loop, or call "
                         "agentrl.integrations.verl.annotate_steps(batch) before adjust_batch / balance_batch")
    if FIELDS["reward"] in nt:
        reward = np.asarray(nt[FIELDS["reward"]], dtype=np.float64)
    else:
        reward = token_level_rewards.sum(-1).detach().cpu().double().numpy()
    optional = {name: nt.get(FIELDS[name]) for name in ("valid", "anchor", "success", "text")}
    return StepColumns(
        group=as_object_array(nt[FIELDS["group"]]).astype(str), traj=as_object_array(nt[FIELDS["traj"]]).astype(str),
        step=np.asarray(nt[FIELDS["step"]]).astype(np.int64), reward=reward,
        valid=None if optional["valid"] is None else np.asarray(optional["valid"], dtype=bool),
        anchor=None if optional["anchor"] is None else as_object_array(optional["anchor"]),
        success=None if optional["success"] is None else np.asarray(optional["success"], dtype=bool),
        text=None if optional["text"] is None else as_object_array(optional["text"]),
    )


def _estimator(name: str):
    def estimate(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray | None = None,
                 config: Any = None, non_tensor_batch: dict | None = None,
                 **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if non_tensor_batch is None:
            raise BatchError(f"{name} needs the batch's non-tensor fields, which verl's compute_advantage passes only "
                             "after agentrl.integrations.verl.install() (docs/integrations.md)")
        advantages = step_advantages(NAMES[name], step_columns(token_level_rewards, non_tensor_batch),
                                     options_of(config))
        scores = torch.as_tensor(advantages, dtype=torch.float32, device=response_mask.device)
        scores = scores.unsqueeze(-1) * response_mask
        return scores, scores

    estimate.__name__ = estimate.__qualname__ = f"compute_{name}_advantage"
    estimate.__doc__ = f"agentrl's {NAMES[name]} per step row, broadcast to the row's response tokens."
    return estimate


ESTIMATORS = {name: _estimator(name) for name in NAMES}


def register() -> None:
    """Put :data:`NAMES` in verl's advantage-estimator registry (idempotent)."""
    for name, fn in ESTIMATORS.items():
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.register_adv_est(name)(fn)


def compute_advantage(data: DataProto, adv_estimator: str, config: Any = None) -> DataProto:
    """verl's ``compute_advantage`` for agentrl's names: sets ``advantages`` and ``returns`` (rows × tokens)."""
    name = getattr(adv_estimator, "value", adv_estimator)
    if name not in ESTIMATORS:
        raise BatchError(f"unknown agentrl estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    if "response_mask" not in set(data.batch.keys()):
        raise BatchError("the batch has no response_mask (verl: compute_response_mask(batch))")
    advantages, returns = ESTIMATORS[name](data.batch["token_level_rewards"], data.batch["response_mask"],
                                           config=config, non_tensor_batch=data.non_tensor_batch)
    data.batch["advantages"], data.batch["returns"] = advantages, returns
    return data


def install(options: dict[str, Any] | None = None) -> None:
    """:func:`register`, and route agentrl's names in ``verl.trainer.ppo.ray_trainer.compute_advantage`` to
    :func:`compute_advantage`, which passes the non-tensor fields; every other estimator runs verl's own code.
    ``options`` apply where the call's ``config`` has no ``agentrl`` entry (verl-agent passes no config)."""
    from verl.trainer.ppo import ray_trainer

    register()
    original = getattr(ray_trainer.compute_advantage, "agentrl_original", ray_trainer.compute_advantage)

    def routed(data: DataProto, adv_estimator: Any, *args: Any, **kwargs: Any) -> DataProto:
        if getattr(adv_estimator, "value", adv_estimator) in ESTIMATORS:
            return compute_advantage(data, adv_estimator, kwargs.get("config") or {"agentrl": options or {}})
        return original(data, adv_estimator, *args, **kwargs)

    routed.agentrl_original = original
    ray_trainer.compute_advantage = routed


def annotate_steps(data: DataProto) -> DataProto:
    """Adds ``step_index`` (0, 1, … per ``traj_uid``, in row order). Call it while the rows are in rollout order:
    before verl-agent's ``adjust_batch`` (copies rows) and ``balance_batch`` (reorders them)."""
    data.non_tensor_batch[FIELDS["step"]] = step_order(data.non_tensor_batch[FIELDS["traj"]])
    return data


def add_step_fields(batch: DataProto, step: int, actions: list[str], next_obs: list[str]) -> DataProto:
    """In verl-agent's rollout loop, after ``envs.step``: ``step_index`` and ``step_text`` ("action -> next_obs")."""
    n = len(batch)
    if not (len(actions) == len(next_obs) == n):
        raise BatchError(f"one action and one next observation per row: {n} rows, {len(actions)} actions, "
                         f"{len(next_obs)} observations")
    batch.non_tensor_batch[FIELDS["step"]] = np.full(n, step, dtype=np.int64)
    batch.non_tensor_batch[FIELDS["text"]] = as_object_array(
        [f"{a} -> {o}" if o else str(a) for a, o in zip(actions, next_obs)])
    return batch
