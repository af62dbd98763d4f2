"""agentrl's estimators through SkyRL's real AdvantageEstimatorRegistry and compute_advantages_and_returns.

SkyRL's current package (``skyrl``) declares Python >= 3.11, but ``skyrl/backends/__init__.py`` imports its Tinker
backend, whose pydantic models need Python 3.12; on 3.11 the test imports the ``skyrl.backends`` package without
that ``__init__`` (the registry module itself is plain Python 3.11 code). docs/integrations.md has the install.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest

skyrl = pytest.importorskip("skyrl", reason="SkyRL is not installed (scripts/install_integrations.sh)")
torch = pytest.importorskip("torch")
if sys.version_info < (3, 12) and "skyrl.backends" not in sys.modules:
    backends = types.ModuleType("skyrl.backends")
    backends.__path__ = [str(pathlib.Path(skyrl.__file__).parent / "backends")]
    sys.modules["skyrl.backends"] = backends
ppo_utils = pytest.importorskip("skyrl.backends.skyrl_train.utils.ppo_utils")

from conftest import REPO_ROOT as REPO
from integration_batches import random_steps, trajectory_rows
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.train.config import AlgorithmConfig

import agentrl.integrations.skyrl as agentrl_skyrl
from agentrl.algos import gigpo_advantages_flat, grpo_advantages_flat, scpo_advantages_flat
from agentrl.algos.types import BatchError


def skyrl_batch(rows: dict) -> TrainingInputBatch:
    batch = TrainingInputBatch({"rewards": torch.tensor(rows["rewards"]),
                                "response_mask": torch.tensor(rows["response_mask"]),
                                "loss_mask": torch.tensor(rows["model_mask"])})
    batch.metadata = {"uids": list(rows["uid"]), "success": rows["success"], "step_texts": rows["step_texts"],
                      "anchors": rows["anchors"]}
    return batch


def run(name: str, batch: TrainingInputBatch, **extra) -> tuple[torch.Tensor, torch.Tensor]:
    """What SkyRL's trainer calls, plus the per-turn keywords a trainer subclass adds."""
    return ppo_utils.compute_advantages_and_returns(
        token_level_rewards=batch["rewards"], response_mask=batch["response_mask"],
        index=np.array(batch.metadata["uids"]), adv_estimator=name,
        config=AlgorithmConfig(advantage_estimator=name), values=None, grpo_norm_by_std=True, gamma=1.0, lambd=1.0,
        **extra)


def flat(name: str, steps: dict, traj: np.ndarray) -> np.ndarray:
    s = steps
    if name == "agentrl_grpo":
        return grpo_advantages_flat(s["uid"], traj, s["step_index"], s["rewards"], None)
    if name == "agentrl_gigpo":
        return gigpo_advantages_flat(s["uid"], traj, s["step_index"], s["rewards"], None, s["anchor_obs"])
    return scpo_advantages_flat(s["uid"], traj, s["step_index"], s["rewards"], None, s["success"], s["step_text"],
                                s["anchor_obs"], scorer="lexical")


@pytest.mark.parametrize("name", list(agentrl_skyrl.NAMES))
def test_skyrl_registry_estimator_gives_each_turns_tokens_the_flat_api_advantage(name):
    agentrl_skyrl.register({"scorer": "lexical"})
    assert name in ppo_utils.AdvantageEstimatorRegistry.list_available()
    steps = random_steps(seed=11)
    rows = trajectory_rows(steps)
    batch = skyrl_batch(rows)
    advantages, returns = run(name, batch, **agentrl_skyrl.step_kwargs(batch))
    assert advantages.shape == batch["response_mask"].shape and torch.equal(advantages, returns)
    expected = flat(name, steps, rows["traj_of_step"])
    step_ids = agentrl_skyrl.turns_from_mask(rows["model_mask"])
    for i, (k, t) in enumerate(zip(rows["traj_of_step"], steps["step_index"])):
        np.testing.assert_allclose(advantages[k][step_ids[k] == t].numpy(), expected[i], rtol=1e-6, atol=1e-5)
    assert torch.all(advantages[torch.tensor(step_ids) < 0] == 0)  # observation and padding tokens get none
    assert np.abs(expected).max() > 0.5


def test_skyrl_plain_trainer_call_names_the_missing_keywords_and_the_context_passes_them():
    agentrl_skyrl.register({"scorer": "lexical"})
    batch = skyrl_batch(trajectory_rows(random_steps(seed=1)))
    with pytest.raises(BatchError, match="step_kwargs"):
        run("scpo", batch)
    explicit, _ = run("scpo", batch, **agentrl_skyrl.step_kwargs(batch))
    with agentrl_skyrl.passing_step_kwargs(batch):  # what a RayPPOTrainer subclass wraps its super() call in
        passed, _ = run("scpo", batch)
    assert torch.equal(passed, explicit) and explicit.abs().max() > 0.5
    with pytest.raises(BatchError, match="step_kwargs"):  # restored afterwards
        run("scpo", batch)


def test_skyrl_example_runs():
    result = subprocess.run([sys.executable, str(REPO / "examples" / "integrations" / "skyrl_scpo.py")],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len([line for line in result.stdout.splitlines() if line.startswith("task-")]) == 4


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="skyrl.backends imports on Python 3.12")
def test_on_python_3_11_importing_the_adapter_says_why_in_one_line():
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import agentrl.integrations.skyrl"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: SkyRL's skyrl.backends does not import on Python 3.11") and "3.12" in last
