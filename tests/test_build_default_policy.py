"""scripts/build_default_policy.py: the parts of the build that decide what the policy is trained on."""

from __future__ import annotations

import pytest
from conftest import DEFAULT_POLICY_SCRIPT as SCRIPT

from agentrl.models import resolve_model
from agentrl.policy import HFPolicy


def test_sampled_candidates_keep_the_experts_reply_and_the_states_order(build, tmp_path):
    policy = HFPolicy(resolve_model("tiny-random", tmp_path), device="cpu")
    candidates = [f"<action>go to shelf {i}</action>" for i in range(30)]
    demos = [{"prompt": f"You see shelf {k}.", "reply": candidates[k], "candidates": candidates} for k in (0, 17, 29)]

    full = build.train._demonstrations(policy, demos, 1024)
    assert [len(d.choice_ids) for d in full] == [30, 30, 30]
    assert [d.expert_index for d in full] == [0, 17, 29]

    sampled = build.train._demonstrations(policy, demos, 1024, max_candidates=9, seed=3)
    position = {tuple(policy.choice_token_ids(c)): i for i, c in enumerate(candidates)}
    for demo, row in zip(demos, sampled):
        assert len(row.choice_ids) == 9
        assert row.choice_ids[row.expert_index] == policy.choice_token_ids(demo["reply"])
        kept = [position[tuple(ids)] for ids in row.choice_ids]
        assert kept == sorted(set(kept))  # distinct, in the state's order
    assert len({tuple(map(tuple, row.choice_ids)) for row in sampled}) == 3  # a fresh draw per state
    again = build.train._demonstrations(policy, demos, 1024, max_candidates=9, seed=3)
    assert [r.choice_ids for r in again] == [r.choice_ids for r in sampled]  # seeded

    # A DAgger row keeps the reply the policy chose there (the mistake to unlearn) beside the expert's, always.
    dagger = [{**demo, "played": candidates[(k + 5) % 30]} for k, demo in zip((0, 17, 29), demos)]
    for seed in range(5):
        for demo, row in zip(dagger, build.train._demonstrations(policy, dagger, 1024, max_candidates=9, seed=seed)):
            assert len(row.choice_ids) == 9 and policy.choice_token_ids(demo["played"]) in row.choice_ids
            assert row.choice_ids[row.expert_index] == policy.choice_token_ids(demo["reply"])


def test_hard_negatives_draw_the_candidates_with_the_experts_command_word_first(build, tmp_path):
    """Where the expert takes the task's object, the other objects at that place are the comparison that teaches
    which object the task names: with hard negatives they are all kept (up to the cap), the rest filled at random."""
    policy = HFPolicy(resolve_model("tiny-random", tmp_path), device="cpu")
    takes = [f"<action>take {o} 1 from desk 1</action>" for o in ("bowl", "cellphone", "pen", "book")]
    goes = [f"<action>go to shelf {i}</action>" for i in range(26)]
    candidates = goes[:10] + takes + goes[10:]
    demo = {"prompt": "Your task is to: put a bowl in shelf 1. You see a bowl 1, a cellphone 1...",
            "reply": takes[0], "candidates": candidates}
    ids = {tuple(policy.choice_token_ids(c)): c for c in candidates}
    for seed in range(5):
        (row,) = build.train._demonstrations(policy, [demo], 1024, max_candidates=9, seed=seed, hard_negatives=True)
        kept = [ids[tuple(c)] for c in row.choice_ids]
        assert len(kept) == 9 and set(takes) <= set(kept) and kept[row.expert_index] == takes[0]
        assert kept == [c for c in candidates if c in kept]  # in the state's order
    # Without them, 8 of 29 others at random leave most of the 3 other takes out on most draws.
    random_rows = [build.train._demonstrations(policy, [demo], 1024, max_candidates=9, seed=seed)[0]
                   for seed in range(20)]
    assert sum(all(policy.choice_token_ids(t) in row.choice_ids for t in takes) for row in random_rows) < 5
    # More same-word candidates than the cap: the sample is all of that word.
    (row,) = build.train._demonstrations(policy, [{**demo, "reply": goes[3]}], 1024, max_candidates=9, seed=0,
                                         hard_negatives=True)
    assert all(ids[tuple(c)].startswith("<action>go to") for c in row.choice_ids)


