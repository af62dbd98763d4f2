"""Typed training configuration: defaults from the spec, files, --set overrides, and clear errors."""

from __future__ import annotations

import pytest

from agentrl.config import TrainConfig, apply_overrides, build_config, from_dict, load_config_file, save_config
from agentrl.errors import ConfigError


def test_defaults_follow_the_reference_setup():
    cfg = TrainConfig()
    assert (cfg.rollout.tasks_per_iteration, cfg.rollout.group_size) == (16, 8)  # algorithms.md §1.6
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
