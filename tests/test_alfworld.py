"""ALFWorld on the real engine and the real games (../shared/data/alfworld), unpacked into a temp dir per session.

Every test plays real game files with textworld's PDDL engine; nothing is mocked. They skip only when the shared data
folder is absent.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tarfile
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agentrl.envs.alfworld import (
    TABLE_COLUMNS,
    ALFWorldEnv,
    data_status,
    room_type,
    success_by_task_type,
    task_type_label,
)
from agentrl.envs.alfworld import data as alfworld_data
from agentrl.envs.alfworld.tasks import object_of_task_dir
from agentrl.errors import AgentRLError, ConfigError, MissingDataError
from agentrl.testing import check_text_env

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "alfworld"
EVAL_ARCHIVE = DATA / "json_2.1.1-eval.tar.gz"
TRAIN_ARCHIVE = DATA / "json_2.1.1-train.tar.gz"

pytestmark = pytest.mark.skipif(
    not EVAL_ARCHIVE.is_file(), reason=f"the ALFWorld games are not in {DATA} (shared data folder absent)"
)

OOD = "eval_out_of_distribution"
IND = "eval_in_distribution"
#: A kitchen game (FloorPlan 13) whose two-object task needs 8 steps, and a bedroom one (FloorPlan 308).
KITCHEN_PICK2 = "valid_seen/pick_two_obj_and_place-Spatula-None-Drawer-13/trial_T20190908_183331_203888"
BEDROOM_LOOK = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"


def _unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="session")
def eval_dir(tmp_path_factory) -> Path:
    """A data folder with only the eval games (valid_seen, valid_unseen), as the eval archive unpacks."""
    return _unpack(EVAL_ARCHIVE, tmp_path_factory.mktemp("alfworld-eval"))


@pytest.fixture(scope="session")
def full_dir(tmp_path_factory) -> Path:
    """A data folder with every split (336 MB unpacked)."""
    if not TRAIN_ARCHIVE.is_file():
        pytest.skip(f"{TRAIN_ARCHIVE} is absent")
    dest = tmp_path_factory.mktemp("alfworld-full")
    _unpack(EVAL_ARCHIVE, dest)
    return _unpack(TRAIN_ARCHIVE, dest)


@pytest.fixture(scope="session")
def ood_env(eval_dir):
    env = ALFWorldEnv(split=OOD, data_dir=eval_dir)
    yield env
    env.close()


def _walkthrough(env: ALFWorldEnv, task_id: str) -> list[str]:
    return json.loads(env.task(task_id).gamefile.read_text())["walkthrough"]


def _trajectory(env, task_id: str, actions: list[str]) -> list[tuple[str, list[str], float, bool]]:
    obs, info = env.reset(options={"task_id": task_id})
    out = [(obs, info["admissible_actions"], 0.0, False)]
    for action in actions:
        obs, reward, terminated, _, info = env.step(action)
        out.append((obs, info["admissible_actions"], reward, terminated))
    return out


# ---------------------------------------------------------------------------------------------------- data
def test_split_counts_and_absent_train_split(eval_dir):
    env = ALFWorldEnv(split=OOD, data_dir=eval_dir)
    assert len(env.task_ids(IND)) == 140
    assert len(env.task_ids(OOD)) == 134
    assert env.task_ids("train") == ()  # only the eval archive is unpacked
    assert env.task_ids(OOD)[0].startswith("valid_unseen/") and env.task_ids(IND)[0].startswith("valid_seen/")
    assert list(env.task_ids(OOD)) == sorted(env.task_ids(OOD))
    with pytest.raises(MissingDataError, match=r"split 'train' .*absent.*agentrl data alfworld"):
        env.reset(options={"split": "train", "task_index": 0})
    with pytest.raises(MissingDataError, match="absent"):
        ALFWorldEnv(split="train", data_dir=eval_dir)
    # The default split is train; the env still serves the splits that are present.
    default = ALFWorldEnv(data_dir=eval_dir)
    obs, info = default.reset(options={"split": IND, "task_index": 0})
    assert info["task_id"] == default.task_ids(IND)[0] and "Your task is to: " in obs
    default.close()


def test_train_split_count(full_dir):
    env = ALFWorldEnv(data_dir=full_dir)
    assert len(env.task_ids("train")) == 3553
    assert env.task_ids("train")[0].startswith("train/")


def test_task_types_and_rooms_from_directory_names(ood_env):
    tasks = [ood_env.task(t) for t in ood_env.task_ids(OOD)]
    counts = {label: sum(t.label == label for t in tasks) for label in TABLE_COLUMNS}
    # valid_unseen's task mix (docs/spec/environments.md §3.4): clean 31, look 18, heat 23, cool 21, two 17, pick 24.
    assert counts == {"Pick": 24, "Look": 18, "Clean": 31, "Heat": 23, "Cool": 21, "Pick2": 17}
    bedroom = ood_env.task(BEDROOM_LOOK)
    assert (bedroom.scene, bedroom.room_type, bedroom.task_type) == (308, "bedroom", "look_at_obj_in_light")
    assert {t.room_type for t in tasks} <= {"kitchen", "living room", "bedroom", "bathroom"}
    assert [room_type(n) for n in (1, 30, 201, 330, 430, 550)] == [
        "kitchen", "kitchen", "living room", "bedroom", "bathroom", "unknown"]


def test_the_task_dirs_object_is_the_one_the_games_task_line_names(ood_env):
    obs, _ = ood_env.reset(options={"task_id": BEDROOM_LOOK})
    assert object_of_task_dir(BEDROOM_LOOK.split("/")[1]) == "alarmclock"
    assert "Your task is to: examine the alarmclock with the desklamp." in obs


def test_traj_data_json_gives_the_task_type_and_movable_sliced_are_skipped(eval_dir, tmp_path):
    source = eval_dir / "json_2.1.1" / "valid_unseen"
    task_dir = next(d for d in sorted(source.iterdir()) if d.name.startswith("pick_and_place_simple"))
    root = tmp_path / "json_2.1.1" / "valid_unseen"
    # A user download names the type in traj_data.json; the directory name must not win over it.
    renamed = root / ("look_at_obj_in_light-" + task_dir.name.split("-", 1)[1])
    trial = next(task_dir.iterdir())
    (renamed / trial.name).mkdir(parents=True)
    (renamed / trial.name / "game.tw-pddl").write_bytes((trial / "game.tw-pddl").read_bytes())
    (renamed / trial.name / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    # Paths with "movable" or "Sliced" are not playable in text (AlfredTWEnv), nor are unsolvable games.
    sliced = root / ("pick_and_place_simple-AppleSliced-None-Fridge-1") / "trial_x"
    sliced.mkdir(parents=True)
    (sliced / "game.tw-pddl").write_bytes((trial / "game.tw-pddl").read_bytes())
    unsolvable = root / "pick_and_place_simple-Mug-None-Desk-301" / "trial_y"
    unsolvable.mkdir(parents=True)
    game = json.loads((trial / "game.tw-pddl").read_text())
    (unsolvable / "game.tw-pddl").write_text(json.dumps({**game, "solvable": False}))
    env = ALFWorldEnv(split=OOD, data_dir=tmp_path)
    assert env.task_ids() == (f"valid_unseen/{renamed.name}/{trial.name}",)
    assert env.task(env.task_ids()[0]).task_type == "pick_and_place_simple"


def test_missing_data_error_says_where_it_looked_and_how_to_get_games(tmp_path, monkeypatch):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    with pytest.raises(MissingDataError) as excinfo:
        ALFWorldEnv(data_dir=empty)
    message = str(excinfo.value)
    assert str(empty) in message and "alfworld-download" in message and "agentrl data alfworld --archive" in message
    monkeypatch.setenv("ALFWORLD_DATA", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.cache/alfworld is empty too
    status = data_status()
    assert status is not None and str(empty) in status and "\n" not in status
    with pytest.raises(MissingDataError):
        ALFWorldEnv()


def test_default_locations_env_var(eval_dir, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(eval_dir))
    assert data_status() is None
    env = ALFWorldEnv(split=OOD)
    assert env.games_root == eval_dir / "json_2.1.1"
    # The json_2.1.1 folder itself is accepted as data_dir too.
    assert ALFWorldEnv(split=OOD, data_dir=eval_dir / "json_2.1.1").task_ids() == env.task_ids()


def test_data_command_unpacks_an_archive(tmp_path, capsys):
    dest = tmp_path / "games"
    alfworld_data.command(archive=EVAL_ARCHIVE, dest=dest)
    out = capsys.readouterr().out
    assert "140 games" in out and "134 games" in out and "folder absent" in out
    assert len(ALFWorldEnv(split=IND, data_dir=dest).task_ids()) == 140
    # Showing what is found, without an archive.
    alfworld_data.command(archive=None, dest=dest)
    assert "ALFWorld games found in" in capsys.readouterr().out


def test_data_command_refuses_an_archive_without_games(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    (tmp_path / "readme.txt").write_text("not a game")
    with tarfile.open(junk, "w:gz") as tf:
        tf.add(tmp_path / "readme.txt", arcname="readme.txt")
    with pytest.raises(AgentRLError, match="does not hold ALFWorld games"):
        alfworld_data.command(archive=junk, dest=tmp_path / "out")
    with pytest.raises(MissingDataError):
        alfworld_data.command(archive=tmp_path / "missing.tar.gz", dest=tmp_path / "out")


def test_data_command_through_the_cli(tmp_path, agentrl_cli):
    result = subprocess.run(
        [*agentrl_cli, "data", "alfworld", "--archive", str(EVAL_ARCHIVE), "--dest", str(tmp_path / "cli")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "134 games" in result.stdout
    assert (tmp_path / "cli" / "json_2.1.1" / "valid_unseen").is_dir()


# ---------------------------------------------------------------------------------------------------- play
def test_walkthrough_wins_one_game_of_each_task_type(ood_env):
    for label in TABLE_COLUMNS:
        task_id = next(t for t in ood_env.task_ids(OOD) if ood_env.task(t).label == label)
        walkthrough = _walkthrough(ood_env, task_id)
        obs, info = ood_env.reset(options={"task_id": task_id})
        assert info["task_type"] == label and task_type_label(info["task_type_raw"]) == label
        assert info["instruction"] and obs.rstrip().endswith(info["instruction"])
        rewards = []
        for i, action in enumerate(walkthrough):
            assert action in info["admissible_actions"], (task_id, i, action)
            obs, reward, terminated, truncated, info = ood_env.step(action)
            rewards.append(reward)
            assert terminated == (i == len(walkthrough) - 1) and not truncated
        assert info["won"] and rewards[-1] == 10.0 and sum(rewards) == 10.0, task_id


def test_info_contract_help_removed_and_anchor_is_the_raw_feedback(ood_env):
    obs, info = ood_env.reset(options={"task_id": BEDROOM_LOOK})
    assert "help" not in info["admissible_actions"]
    assert info["admissible_actions"] == sorted(info["admissible_actions"])
    assert {"look", "inventory", "go to desk 2"} <= set(info["admissible_actions"])
    assert info["anchor"] == obs and info["gamefile"].endswith("game.tw-pddl")
    assert info["instruction"] == "examine the alarmclock with the desklamp."
    obs, _, _, _, info = ood_env.step("go to desk 2")
    assert obs == info["anchor"] == "You arrive at desk 2. On the desk 2, you see a alarmclock 1."


def test_inadmissible_command_gives_nothing_happens_and_no_reward(ood_env):
    obs0, info0 = ood_env.reset(options={"task_id": BEDROOM_LOOK})
    for command in ("take the moon", "use desklamp 1", "xyzzy ✓", ""):
        obs, reward, terminated, truncated, info = ood_env.step(command)
        assert obs == "Nothing happens." and reward == 0.0 and not terminated and not truncated
        assert info["admissible_actions"] == info0["admissible_actions"] and not info["won"]
    # The state did not change: the walkthrough still wins from here.
    for action in _walkthrough(ood_env, BEDROOM_LOOK):
        obs, reward, terminated, _, info = ood_env.step(action)
    assert terminated and reward == 10.0


def test_success_reward_is_configurable_and_episodes_truncate_at_max_steps(eval_dir):
    env = ALFWorldEnv(split=OOD, data_dir=eval_dir, success_reward=1.0, max_steps=3)
    assert env.max_steps == 3 and ALFWorldEnv.default_max_steps == 50
    env.reset(options={"task_id": BEDROOM_LOOK})
    flags = [env.step("look")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    env.reset(options={"task_id": BEDROOM_LOOK})
    results = [env.step(a) for a in _walkthrough(env, BEDROOM_LOOK)]
    assert results[-1][1] == 1.0 and results[-1][2]
    env.close()


def test_reset_is_deterministic_within_and_across_processes(ood_env, eval_dir):
    first = ood_env.reset(seed=0, options={"task_id": BEDROOM_LOOK})
    ood_env.step("go to desk 1")
    again = ood_env.reset(seed=123, options={"split": OOD, "task_index": ood_env.task_ids().index(BEDROOM_LOOK)})
    assert first[0] == again[0] and first[1]["admissible_actions"] == again[1]["admissible_actions"]
    # Seeded draws of a task repeat.
    drawn = [ood_env.reset(seed=7)[1]["task_id"] for _ in range(2)]
    assert drawn[0] == drawn[1]
    # Another process with another hash seed (set iteration order) sees the same text.
    code = (
        "import json, sys; from agentrl.envs.alfworld import ALFWorldEnv; "
        f"env = ALFWorldEnv(split={OOD!r}, data_dir=sys.argv[1]); "
        f"obs, info = env.reset(options={{'task_id': {BEDROOM_LOOK!r}}}); "
        "print(json.dumps([obs, info['admissible_actions']]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(eval_dir)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [first[0], first[1]["admissible_actions"]]


def test_fast_reset_equals_cold_reset_byte_for_byte(eval_dir):
    from agentrl.envs.alfworld import engine

    engine.GROUNDINGS.clear()
    fast = ALFWorldEnv(split=IND, data_dir=eval_dir)
    cold = ALFWorldEnv(split=IND, data_dir=eval_dir, fast_reset=False)  # textworld's own reset: re-translates
    rng = np.random.default_rng(0)
    for task_id in (KITCHEN_PICK2, BEDROOM_LOOK):
        walkthrough = _walkthrough(fast, task_id)
        start = time.perf_counter()
        obs, info = fast.reset(options={"task_id": task_id})  # grounds the game
        first_reset = time.perf_counter() - start
        # Dirty the engine's state with random admissible steps; the restart must still be exact.
        for _ in range(5):
            actions = info["admissible_actions"]
            obs, _, _, _, info = fast.step(actions[int(rng.integers(len(actions)))])
        start = time.perf_counter()
        fast.reset(options={"task_id": task_id})
        repeated_reset = time.perf_counter() - start
        fast_trajectory = _trajectory(fast, task_id, walkthrough)
        cold_trajectory = _trajectory(cold, task_id, walkthrough)
        assert fast_trajectory == cold_trajectory  # observations, admissible actions, rewards, termination
        assert fast_trajectory[-1][2:] == (10.0, True)
        if task_id == KITCHEN_PICK2:  # the bar, measured on a kitchen: at least 5x faster
            assert repeated_reset * 5 <= first_reset, (first_reset, repeated_reset)
    assert engine.GROUNDINGS.misses == 2 and len(engine.GROUNDINGS) == 2  # each game grounded once
    fast.close()
    cold.close()


def test_every_episode_after_fast_resets_replays_the_same_way(ood_env):
    """Two envs of one process share a grounding; each gets its own engine state."""
    other = ALFWorldEnv(split=OOD, data_dir=ood_env.games_root)
    walkthrough = _walkthrough(ood_env, BEDROOM_LOOK)
    ood_env.reset(options={"task_id": BEDROOM_LOOK})
    other.reset(options={"task_id": BEDROOM_LOOK})
    # Interleave the two episodes: one follows the walkthrough, the other wanders.
    for action in walkthrough:
        result = ood_env.step(action)
        other.step("go to shelf 1")
    assert result[4]["won"] and not other._last_info["won"]
    other.close()


def test_check_text_env_passes(full_dir):
    env = ALFWorldEnv(split=OOD, data_dir=full_dir)
    check_text_env(env)
    env.close()


def test_gymnasium_make_and_alias(eval_dir):
    import agentrl.envs as envs

    env = gym.make("agentrl/ALFWorld-v0", split=OOD, data_dir=str(eval_dir))
    obs, info = env.reset(options={"task_index": 0})
    assert isinstance(env.unwrapped, ALFWorldEnv) and info["task_id"] == env.unwrapped.task_ids()[0]
    env.close()
    env = envs.make("alfworld", split=IND, data_dir=str(eval_dir), max_steps=10)
    assert env.unwrapped.max_steps == 10
    env.close()


def test_constructor_arguments_pickle_and_rebuild_the_env(eval_dir):
    make = partial(ALFWorldEnv, split=OOD, data_dir=str(eval_dir), task_types=["Look"], anchor="state")
    rebuilt = pickle.loads(pickle.dumps(make))()
    assert all(rebuilt.task(t).label == "Look" for t in rebuilt.task_ids())
    obs, _ = rebuilt.reset(options={"task_index": 0})
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    rebuilt.close()
    # close() frees the engine; the env can play again afterwards.
    obs_again, _ = rebuilt.reset(options={"task_index": 0})
    assert obs_again == obs
    rebuilt.close()


def test_task_type_filter(eval_dir):
    heat = ALFWorldEnv(split=OOD, data_dir=eval_dir, task_types=["Heat"])
    assert len(heat.task_ids()) == 23 and len(heat.task_ids(IND)) > 0
    assert {heat.task(t).task_type for t in heat.task_ids()} == {"pick_heat_then_place_in_recep"}
    by_raw = ALFWorldEnv(split=OOD, data_dir=eval_dir, task_types=["pick_heat_then_place_in_recep", 4])
    assert by_raw.task_ids() == heat.task_ids()
    with pytest.raises(AgentRLError, match="unknown task_id"):
        heat.reset(options={"task_id": BEDROOM_LOOK})
    with pytest.raises(ConfigError, match="unknown ALFWorld task type"):
        ALFWorldEnv(split=OOD, data_dir=eval_dir, task_types=["Juggle"])
    with pytest.raises(ConfigError, match="anchor"):
        ALFWorldEnv(split=OOD, data_dir=eval_dir, anchor="vibes")


def test_state_and_location_anchors(eval_dir):
    by_state = ALFWorldEnv(split=OOD, data_dir=eval_dir, anchor="state")
    start = by_state.reset(options={"task_id": BEDROOM_LOOK})[1]["anchor"]
    assert by_state.step("inventory")[4]["anchor"] == start  # nothing changed in the world
    at_desk = by_state.step("go to desk 2")[4]["anchor"]
    assert at_desk != start
    by_state.step("go to desk 1")
    assert by_state.step("go to desk 2")[4]["anchor"] == at_desk  # the same state by another path
    by_state.close()

    by_place = ALFWorldEnv(split=OOD, data_dir=eval_dir, anchor="location_inventory")
    assert by_place.reset(options={"task_id": BEDROOM_LOOK})[1]["anchor"] == (
        "at: the middle of the room | holding: nothing")
    by_place.step("go to desk 2")
    assert by_place.step("take alarmclock 1 from desk 2")[4]["anchor"] == "at: desk 2 | holding: alarmclock 1"
    by_place.close()


# ---------------------------------------------------------------------------------------------------- expert
def test_expert_follows_the_walkthrough(eval_dir):
    env = ALFWorldEnv(split=IND, data_dir=eval_dir, expert=True)
    walkthrough = _walkthrough(env, KITCHEN_PICK2)
    obs, info = env.reset(options={"task_id": KITCHEN_PICK2})
    played = []
    while info["expert_action"] is not None:
        played.append(info["expert_action"])
        obs, reward, terminated, truncated, info = env.step(played[-1])
    assert played == walkthrough and terminated and info["won"] and info["expert_action"] is None
    env.close()


def test_expert_recovers_after_the_agent_leaves_the_walkthrough(eval_dir):
    """After random detours (taking and moving other objects included), the expert's plan still wins, quickly.
    The kitchen two-object game is one where textworld's unrestricted replanner runs for minutes."""
    env = ALFWorldEnv(split=IND, data_dir=eval_dir, expert=True)
    rng = np.random.default_rng(1)
    for detour in (2, 6):
        obs, info = env.reset(options={"task_id": KITCHEN_PICK2})
        for _ in range(detour):
            actions = info["admissible_actions"]
            obs, _, _, _, info = env.step(actions[int(rng.integers(len(actions)))])
        start = time.perf_counter()
        steps, terminated = 0, False
        while not terminated and steps < 40:
            assert info["expert_action"] in info["admissible_actions"]
            obs, reward, terminated, truncated, info = env.step(info["expert_action"])
            steps += 1
        assert info["won"] and reward == 10.0, detour
        assert time.perf_counter() - start < 60
    env.close()