def test_demonstrations_are_rendered_with_the_agent_settings_the_policy_ships_with(build, tmp_path):
    """Collection, training, evaluation and the shipped agentrl.json use one set of agent settings, those the cache
    was collected with: the prompts trained on are the prompts the trainer will show (here: older actions listed
    once the history of 2 scrolls past them, and an action list only with --list-actions)."""
    import json
    import random

    import agentrl.envs as envs
    from agentrl.agents.react import ReActAgent

    assert build.common.AGENT["action_memory"] > 0
    short, listed = build.options.parse_args([]), build.options.parse_args(["--list-actions"])
    assert build.common.agent_settings(short, tmp_path / "new") == {**build.common.AGENT, "list_actions": False}
    legacy = tmp_path / "legacy"  # a cache collected before demos/agent.json: the reference prompt's list
    (legacy / "demos").mkdir(parents=True)
    assert build.common.agent_settings(listed, legacy) == {**build.common.AGENT, "list_actions": True}
    with pytest.raises(SystemExit, match="--list-actions"):
        build.common.agent_settings(short, legacy)
    (legacy / "demos" / "agent.json").write_text(json.dumps({**build.common.AGENT, "list_actions": False}))
    assert build.common.agent_settings(short, legacy)["list_actions"] is False

    env = envs.make("crafting", expert=True)
    for listed in (True, False):
        agent = ReActAgent("crafting", **{**build.common.AGENT, "list_actions": listed})
        for task_id in env.unwrapped.task_ids("train"):  # the first task whose expert episode has 4 steps or more
            episode: list[dict] = []
            if build.collect._expert_episode(env, agent, "crafting", task_id, "expert", episode, random.Random(0)) \
                    and len(episode) >= 4:
                break
        assert len(episode) >= 4
        assert "Your action" not in episode[2]["prompt"]  # steps 1-2 are still in the history
        assert "Your action at step 1 was: " in episode[3]["prompt"]
        assert all(d["reply"] in d["candidates"] for d in episode)
        assert all(("Your admissible actions" in d["prompt"]) == listed for d in episode)
    env.close()


def test_dagger_labels_the_states_the_policy_itself_reaches_with_the_planners_action(build):
    """DAgger's data: the shipped policy plays a real ALFWorld train game; each state it reaches is recorded with the
    planner's action for that state (not the policy's), the prompt the agent showed there, and the episode stops
    once the policy loops (same move from the same observation 3 times)."""
    import agentrl.envs as envs
    from agentrl.agents.react import ReActAgent
    from agentrl.envs.alfworld import data_status
    from agentrl.models import EMBEDDED_POLICY, EMBEDDED_POLICY_DIR

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    if not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file():
        pytest.skip("the embedded policy is not built")
    policy = HFPolicy(resolve_model(EMBEDDED_POLICY, EMBEDDED_POLICY_DIR.parent), device="cpu")
    env = envs.make("alfworld", expert=True, max_steps=60)
    agent = ReActAgent("alfworld", **build.common.AGENT)
    task_id = sorted(env.unwrapped.task_ids("train"))[0]
    rows: list[dict] = []
    won, played = build.dagger._policy_episode(env, agent, policy, task_id, "dagger-T0", rows, 0.0, seed=0,
                                               max_steps=12)
    assert rows and len(rows) == len(played) <= 12

    # Replay the policy's moves: every row is the state it reached, labelled with the planner's action there.
    obs, info = env.reset(options={"task_id": task_id})
    agent.reset(1)
    observations = []
    for row, action in zip(rows, played):
        assert row["prompt"] == agent.messages(0, obs, info)[0]["content"]
        assert row["reply"] == f"<action>{info['expert_action']}</action>" and row["reply"] in row["candidates"]
        assert row["kind"] == "dagger-T0" and row["task_id"] == task_id
        assert row["played"] == f"<action>{action}</action>" and row["played"] in row["candidates"]
        observations.append(obs)
        agent.record(0, obs, action)
        obs, _, terminated, truncated, info = env.step(action)
    env.close()
    assert any(row["reply"] != f"<action>{action}</action>" for row, action in zip(rows, played))  # not the expert
    if not won and len(played) < 12:  # it stopped early: a loop
        assert sum((o, a) == (observations[-1], played[-1]) for o, a in zip(observations, played)) == 3


