"""SCPO in verl / verl-agent: the rollout fields, then the estimator by name, as verl's trainer calls it (CPU).

A toy 3-step task ("take key", "open door", "go out", in order) is played the way verl-agent's rollout loop plays
it: one DataProto per step for all environments, with verl-agent's own fields (uid, traj_uid, anchor_obs, rewards,
is_action_valid) and the two lines SCPO adds (agentrl_verl.add_step_fields; success once the episode ends). The
batch is then padded with copies and shuffled as adjust_batch / balance_batch do, and verl's compute_advantage runs
with algorithm.adv_estimator=scpo. Needs verl (scripts/install_integrations.sh); run: python verl_scpo.py
"""

import uuid

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import ray_trainer

import agentrl.integrations.verl as agentrl_verl

ACTIONS, rng = ["take key", "open door", "go out", "look"], np.random.default_rng(0)
agentrl_verl.install()  # once, in the process that runs the trainer (verl-agent: its main_ppo.py)

n_envs, group_size = 8, 4
uid = np.repeat([str(uuid.uuid4()) for _ in range(n_envs // group_size)], group_size).astype(object)
traj_uid = np.array([str(uuid.uuid4()) for _ in range(n_envs)], dtype=object)
progress, done, steps = np.zeros(n_envs, int), np.zeros(n_envs, bool), []
for step in range(4):  # verl-agent: for _step in range(max_steps)
    obs = [f"progress {p}" for p in progress]
    actions = [ACTIONS[progress[i]] if rng.random() < 0.6 else "look" for i in range(n_envs)]
    moved = np.array([a == ACTIONS[min(p, 2)] for a, p in zip(actions, progress)]) & ~done
    progress = progress + moved
    rewards = np.where(moved & (progress == 3), 10.0, 0.0)
    next_obs = ["You are outside." if p == 3 else ("OK." if m else "Nothing happens.") for p, m in zip(progress, moved)]
    batch = DataProto.from_dict(
        tensors={"response_mask": torch.ones(n_envs, 4), "token_level_rewards": torch.zeros(n_envs, 4)},
        non_tensors={"uid": uid, "traj_uid": traj_uid, "anchor_obs": np.array(obs, dtype=object),
                     "rewards": rewards, "is_action_valid": np.ones(n_envs, bool)})
    agentrl_verl.add_step_fields(batch, step, actions, next_obs)  # SCPO's line in the rollout loop
    steps.append(batch[~done])  # verl-agent keeps the rows of active environments only
    done |= progress == 3
success = progress == 3  # verl-agent: what its success_evaluator reports per environment
for batch in steps:
    batch.non_tensor_batch["success"] = success[[list(traj_uid).index(t) for t in batch.non_tensor_batch["traj_uid"]]]
data = DataProto.concat(steps)
rows = rng.permutation(np.concatenate([np.arange(len(data)), [0, 1]]))  # adjust_batch copies, balance_batch order
data = data.select_idxs(rows)

config = {"agentrl": {"scorer": "lexical"}}  # verl: +algorithm.agentrl.scorer=lexical (default: bertscore)
data = ray_trainer.compute_advantage(data, adv_estimator="scpo", gamma=1.0, lam=1.0, config=config)
advantages, nt = data.batch["advantages"][:, 0].numpy(), data.non_tensor_batch
for k, t in enumerate(traj_uid):  # one line per episode: each step's action and advantage (copies collapse)
    row_of_step = {int(nt["step_index"][i]): i for i in np.flatnonzero(nt["traj_uid"] == t)}
    cells = [f"{nt['step_text'][i].split(' -> ')[0]:>9} {advantages[i]:+.2f}" for _, i in sorted(row_of_step.items())]
    print("won " if success[k] else "lost", " | ".join(cells))
