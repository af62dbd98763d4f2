"""The ALFWorld experts that label the build's demonstrations (agentrl.envs.alfworld.experts), on real train games."""

from __future__ import annotations

import pytest

from agentrl.envs.alfworld import experts


def test_the_searching_expert_labels_only_what_the_agent_can_know(build):
    """DAgger's labeller on a real ALFWorld game: before the task's object has been in sight it searches (the most
    likely unvisited receptacle by the prior, opening closed ones where it stands), never going straight to where
    the planner knows the object is; once the object is in sight it follows the planner."""
    import re

    import agentrl.envs as envs
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld", expert=True, max_steps=60)
    task_id = next(t for t in sorted(env.unwrapped.task_ids("train")) if "Mug-None-CoffeeMachine" in t)
    wanted = experts.wanted_object(env, task_id)
    assert wanted == "mug"
    obs, info = env.reset(options={"task_id": task_id})
    places = [a[len("go to "):] for a in info["admissible_actions"] if a.startswith("go to ")]
    closed = next(p for p in places if p.startswith(("fridge", "cabinet", "microwave")))
    prior = {"mug": {"shelf": 5, experts.object_type(closed): 3}}
    expert = experts.SearchingExpert(wanted, prior)

    shelves = sorted(p for p in places if p.startswith("shelf"))
    first = expert(obs, info)
    assert first == (f"go to {shelves[0]}" if shelves else f"go to {closed}")
    obs, _, _, _, info = env.step(f"go to {closed}")  # the agent goes elsewhere: a closed receptacle
    sees_mug = re.search(r"\bmug \d+", obs)
    label = expert(obs, info)
    assert label == (info["expert_action"] if sees_mug else f"open {closed}")
    # Walk on until the mug is in sight; until then: open where it stands if closed, else an unvisited place.
    visited = {closed}
    for place in places:
        if expert.seen:
            break
        if place in visited:
            continue
        obs, _, _, _, info = env.step(f"go to {place}")
        visited.add(place)
        label = expert(obs, info)
        if not expert.seen:
            if f"The {place} is closed" in obs:
                assert label == f"open {place}"
            else:
                assert label.startswith("go to ") and label[len("go to "):] not in visited
    assert expert.seen and label == info["expert_action"]
    env.close()


def test_the_planner_and_the_any_instance_expert_take_the_tasks_object_in_reach(build):
    """On real train games: where a tomato lies on the receptacle the agent stands at, the planner takes it (its
    focus includes objects of the goal's types where the agent stands; it used to walk on to the tomato its
    walkthrough names, which the any-instance labeller corrected), so that labeller changes nothing there and the
    game is won; in a two-object game the object already put on the target is never taken back."""
    import random
    import re

    import agentrl.envs as envs
    from agentrl.agents.react import ReActAgent
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld", expert=True, max_steps=60)
    agent = ReActAgent("alfworld", think=False, history_length=2, action_memory=12, list_actions=False)
    tomato = "train/pick_clean_then_place_in_recep-Tomato-None-DiningTable-4/trial_T20190907_142426_940554"
    vases = "train/pick_two_obj_and_place-Vase-None-CoffeeTable-227/trial_T20190909_034134_166906"
    if not {tomato, vases} <= set(env.unwrapped.task_ids("train")):
        pytest.skip("these ALFWorld train games are not installed")

    # The planner's own choice in the state the data showed: tomatoes 2 and 3 in reach, it takes one.
    obs, info = env.reset(options={"task_id": tomato})
    obs, _, _, _, info = env.step("go to diningtable 1")
    assert "tomato 2" in obs and re.fullmatch(r"take tomato [23] from diningtable 1", info["expert_action"])
    expert = experts.AnyInstanceExpert(experts.wanted_object(env, tomato), experts.target_kind(env, tomato),
                                     two_objects=False)
    assert expert(obs, info) == info["expert_action"] and expert.relabelled == 0

    # Whole episodes played by these labels: the tomato game from that state, the vase game from the state where the
    # first vase has just been put on the coffee table (the walkthrough up to its first "move"), where the planner
    # walks on to fetch the second.
    walkthrough = experts.walkthrough(env, vases)
    first_put = walkthrough[: next(i for i, c in enumerate(walkthrough) if c.startswith("move ")) + 1]
    for task_id, prefix, two_objects in ((tomato, ["go to diningtable 1"], False), (vases, first_put, True)):
        target = experts.target_kind(env, task_id)
        assert target == ("diningtable" if task_id == tomato else "coffeetable")
        expert = experts.AnyInstanceExpert(experts.wanted_object(env, task_id), target, two_objects)
        demos: list[dict] = []
        won = build.collect._expert_episode(env, agent, "alfworld", task_id, "search", demos, random.Random(0),
                                            prefix=list(prefix), labeller=expert)
        labels = [re.sub(r"</?action>", "", d["reply"]) for d in demos]
        assert won, labels
        if two_objects:
            assert not any(re.match(r"take vase \d+ from coffeetable", label) for label in labels), labels
        else:
            assert re.fullmatch(r"take tomato [23] from diningtable 1", labels[1]), labels
    env.close()