def test_an_interrupted_training_stage_resumes_and_reports_every_epoch_once(build, tmp_path, monkeypatch):
    policy_dir = resolve_model("tiny-random", tmp_path)
    candidates = [f"<action>go to shelf {i}</action>" for i in range(6)]
    rows = [{"env": "alfworld", "kind": "search", "prompt": f"You see shelf {k}.", "reply": candidates[k % 6],
             "candidates": candidates} for k in range(12)]
    args = build.options.parse_args(["--max-prompt-tokens", "256", "--max-candidates", "3", "--batch-size", "4",
                                     "--checkpoint-every", "2", "--threads", "1"])
    out = tmp_path / "sft"
    messages = []

    def crash_when_epoch_1_is_logged(message):
        messages.append(message)
        if "epoch 1:" in message:
            raise KeyboardInterrupt  # after epoch 1's history entry, before its end-of-epoch checkpoint

    monkeypatch.setattr(build.train, "log", crash_when_epoch_1_is_logged)
    with pytest.raises(KeyboardInterrupt):
        build.train.fit(HFPolicy(policy_dir, device="cpu"), rows, rows[:4], args, 1e-3, 2, "train", out)
    monkeypatch.setattr(build.train, "log", messages.append)
    report = build.train.fit(HFPolicy(policy_dir, device="cpu"), rows, rows[:4], args, 1e-3, 2, "train", out)
    assert any(m.startswith("train: resuming from") for m in messages)
    assert [e["epoch"] for e in report["epochs"]] == [1, 2]
    assert report["seconds"] >= report["epochs"][-1]["seconds"] > 0


def test_the_card_stage_adds_results_measured_on_the_packaged_weights(build, tmp_path, monkeypatch):
    """`--stages eval,card --eval-packaged`: the real packaged policy plays Crafting with the settings of its own
    agentrl.json; the result lands in its agentrl.json and card, marked as measured on the packaged weights, and the
    weights stay as they were."""
    import json
    import shutil

    from agentrl.models import EMBEDDED_POLICY_DIR

    # The eval jobs run in spawned processes, which import the recipe's package by name.
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    out = tmp_path / "tiny"
    shutil.copytree(EMBEDDED_POLICY_DIR, out)
    weights = (out / "model.safetensors").read_bytes()
    before = json.loads((out / "agentrl.json").read_text())
    monkeypatch.setattr(build.evaluate, "EVAL_JOBS",
                        (("crafting-score", "crafting", "eval_in_distribution", 3, "score"),))
    build.stages.main(["--work", str(tmp_path / "work"), "--out", str(out), "--stages", "eval,card", "--eval-packaged",
                       "--workers", "1"])
    row = json.loads((tmp_path / "work" / "eval-packaged" / "crafting-score.json").read_text())
    assert row["agent"] == "score" and row["by_type"]["All"]["n"] == 3
    after = json.loads((out / "agentrl.json").read_text())
    assert after["results"]["crafting-score"] == {"split": row["split"], "agent": "score", "by_type": row["by_type"],
                                                  "weights": "packaged"}
    assert ({k: v for k, v in after["results"].items() if k != "crafting-score"} ==
            {k: v for k, v in before["results"].items() if k != "crafting-score"})
    card = (out / "README.md").read_text()
    success = row["by_type"]["All"]["success"]
    assert f"| crafting | eval_in_distribution (3) | {success:.1f}% | 0.0% |" in card
    packaged = " ".join(card.split()).split("bf16 weights, after the build (the `card` stage): ", 1)[1].split(".")[0]
    assert "`crafting-score`" in packaged
    # The shipped card's random ALFWorld rows were measured by the card stage too, but do not depend on the weights.
    assert before["results"]["alfworld-unseen-random"]["weights"] == "packaged" and "random" not in packaged
    assert (out / "model.safetensors").read_bytes() == weights
    with pytest.raises(SystemExit, match="no results"):
        build.stages.main(["--work", str(tmp_path / "empty"), "--out", str(out), "--stages", "card"])


