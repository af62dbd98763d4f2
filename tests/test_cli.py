"""The installed ``agentrl`` command, driven as a user drives it (subprocess, pipes)."""

from __future__ import annotations

import json
import subprocess

import pytest

COMMANDS = ["envs", "algos", "check-env", "play", "eval", "data", "config"]


def run(cli, *args, stdin=None, timeout=120, env=None):
    return subprocess.run([*cli, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, **(env or {}), "COLUMNS": "200"})


def test_help_lists_every_command(agentrl_cli):
    result = run(agentrl_cli, "--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("command", ["check-env", "play", "eval", "train", "config"])
def test_every_option_is_documented(agentrl_cli, command):
    import re

    result = run(agentrl_cli, command, "--help")
    assert result.returncode == 0
    option_lines = [line for line in result.stdout.splitlines() if re.match(r"^│\s+(\*\s+)?--[a-z]", line)]
    assert option_lines, result.stdout
    for line in option_lines:
        # columns: option name(s), type, help text; an option without help has only two
        columns = [c for c in re.split(r"\s{2,}", line.strip("│ ")) if c]
        assert len(columns) >= 3, f"undocumented option in `agentrl {command}`: {line}"


def test_envs_table_shows_builtin_env_ready(agentrl_cli):
    result = run(agentrl_cli, "envs")
    assert result.returncode == 0
    row = next(line for line in result.stdout.splitlines() if "crafting" in line)
    assert "agentrl/Crafting-v0" in row and "ready" in row


def test_unknown_env_is_one_line_exit_2(agentrl_cli):
    result = run(agentrl_cli, "check-env", "craftng")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "Did you mean 'crafting'?" in " ".join(result.stderr.split())


def test_bad_env_arg_is_exit_2(agentrl_cli):
    result = run(agentrl_cli, "check-env", "crafting", "-e", "no_such_arg=1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    result = run(agentrl_cli, "check-env", "crafting", "-e", "novalue")
    assert result.returncode == 2 and "KEY=VALUE" in result.stderr


def test_check_env_passes(agentrl_cli):
    result = run(agentrl_cli, "check-env", "crafting")
    assert result.returncode == 0, result.stderr
    assert "passes" in result.stdout


def test_play_through_a_pipe_to_a_win(agentrl_cli):
    """A person plays: we feed the expert's moves (computed in-process) through stdin of the real command."""
    import agentrl.envs as envs

    env = envs.make("crafting", expert=True)
    obs, info = env.reset(seed=0, options={"task_id": "train/00003"})
    moves = []
    while True:
        moves.append(info["expert_action"])
        obs, _, terminated, truncated, info = env.step(moves[-1])
        if terminated or truncated:
            break
    # The first move is typed as its number in the action list, the rest as text.
    first_number = str(env.reset(options={"task_id": "train/00003"})[1]["admissible_actions"].index(moves[0]) + 1)
    result = run(agentrl_cli, "play", "crafting", "--task", "train/00003", stdin="\n".join([first_number, *moves[1:]]) + "\n")
    assert result.returncode == 0, result.stderr
    assert "Your task is to: craft" in result.stdout
    assert f"won after {len(moves)} steps, return 10" in result.stdout


def test_play_quits_on_end_of_input(agentrl_cli):
    result = run(agentrl_cli, "play", "crafting", stdin="look\n")
    assert result.returncode == 0
    assert "stopped after 1 steps" in result.stdout


def test_eval_expert_and_random_write_reports(agentrl_cli, tmp_path):
    out = tmp_path / "expert.json"
    result = run(agentrl_cli, "eval", "--env", "crafting", "--agent", "expert", "--episodes", "20", "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["summary"]["All"]["success"] == 100.0 and report["summary"]["All"]["n"] == 20
    out = tmp_path / "random.json"
    result = run(agentrl_cli, "eval", "--env", "crafting", "--agent", "random", "--episodes", "20", "--out", str(out))
    assert result.returncode == 0
    assert json.loads(out.read_text())["summary"]["All"]["success"] < 50.0


def test_eval_model_with_attempts_shows_progress_and_writes_every_episode(agentrl_cli, tmp_path):
    from tiny_model import tiny_model_dir

    out = tmp_path / "model.json"
    result = run(agentrl_cli, "eval", "--env", "crafting", "--model", str(tiny_model_dir()), "--mode", "score",
                 "--no-think", "--episodes", "2", "--attempts", "3", "-e", "max_steps=3", "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["summary"]["All"]["n"] == 6 and len({e["task_id"] for e in report["episodes"]}) == 2
    assert "6/6" in result.stderr  # the progress bar's final count of episodes


def test_eval_model_is_driven_as_its_agentrl_json_recommends_unless_told_otherwise(agentrl_cli, tmp_path):
    import shutil

    from tiny_model import tiny_model_dir

    model = shutil.copytree(tiny_model_dir(), tmp_path / "model")
    (model / "agentrl.json").write_text(json.dumps(
        {"agent": {"think": False, "mode": "score", "history_length": 1, "action_memory": 4, "list_actions": False,
                   "choice_rule": "mean"}}))
    args = ("eval", "--env", "crafting", "--model", str(model), "--episodes", "1", "-e", "max_steps=2")
    result = run(agentrl_cli, *args)
    assert result.returncode == 0, result.stderr
    assert ("agent: mode score (mean log-likelihood), think off, history_length 1, action_memory 4, list_actions off"
            in result.stderr)
    result = run(agentrl_cli, *args, "--choice-rule", "sum")
    assert result.returncode == 0, result.stderr
    assert "agent: mode score (sum log-likelihood), think off" in result.stderr
    result = run(agentrl_cli, *args, "--mode", "generate", "--think")
    assert result.returncode == 0, result.stderr
    assert "agent: mode generate, think on, history_length 1" in result.stderr


def test_eval_model_sets_torch_threads_as_train_does(agentrl_cli):
    import os

    from tiny_model import tiny_model_dir

    from agentrl.policy import default_cpu_threads

    # Two evaluations side by side each ran torch's default 2 threads on 2 cores and took 3x longer (issue 8).
    args = ("eval", "--env", "crafting", "--model", str(tiny_model_dir()), "--episodes", "1", "-e", "max_steps=2")
    # OMP_NUM_THREADS = cores: what torch would use if the command set nothing
    result = run(agentrl_cli, *args, env={"OMP_NUM_THREADS": str(os.cpu_count() or 1)})
    assert result.returncode == 0, result.stderr
    assert f"torch threads {default_cpu_threads()}" in result.stderr
    result = run(agentrl_cli, *args, "--threads", "3")
    assert result.returncode == 0, result.stderr
    assert "torch threads 3" in result.stderr


def test_eval_unknown_agent(agentrl_cli):
    result = run(agentrl_cli, "eval", "--env", "crafting", "--agent", "oracle")
    assert result.returncode == 2 and "known: expert, random" in result.stderr


def test_config_lists_every_key_with_its_default_and_a_description(agentrl_cli):
    from agentrl.config import describe_config

    rows = describe_config()
    assert all(note for _, _, note in rows), [key for key, _, note in rows if not note]
    result = run(agentrl_cli, "config", "learner", env={"COLUMNS": "250"})
    assert result.returncode == 0
    learner_keys = [key for key, _, _ in rows if key.startswith("learner.")]
    assert learner_keys and all(key in result.stdout for key in learner_keys)
    assert "AdamW learning rate" in result.stdout and "rollout." not in result.stdout
    unknown = run(agentrl_cli, "config", "lerner")
    assert unknown.returncode == 2 and "known: agent, algo" in unknown.stderr
    helped = run(agentrl_cli, "train", "--help")
    assert "agentrl config" in helped.stdout and "agentrl[vllm]" in helped.stdout and "agentrl[ray]" in helped.stdout


def test_set_reads_exponent_floats_and_unknown_models_fail_at_once(agentrl_cli, tmp_path):
    import time

    from agentrl.config import build_config

    assert build_config(None, {"learner.lr": "1e-4", "model.path": "tiny-random"}).learner.lr == 1e-4
    start = time.perf_counter()
    result = run(agentrl_cli, "train", "--env", "crafting", "--model", "no-such-org/no-such-model",
                 "--run-dir", str(tmp_path / "r"), "--set", "learner.lr=1e-4")
    assert result.returncode == 2 and "unknown model 'no-such-org/no-such-model'" in result.stderr
    assert time.perf_counter() - start < 60  # no hub retries (they took 27 s before)


def test_eval_expert_on_an_env_without_one_is_a_clear_error(agentrl_cli, tmp_path):
    import os
    import sys
    from pathlib import Path

    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    result = run(agentrl_cli, "eval", "--env", "test_plain_env:PotionLab", "--agent", "expert", env=env)
    assert result.returncode == 2 and "has no expert" in result.stderr and "Traceback" not in result.stderr


def test_algorithms_by_module_function_and_plugin_check_errors_in_one_line(tmp_path, monkeypatch):
    from agentrl.algos import get_algorithm
    from agentrl.errors import AgentRLError, ConfigError

    (tmp_path / "my_credit.py").write_text(
        "import dataclasses\n"
        "import numpy as np\n"
        "from agentrl.algos import AlgoConfig, register_algorithm\n"
        "@dataclasses.dataclass\n"
        "class Cfg(AlgoConfig):\n"
        "    scale: float = 1.0\n"
        "    def check(self):\n"
        "        if self.scale <= 0:\n"
        "            raise ValueError('scale must be positive')\n"
        "@register_algorithm('my_credit_fn', 'returns times scale', Cfg)\n"
        "def credit(batch, config):\n"
        "    return np.full(len(batch), config.scale), {}\n"
        "def not_an_algorithm():\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = get_algorithm("my_credit:credit")
    assert spec.name == "my_credit_fn"
    with pytest.raises(ConfigError, match="invalid options for algorithm 'my_credit_fn': scale must be positive"):
        spec.make_config({"scale": -1})
    with pytest.raises(AgentRLError, match="decorated with"):
        get_algorithm("my_credit:not_an_algorithm")
