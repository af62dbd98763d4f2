"""The algorithm registry, configs, entry points, import hygiene and the drop-in example."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agentrl.algos import (
    ALGORITHMS,
    AlgoConfig,
    AlgorithmSpec,
    GiGPOConfig,
    SCPOConfig,
    Step,
    StepBatch,
    Trajectory,
    get_algorithm,
    list_algorithms,
    option,
    register_algorithm,
)
from agentrl.algos.spec import AlgorithmRegistry
from agentrl.errors import AgentRLError, ConfigError, UnknownNameError

REPO = Path(__file__).resolve().parents[1]


def test_builtin_algorithms_are_listed_with_one_line_descriptions():
    names = [spec.name for spec in list_algorithms()]
    assert {"grpo", "gigpo", "scpo", "scpo_grpo"} <= set(names)
    assert names == sorted(names)
    for spec in list_algorithms():
        assert spec.description and "\n" not in spec.description
        assert isinstance(spec, AlgorithmSpec) and issubclass(spec.config_cls, AlgoConfig)


def test_unknown_algorithm_lists_known_names_and_suggests():
    with pytest.raises(UnknownNameError) as err:
        get_algorithm("gipgo")
    message = str(err.value)
    assert "'gigpo'" in message and "grpo" in message and "scpo" in message


def test_options_describe_every_config_field():
    options = get_algorithm("gigpo").options()
    assert [o[0] for o in options] == list(GiGPOConfig.__dataclass_fields__)
    by_name = {name: (typ, default, help_) for name, typ, default, help_ in options}
    assert by_name["mode"][0] == "mean_norm|mean_std_norm" and by_name["mode"][1] == "mean_norm"
    assert by_name["gamma"] == ("float", 0.95, by_name["gamma"][2]) and by_name["gamma"][2]
    scpo = {name: typ for name, typ, _, _ in get_algorithm("scpo").options()}
    assert scpo["match_threshold"] == "float|None" and scpo["alignment"] == "dp|greedy|unordered"
    assert all(help_ for _, _, _, help_ in get_algorithm("scpo").options())


def test_config_from_strings_and_validation():
    cfg = SCPOConfig.from_dict({"credit_scale": "0.25", "match_threshold": "none", "seed": "3", "base": "grpo"})
    assert (cfg.credit_scale, cfg.match_threshold, cfg.seed, cfg.base) == (0.25, None, 3, "grpo")
    assert get_algorithm("grpo").make_config({"norm_by_std": "false"}).norm_by_std is False
    with pytest.raises(ConfigError, match="unknown option"):
        GiGPOConfig.from_dict({"gama": 0.9})
    with pytest.raises(ConfigError, match="mode"):
        GiGPOConfig(mode="mean")
    with pytest.raises(ConfigError, match="gamma"):
        GiGPOConfig(gamma=1.5)
    with pytest.raises(ConfigError, match="credit_scale"):
        SCPOConfig(credit_scale="big")
    with pytest.raises(UnknownNameError, match="lexical"):
        SCPOConfig(scorer="lexcial")
    with pytest.raises(ConfigError, match="GiGPOConfig"):
        get_algorithm("grpo").compute([], GiGPOConfig())


def test_results_follow_input_order_with_interleaved_groups():
    def one(group, tid, success, n):
        return Trajectory(group, tid, success, [Step(f"s{t}", "a", 10.0 * (success and t == n - 1), t == n - 1)
                                                for t in range(n)])

    trajectories = [one("a", 0, True, 2), one("b", 1, False, 3), one("a", 2, False, 1), one("b", 3, True, 1)]
    result = get_algorithm("grpo").compute(trajectories)
    assert [len(a) for a in result.advantages] == [2, 3, 1, 1]
    assert result.advantages[0][0] > 0 > result.advantages[2][0]
    assert result.advantages[3][0] > 0 > result.advantages[1][0]
    assert get_algorithm("gigpo").compute([]).advantages == []


@dataclass
class ToyConfig(AlgoConfig):
    scale: float = option(2.0, "multiplies the reward")


@pytest.fixture
def toy_algorithm():
    @register_algorithm("toy_reward_scale", "reward times a constant (test only)", ToyConfig)
    def toy(batch: StepBatch, config: ToyConfig):
        return config.scale * batch.reward, {"rows": float(len(batch))}

    yield toy
    ALGORITHMS._items.pop("toy_reward_scale", None)


def test_register_a_new_algorithm(toy_algorithm):
    spec = get_algorithm("toy_reward_scale")
    assert toy_algorithm.spec is spec
    result = spec.compute([Trajectory("g", 0, True, [Step("o", "a", 1.0, False), Step("o", "b", 3.0, True)])],
                          {"scale": "0.5"})
    np.testing.assert_array_equal(result.advantages[0], [0.5, 1.5])
    assert result.diagnostics == {"rows": 2.0}
    assert spec.options() == [("scale", "float", 2.0, "multiplies the reward")]
    with pytest.raises(AgentRLError, match="already registered"):
        register_algorithm("toy_reward_scale", "again", ToyConfig)(lambda b, c: (b.reward, {}))


def test_register_rejects_bad_configs_and_bad_outputs(toy_algorithm):
    with pytest.raises(AgentRLError, match="AlgoConfig"):
        register_algorithm("bad", "x", dict)
    with pytest.raises(AgentRLError, match="one line"):
        register_algorithm("bad", "two\nlines", ToyConfig)
    wrong = AlgorithmSpec("wrong", "returns too few values", ToyConfig, lambda b, c: (np.zeros(1), {}))
    with pytest.raises(AgentRLError, match="returned"):
        wrong.compute([Trajectory("g", 0, True, [Step("o", "a", 1.0, False), Step("o", "b", 3.0, True)])])


def write_plugin(root: Path, module: str, body: str, entry: str) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(body))
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[agentrl.algos]\n{entry}\n")


def test_entry_point_plugins(tmp_path, monkeypatch):
    write_plugin(tmp_path, "agentrl_plugin_demo", """
        import numpy as np
        from agentrl.algos import AlgorithmSpec, GRPOConfig
        SPEC = AlgorithmSpec("reinforce", "plain episode return", GRPOConfig,
                             lambda batch, config: (np.zeros(len(batch)), {}))
        """, "reinforce = agentrl_plugin_demo:SPEC")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_points = tmp_path / "agentrl_plugin_demo-0.1.dist-info" / "entry_points.txt"

    registry = AlgorithmRegistry("algorithm", "agentrl.algos")  # a fresh registry, as on first use
    assert registry.get("reinforce").description == "plain episode return"
    assert "reinforce" in registry.names()

    entry_points.write_text("[agentrl.algos]\nbroken = agentrl_plugin_demo:MISSING\n")
    with pytest.raises(AgentRLError, match="broken"):
        AlgorithmRegistry("algorithm", "agentrl.algos").names()

    entry_points.write_text("[agentrl.algos]\nnot_a_spec = agentrl_plugin_demo:np\n")
    with pytest.raises(AgentRLError, match="must name an AlgorithmSpec"):
        AlgorithmRegistry("algorithm", "agentrl.algos").names()


def test_algos_import_no_models_trainer_agents_or_envs():
    code = (
        "import sys, agentrl.algos as a\n"
        "a.get_algorithm('scpo').compute([], {'scorer': 'lexical'})\n"
        "bad = [m for m in ('torch', 'sentence_transformers', 'transformers', 'agentrl.envs', 'agentrl.agents',"
        " 'agentrl.trainer', 'agentrl.models', 'agentrl.rollout') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_drop_in_example_runs_and_learns():
    out = subprocess.run([sys.executable, str(REPO / "examples" / "scpo_drop_in.py")], capture_output=True,
                         text=True, timeout=300, check=True)
    rates = [float(line.split()[-1]) for line in out.stdout.splitlines() if "success rate" in line]
    assert len(rates) >= 2 and rates[-1] > rates[0] + 0.3


def test_the_docs_example_algorithm_runs():
    text = (REPO / "docs" / "algorithms.md").read_text()
    section = text.split("## Adding an algorithm", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    try:
        exec(compile(code, "docs/algorithms.md", "exec"), namespace)
        trajectories = [
            Trajectory("g", 0, True, [Step("o", "a", 0.0, False), Step("o", "b", 10.0, True)]),
            Trajectory("g", 1, False, [Step("o", "a", 0.0, True)]),
            Trajectory("g", 2, False, [Step("o", "c", 0.0, True)]),
        ]
        result = get_algorithm("rloo").compute(trajectories, {"scale": 0.5})
        # R = 10, 0, 0: baselines 0, 5, 5 → A = 10, −5, −5, times 0.5
        np.testing.assert_allclose(np.concatenate(result.advantages), [5, 5, -2.5, -2.5])
    finally:
        ALGORITHMS._items.pop("rloo", None)


def _random_groups(seed: int = 0) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    out = []
    for g in range(3):
        for t in range(4):
            n = int(rng.integers(2, 6))
            steps = [Step(obs=f"o{int(rng.integers(3))}", action=f"a{int(rng.integers(3))}", reward=0.0,
                          done=i == n - 1, valid=bool(rng.random() > 0.2), next_obs=f"o{int(rng.integers(3))}")
                     for i in range(n)]
            won = bool(rng.random() > 0.5)
            steps[-1].reward = 10.0 if won else 0.0
            out.append(Trajectory(f"g{g}", f"g{g}/{t}", won, steps))
    return out


@pytest.mark.parametrize("name", ["grpo", "gigpo", "scpo"])
def test_flat_functions_share_leading_arrays_config_objects_and_diagnostics(name):
    """GRPO, GiGPO and SCPO's flat forms take (group, traj, step, reward, valid, ...) in that order, a whole config
    object or keyword options (the same result), and return the registry's advantages and, asked, diagnostics."""
    from agentrl.algos import to_flat
    from agentrl.algos.gigpo import gigpo_advantages_flat
    from agentrl.algos.grpo import GRPOConfig, grpo_advantages_flat
    from agentrl.algos.scpo import scpo_advantages_flat

    trajectories = _random_groups()
    f = to_flat(trajectories)
    lead = (f.group_index, f.traj_index, f.step_index, f.reward, f.valid)
    options = {"grpo": {"invalid_penalty": 0.3}, "gigpo": {"gamma": 0.9}, "scpo": {"scorer": "lexical"}}[name]
    config_cls = {"grpo": GRPOConfig, "gigpo": GiGPOConfig, "scpo": SCPOConfig}[name]
    call = {"grpo": lambda **kw: grpo_advantages_flat(*lead, **kw),
            "gigpo": lambda **kw: gigpo_advantages_flat(*lead, f.anchor, **kw),
            "scpo": lambda **kw: scpo_advantages_flat(*lead, f.success, f.step_text, f.anchor, **kw)}[name]
    by_keywords = call(**options)
    by_config = call(config=config_cls.from_dict(options))
    np.testing.assert_array_equal(by_keywords, by_config)
    expected, registry_diagnostics = get_algorithm(name).compute_flat(f, options)
    np.testing.assert_array_equal(by_keywords, expected)
    advantages, diagnostics = call(return_diagnostics=True, **options)
    np.testing.assert_array_equal(advantages, expected)
    assert diagnostics and set(diagnostics) <= set(registry_diagnostics)
    for key, value in diagnostics.items():
        assert value == pytest.approx(registry_diagnostics[key], nan_ok=True), key