def test_the_card_says_what_free_generation_measured_and_keeps_its_prose_wrapped(build):
    """The shipped build record rendered three ways: without a free-generation result, with one far below the best
    admissible action's (the shipped policy's 0/134), and with one close to it."""
    import json

    from agentrl.models import EMBEDDED_POLICY_DIR

    record = json.loads((EMBEDDED_POLICY_DIR / "agentrl.json").read_text())
    results = {k: v for k, v in record["results"].items() if k != "alfworld-unseen-generate"}
    best = results["alfworld-unseen-greedy"]["by_type"]["All"]

    def card(generate_success=None):
        rows = dict(results)
        if generate_success is not None:
            rows["alfworld-unseen-generate"] = {"split": "eval_out_of_distribution", "agent": "generate",
                                                "by_type": {"All": {**best, "success": generate_success}}}
        return build.card.model_card(record, rows, record.get("results_before_dagger"))

    def prose(text):
        return " ".join(text.split())

    assert "it is not measured here" in prose(card())
    worse = card(0.0)
    assert "runs but plays far worse" in prose(worse) and "keep `agent.mode: score`" in prose(worse)
    assert "works too and is measured below" in prose(card(best["success"] - 1))
    assert all(len(line) <= 118 for line in worse.splitlines() if not line.startswith("|"))


def test_a_smaller_builds_games_are_the_first_of_a_larger_ones(build):
    """--alfworld-skip-games K relies on it: the balanced order does not depend on the count asked for, so a build
    continued from a K-game model trains on games that model never saw."""
    labels = {f"{label}-{i}": label for label, n in (("pick", 50), ("look", 9), ("heat", 30)) for i in range(n)}
    small, large = build.collect.balanced_games(labels, 30, seed=0), build.collect.balanced_games(labels, 90, seed=0)
    assert large[:len(small)] == small
    assert len(small) == 29 and sorted(labels[g] for g in small).count("look") == 9  # a short type gives all it has
    assert len(large) == 9 + 30 + 30 and len(set(large)) == len(large)
    assert build.collect.balanced_games(labels, 90, seed=1) != large


