"""The examples run as a user runs them: a user-registered env trained from Python and from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def test_custom_env_trains_from_python(tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / "custom_env.py"), str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2] and "eval/success" in records[-1]


def test_custom_env_trains_from_the_cli(tmp_path, agentrl_cli):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES)}
    result = subprocess.run(
        [*agentrl_cli, "train", "--env", "custom_env:ComboLockEnv", "--algo", "gigpo", "--model", "tiny-random",
         "--run-dir", str(tmp_path / "cli"), "--set", "agent.mode=score", "--set", "agent.think=false",
         "--set", "rollout.workers=1", "--set", "rollout.tasks_per_iteration=2", "--set", "rollout.group_size=2",
         "--set", "run.iterations=1", "--set", "run.eval_every=0"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "cli" / "checkpoints" / "iter-000001" / "COMPLETE").is_file()


def test_the_plain_errands_env_passes_check_env_and_its_expert_wins(agentrl_cli):
    """examples/errands_env.py imports no agentrl; check-env accepts it as it is and plays its expert, and the
    expert's shortest errand wins every task it is given."""
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES), "COLUMNS": "200"}
    lines = (EXAMPLES / "errands_env.py").read_text().splitlines()
    assert not [line for line in lines if line.startswith(("import agentrl", "from agentrl"))]
    checked = subprocess.run([*agentrl_cli, "check-env", "errands_env:Errands"], capture_output=True, text=True,
                             timeout=600, env=env)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "passes check_text_env" in checked.stdout + checked.stderr
    played = subprocess.run([*agentrl_cli, "eval", "--env", "errands_env:Errands", "--agent", "expert",
                             "--episodes", "20"], capture_output=True, text=True, timeout=600, env=env)
    assert played.returncode == 0, played.stderr[-3000:]
    assert "│       All │     100.0 │" in played.stdout
