"""agentrl's estimators through verl's real advantage-estimator registry and compute_advantage, on verl's DataProto."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed (scripts/install_integrations.sh)")
torch = pytest.importorskip("torch")

from conftest import REPO_ROOT as REPO
from integration_batches import random_steps, token_rewards
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos

import agentrl.integrations.verl as agentrl_verl
from agentrl.algos import gigpo_advantages_flat, grpo_advantages_flat, scpo_advantages_flat
from agentrl.algos.types import BatchError

FLAT = {
    "agentrl_grpo": lambda s, **o: grpo_advantages_flat(s["uid"], s["traj_uid"], s["step_index"], s["rewards"],
                                                        s["is_action_valid"], **o),
    "agentrl_gigpo": lambda s, **o: gigpo_advantages_flat(s["uid"], s["traj_uid"], s["step_index"], s["rewards"],
                                                          s["is_action_valid"], s["anchor_obs"], **o),
    "scpo": lambda s, **o: scpo_advantages_flat(s["uid"], s["traj_uid"], s["step_index"], s["rewards"],
                                                s["is_action_valid"], s["success"], s["step_text"], s["anchor_obs"],
                                                **o),
}
OPTIONS = {"scorer": "lexical"}  # SCPO's lexical scorer: no model to load


def config(name: str) -> dict:
    """verl's algorithm config as the estimators read it: agentrl's options under ``agentrl``."""
    return {"agentrl": OPTIONS if name == "scpo" else {}}


def data_proto(steps: dict[str, np.ndarray], rows: np.ndarray | None = None) -> DataProto:
    rows = np.arange(len(steps["uid"])) if rows is None else rows
    rewards, mask = token_rewards(steps)
    tensors = {"token_level_rewards": torch.tensor(rewards[rows]), "response_mask": torch.tensor(mask[rows])}
    return DataProto.from_dict(tensors=tensors, non_tensors={k: v[rows] for k, v in steps.items()})


def flat(name: str, steps: dict[str, np.ndarray]) -> np.ndarray:
    options = OPTIONS if name == "scpo" else {}
    return FLAT[name](steps, **options)


def shuffled_with_copies(n: int, seed: int = 1) -> np.ndarray:
    """Row order after verl-agent's adjust_batch (copies of random rows appended) and balance_batch (reordered)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.concatenate([np.arange(n), rng.choice(n, 5, replace=False)]))


@pytest.mark.parametrize("name", list(agentrl_verl.NAMES))
def test_verl_registry_estimator_equals_the_flat_api_on_shuffled_padded_batches(name):
    agentrl_verl.register()
    steps = random_steps(seed=3)
    rows = shuffled_with_copies(len(steps["uid"]))
    data = data_proto(steps, rows)
    fn = core_algos.get_adv_estimator_fn(name)
    advantages, returns = fn(token_level_rewards=data.batch["token_level_rewards"],
                             response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
                             config=config(name), non_tensor_batch=data.non_tensor_batch)
    expected = flat(name, steps)[rows]
    mask = data.batch["response_mask"]
    assert advantages.shape == returns.shape == mask.shape
    assert torch.equal(advantages, returns)
    assert torch.all(advantages[mask == 0] == 0)
    got = (advantages * mask).sum(-1) / mask.sum(-1)  # every response token of a row carries the row's advantage
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-5)
    assert np.abs(expected).max() > 0.5  # a batch with real credit, not all zeros


def test_installed_compute_advantage_routes_agentrl_names_and_leaves_verls_own():
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    agentrl_verl.install()
    agentrl_verl.install()  # idempotent: wraps verl's function once
    assert ray_trainer.compute_advantage.agentrl_original.__module__ == "verl.trainer.ppo.ray_trainer"
    steps = random_steps(seed=5)
    for name in agentrl_verl.NAMES:
        data = ray_trainer.compute_advantage(data_proto(steps), adv_estimator=name, gamma=1.0, lam=1.0,
                                              config=OmegaConf.create(config(name)))  # verl's DictConfig
        got = data.batch["advantages"].sum(-1) / data.batch["response_mask"].sum(-1)
        np.testing.assert_allclose(got.numpy(), flat(name, steps), rtol=1e-6, atol=1e-5)
    data = ray_trainer.compute_advantage(data_proto(steps), adv_estimator="grpo", gamma=1.0, lam=1.0)
    verl_grpo, _ = core_algos.compute_grpo_outcome_advantage(data.batch["token_level_rewards"],
                                                             data.batch["response_mask"], steps["uid"])
    assert torch.equal(data.batch["advantages"], verl_grpo)