def test_a_build_continued_from_the_packaged_policy_trains_its_weights_on_new_games(build, tmp_path, monkeypatch):
    """`--init-from <packaged policy> --alfworld-skip-games K`: the tokenizer and weights are the packaged policy's
    (trained further, not a new Llama), only games after the first K are collected, and the new agentrl.json and
    card record the build it continued and the games of both."""
    import json
    import shutil

    from safetensors.torch import load_file

    from agentrl.envs.alfworld import data_status
    from agentrl.models import EMBEDDED_POLICY_DIR

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    if not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file():
        pytest.skip("the embedded policy is not built")
    # The collection runs in spawned processes, which import the recipe's package by name.
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    start = tmp_path / "start"
    shutil.copytree(EMBEDDED_POLICY_DIR, start)
    earlier = json.loads((start / "agentrl.json").read_text())
    work, out = tmp_path / "work", tmp_path / "out"
    for module in (build.collect, build.tokenizer, build.train, build.dagger, build.evaluate, build.package):
        monkeypatch.setattr(module, "log", lambda message: None)
    options = ["--work", str(work), "--out", str(out), "--init-from", str(start), "--alfworld-games", "12",
               "--alfworld-skip-games", "10", "--webshop-goals", "0", "--crafting-tasks", "0", "--textworld-games", "0",
               "--threads", "1", "--lr", "1e-4"]
    build.stages.main(options + ["--stages", "collect,tokenizer,train,package", "--workers", "1"])

    played = json.loads((work / "demos" / "alfworld-0.done.json").read_text())["games_used"]
    from agentrl import envs

    base = envs.make("alfworld").unwrapped
    labels = {task_id: base.task(task_id).label for task_id in base.task_ids("train")}
    assert played == build.collect.balanced_games(labels, 12, seed=0)[10:]  # the 2 games after those of a 10-game build
    assert (out / "tokenizer.json").read_text() == (start / "tokenizer.json").read_text()
    before, after = load_file(start / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    moved = [name for name in before if not before[name].equal(after[name])]
    assert moved  # trained...
    for name in moved:  # ...from these weights: a new Llama would be nowhere near them
        assert (after[name].float() - before[name].float()).norm() < 0.1 * before[name].float().norm()
    packaged = json.loads((out / "agentrl.json").read_text())
    assert packaged["continued_from"] == {k: v for k, v in earlier.items() if not k.startswith("results")}
    assert packaged["alfworld_train_games"] == earlier["alfworld_train_games"] + 2
    assert packaged["architecture"] == earlier["architecture"]
    assert packaged["command"] == ("python scripts/build_default_policy.py --alfworld-games 12 "
                                   f"--alfworld-skip-games 10 --init-from {start} --lr 0.0001")
    card = " ".join((out / "README.md").read_text().split())
    assert f"This build continued an earlier one: the agentrl-tiny built on {earlier['built']}" in card
    assert "2 further ALFWorld train games" in card


def test_zero_epochs_from_a_packaged_policy_start_dagger_from_its_weights_unchanged(build, tmp_path, monkeypatch):
    """`--init-from MODEL --epochs 0`: the train stage hands MODEL's weights (bf16 files, float32 in training)
    and tokenizer to DAgger as they are; without --init-from, 0 epochs would be an untrained Llama: refused."""
    import json

    from safetensors.torch import load_file

    from agentrl.models import EMBEDDED_POLICY_DIR

    if not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file():
        pytest.skip("the embedded policy is not built")
    for module in (build.collect, build.tokenizer, build.train, build.dagger, build.evaluate, build.package):
        monkeypatch.setattr(module, "log", lambda message: None)
    work = tmp_path / "work"
    with pytest.raises(SystemExit, match="--epochs 0 .* needs --init-from"):
        build.stages.main(["--work", str(work), "--stages", "tokenizer,train", "--epochs", "0"])
    build.stages.main(["--work", str(work), "--stages", "tokenizer,train", "--epochs", "0", "--init-from",
                       str(EMBEDDED_POLICY_DIR), "--threads", "1"])
    before, after = load_file(EMBEDDED_POLICY_DIR / "model.safetensors"), load_file(work / "sft" / "model.safetensors")
    assert before.keys() == after.keys()
    for name in before:
        assert after[name].dtype.is_floating_point and after[name].equal(before[name].to(after[name].dtype))
    assert (work / "tokenizer" / "tokenizer.json").read_text() == (EMBEDDED_POLICY_DIR / "tokenizer.json").read_text()
    report = json.loads((work / "sft" / "train.json").read_text())
    assert report["epochs"] == [] and report["init_from"]["path"] == str(EMBEDDED_POLICY_DIR)
    assert report["init_from"]["build"]["alfworld_train_games"] >= 1


def test_dagger_on_a_kept_packaged_policy_is_packaged_with_the_earlier_builds_sft_on_its_card(build, tmp_path,
                                                                                           monkeypatch):
    """`--init-from <packaged policy> --epochs 0 --dagger-rounds 1`: DAgger fine-tunes the packaged weights on
    states they reach in games they never saw, and the package's card describes the earlier build's SFT (its data,
    loss, time) and the round, with the packaged policy's own results as those before DAgger."""
    import json
    import shutil

    from safetensors.torch import load_file

    from agentrl.envs.alfworld import data_status
    from agentrl.models import EMBEDDED_POLICY_DIR

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    if not (EMBEDDED_POLICY_DIR / "model.safetensors").is_file():
        pytest.skip("the embedded policy is not built")
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # spawned workers import the recipe's package by name
    for module in (build.collect, build.tokenizer, build.train, build.dagger, build.evaluate, build.package):
        monkeypatch.setattr(module, "log", lambda message: None)
    start = tmp_path / "start"
    shutil.copytree(EMBEDDED_POLICY_DIR, start)
    earlier = json.loads((start / "agentrl.json").read_text())
    work, out = tmp_path / "work", tmp_path / "out"
    build.stages.main(["--work", str(work), "--out", str(out), "--init-from", str(start), "--epochs", "0",
                       "--alfworld-games", "12", "--alfworld-skip-games", "10", "--webshop-goals", "0",
                       "--crafting-tasks", "0", "--textworld-games", "0", "--threads", "1", "--workers", "1",
                       "--dagger-rounds", "1", "--dagger-minutes", "0.01", "--dagger-replay", "20",
                       "--dagger-lr", "1e-4", "--stages", "collect,tokenizer,train,dagger,package"])

    (report,) = json.loads((out / "agentrl.json").read_text())["dagger"]
    assert report["from"] == "sft" and report["dagger_rows"] > 0 and 0 < report["replay_rows"] <= 20
    played = report["collect"]["alfworld-0"]
    assert played["games"] == 1  # one game started within the time given, played greedily and sampled
    before, after = load_file(start / "model.safetensors"), load_file(out / "model.safetensors")
    moved = [name for name in before if not before[name].equal(after[name])]
    assert moved
    for name in moved:  # fine-tuned from the packaged weights
        assert (after[name].float() - before[name].float()).norm() < 0.1 * before[name].float().norm()
    packaged = json.loads((out / "agentrl.json").read_text())
    assert packaged["train"]["epochs"] == [] and packaged["alfworld_train_games"] == earlier["alfworld_train_games"] + 2
    started = {k: v["by_type"] for k, v in earlier["results"].items() if v["agent"] in build.evaluate.MODEL_AGENTS}
    assert {k: v["by_type"] for k, v in packaged["results_before_dagger"].items()} == started
    assert packaged["results"]["alfworld-unseen-expert"]["by_type"] == earlier["results"]["alfworld-unseen-expert"]["by_type"]
    card = " ".join((out / "README.md").read_text().split())
    assert f"This build kept the weights and tokenizer of the agentrl-tiny built on {earlier['built']}" in card
    assert "ran DAgger on them (below) in 2 ALFWorld train games that model had not seen" in card
    sft_line = f"{earlier['train']['train_demos']} demonstrations"
    assert sft_line in card  # the earlier build's SFT, described from its record
    assert "Then DAgger (Ross et al. 2011), 1 round(s)" in card
    assert "Validation loss on held-out games of this build's demonstrations" in card


def test_skipped_alfworld_kinds_are_not_played_and_the_walkthrough_episode_follows_the_games_plan(build, tmp_path):
    """``--skip-kinds alfworld/search`` (the issue's first recipe: walkthroughs and detours) on a real train game:
    no search episode is played, the walkthrough episode's labels are the game's walkthrough, and it wins."""
    import json

    from agentrl.agents.react import parse_reply
    import agentrl.envs as envs
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld")
    base = env.unwrapped
    task_id = sorted(t for t in base.task_ids("train") if "pick_and_place_simple" in t)[0]
    walkthrough = json.loads((base.games_root / task_id / "game.tw-pddl").read_text())["walkthrough"]
    env.close()
    out = tmp_path / "demos.jsonl"
    stats = build.collect.collect_alfworld_shard([task_id], {}, 0, str(out), None, ("walkthrough", "detour"),
                                                 {**build.common.AGENT, "list_actions": False})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["kind"] for r in rows} == {"walkthrough", "detour"}
    assert "search_won" not in stats and stats["walk_won"] == 1 and stats["games"] == 1
    walked = [parse_reply(r["reply"], require_think=False).action for r in rows if r["kind"] == "walkthrough"]
    assert walked == walkthrough