def test_flat_functions_take_string_ids_and_refuse_token_level_or_discounted_rewards():
    """verl-agent keeps uuid strings for uid/traj_uid and token-level rewards; the flat API takes the ids as they are
    and refuses rewards that are not raw per-step rewards, naming the fix (issue 42)."""
    from agentrl.algos.gigpo import gigpo_advantages_flat
    from agentrl.algos.grpo import grpo_advantages_flat
    from agentrl.algos.scpo import scpo_advantages_flat
    from agentrl.errors import AgentRLError

    step = np.array([0, 1, 0, 1, 0, 1])
    reward = np.array([0.0, 10.0, 0.0, 0.0, 0.0, 10.0])
    anchor = np.array(["s0", "s1", "s0", "s2", "s0", "s1"])
    success = np.array([True, True, False, False, True, True])
    text = np.array(["a -> b", "c -> won", "a -> b", "x -> y", "a -> b", "c -> won"])
    numbered = (np.zeros(6, int), np.array([0, 0, 1, 1, 2, 2]))
    uuids = (np.array(["9f2c"] * 6), np.array(["a1-x", "a1-x", "b7-y", "b7-y", "c3-z", "c3-z"]))  # sorted as 0, 1, 2
    for ids_a, ids_b in [(numbered, uuids)]:
        np.testing.assert_array_equal(grpo_advantages_flat(*ids_a, step, reward),
                                      grpo_advantages_flat(*ids_b, step, reward))
        np.testing.assert_array_equal(gigpo_advantages_flat(*ids_a, step, reward, None, anchor),
                                      gigpo_advantages_flat(*ids_b, step, reward, None, anchor))
        np.testing.assert_array_equal(
            scpo_advantages_flat(*ids_a, step, reward, None, success, text, anchor, scorer="lexical",
                                 sibling="random"),
            scpo_advantages_flat(*ids_b, step, reward, None, success, text, anchor, scorer="lexical",
                                 sibling="random"))
    with pytest.raises(AgentRLError, match=r"token-level rewards .* reward.sum\(-1\)"):
        grpo_advantages_flat(*numbered, step, np.zeros((6, 5)))
    discounted = np.array([0.95**2 * 10, 0.95 * 10, 10.0, 0.0, 0.0, 0.0])
    with pytest.raises(AgentRLError, match="look like discounted returns"):
        gigpo_advantages_flat(np.zeros(6, int), np.array([0, 0, 0, 1, 1, 1]), np.array([0, 1, 2] * 2), discounted,
                              None, anchor)
    shaped = np.array([1.0, 3.0, 10.0, 0.0, 0.0, 0.0])  # progress rewards that do not fall geometrically are fine
    gigpo_advantages_flat(np.zeros(6, int), np.array([0, 0, 0, 1, 1, 1]), np.array([0, 1, 2] * 2), shaped, None,
                          anchor)
    with pytest.raises(AgentRLError, match="step_index must hold integers"):
        grpo_advantages_flat(*numbered, step.astype(str), reward)