def test_the_searching_expert_takes_the_policys_own_search_move_as_its_label(build):
    """A search has many right moves: before the object is in sight, the policy's "go to" a receptacle not yet
    visited where the object is found in the train games is the label; a move to a visited receptacle, or to one
    where the object is never found, is labelled with the expert's own next receptacle."""
    import agentrl.envs as envs
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld", expert=True, max_steps=60)
    task_id = next(t for t in sorted(env.unwrapped.task_ids("train")) if "Mug-None-CoffeeMachine" in t)
    obs, info = env.reset(options={"task_id": task_id})
    places = [a[len("go to "):] for a in info["admissible_actions"] if a.startswith("go to ")]
    open_kinds = {experts.object_type(p) for p in places} - {"fridge", "cabinet", "microwave", "drawer", "safe"}
    plausible_kinds = sorted(open_kinds)[:2]
    prior = {"mug": {kind: 5 - i for i, kind in enumerate(plausible_kinds)}}
    plausible = [p for p in places if experts.object_type(p) in plausible_kinds]
    never = next(p for p in places if experts.object_type(p) not in plausible_kinds)
    expert = experts.SearchingExpert("mug", prior)
    assert expert(obs, info, f"go to {never}") == f"go to {expert.order[0]}"
    assert expert(obs, info, f"go to {plausible[-1]}") == f"go to {plausible[-1]}"
    obs, _, _, _, info = env.step(f"go to {plausible[-1]}")
    if expert(obs, info, f"go to {plausible[-1]}") == info["expert_action"]:
        pytest.skip("the mug was in sight at the first receptacle")
    assert expert.visited == {plausible[-1]}
    assert expert(obs, info, f"go to {plausible[0]}") == f"go to {plausible[0]}"
    assert expert(obs, info, "look") == f"go to {next(p for p in expert.order if p not in expert.visited)}"
    env.close()


def test_observable_labels_start_every_alfworld_episode_with_a_search_not_the_planners_shortcut(build, tmp_path):
    """``--alfworld-labels observable`` on real train games whose object is not where it is most often found: the
    first state of both episodes is labelled with a move to the most likely kind of receptacle (what the agent can
    know), where the planner's labels of the same games go straight to the object's hidden place."""
    import json
    import re

    from agentrl.agents.react import parse_reply
    import agentrl.envs as envs
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld")
    base = env.unwrapped
    train_ids = sorted(base.task_ids("train"))
    prior = experts.search_prior(base.games_root, train_ids)

    def first_take(task_id: str) -> tuple[str, str]:
        walkthrough = json.loads((base.games_root / task_id / "game.tw-pddl").read_text())["walkthrough"]
        obj, place = next(re.match(r"take (.+?) from (.+)$", c).groups() for c in walkthrough if c.startswith("take "))
        return experts.object_type(obj), experts.object_type(place)

    def top_kinds(wanted: str) -> set[str]:
        counts = prior[wanted]
        return {kind for kind, n in counts.items() if n == max(counts.values())}

    games = [t for t in train_ids if "pick_and_place_simple" in t
             and first_take(t)[1] not in top_kinds(first_take(t)[0])][:2]
    env.close()
    settings = {**build.common.AGENT, "list_actions": False}
    first_labels, search_labels = {}, {}
    for labels in ("observable", "planner"):
        out = tmp_path / f"{labels}.jsonl"
        stats = build.collect.collect_alfworld_shard(games, prior, 0, str(out), None, ("search", "detour"), settings,
                                                      labels)
        assert stats["labels"] == labels and stats["games"] == 2 and stats["search_won"] == 2
        search_labels[labels] = stats.get("search_labels", 0)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        for task_id in games:
            for kind in ("search", "detour"):
                reply = next(r["reply"] for r in rows if r["task_id"] == task_id and r["kind"] == kind)
                first_labels[labels, task_id, kind] = parse_reply(reply, require_think=False).action
    assert search_labels["observable"] >= 4 and search_labels["planner"] == 0
    for task_id in games:
        wanted, hidden_place = first_take(task_id)
        for kind in ("search", "detour"):
            observable = first_labels["observable", task_id, kind]
            assert observable.startswith("go to ")
            assert experts.object_type(observable[len("go to "):]) in top_kinds(wanted)
        planner = first_labels["planner", task_id, "detour"]
        assert experts.object_type(planner[len("go to "):]) == hidden_place