def test_object_swaps_name_another_object_in_sight_in_every_task_line_and_take_its_first_listed_instance(
        build, tmp_path):
    """On the walkthrough episodes of real train games: a copy of each state where the expert takes the task's
    object, whose task lines name another object type in sight and whose label takes that type's first-listed
    instance there; nothing else in the prompt changes, and the type's other instances leave the candidates."""
    import json
    import re

    import agentrl.envs as envs
    from agentrl.envs.alfworld import data_status

    if data_status() is not None:
        pytest.skip(f"ALFWorld games not installed: {data_status()}")
    env = envs.make("alfworld")
    train = sorted(env.unwrapped.task_ids("train"))
    env.close()
    games = [t for t in train if "pick_and_place_simple" in t][:3] + [t for t in train if "pick_two_obj" in t][:3]
    out = tmp_path / "demos.jsonl"
    build.collect.collect_alfworld_shard(games, {}, 0, str(out), None, ("walkthrough",),
                                         {**build.common.AGENT, "list_actions": False})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    takes = [r for r in rows if r["reply"].startswith("<action>take ")]
    copies = build.train.object_swaps(rows, 2, seed=0)
    assert copies and {c["kind"] for c in copies} == {"swap"}
    assert build.train.object_swaps(rows, 2, seed=0) == copies  # seeded
    first_takes = {id(r) for r in takes if not re.search(r"take \S+ \d+ from ", r["prompt"])}
    assert len(first_takes) < len(takes)  # pick-two games' second takes exist, and are left out
    for copy in copies:
        (source,) = [r for r in takes if r["task_id"] == copy["task_id"] and id(r) in first_takes
                     and r["prompt"].split("Your task is to:")[0] == copy["prompt"].split("Your task is to:")[0]
                     and r["prompt"].rsplit("observation is: ", 1)[1] == copy["prompt"].rsplit("observation is: ", 1)[1]]
        old = build.train._TAKE.match(source["reply"]).group(1)
        new, number, place = build.train._TAKE.match(copy["reply"]).groups()
        assert new != old and place == build.train._TAKE.match(source["reply"]).group(3)
        task_lines = re.findall(r"Your task is to: [^\n']*", copy["prompt"])
        assert task_lines and all(re.search(rf"\b{new}\b", t) and not re.search(rf"\b{old}\b", t)
                                  for t in task_lines)
        assert re.sub(r"Your task is to: [^\n']*", "", copy["prompt"]) == \
            re.sub(r"Your task is to: [^\n']*", "", source["prompt"])
        seen = copy["prompt"].rsplit("observation is: ", 1)[1]
        listed = re.findall(rf"\b{new} (\d+)\b", seen)
        assert number == listed[0]
        assert copy["reply"] in copy["candidates"] and set(copy["candidates"]) <= set(source["candidates"])
        assert not [c for c in copy["candidates"] if c != copy["reply"] and c.startswith(f"<action>take {new} ")]
        assert source["reply"] in copy["candidates"]  # the old object is now the wrong one to take
