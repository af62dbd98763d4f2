"""Checks for user environments: :func:`check_text_env` is Gymnasium's ``check_env`` plus agentrl's contract.

Call it in your own test suite on any environment you register::

    from agentrl.testing import check_text_env
    notes = check_text_env(agentrl.envs.make("mypkg.env:MyEnv"))   # raises ContractError on a broken contract

:func:`play_expert` plays a few episodes with the env's expert, for envs that have one.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

from agentrl.envs.core import INFO_KEYS, TextEnv


class ContractError(AssertionError):
    """An environment breaks the agentrl text-environment contract."""


def _check_info(info: Any, where: str) -> None:
    if not isinstance(info, dict):
        raise ContractError(f"{where}: info must be a dict, got {type(info).__name__}")
    missing = [k for k in INFO_KEYS if k not in info]
    if missing:
        raise ContractError(f"{where}: info lacks the documented key(s) {missing}")
    actions = info["admissible_actions"]
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ContractError(f"{where}: info['admissible_actions'] must be a list of str")
    if not isinstance(info["won"], bool):
        raise ContractError(f"{where}: info['won'] must be a bool, got {type(info['won']).__name__}")
    if not isinstance(info["instruction"], str):
        raise ContractError(f"{where}: info['instruction'] must be a str")
    try:
        hash(info["anchor"])
    except TypeError as exc:
        raise ContractError(f"{where}: info['anchor'] must be hashable (GiGPO groups steps by it)") from exc


def check_text_env(env: gym.Env, *, steps: int = 5, run_gymnasium_checker: bool = True) -> list[str]:
    """Raise :class:`ContractError` if ``env`` breaks the contract; return notes on what it lacks but may lack
    (e.g. admissible actions: a free-form env).

    Checks, in order:

    1. Gymnasium's ``check_env`` (spaces, reset/step signatures, seeding determinism), unless disabled.
    2. Observations and actions are strings; every ``reset`` and ``step`` info has :data:`INFO_KEYS`.
    3. The env is a :class:`TextEnv` with tasks: each split lists task ids, and resetting the same task twice
       (by id, and by split + index) gives byte-identical observations and admissible actions.
    4. A few steps with admissible actions (or a free-form action) return Gymnasium's 5-tuple with a float
       reward and bool flags; an arbitrary garbage action does not raise.
    """
    base = env.unwrapped
    if not isinstance(base, TextEnv):
        raise ContractError(f"{type(base).__name__} is not an agentrl.envs.TextEnv (agentrl.envs.make wraps a plain "
                            "Gymnasium env for you)")
    if not base.splits:
        raise ContractError("the env declares no splits")
    _garbage_step(env, base.task_ids(base.split)[0])  # before Gymnasium's checker, which sends random text too
    if run_gymnasium_checker:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium warns about wrappers and render fps; not contract breaks
            try:
                check_env(base, skip_render_check=True, skip_close_check=True)
            except Exception as exc:
                raise ContractError(f"Gymnasium's env checker failed: {_one_line(exc)}") from exc

    for split in base.splits:
        ids = base.task_ids(split)
        if len(ids) == 0:
            raise ContractError(f"split {split!r} has no tasks")
        if not all(isinstance(t, str) for t in list(ids[:10])):
            raise ContractError(f"task ids of split {split!r} must be str")

    split = base.split
    first_id = base.task_ids(split)[0]
    obs_a, info_a = env.reset(seed=0, options={"task_id": first_id})
    obs_b, info_b = env.reset(seed=0, options={"split": split, "task_index": 0})
    for obs, info, how in ((obs_a, info_a, "task_id"), (obs_b, info_b, "task_index")):
        if not isinstance(obs, str):
            raise ContractError(f"reset({how}) must return a str observation, got {type(obs).__name__}")
        _check_info(info, f"reset({how})")
        if info["task_id"] != first_id:
            raise ContractError(f"reset({how}) reported task_id {info['task_id']!r}, expected {first_id!r}")
    if obs_a != obs_b or info_a["admissible_actions"] != info_b["admissible_actions"]:
        raise ContractError("resetting the same task twice gave different initial states")

    obs, info = env.reset(seed=1, options={"task_id": first_id})
    if obs != obs_a:
        raise ContractError("the initial observation of a task must not depend on the reset seed")
    for i in range(steps):
        actions = info["admissible_actions"]
        action = actions[i % len(actions)] if actions else "look"
        result = env.step(action)
        if not (isinstance(result, tuple) and len(result) == 5):
            raise ContractError("step() must return (obs, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, info = result
        if not isinstance(obs, str):
            raise ContractError(f"step() must return a str observation, got {type(obs).__name__}")
        if not isinstance(reward, float) or not isinstance(terminated, bool) or not isinstance(truncated, bool):
            raise ContractError("step() must return a float reward and bool terminated/truncated")
        _check_info(info, f"step {i}")
        if info["task_id"] != first_id:
            raise ContractError("info['task_id'] changed during the episode")
        if terminated or truncated:
            break
    _check_info(_garbage_step(env, first_id), "garbage action")
    notes = []
    if not info_a["admissible_actions"]:
        notes.append("free-form: info['admissible_actions'] is empty, so the agent generates actions "
                     "(agent.mode=generate); agent.mode=score needs a list of actions")
    return notes


def play_expert(env: gym.Env, episodes: int = 3) -> tuple[int, int] | None:
    """Play ``episodes`` tasks of the train split with the env's expert (``env`` built with ``expert=True``);
    ``(won, played)``, or None when the env has no expert (``info["expert_action"]`` is None at the start)."""
    from agentrl.agents.scripted import ExpertAgent

    base = env.unwrapped
    ids = list(base.task_ids(base.split)[:episodes])
    agent, won = ExpertAgent(), 0
    for index, task_id in enumerate(ids):
        obs, info = env.reset(seed=index, options={"task_id": task_id})
        if info.get("expert_action") is None:
            if index == 0:
                return None
            raise ContractError(f"task {task_id!r}: info['expert_action'] is None at the start")
        while True:
            (action,) = agent.act([obs], [info])
            try:
                obs, _, terminated, truncated, info = env.step(action)
            except Exception as exc:
                raise ContractError(f"task {task_id!r}: the expert's action {action!r} raised {_one_line(exc)}") from exc
            if terminated or truncated:
                break
        won += bool(info["won"])
    return won, len(ids)


def _garbage_step(env: gym.Env, task_id: str) -> dict[str, Any]:
    env.reset(seed=2, options={"task_id": task_id})
    try:
        return env.step(GARBAGE_ACTION)[4]
    except Exception as exc:
        raise ContractError(f"step({GARBAGE_ACTION!r}) raised {_one_line(exc, 120)}; an action that is not possible "
                            "must get an observation saying so (a model's malformed reply is such an action)") from exc


#: The action :func:`check_text_env` sends to see that an impossible action gets an answer, not an exception.
GARBAGE_ACTION = "xyzzy <not an action> ✓"


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}{'…' if len(text) > limit else ''}"
