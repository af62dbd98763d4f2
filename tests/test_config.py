"""Typed training configuration: defaults from the spec, files, --set overrides, and clear errors."""

from __future__ import annotations

import pytest

from agentrl.config import TrainConfig, apply_overrides, build_config, from_dict, load_config_file, save_config
from agentrl.errors import ConfigError


def test_defaults_follow_the_reference_setup():
    cfg = TrainConfig()
    assert (cfg.rollout.tasks_per_iteration, cfg.rollout.group_size) == (16, 8)  # docs/spec/algorithms.md §1.6
    assert cfg.agent.history_length == 2
    assert cfg.generation.temperature == 1.0 and cfg.run.eval_temperature == 0.4
    assert cfg.learner.lr == 1e-6 and cfg.learner.kl_coef == 0.01


def test_yaml_file_and_overrides_compose(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("env:\n  name: crafting\n  args: {max_steps: 20}\nrollout:\n  group_size: 4\n")
    cfg = build_config(path, {"rollout.group_size": 2, "learner.lr": 1e-4, "model.lora.r": 8})
    assert cfg.env.name == "crafting" and cfg.env.args == {"max_steps": 20}
    assert cfg.rollout.group_size == 2 and cfg.learner.lr == 1e-4
    assert cfg.model.lora is not None and cfg.model.lora.r == 8


def test_toml_and_round_trip(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[algo]\nname = "gigpo"\n[algo.options]\nmode = "mean_std_norm"\n')
    cfg = build_config(path)
    assert cfg.algo.options == {"mode": "mean_std_norm"}
    save_config(cfg, tmp_path / "saved.yaml")
    again = build_config(tmp_path / "saved.yaml")
    assert again == cfg


@pytest.mark.parametrize("overrides, message", [
    ({"rollout.grup_size": 4}, "unknown config key(s) rollout.grup_size"),
    ({"rollout.group_size": "four"}, "rollout.group_size must be an integer"),
    ({"rollout.group_size": 0}, "rollout.group_size must be >= 1"),
    ({"agent.mode": "beam"}, "agent.mode must be one of"),
    ({"agent.think": "yes"}, "agent.think must be true or false"),
    ({"learner.lr": [1]}, "learner.lr must be a number"),
    ({"rollout.group_size.x": 1}, "rollout.group_size must be an integer"),
])
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_config(None, overrides)
    assert message in str(err.value)


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config_file(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config_file(listing)


def test_from_dict_rejects_non_mapping_section():
    with pytest.raises(ConfigError, match="rollout must be a mapping"):
        from_dict(TrainConfig, {"rollout": 3})


def test_apply_overrides_does_not_mutate_input():
    data = {"a": {"b": 1}}
    out = apply_overrides(data, {"a.b": 2, "c.d": 3})
    assert data == {"a": {"b": 1}} and out == {"a": {"b": 2}, "c": {"d": 3}}


def test_no_model_means_the_embedded_policy_on_a_cpu_with_its_agent_settings(monkeypatch):
    import torch

    from agentrl.models import EMBEDDED_POLICY, recommended_agent_settings

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = build_config(None, {"env.name": "crafting"})
    assert config.model.path == EMBEDDED_POLICY
    expected = recommended_agent_settings(EMBEDDED_POLICY)
    for key, value in expected.items():
        assert getattr(config.agent, key) == value
    # Anything set explicitly wins over the model's recommendation.
    assert build_config(None, {"agent.think": True, "agent.mode": "generate"}).agent.think is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert build_config(None, {"env.name": "crafting"}).model.path is None  # a GPU: the user names a model


def test_a_model_folders_agentrl_json_sets_agent_defaults(tmp_path):
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "agentrl.json").write_text(
        '{"agent": {"think": false, "history_length": 3, "mode": "score", "list_actions": false}}')
    config = build_config(None, {"model.path": str(folder)})
    assert (config.agent.think, config.agent.history_length, config.agent.mode) == (False, 3, "score")
    assert config.agent.list_actions is False
    assert build_config(None, {"model.path": "tiny-random"}).agent.list_actions is True  # nothing recommended
    file = tmp_path / "run.yaml"
    file.write_text("agent:\n  history_length: 1\n")
    assert build_config(file, {"model.path": str(folder)}).agent.history_length == 1
    (folder / "agentrl.json").write_text("not json")  # a broken file recommends nothing
    assert build_config(None, {"model.path": str(folder)}).agent.think is True


def test_the_example_configs_build():
    """The files the README points users at are valid configs (a renamed or mistyped key fails here, not in a run)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "examples" / "configs"
    files = sorted(folder.glob("*.yaml"))
    assert files
    for path in files:
        config = build_config(path, {})
        assert config.env.name and config.algo.name
    alfworld = build_config(folder / "alfworld-cpu.yaml", {})
    assert alfworld.env.name == "alfworld" and alfworld.run.eval_before_train