def test_expert_gives_up_only_in_a_dead_end(eval_dir):
    """Holding an object that no receptacle of the room accepts, the agent can never take the laptop: no plan."""
    env = ALFWorldEnv(split=IND, data_dir=eval_dir, expert=True)
    task_id = "valid_seen/look_at_obj_in_light-Laptop-None-DeskLamp-328/trial_T20190908_201550_622420"
    env.reset(options={"task_id": task_id})
    env.step("go to bed 1")
    obs, _, _, _, info = env.step("take teddybear 1 from bed 1")
    assert obs == "You pick up the teddybear 1 from the bed 1."
    assert not any(a.startswith("move teddybear 1") for a in info["admissible_actions"])
    assert info["expert_action"] is None
    env.close()


@pytest.mark.slow
def test_every_ood_game_is_won_by_its_walkthrough_after_fast_resets(eval_dir):
    env = ALFWorldEnv(split=OOD, data_dir=eval_dir)
    lost = []
    for task_id in env.task_ids(OOD):
        env.reset(options={"task_id": task_id})
        env.step("look")  # then restart from the saved initial state
        env.reset(options={"task_id": task_id})
        results = [env.step(action) for action in _walkthrough(env, task_id)]
        if not (results[-1][4]["won"] and results[-1][1] == 10.0):
            lost.append(task_id)
    assert lost == []
    env.close()


