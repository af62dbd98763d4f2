"""The built-in Crafting env: determinism, a winning expert, real partial progress, held-out targets."""

from __future__ import annotations

from collections import Counter

import pytest

import agentrl.envs as envs
from agentrl.envs.crafting import MAX_EXPERT_STEPS, MIN_EXPERT_STEPS, OOD_TARGETS, RECIPES, SPLIT_SIZES, make_task
from agentrl.errors import AgentRLError
from agentrl.testing import check_text_env


def play_expert(env, task_id=None, info=None):
    """Follow the expert from a fresh reset of ``task_id`` (or from the current state, whose ``info`` is given)."""
    if info is None:
        _, info = env.reset(options={"task_id": task_id})
    steps = 0
    while True:
        _, reward, terminated, truncated, info = env.step(info["expert_action"])
        steps += 1
        if terminated or truncated:
            return info["won"], reward, steps


def test_split_sizes_and_passes_check_text_env():
    env = envs.make("crafting")
    for split, size in SPLIT_SIZES.items():
        assert len(env.unwrapped.task_ids(split)) == size
    check_text_env(env)


def test_same_task_same_observation_byte_for_byte():
    a, b = envs.make("crafting"), envs.make("crafting")
    for index in (0, 17, 9999):
        obs_a, info_a = a.reset(seed=1, options={"task_index": index})
        obs_b, info_b = b.reset(seed=99, options={"split": "train", "task_index": index})
        assert obs_a == obs_b and info_a["admissible_actions"] == info_b["admissible_actions"]
        for action in info_a["admissible_actions"][:3]:
            assert a.step(action)[0] == b.step(action)[0]
    assert a.reset(seed=5)[0] == b.reset(seed=5)[0]  # a seeded draw picks the same task


@pytest.mark.parametrize("split", list(SPLIT_SIZES))
def test_expert_wins_within_the_advertised_horizon(split):
    env = envs.make("crafting", split=split, expert=True)
    for task_id in env.unwrapped.task_ids(split)[:60]:
        won, reward, steps = play_expert(env, task_id)
        assert won and reward == 10.0
        assert MIN_EXPERT_STEPS <= steps <= MAX_EXPERT_STEPS


def test_out_of_distribution_targets_are_held_out():
    train_targets = {make_task("train", i).target for i in range(400)}
    ood_targets = {make_task("eval_out_of_distribution", i).target for i in range(200)}
    assert not train_targets & set(OOD_TARGETS)
    assert ood_targets <= set(OOD_TARGETS)


def test_failed_attempt_makes_partial_progress_then_recovers():
    """Follow the expert half way, wander, and the expert still finishes: progress is kept in the state."""
    env = envs.make("crafting", expert=True).unwrapped
    obs, info = env.reset(options={"task_index": 42})
    full_plan_length = env.task(info["task_id"]).expert_length
    for _ in range(full_plan_length // 2):
        obs, _, _, _, info = env.step(info["expert_action"])
    obs, _, _, _, info = env.step("inventory")
    assert obs.startswith("You carry") and "nothing" not in obs
    won, _, remaining = play_expert(env, info=info)
    assert won and remaining <= full_plan_length - full_plan_length // 2 + 2


def test_inadmissible_action_changes_nothing():
    env = envs.make("crafting").unwrapped
    obs, info = env.reset(options={"task_index": 3})
    obs2, reward, terminated, truncated, info2 = env.step("craft a spaceship")
    assert obs2 == "Nothing happens." and reward == 0.0 and not terminated
    assert info2["admissible_actions"] == info["admissible_actions"]


def test_crafting_consumes_ingredients():
    env = envs.make("crafting").unwrapped
    env.reset(options={"task_index": 0})
    task = env.task(env.task_id)
    wood_place = task.material_places["wood"]
    env.step(f"go to {wood_place}")
    env.step("gather wood")
    env.step("go to workbench")
    if "plank" not in task.known_recipes:
        pytest.skip("task 0 does not list the plank recipe")
    obs, *_ = env.step("craft plank")
    assert obs == "You craft a plank from wood. You carry plank."
    assert env.step("inventory")[0] == "You carry plank."
    assert "craft plank" not in env.step("look")[4]["admissible_actions"]


def test_recipes_are_acyclic_and_grounded():
    def depth(item, seen=()):
        assert item not in seen, f"cycle through {item}"
        if item not in RECIPES:
            return 0
        return 1 + max(depth(part, seen + (item,)) for part in RECIPES[item][1])

    assert max(depth(item) for item in RECIPES) >= 3


def test_random_agent_rarely_wins_but_tasks_are_not_impossible():
    env = envs.make("crafting", max_steps=50)
    rng = __import__("numpy").random.default_rng(0)
    wins = Counter()
    for index in range(1000):
        obs, info = env.reset(options={"task_index": index})
        while True:
            actions = info["admissible_actions"]
            obs, reward, terminated, truncated, info = env.step(actions[int(rng.integers(len(actions)))])
            if terminated or truncated:
                wins[info["won"]] += 1
                break
    assert 0 < wins[True] < 30  # sparse: well under 1% of random episodes succeed


def test_max_plan_length_keeps_short_tasks_with_their_ids():
    full = envs.make("crafting").unwrapped
    short = envs.make("crafting", max_plan_length=6, expert=True)
    for split in SPLIT_SIZES:
        ids = short.unwrapped.task_ids(split)
        assert len(ids) < SPLIT_SIZES[split]
        assert len(ids) > 0 or split == "eval_out_of_distribution"  # held-out targets all need 7+ steps
        assert set(ids) <= set(full.task_ids(split))
        assert all(make_task(*(lambda s, i: (s, int(i)))(*t.split("/"))).expert_length <= 6 for t in ids[:50])
    task_id = short.unwrapped.task_ids("train")[3]
    obs, _ = short.reset(options={"task_index": 3})
    assert obs == full.reset(options={"task_id": task_id})[0]  # same id, same world, same observation
    assert play_expert(short, task_id)[2] <= 6
    long_id = next(t for t in full.task_ids("train") if t not in set(short.unwrapped.task_ids("train")))
    with pytest.raises(AgentRLError, match="unknown task_id"):
        short.reset(options={"task_id": long_id})
    with pytest.raises(ValueError):
        envs.make("crafting", max_plan_length=3)


def test_min_plan_length_keeps_long_tasks_and_combines_with_max():
    """A long-horizon slice: plans of 8-12 steps, every kept task's expert plan in range, ids shared with the full
    split; a window that excludes everything is refused."""
    full = envs.make("crafting").unwrapped
    window = envs.make("crafting", min_plan_length=8, max_plan_length=12, expert=True)
    lengths = {split: [make_task(split, int(t.split("/")[1])).expert_length
                       for t in window.unwrapped.task_ids(split)] for split in SPLIT_SIZES}
    for split, found in lengths.items():
        assert found and all(8 <= n <= 12 for n in found), split
        assert len(found) < SPLIT_SIZES[split] or split == "eval_out_of_distribution"  # its targets all need 8-12
        assert set(window.unwrapped.task_ids(split)) <= set(full.task_ids(split))
    assert max(lengths["train"]) == 12 and min(lengths["train"]) == 8
    task_id = window.unwrapped.task_ids("train")[0]
    assert 8 <= play_expert(window, task_id)[2] <= 12
    with pytest.raises(ValueError, match="above max_plan_length"):
        envs.make("crafting", min_plan_length=9, max_plan_length=7)
