"""The text-env contract, the registry (aliases, Gymnasium ids, class paths, entry-point plugins) and check_text_env."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import agentrl.envs as envs
from agentrl.envs.core import PrintableText, TextEnv
from agentrl.errors import AgentRLError, UnknownNameError
from agentrl.testing import ContractError, check_text_env


def test_printable_text_admits_real_text_and_rejects_control_chars():
    space = PrintableText()
    assert space.contains("Épée – 12\" ½ off\nline two\ttab ✓ 日本")
    assert space.contains("")
    assert not space.contains("bell\x07")
    assert not space.contains(b"bytes")
    assert not space.contains("x" * (space.max_length + 1))
    sample = PrintableText(max_length=50, seed=0).sample()
    assert isinstance(sample, str) and space.contains(sample)


@pytest.mark.parametrize("name", ["crafting", "Crafting-v0", "agentrl/Crafting-v0", "CRAFTING"])
def test_make_resolves_alias_and_ids(name):
    env = envs.make(name)
    assert isinstance(env.unwrapped, envs.TextEnv)
    assert env.spec.id == "agentrl/Crafting-v0"


def test_gymnasium_make_works_directly():
    env = gym.make("agentrl/Crafting-v0", split="eval_in_distribution")
    obs, info = env.reset(seed=0)
    assert info["task_id"].startswith("eval_in_distribution/")


def test_make_accepts_module_class_path():
    env = envs.make("agentrl.envs.crafting:CraftingEnv")
    assert type(env.unwrapped).__name__ == "CraftingEnv"


def test_unknown_env_lists_known_and_closest():
    with pytest.raises(UnknownNameError) as err:
        envs.make("alfwrld")
    message = str(err.value)
    assert "Did you mean 'alfworld'?" in message
    for alias in ("crafting", "alfworld", "webshop", "textworld"):
        assert alias in message


def test_register_custom_env_under_namespace():
    class Echo(TextEnv):
        splits = ("train",)

        def task_ids(self, split=None):
            return ["a", "b"]

        def _reset_task(self, task_id):
            return f"say {task_id}", {"instruction": f"say {task_id}", "admissible_actions": ["a", "b"]}

        def _step(self, action):
            won = action == self.task_id
            return ("yes" if won else "no"), float(won), won, {"won": won, "admissible_actions": ["a", "b"]}

    envs.register("Echo-v0", Echo, description="echo test env")
    try:
        env = gym.make("agentrl/Echo-v0")
        obs, info = env.reset(options={"task_id": "b"})
        assert obs == "say b" and info["anchor"] == "say b"
        _, reward, terminated, _, info = env.step("b")
        assert reward == 1.0 and terminated and info["won"]
        assert "echo" in [e.alias for e in envs.list_envs()]
        check_text_env(envs.make("echo"))
    finally:
        envs.registration.ENVS._items.pop("echo", None)
        gym.registry.pop("agentrl/Echo-v0", None)


def test_alias_collision_is_an_error():
    with pytest.raises(AgentRLError, match="already used"):
        envs.register("Other-v0", "agentrl.envs.crafting:CraftingEnv", alias="crafting")


def test_reset_options_are_validated():
    env = envs.make("crafting")
    with pytest.raises(AgentRLError, match="unknown task_id"):
        env.reset(options={"task_id": "train/99999999"})
    with pytest.raises(AgentRLError, match="out of range"):
        env.reset(options={"task_index": 10**9})
    with pytest.raises(AgentRLError, match="unknown split"):
        env.reset(options={"split": "nope", "task_index": 0})
    with pytest.raises(AgentRLError, match="unknown reset option"):
        env.reset(options={"level": 3})


def test_step_before_reset_and_non_str_action():
    env = envs.make("crafting").unwrapped
    with pytest.raises(AgentRLError, match="reset"):
        env.step("look")
    env.reset(seed=0)
    with pytest.raises(TypeError):
        env.step(3)


def test_max_steps_truncates():
    env = envs.make("crafting", max_steps=3)
    env.reset(seed=0)
    flags = [env.step("look")[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_check_text_env_catches_a_broken_env():
    class NonDeterministic(TextEnv):
        counter = 0

        def task_ids(self, split=None):
            return ["only"]

        def _reset_task(self, task_id):
            NonDeterministic.counter += 1
            return f"state {NonDeterministic.counter}", {}

        def _step(self, action):
            return "ok", 0.0, False, {}

    with pytest.raises((ContractError, AssertionError)):
        check_text_env(NonDeterministic())


@pytest.mark.parametrize("entry", envs.list_envs(), ids=lambda e: e.alias)
def test_every_registered_env_passes_check_text_env(entry):
    problem = entry.data_status()
    if problem is not None:
        pytest.skip(f"{entry.alias} data not at its default location: {problem}")
    env = envs.make(entry.alias)
    base = env.unwrapped
    empty = [split for split in base.splits if not base.task_ids(split)]
    if empty:  # e.g. ALFWorld's eval archive unpacked without the train one; check_text_env wants every split
        env.close()
        pytest.skip(f"{entry.alias} data is partial here: no tasks in {', '.join(empty)}")
    check_text_env(env)


def test_entry_point_plugin_from_an_installed_distribution(tmp_path):
    """A third-party package registers an env through the agentrl.envs entry-point group (a real .dist-info)."""
    pkg = tmp_path / "coinflip_env"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        from agentrl.envs import TextEnv

        class CoinFlip(TextEnv):
            splits = ("train",)
            description = "guess the coin"

            def task_ids(self, split=None):
                return ["heads", "tails"]

            def _reset_task(self, task_id):
                return "guess", {"instruction": "guess the coin", "admissible_actions": ["heads", "tails"]}

            def _step(self, action):
                won = action == self.task_id
                return ("right" if won else "wrong"), float(won), True, {"won": won}
    '''))
    dist = tmp_path / "coinflip_env-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coinflip-env\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentrl.envs]\ncoinflip = coinflip_env:CoinFlip\n")
    script = textwrap.dedent('''
        import gymnasium as gym
        import agentrl.envs as envs
        from agentrl.testing import check_text_env
        env = envs.make("coinflip")
        obs, info = env.reset(options={"task_id": "tails"})
        assert env.step("tails")[1] == 1.0
        assert "coinflip" in [e.alias for e in envs.list_envs()]
        assert gym.make("agentrl/coinflip-v0").unwrapped.description == "guess the coin"
        check_text_env(env)
        print("plugin ok")
    ''')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "plugin ok" in result.stdout
