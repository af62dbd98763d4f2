"""SCPO in SkyRL: registered by name, run on a TrainingInputBatch of multi-turn rows as SkyRL's trainer calls it.

SkyRL keeps an episode as one row: the model's turns (loss_mask 1) between observation tokens (loss_mask 0), each
turn's reward on its last token. The per-turn fields SCPO needs come from the generator through batch.metadata;
agentrl_skyrl.step_kwargs(batch) hands them to the estimator (in a trainer subclass, docs/integrations.md).
Needs SkyRL (scripts/install_integrations.sh); run: python skyrl_scpo.py
"""

import pathlib
import sys
import types

import numpy as np
import torch

if sys.version_info < (3, 12):  # skyrl/backends/__init__.py imports the Tinker backend, which needs Python 3.12
    import skyrl

    backends = types.ModuleType("skyrl.backends")
    backends.__path__ = [str(pathlib.Path(skyrl.__file__).parent / "backends")]
    sys.modules["skyrl.backends"] = backends
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.backends.skyrl_train.utils import ppo_utils
from skyrl.train.config import AlgorithmConfig

import agentrl.integrations.skyrl as agentrl_skyrl

agentrl_skyrl.register({"scorer": "lexical"})  # trainer.algorithm.advantage_estimator=scpo

# Two tasks × two episodes; per turn (action, next observation, reward). Turn tokens: 2 model, then 2 observation.
episodes = [
    ("task-1", [("take key", "OK.", 0.0), ("open door", "OK.", 0.0), ("go out", "You are outside.", 10.0)]),
    ("task-1", [("look", "Nothing happens.", 0.0), ("take key", "OK.", 0.0), ("look", "Nothing happens.", 0.0)]),
    ("task-2", [("take key", "OK.", 0.0), ("go out", "You are outside.", 10.0)]),
    ("task-2", [("open door", "Nothing happens.", 0.0), ("take key", "OK.", 0.0)]),
]
width = 4 * max(len(turns) for _, turns in episodes)
loss_mask, rewards = torch.zeros(len(episodes), width), torch.zeros(len(episodes), width)
for row, (_, turns) in enumerate(episodes):
    for t, (_, _, reward) in enumerate(turns):
        loss_mask[row, 4 * t: 4 * t + 2] = 1
        rewards[row, 4 * t + 1] = reward
batch = TrainingInputBatch({"rewards": rewards, "loss_mask": loss_mask,
                            "response_mask": (torch.arange(width) < torch.tensor([4 * len(t) for _, t in episodes])
                                              [:, None]).float()})
batch.metadata = {
    "uids": [task for task, _ in episodes],
    "success": [turns[-1][2] > 0 for _, turns in episodes],
    "step_texts": [[f"{a} -> {o}" for a, o, _ in turns] for _, turns in episodes],
    "anchors": [["start"] + [o for _, o, _ in turns[:-1]] for _, turns in episodes],  # the observation acted on
}
advantages, _ = ppo_utils.compute_advantages_and_returns(
    token_level_rewards=batch["rewards"], response_mask=batch["response_mask"], index=np.array(batch.metadata["uids"]),
    adv_estimator="scpo", config=AlgorithmConfig(advantage_estimator="scpo"), **agentrl_skyrl.step_kwargs(batch))
for row, (task, turns) in enumerate(episodes):
    print(task, " | ".join(f"{a:>9} {advantages[row, 4 * t].item():+.2f}" for t, (a, _, _) in enumerate(turns)))
