"""Real ReAct prompts of env states met by random admissible moves, and the small models that read them."""

from __future__ import annotations

import random
from pathlib import Path

from throughput_parts import SHARED_ALFWORLD


def alfworld_missing() -> str | None:
    """None when the trainer can find ALFWorld games, else what to unpack (and from where)."""
    try:
        from agentrl.envs.alfworld import data_status
    except ImportError as exc:  # the engine is not installed
        return f"ALFWorld cannot be imported ({exc})"
    problem = data_status()
    if problem is None:
        return None
    archives = [SHARED_ALFWORLD / f"json_2.1.1-{part}.tar.gz" for part in ("train", "eval")]
    commands = " && ".join(f"agentrl data alfworld --archive {a}" for a in archives)
    return (f"no ALFWorld games at $ALFWORLD_DATA or ~/.cache/alfworld. The trainer needs the train split and an "
            f"eval split: unpack both archives with `{commands}` (json_2.1.1/train and valid_train; json_2.1.1/"
            f"valid_seen and valid_unseen). Details: {problem}")


def collect_states(env_name: str, env_args: dict, split: str, tasks: int, steps: int, seed: int) -> list[tuple]:
    """(observation, info with the admissible actions, history) of the states met by random admissible moves (an
    untrained policy) on ``tasks`` tasks, shuffled (seeded) so that any first N mix tasks and steps. ``history`` is
    the (observation, action) steps before the state."""
    from agentrl import envs

    env = envs.make(env_name, **env_args)
    try:
        ids = list(env.unwrapped.task_ids(split))
        rng = random.Random(seed)
        states = []
        for task_id in rng.sample(ids, min(tasks, len(ids))):
            obs, info = env.reset(options={"task_id": task_id})
            history: list[tuple[str, str]] = []
            for _ in range(steps):
                actions = list(info["admissible_actions"])
                states.append((obs, {"admissible_actions": actions}, list(history)))
                action = rng.choice(actions)
                history.append((obs, action))
                obs, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
        rng.shuffle(states)
        return states
    finally:
        env.close()


def collect_group_states(env_name: str, split: str, tasks: int, group: int, steps: int, seed: int) -> list[list[tuple]]:
    """What the trainer's policy sees, step by step, in a rollout of ``tasks`` tasks x ``group`` envs: per step, the
    (observation, info, history) of every env (members of a group play their own random admissible moves, so their
    prompts are identical at step 0 and diverge after). Episodes that end early are left out of later steps."""
    from agentrl import envs

    env = envs.make(env_name)
    try:
        ids = list(env.unwrapped.task_ids(split))
        rng = random.Random(seed)
        per_step: list[list[tuple]] = [[] for _ in range(steps)]
        for task_id in rng.sample(ids, min(tasks, len(ids))):
            for _ in range(group):
                obs, info = env.reset(options={"task_id": task_id})
                history: list[tuple[str, str]] = []
                for step in range(steps):
                    actions = list(info["admissible_actions"])
                    per_step[step].append((obs, {"admissible_actions": actions}, list(history)))
                    action = rng.choice(actions)
                    history.append((obs, action))
                    obs, _, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        break
        return per_step
    finally:
        env.close()


def messages(states: list[tuple], env_name: str, think: bool) -> list[list[dict]]:
    from agentrl.agents.react import ReActAgent

    agent = ReActAgent(ReActAgent.family_for_env(env_name), think=think)
    agent.reset(len(states))
    out = []
    for index, (obs, info, history) in enumerate(states):
        for past_obs, action in history:
            agent.record(index, past_obs, action)
        out.append(agent.messages(index, obs, info))
    return out


def build_model(root: Path, name: str, corpus: list[str], hidden: int, layers: int, vocab: int) -> dict:
    from agentrl.models import save_tiny_model
    from agentrl.policy import HFPolicy

    path = save_tiny_model(root / name, seed=0, vocab_size=vocab, hidden_size=hidden, num_layers=layers,
                           corpus=corpus)
    policy = HFPolicy(str(path), device="cpu")
    return {"path": str(path), "hidden": hidden, "layers": layers, "vocab": len(policy.tokenizer),
            "params": policy.num_parameters(), "dtype": str(next(policy.model.parameters()).dtype)}