def test_success_by_task_type_uses_the_published_layout():
    table = success_by_task_type([("Pick", True), ("pick_and_place_simple", False), ("Heat", True),
                                  ("pick_two_obj_and_place", True)])
    assert list(table) == ["Pick", "Heat", "Pick2", "All"]
    assert table == {"Pick": 50.0, "Heat": 100.0, "Pick2": 100.0, "All": 75.0}
    assert TABLE_COLUMNS == ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")


def test_grounding_leaves_sys_argv_alone(eval_dir, monkeypatch):
    """fast-downward's translator rewrites sys.argv; a user's program must not see that."""
    from agentrl.envs.alfworld import engine

    argv = ["my_training_script.py", "--lr", "1e-6"]
    monkeypatch.setattr(sys, "argv", argv)
    engine.GROUNDINGS.clear()
    for fast_reset in (True, False):
        env = ALFWorldEnv(split=OOD, data_dir=eval_dir, fast_reset=fast_reset)
        env.reset(options={"task_id": BEDROOM_LOOK})
        env.reset(options={"task_id": BEDROOM_LOOK})
        env.close()
    assert sys.argv is argv and argv == ["my_training_script.py", "--lr", "1e-6"]


# ---------------------------------------------------------------------------------------------------- memoized parses
def _engine_trajectory(eng, gamefile: str, actions: list[str]) -> list[tuple]:
    """Everything a step of the wrapped engine returns that the env reads: feedback, admissible commands, won, done."""
    eng.load(gamefile)
    state = eng.reset()
    out = [(state.feedback, list(state["admissible_commands"]), state["won"], False)]
    for action in actions:
        state, _score, done = eng.step(action)
        out.append((state.feedback, list(state["admissible_commands"]), state["won"], done))
    return out