def test_gigpo_through_verl_matches_verl_agents_equations_worked_by_hand():
    """verl-agent's compute_gigpo_outcome_advantage (not on PyPI) in its defaults: mean_norm, γ = 0.95, ω = 1,
    penalty 0.1; episode statistics pooled over step rows (docs/spec/algorithms.md §2.1, §3.2).

    Group A: a = (s0, s1), rewards 0, 10; b = (s0, s2, s1), rewards 0, 0, 0, step 1 invalid.
      scores a: 10, 10; b: 0, -0.1, 0 -> mean 3.98 -> A^E a: 6.02, 6.02; b: -3.98, -4.08, -3.98
      step returns a: 9.5, 10; b: 0, -0.1, 0 -> anchors s0 {9.5, 0}, s1 {10, 0}, s2 {-0.1}
      A^S a: 4.75, 5; b: -4.75, 0, -5 -> A a: 10.77, 11.02; b: -8.73, -4.08, -8.98
    Group B: d = (t0, t0), rewards 0, 10: A^E 0, 0 (mean of its two rows); anchor t0 {9.5, 10} -> A -0.25, 0.25.
    """
    steps = {
        "uid": np.array(["A"] * 5 + ["B"] * 2, dtype=object),
        "traj_uid": np.array(["a", "a", "b", "b", "b", "d", "d"], dtype=object),
        "step_index": np.array([0, 1, 0, 1, 2, 0, 1]),
        "rewards": np.array([0, 10, 0, 0, 0, 0, 10], dtype=float),
        "is_action_valid": np.array([1, 1, 1, 0, 1, 1, 1], dtype=bool),
        "anchor_obs": np.array(["s0", "s1", "s0", "s2", "s1", "t0", "t0"], dtype=object),
    }
    data = agentrl_verl.compute_advantage(data_proto(steps), "agentrl_gigpo")
    got = data.batch["advantages"].sum(-1) / data.batch["response_mask"].sum(-1)
    np.testing.assert_allclose(got.numpy(), [10.77, 11.02, -8.73, -4.08, -8.98, -0.25, 0.25], atol=2e-5)


def test_annotate_steps_recovers_step_order_from_rollout_order():
    steps = random_steps(seed=7)
    data = data_proto(steps)
    data.non_tensor_batch.pop("step_index")
    with pytest.raises(BatchError, match="annotate_steps"):
        agentrl_verl.compute_advantage(data, "agentrl_gigpo")
    agentrl_verl.annotate_steps(data)
    np.testing.assert_array_equal(data.non_tensor_batch["step_index"], steps["step_index"])


def test_missing_fields_and_verls_plain_call_fail_with_the_fix():
    agentrl_verl.register()
    steps = random_steps(seed=2)
    data = data_proto(steps)
    fn = core_algos.get_adv_estimator_fn("scpo")
    with pytest.raises(BatchError, match="install"):  # verl's generic branch passes token tensors and uid only
        fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
           config=None, index=steps["uid"])
    data.non_tensor_batch.pop("step_text")
    with pytest.raises(BatchError, match="scpo needs per-step text"):
        agentrl_verl.compute_advantage(data, "scpo", {"agentrl": OPTIONS})


def test_copies_must_match_their_original():
    steps = random_steps(seed=4)
    rows = np.concatenate([np.arange(len(steps["uid"])), [0]])
    data = data_proto(steps, rows)
    data.non_tensor_batch["rewards"] = data.non_tensor_batch["rewards"].copy()
    data.non_tensor_batch["rewards"][-1] += 1.0
    with pytest.raises(BatchError, match="same|different rewards"):
        agentrl_verl.compute_advantage(data, "agentrl_grpo")


def test_add_step_fields_writes_what_scpo_reads():
    data = data_proto(random_steps(seed=0), np.arange(3))
    agentrl_verl.add_step_fields(data, 4, ["open door", "look", "go"], ["The door opens.", "", "You arrive."])
    assert data.non_tensor_batch["step_index"].tolist() == [4, 4, 4]
    assert data.non_tensor_batch["step_text"].tolist() == ["open door -> The door opens.", "look", "go -> You arrive."]


def test_verl_example_runs():
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    result = subprocess.run([sys.executable, str(REPO / "examples" / "integrations" / "verl_scpo.py")],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith(("won", "lost"))]
    assert len(lines) == 8 and any(line.startswith("won") for line in lines)
