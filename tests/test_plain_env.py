"""A plain Gymnasium text env, written with no agentrl import, works wherever an env name works (issue 40).

``PotionLab`` below is such an env: string observations and actions, ``admissible_actions`` and ``won`` in
``info``, tasks by reset seed. Its module is this test file (``test_plain_env:PotionLab`` once ``tests/`` is on the
path), registered as a Gymnasium id and reachable through an entry point.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium import spaces

RECIPES = ("red", "blue", "green")


class PotionLab(gym.Env):
    """Brew the potion the customer asks for: add its ingredient, then serve it."""

    metadata = {"render_modes": []}

    def __init__(self, free_form: bool = False, strict: bool = False):
        self.observation_space = spaces.Text(2000, charset=" abcdefghijklmnopqrstuvwxyz.")
        self.action_space = spaces.Text(200, charset=" abcdefghijklmnopqrstuvwxyz")
        self.free_form, self.strict = free_form, strict

    def _info(self, over: bool = False) -> dict:
        actions = [] if over else [f"add {r}" for r in RECIPES] + ["serve"]
        return {} if self.free_form else {"admissible_actions": actions}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.want = RECIPES[int(self.np_random.integers(len(RECIPES)))]
        self.added = None
        return f"a customer wants a {self.want} potion.", self._info()

    def step(self, action):
        if action.startswith("add ") and action[4:] in RECIPES:
            self.added = action[4:]
            return f"you added {self.added}.", 0.0, False, False, self._info()
        if action == "serve":
            won = self.added == self.want
            return ("the customer is happy." if won else "wrong potion."), float(won), True, False, self._info(True)
        if self.strict:
            raise ValueError(f"unknown action {action!r}")
        return "nothing happens.", 0.0, False, False, self._info()


class ShelfLab(PotionLab):
    """PotionLab with tasks of its own (``splits`` and ``task_ids``) and an expert."""

    splits = ("fit", "holdout")

    def task_ids(self, split):
        return [f"{split}-{r}" for r in RECIPES]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.want = (options or {}).get("task_id", "fit-red").split("-")[1]
        return f"a customer wants a {self.want} potion.", {**self._info(), "expert_action": f"add {self.want}",
                                                            "task_type": self.want}

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "expert_action": "serve", "task_type": self.want}


gym.register("PotionLab-v7", entry_point=PotionLab, max_episode_steps=20)


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))


@pytest.mark.parametrize("name", ["test_plain_env:PotionLab", "test_plain_env:PotionLab-v7", "PotionLab-v7"])
def test_a_plain_env_is_made_under_every_kind_of_name(name, on_path):
    import agentrl.envs as envs
    from agentrl.testing import check_text_env

    env = envs.make(name, max_steps=5)
    base = env.unwrapped
    assert isinstance(base, envs.TextEnv) and base.splits == ("train", "test")
    assert base.task_ids("test")[:2] == ["seed-10000", "seed-10001"] and len(base.task_ids("train")) == 10_000
    obs, info = env.reset(options={"task_id": "seed-7"})
    assert env.reset(seed=99, options={"task_id": "seed-7"})[0] == obs  # a task is its seed
    assert info["task_id"] == "seed-7" and info["anchor"] == obs and info["won"] is False
    want = obs.split()[4]
    env.step(f"add {want}")
    *_, terminated, truncated, info = env.step("serve")
    assert terminated and not truncated and info["won"] is True  # won: terminated with a positive reward
    assert check_text_env(env) == []


def test_tasks_of_its_own_expert_and_free_form_notes(on_path):
    import agentrl.envs as envs
    from agentrl.testing import check_text_env, play_expert

    env = envs.make("test_plain_env:ShelfLab", split="holdout")
    assert env.unwrapped.splits == ("fit", "holdout") and env.unwrapped.task_ids() == [f"holdout-{r}" for r in RECIPES]
    obs, info = env.reset(options={"task_id": "holdout-blue"})
    assert "blue" in obs and info["task_type"] == "blue"
    assert play_expert(envs.make("test_plain_env:ShelfLab", expert=True)) == (3, 3)
    assert play_expert(envs.make("test_plain_env:PotionLab", expert=True)) is None  # no expert: said so
    notes = check_text_env(envs.make("test_plain_env:PotionLab", free_form=True))
    assert len(notes) == 1 and "free-form" in notes[0]


def test_check_env_names_a_broken_contract_in_one_line(on_path, agentrl_cli, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    def check(*args):
        env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parent)}
        return subprocess.run([*agentrl_cli, "check-env", *args], capture_output=True, text=True, env=env)

    strict = check("test_plain_env:PotionLab", "-e", "strict=true")
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    error = " ".join(strict.stderr.split())
    assert "raised ValueError" in error and "not possible" in error and len(strict.stderr) < 600
    passing = check("test_plain_env:ShelfLab")
    assert passing.returncode == 0, passing.stderr
    assert "passes check_text_env" in passing.stdout and "expert: won 3 of 3" in passing.stdout
    free = check("test_plain_env:PotionLab", "-e", "free_form=true")
    assert free.returncode == 0 and "free-form" in " ".join(free.stderr.split())
    assert sys.executable  # the CLI runs in this interpreter's environment


def test_an_env_class_with_no_splits_is_one_clear_error():
    import agentrl.envs as envs
    from agentrl.errors import ConfigError

    class NoSplits(envs.TextEnv):
        splits = ()

    with pytest.raises(ConfigError, match="splits is empty"):
        NoSplits()


def test_envs_lists_an_entry_that_cannot_be_built_as_broken(agentrl_cli, tmp_path):
    import subprocess

    script = ("import agentrl.envs as e; e.register('Ghost-v0', 'no_such_module_xyz:Ghost', alias='ghost'); "
              "from agentrl.cli import main; import sys; sys.argv = ['agentrl', 'envs']; main()")
    result = subprocess.run([__import__("sys").executable, "-c", script], capture_output=True, text=True,
                            env={**__import__("os").environ, "COLUMNS": "250"})
    row = next(line for line in result.stdout.splitlines() if "ghost" in line)
    assert "broken" in row and "no_such_module_xyz" in row


SMALL = {"rollout.tasks_per_iteration": 2, "rollout.group_size": 2, "rollout.workers": 0,
         "generation.max_new_tokens": 8, "generation.max_prompt_tokens": 192, "learner.lr": 1e-3,
         "learner.mini_batch_size": 8, "learner.micro_batch_size": 4, "learner.bf16": False,
         "run.iterations": 1, "run.eval_every": 0, "run.sample_groups": 0}
#: Trained with the scoring rule that is not the default, so that it has to travel with the checkpoint.
OTHER_RULE = "mean"
TRAINED_AS = {"agent.mode": "score", "agent.think": False, "agent.history_length": 1, "agent.list_actions": False,
              "agent.choice_rule": OTHER_RULE}


def sections(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
    return out


def test_a_plain_env_trains_by_every_name_and_its_checkpoint_is_driven_as_trained(tmp_path, monkeypatch,
                                                                                agentrl_cli):
    import json
    import os
    import subprocess
    from pathlib import Path

    import agentrl
    from agentrl.evaluation import evaluate_model
    from tiny_model import tiny_model_dir

    here = Path(__file__).parent
    plugin = tmp_path / "plugin"
    (plugin / "potion_plugin-0.1.dist-info").mkdir(parents=True)
    (plugin / "potion_plugin-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: potion-plugin\n"
                                                                     "Version: 0.1\n")
    (plugin / "potion_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[agentrl.envs]\npotionlab = test_plain_env:PotionLab\n")
    monkeypatch.syspath_prepend(str(here))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(plugin)]), "COLUMNS": "200"}
    settings = {**SMALL, **TRAINED_AS, "model.path": str(tiny_model_dir())}
    from agentrl.config import DEFAULT_CHOICE_RULE

    assert OTHER_RULE != DEFAULT_CHOICE_RULE

    # Python, by module:Class and by Gymnasium id
    for name in ("test_plain_env:PotionLab", "PotionLab-v7"):
        result = agentrl.train(env=name, algo="grpo", run_dir=tmp_path / name.replace(":", "_"), quiet=True,
                               **sections({k: v for k, v in settings.items() if not k.startswith("model.")}),
                               model=str(tiny_model_dir()))
        assert result.iterations_done == 1
    # the CLI, by entry point
    cli_run = tmp_path / "cli"
    flags = [arg for key, value in settings.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    done = subprocess.run([*agentrl_cli, "train", "--env", "potionlab", "--algo", "gigpo", "--run-dir", str(cli_run),
                           *flags], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    model = cli_run / "checkpoints" / "iter-000001" / "model"
    recorded = json.loads((model / "agentrl.json").read_text())["agent"]
    assert {f"agent.{k}": v for k, v in recorded.items() if f"agent.{k}" in TRAINED_AS} == TRAINED_AS

    # evaluating the checkpoint drives it as trained, in the CLI and in Python alike (one rule)
    report_path = tmp_path / "report.json"
    evaluated = subprocess.run([*agentrl_cli, "eval", "--env", "potionlab", "--model", str(model), "--episodes", "2",
                                "--out", str(report_path)], capture_output=True, text=True, env=env, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr
    cli_settings = json.loads(report_path.read_text())["settings"]
    python_settings = evaluate_model("test_plain_env:PotionLab", str(model), episodes=2).settings
    assert cli_settings == python_settings
    assert {f"agent.{k}": cli_settings[k] for k in ("mode", "think", "history_length", "list_actions",
                                                    "choice_rule")} == TRAINED_AS
    # and training on from the checkpoint (Python API, no agent settings given) takes them too
    again = agentrl.train(env="test_plain_env:PotionLab", algo="grpo", model=str(model), run_dir=tmp_path / "again", quiet=True,
                          **sections({k: v for k, v in SMALL.items()}))
    config = (again.run_dir / "config.yaml").read_text()
    assert "mode: score" in config and "history_length: 1" in config and f"choice_rule: {OTHER_RULE}" in config
