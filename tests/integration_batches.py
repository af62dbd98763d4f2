"""A small random multi-turn batch, one row per step, shared by the framework integration tests."""

from __future__ import annotations

import uuid

import numpy as np

ANCHORS = ["kitchen", "hall", "cabinet 1 is closed", "Nothing happens.", "garden"]
ACTIONS = ["go to hall", "open cabinet 1", "take key", "look", "go out"]


def random_steps(seed: int = 0, groups: int = 3, per_group: int = 4, max_len: int = 5) -> dict[str, np.ndarray]:
    """Rows in rollout order (trajectory by trajectory): uuid ids, raw step rewards (10 on a success's last step),
    validity, anchors, success flags and "action -> next_obs" texts; every group has both outcomes."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("uid", "traj_uid", "step_index", "rewards", "is_action_valid",
                                             "anchor_obs", "success", "step_text")}
    for g in range(groups):
        uid = str(uuid.UUID(int=int(rng.integers(2**62)) + g))
        for k in range(per_group):
            traj = str(uuid.UUID(int=int(rng.integers(2**62)) + 1000 + k))
            length = int(rng.integers(1, max_len + 1))
            won = k % 2 == 0
            for t in range(length):
                last = t == length - 1
                cols["uid"].append(uid)
                cols["traj_uid"].append(traj)
                cols["step_index"].append(t)
                cols["rewards"].append(10.0 if (won and last) else 0.0)
                cols["is_action_valid"].append(bool(rng.random() > 0.15))
                cols["anchor_obs"].append(ANCHORS[int(rng.integers(len(ANCHORS)))])
                cols["success"].append(won)
                cols["step_text"].append(f"{ACTIONS[int(rng.integers(len(ACTIONS)))]} -> "
                                         f"{ANCHORS[int(rng.integers(len(ANCHORS)))]}")
    out = {k: np.array(v, dtype=object) for k, v in cols.items()}
    out["step_index"] = np.array(cols["step_index"], dtype=np.int64)
    out["rewards"] = np.array(cols["rewards"], dtype=np.float64)
    out["is_action_valid"] = np.array(cols["is_action_valid"], dtype=bool)
    out["success"] = np.array(cols["success"], dtype=bool)
    return out


def token_rewards(steps: dict[str, np.ndarray], length: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """verl-agent's token tensors for the rows: a right-padded response mask, and the episode return on the last
    response token of every step row (what its episode reward manager writes), not the step's own reward."""
    rng = np.random.default_rng(seed)
    n = len(steps["uid"])
    lengths = rng.integers(1, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)
    episode = {t: 0.0 for t in steps["traj_uid"]}
    for t, r in zip(steps["traj_uid"], steps["rewards"]):
        episode[t] += r
    rewards = np.zeros((n, length), np.float32)
    rewards[np.arange(n), lengths - 1] = [episode[t] for t in steps["traj_uid"]]
    return rewards, mask


def trajectory_rows(steps: dict[str, np.ndarray], seed: int = 0) -> dict:
    """The same episodes as one row per trajectory (SkyRL, TRL): per turn 1-3 model tokens (mask 1) then 1-2
    observation tokens (mask 0), the turn's reward on its last model token; per-turn texts and anchors as lists."""
    rng = np.random.default_rng(seed)
    trajs = list(dict.fromkeys(steps["traj_uid"]))
    rows: dict[str, list] = {k: [] for k in ("uid", "success", "model_mask", "rewards", "step_texts", "anchors")}
    for traj in trajs:
        at = np.flatnonzero(steps["traj_uid"] == traj)
        at = at[np.argsort(steps["step_index"][at])]
        mask, rewards = [], []
        for i in at:
            n_model, n_obs = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            mask += [1] * n_model + [0] * n_obs
            rewards += [0.0] * (n_model - 1) + [float(steps["rewards"][i])] + [0.0] * n_obs
        rows["uid"].append(steps["uid"][at[0]])
        rows["success"].append(bool(steps["success"][at[0]]))
        rows["model_mask"].append(mask)
        rows["rewards"].append(rewards)
        rows["step_texts"].append([steps["step_text"][i] for i in at])
        rows["anchors"].append([steps["anchor_obs"][i] for i in at])
    width = max(len(m) for m in rows["model_mask"]) + 2
    pad = lambda seqs: np.array([s + [0] * (width - len(s)) for s in seqs], dtype=np.float32)
    rows["response_mask"] = pad([[1] * len(m) for m in rows["model_mask"]])
    rows["model_mask"], rows["rewards"] = pad(rows["model_mask"]), pad(rows["rewards"])
    rows["traj_of_step"] = np.array([trajs.index(t) for t in steps["traj_uid"]])
    return rows