def _symbol_contexts(symbols) -> list:
    from textworld.envs.pddl import textgen

    out = []
    for symbol in symbols:
        out.append(symbol.context)
        for inner in (getattr(symbol, "expression", None), getattr(symbol, "symbol", None)):
            if isinstance(inner, textgen.Symbol):
                out += _symbol_contexts([inner])
    return out


def test_memoized_parses_give_the_same_game_step_by_step(ood_env):
    """Real games of every task type played by an engine with the parse memo and one with textworld's own grammar
    (each grounding its own copy of the game): identical feedback, admissible commands, won and done at every
    step, over the walkthrough (to the win), random admissible moves and an inadmissible command."""
    from agentrl.envs.alfworld import engine

    task_types = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                  "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
    games = [next(t for t in ood_env.task_ids(OOD) if ood_env.task(t).task_type == kind) for kind in task_types]
    memo = engine.make_engine(cache=engine.GroundingCache(), memoize_parses=True)
    plain = engine.make_engine(cache=engine.GroundingCache(), memoize_parses=False)
    rng = np.random.default_rng(3)
    hits_before = engine.TEMPLATE_PARSES.hits
    try:
        for task_id in games:
            gamefile = str(ood_env.task(task_id).gamefile)
            walkthrough = _walkthrough(ood_env, task_id)
            # Random admissible moves first (chosen on the plain engine's lists), then a restart and the walkthrough.
            plain.load(gamefile)
            state = plain.reset()
            wander = []
            for _ in range(12):
                commands = [c for c in state["admissible_commands"] if c != "help"]
                wander.append(commands[int(rng.integers(len(commands)))])
                state, _, _ = plain.step(wander[-1])
            wander.append("fly to the moon")  # inadmissible: "Nothing happens."
            for actions in (wander, walkthrough):
                expected = _engine_trajectory(plain, gamefile, actions)
                got = _engine_trajectory(memo, gamefile, actions)
                assert got == expected, task_id
            assert expected[-1][2] is True  # the walkthrough wins
        assert isinstance(memo.unwrapped._logic.grammar, engine.MemoizedGrammar)
        assert not isinstance(plain.unwrapped._logic.grammar, engine.MemoizedGrammar)
        assert engine.TEMPLATE_PARSES.hits > hits_before and engine.QUERY_PARSES.hits > 0
        # What the memo keeps is never handed out: no derivation ever set a context on a stored symbol.
        for symbols in engine.TEMPLATE_PARSES._items.values():
            assert all(context == {} for context in _symbol_contexts(symbols))
    finally:
        memo.close()
        plain.close()


def test_parse_memo_is_keyed_by_the_exact_string_and_bounded():
    from agentrl.envs.alfworld.engine import ParseMemo

    calls = []
    memo = ParseMemo(lambda text: calls.append(text) or [text.upper()], maxsize=2)
    assert memo.get("go to {r.name}") == ["GO TO {R.NAME}"] and memo.get("go to {r.name}") == ["GO TO {R.NAME}"]
    assert memo.get("go to {r.name} ") == ["GO TO {R.NAME} "]  # one space more: another key
    assert calls == ["go to {r.name}", "go to {r.name} "] and (memo.hits, memo.misses) == (1, 2)
    memo.get("a")
    assert len(memo) == 2 and "go to {r.name}" not in memo._items  # least recently used dropped

    class Text(str):
        pass

    memo.get(Text("a"))  # not a plain str: parsed, never cached under its value
    assert calls[-1] == "a" and isinstance(calls[-1], Text)
