"""Grouped rollouts in two waves: the env workers step one wave while the policy acts for the other, and the
trajectories do not depend on how many workers the pool has."""

from __future__ import annotations

import pytest
from tiny_model import tiny_model_dir

from agentrl.agents.react import ReActAgent
from agentrl.envpool import EnvPool
from agentrl.policy import GenerationConfig, HFPolicy
from agentrl.rollout import collect_rollouts

TASKS = ["train/00000", "train/00001"]


def play(pool, tasks, group_size, *, overlap=True, policy=None):
    policy = policy or HFPolicy(tiny_model_dir())
    agent = ReActAgent(env_family="crafting", think=False)
    # temperature 1: sampled choices, so a change of seed or of the rows in a policy call would show
    return collect_rollouts(pool, agent, policy, tasks, group_size, GenerationConfig(temperature=1.0,
                            max_prompt_tokens=192), mode="score", seed=5, overlap_env_steps=overlap)


def actions(batch):
    return {t.trajectory.traj_id: [s.action for s in t.trajectory.steps] for t in batch.trajectories}


@pytest.mark.parametrize("tasks, group_size", [(TASKS, 2), (TASKS[:1], 3)])
def test_overlapped_rollouts_do_not_depend_on_the_number_of_workers(tasks, group_size):
    with EnvPool("crafting", {"max_steps": 4}, workers=0) as local:
        expected = actions(play(local, tasks, group_size))
    with EnvPool("crafting", {"max_steps": 4}, workers=2, slots_per_group=group_size) as pool:
        got = actions(play(pool, tasks, group_size))
    assert got == expected
    assert len(expected) == len(tasks) * group_size and all(len(a) == 4 for a in expected.values())


class RecordingPool(EnvPool):
    """An EnvPool that logs when each batch of steps is sent and when its replies are read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[tuple[str, tuple[int, ...]]] = []

    def step_async(self, actions):
        slots = tuple(s for s, _ in actions)
        self.events.append(("send", slots))
        pending = super().step_async(actions)
        read = pending.result

        def result():
            self.events.append(("read", slots))
            return read()

        pending.result = result
        return pending


def recorded(overlap):
    policy = HFPolicy(tiny_model_dir())
    with RecordingPool("crafting", {"max_steps": 3}, workers=1, slots_per_group=2) as pool:
        score = policy.score_choices

        def logged(prompts, *args, **kwargs):
            pool.events.append(("act", (len(prompts),)))
            return score(prompts, *args, **kwargs)

        policy.score_choices = logged
        batch = play(pool, TASKS, 2, overlap=overlap, policy=policy)
    return pool.events, batch


def test_the_policy_acts_for_one_wave_while_the_envs_step_the_other():
    events, batch = recorded(overlap=True)
    # group 0 (slots 0, 1) and group 1 (slots 2, 3) alternate; a wave's replies are read only after the other
    # wave's policy call, so its env steps ran during that call
    assert events[:7] == [("act", (2,)), ("send", (0, 1)), ("act", (2,)), ("send", (2, 3)),
                          ("read", (0, 1)), ("act", (2,)), ("send", (0, 1))]
    assert [e for e in events if e[0] == "act"] == [("act", (2,))] * 6  # 3 steps x 2 waves
    assert len(batch.trajectories) == 4 and batch.stats["time/env_step"] >= 0


def test_without_overlap_every_step_is_one_policy_call_and_one_blocking_env_step():
    events, batch = recorded(overlap=False)
    assert events == [("act", (4,)), ("send", (0, 1, 2, 3)), ("read", (0, 1, 2, 3))] * 3
    assert len(batch.trajectories) == 4
