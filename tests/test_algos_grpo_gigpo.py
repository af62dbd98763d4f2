"""GRPO and GiGPO: hand-computed groups, the doc's reference pseudo-code, and hypothesis properties."""

from __future__ import annotations

import difflib
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos import (
    GiGPOConfig,
    GRPOConfig,
    Step,
    Trajectory,
    from_flat,
    get_algorithm,
    gigpo_advantages_flat,
    grpo_advantages_flat,
    to_flat,
)
from agentrl.algos.common import batch_layout
from agentrl.algos.gigpo import gigpo_parts
from agentrl.algos.types import BatchError

EPS = 1e-6


def traj(group, tid, success, rewards, obs=None, valid=None):
    obs = obs or [f"s{t}" for t in range(len(rewards))]
    valid = valid or [True] * len(rewards)
    steps = [
        Step(obs=o, action=f"a{t}", reward=float(r), done=t == len(rewards) - 1, valid=v, next_obs="")
        for t, (o, r, v) in enumerate(zip(obs, rewards, valid))
    ]
    return Trajectory(group, tid, success, steps)


def flat_args(trajectories):
    b = to_flat(trajectories)
    return b, (b.group_index, b.traj_index, b.step_index, b.reward, b.valid)


# ----------------------------------------------------------------------------------- hand-computed GRPO


def test_grpo_row_pooling_by_hand():
    # τ1 wins in 1 step (R=10), τ2 fails in 3 steps. Rows x = 10, 0, 0, 0: μ = 2.5,
    # σ = sqrt((7.5² + 3·2.5²)/3) = sqrt(75/3) = 5  →  A = 7.5/5 = 1.5 and −2.5/5 = −0.5.
    trajectories = [traj("g", 1, True, [10]), traj("g", 2, False, [0, 0, 0])]
    result = get_algorithm("grpo").compute(trajectories)
    np.testing.assert_allclose(result.advantages[0], [7.5 / (5 + EPS)], rtol=1e-12)
    np.testing.assert_allclose(result.advantages[1], [-2.5 / (5 + EPS)] * 3, rtol=1e-12)
    assert result.advantages[0][0] == pytest.approx(1.5, abs=1e-6)
    assert result.diagnostics["mixed_outcome_groups"] == 1


def test_grpo_trajectory_pooling_by_hand():
    # Paper pooling: one value per trajectory, 10 and 0: μ = 5, σ = sqrt(2·25/1) = 7.0710678 → ±0.70710678.
    trajectories = [traj("g", 1, True, [10]), traj("g", 2, False, [0, 0, 0])]
    result = get_algorithm("grpo").compute(trajectories, {"pool": "trajectories"})
    np.testing.assert_allclose(result.advantages[0], [5 / (math.sqrt(50) + EPS)], rtol=1e-12)
    np.testing.assert_allclose(result.advantages[1], [-0.70710668] * 3, rtol=1e-7)


def test_grpo_invalid_penalty_by_hand_mean_only():
    # Step 2 of τ2 is invalid: rows x = 10, 0, −0.1, 0, μ = 9.9/4 = 2.475, A = x − μ.
    trajectories = [traj("g", 1, True, [10]), traj("g", 2, False, [0, 0, 0], valid=[True, False, True])]
    result = get_algorithm("grpo").compute(trajectories, {"norm_by_std": False})
    np.testing.assert_allclose(result.advantages[0], [7.525], rtol=1e-12)
    np.testing.assert_allclose(result.advantages[1], [-2.475, -2.575, -2.475], rtol=1e-12)


def test_grpo_invalid_penalty_by_hand_with_std():
    # Same rows; Σ(x−μ)² = 7.525² + 2·2.475² + 2.575² = 56.625625 + 12.25125 + 6.630625 = 75.5075,
    # σ = sqrt(75.5075/3) = 5.0168881; A = 7.525/σ = 1.4999338, −2.475/σ = −0.4933337, −2.575/σ = −0.5132664.
    trajectories = [traj("g", 1, True, [10]), traj("g", 2, False, [0, 0, 0], valid=[True, False, True])]
    result = get_algorithm("grpo").compute(trajectories)
    np.testing.assert_allclose(result.advantages[0], [1.4999338], atol=1e-6)
    np.testing.assert_allclose(result.advantages[1], [-0.4933337, -0.5132664, -0.4933337], atol=1e-6)


def test_grpo_single_row_group_uses_zero_mean_unit_std():
    # verl: a group with one row gets μ = 0, σ = 1, so A = x/(1 + ε).
    result = get_algorithm("grpo").compute([traj("solo", 1, True, [10])])
    np.testing.assert_allclose(result.advantages[0], [10 / (1 + EPS)])


def test_all_equal_outcomes_with_invalid_penalty_blows_up_under_std():
    # The code-form quirk kept on purpose (docs/spec/algorithms.md §2.1): equal outcomes, one invalid step, std mode → large |A|.
    trajectories = [traj("g", 1, False, [0, 0], valid=[True, False]), traj("g", 2, False, [0, 0])]
    adv = np.concatenate(get_algorithm("grpo").compute(trajectories).advantages)
    # rows −0.1, 0, 0, 0: μ = −0.025, σ = 0.05 → A = −1.5 for the invalid row, 0.5 for the others
    np.testing.assert_allclose(adv, [0.5, -1.5, 0.5, 0.5], atol=1e-4)


# ----------------------------------------------------------------------------------- hand-computed GiGPO


def gigpo_hand_batch():
    # τ1 wins: s0 → s1, rewards 0, 10.  τ2 fails: s0 → s1 → s3 (invalid at s3).  τ3 fails: s0.
    return [
        traj("g", 1, True, [0, 10], obs=["s0", "s1"]),
        traj("g", 2, False, [0, 0, 0], obs=["s0", "s1", "s3"], valid=[True, True, False]),
        traj("g", 3, False, [0], obs=["s0"]),
    ]


def test_gigpo_mean_norm_by_hand():
    # A^E: rows x = 10, 10, 0, 0, −0.1, 0; μ = 19.9/6 = 3.3166667 → 6.6833333, −3.3166667, −3.4166667.
    # Returns (γ=0.95): τ1 = 9.5, 10; τ2 = 0, 0, −0.1 (penalty after discounting); τ3 = 0.
    # Anchor s0 = {9.5, 0, 0}, mean 3.1666667 → A^S = 6.3333333, −3.1666667, −3.1666667.
    # Anchor s1 = {10, 0}, mean 5 → A^S = 5, −5.  Anchor s3 is a singleton → A^S = 0.
    result = get_algorithm("gigpo").compute(gigpo_hand_batch())
    np.testing.assert_allclose(result.advantages[0], [13.0166667, 11.6833333], atol=1e-6)
    np.testing.assert_allclose(result.advantages[1], [-6.4833333, -8.3166667, -3.4166667], atol=1e-6)
    np.testing.assert_allclose(result.advantages[2], [-6.4833333], atol=1e-6)
    assert result.diagnostics["anchor_groups"] == 3
    assert result.diagnostics["anchor_singleton_frac"] == pytest.approx(1 / 3)


def test_gigpo_mean_std_norm_by_hand():
    # A^E: σ = sqrt(Σ(x−μ)²/5) with Σ = 2·6.6833333² + 3·3.3166667² + 3.4166667² = 134.0083333 → σ = 5.1770326:
    #   6.6833333/σ = 1.2909583, −3.3166667/σ = −0.6406501, −3.4166667/σ = −0.6599662.
    # A^S: s0 σ = sqrt((6.3333333² + 2·3.1666667²)/2) = 5.4848276 → 1.1547005, −0.5773503;
    #      s1 σ = sqrt(2·25/1) = 7.0710678 → 0.7071067, −0.7071067; s3 singleton → 0.
    result = get_algorithm("gigpo").compute(gigpo_hand_batch(), {"mode": "mean_std_norm"})
    np.testing.assert_allclose(result.advantages[0], [1.2909583 + 1.1547005, 1.2909583 + 0.7071068], atol=1e-6)
    np.testing.assert_allclose(
        result.advantages[1], [-0.6406501 - 0.5773503, -0.6406501 - 0.7071068, -0.6599662], atol=1e-6
    )
    np.testing.assert_allclose(result.advantages[2], [-0.6406501 - 0.5773503], atol=1e-6)


def test_gigpo_step_weight_and_loops():
    # A loop inside one trajectory adds members to the anchor group (Eq. 6 crosses time steps):
    # τ1: s0 → s0 → s1 (win at step 2): returns 9.025, 9.5, 10.  τ2: s0 fails: return 0.
    # Anchor s0 = {9.025, 9.5, 0}, mean 6.175 → A^S = 2.85, 3.325, −6.175; s1 singleton → 0.
    # A^E: rows 10, 10, 10, 0 → μ = 7.5 → 2.5 and −7.5.  ω = 0.5.
    trajectories = [traj("g", 1, True, [0, 0, 10], obs=["s0", "s0", "s1"]), traj("g", 2, False, [0], obs=["s0"])]
    result = get_algorithm("gigpo").compute(trajectories, {"step_weight": 0.5})
    np.testing.assert_allclose(result.advantages[0], [2.5 + 1.425, 2.5 + 1.6625, 2.5], atol=1e-9)
    np.testing.assert_allclose(result.advantages[1], [-7.5 - 3.0875], atol=1e-9)


def test_gigpo_explicit_anchor_overrides_obs():
    a = [traj("g", 1, True, [0, 10], obs=["x", "y"]), traj("g", 2, False, [0], obs=["z"])]
    a[1].steps[0].anchor = "x"  # same anchor state as τ1's first step despite different text
    b = [traj("g", 1, True, [0, 10], obs=["x", "y"]), traj("g", 2, False, [0], obs=["x"])]
    np.testing.assert_allclose(
        np.concatenate(get_algorithm("gigpo").compute(a).advantages),
        np.concatenate(get_algorithm("gigpo").compute(b).advantages),
    )


def test_gigpo_similarity_anchors_first_fit_by_hand():
    # "You arrive at cabinet 1." vs "... 2.": ratio 2·23/48 = 0.958 ≥ 0.95 → one cluster;
    # "Nothing happens." vs "Nothing happens!": 2·15/32 = 0.9375 < 0.95 → two clusters.
    obs1 = ["You arrive at cabinet 1.", "Nothing happens."]
    obs2 = ["You arrive at cabinet 2.", "Nothing happens!"]
    assert difflib.SequenceMatcher(None, obs2[0], obs1[0]).ratio() >= 0.95
    trajectories = [traj("g", 1, True, [0, 10], obs=obs1), traj("g", 2, False, [0, 0], obs=obs2)]
    b = to_flat(trajectories)
    layout = batch_layout(b.group_index, b.traj_index, b.step_index)
    config = GiGPOConfig(gamma=0.95, step_weight=1.0, mode="mean_norm", anchor_match="similarity",
                         anchor_similarity_threshold=0.95, pool="steps", invalid_penalty=0.1, epsilon=EPS)
    _, parts = gigpo_parts(layout, b.reward, b.valid, b.anchor, config)
    groups = parts["anchor_group"]
    assert groups[0] == groups[2]
    assert groups[1] != groups[3]
    assert len(set(groups.tolist())) == 3


def test_gigpo_paper_pooling_option():
    # pool="trajectories": A^E over one value per trajectory (10, 0, 0) → μ = 3.3333333, mean_norm.
    result = get_algorithm("gigpo").compute(gigpo_hand_batch(), {"pool": "trajectories"})
    # τ3 row: x = 0 → A^E = −3.3333333; A^S(s0) = −3.1666667
    np.testing.assert_allclose(result.advantages[2], [-3.3333333 - 3.1666667], atol=1e-6)


# ----------------------------------------------------------------------------------- reference pseudo-code
# Transcribed from docs/spec/algorithms.md §2.2 and §3.3 (dict based, one Python loop per row).


def ref_rows(trajs):
    return [(i, t) for i, tr in enumerate(trajs) for t in range(len(tr.steps))]


def ref_mean_std(v):
    v = np.asarray(v, dtype=np.float64)
    if len(v) == 1:
        return 0.0, 1.0
    return v.mean(), v.std(ddof=1)


def ref_episode_adv(trajs, use_std=True, pen=0.1, eps=1e-6, cross_steps=True):
    x = {(i, t): sum(s.reward for s in trajs[i].steps) - pen * (not trajs[i].steps[t].valid) for (i, t) in ref_rows(trajs)}
    pool = defaultdict(list)
    for i, tr in enumerate(trajs):
        if cross_steps:
            pool[tr.group_id] += [x[i, t] for t in range(len(tr.steps))]
        else:
            pool[tr.group_id].append(sum(s.reward for s in tr.steps))
    stats = {g: ref_mean_std(v) for g, v in pool.items()}
    A, F = {}, {}
    for (i, t), v in x.items():
        g = trajs[i].group_id
        mu, sd = stats[g]
        F[g] = (sd + eps) if use_std else 1.0
        A[i, t] = (v - mu) / F[g]
    return A, F


def ref_gigpo(trajs, gamma=0.95, omega=1.0, mode="mean_norm", pen=0.1, eps=1e-6, similarity=False,
              sim_thresh=0.95, cross_steps=True):
    use_std = mode == "mean_std_norm"
    AE, _ = ref_episode_adv(trajs, use_std=use_std, pen=pen, eps=eps, cross_steps=cross_steps)
    ret = {}
    for i, tr in enumerate(trajs):
        G = 0.0
        for t in reversed(range(len(tr.steps))):
            G = tr.steps[t].reward + gamma * G
            ret[i, t] = G
        for t, s in enumerate(tr.steps):
            if not s.valid:
                ret[i, t] -= pen
    key, clusters = {}, defaultdict(list)
    for i, t in ref_rows(trajs):
        g, o = trajs[i].group_id, trajs[i].steps[t].anchor_key
        if not similarity:
            key[i, t] = (g, o)
        else:
            reps = clusters[g]
            cid = next((c for rep, c in reps if difflib.SequenceMatcher(None, o, rep).ratio() >= sim_thresh), None)
            if cid is None:
                cid = len(reps)
                reps.append((o, cid))
            key[i, t] = (g, cid)
    members = defaultdict(list)
    for r, k in key.items():
        members[k].append(ret[r])
    A = {}
    for r, k in key.items():
        v = members[k]
        mu = float(np.mean(v))
        sd = float(np.std(v, ddof=1)) if len(v) > 1 else 1.0
        AS = (ret[r] - mu) / (sd + eps) if use_std else ret[r] - mu
        A[r] = AE[r] + omega * AS
    return A


def as_list(trajs, A):
    return [np.array([A[i, t] for t in range(len(tr.steps))]) for i, tr in enumerate(trajs)]


# ----------------------------------------------------------------------------------- strategies

OBS = ["You arrive at cabinet 1.", "You arrive at cabinet 2.", "Nothing happens.", "You open the fridge 1.",
       "You arrive at countertop 1. On the countertop 1, you see a apple 1."]


@st.composite
def batches(draw, max_groups=4, max_size=5, max_len=6, terminal=None, rewards=(0.0, 1.0, 10.0, -1.0, 0.5)):
    """Random trajectories: several groups, repeated observations, invalid steps, varied rewards."""
    trajectories = []
    for g in range(draw(st.integers(1, max_groups))):
        for k in range(draw(st.integers(1, max_size))):
            length = draw(st.integers(1, max_len))
            success = draw(st.booleans())
            if terminal if terminal is not None else draw(st.booleans()):
                rs = [0.0] * (length - 1) + [10.0 if success else 0.0]
            else:
                rs = draw(st.lists(st.sampled_from(rewards), min_size=length, max_size=length))
            obs = draw(st.lists(st.sampled_from(OBS), min_size=length, max_size=length))
            valid = draw(st.lists(st.booleans() | st.just(True), min_size=length, max_size=length))
            trajectories.append(traj(f"group-{g}", f"{g}-{k}", success, rs, obs=obs, valid=valid))
    return trajectories


def grpo_cfg(norm_by_std, pool):
    return {"norm_by_std": norm_by_std, "pool": pool}


# ----------------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(batches(), st.booleans(), st.sampled_from(["steps", "trajectories"]))
def test_grpo_matches_reference_pseudocode(trajectories, use_std, pool):
    ours = get_algorithm("grpo").compute(trajectories, grpo_cfg(use_std, pool)).advantages
    A, _ = ref_episode_adv(trajectories, use_std=use_std, cross_steps=pool == "steps")
    for a, b in zip(ours, as_list(trajectories, A)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["mean_norm", "mean_std_norm"]), st.booleans(), st.sampled_from([1.0, 0.4]),
       st.sampled_from(["steps", "trajectories"]))
def test_gigpo_matches_reference_pseudocode(trajectories, mode, similarity, omega, pool):
    cfg = {"mode": mode, "step_weight": omega, "anchor_match": "similarity" if similarity else "exact", "pool": pool}
    ours = get_algorithm("gigpo").compute(trajectories, cfg).advantages
    A = ref_gigpo(trajectories, mode=mode, omega=omega, similarity=similarity, cross_steps=pool == "steps")
    for a, b in zip(ours, as_list(trajectories, A)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-6)


@settings(max_examples=50, deadline=None)
@given(batches(), st.booleans(), st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_advantages_are_always_finite(trajectories, use_std, mode):
    for name, cfg in (("grpo", {"norm_by_std": use_std}), ("gigpo", {"mode": mode})):
        adv = get_algorithm(name).compute(trajectories, cfg).advantages
        assert all(np.all(np.isfinite(a)) for a in adv)
        assert [len(a) for a in adv] == [len(t.steps) for t in trajectories]


@settings(max_examples=60, deadline=None)
@given(batches(terminal=False, rewards=(0.0,)), st.booleans(), st.sampled_from(["mean_norm", "mean_std_norm"]), st.booleans())
def test_equal_outcomes_give_zero_advantage_up_to_the_penalty(trajectories, use_std, mode, all_valid):
    # Every reward is 0, so every outcome (and every step return) is equal.
    if all_valid:
        for tr in trajectories:
            for s in tr.steps:
                s.valid = True
    grpo = np.concatenate(get_algorithm("grpo").compute(trajectories, {"norm_by_std": use_std}).advantages)
    gigpo = np.concatenate(get_algorithm("gigpo").compute(trajectories, {"mode": mode}).advantages)
    assert np.all(np.isfinite(grpo)) and np.all(np.isfinite(gigpo))
    if all_valid:
        np.testing.assert_allclose(grpo, 0.0, atol=1e-9)
        np.testing.assert_allclose(gigpo, 0.0, atol=1e-9)
    else:
        if not use_std:  # mean only: |A| ≤ penalty
            assert np.all(np.abs(grpo) <= 0.1 + 1e-12)
        if mode == "mean_norm":  # both levels: |A^E| ≤ p and |A^S| ≤ p
            assert np.all(np.abs(gigpo) <= 0.2 + 1e-12)
        # the penalty never makes an invalid step look better than a valid step of the same group
        b = to_flat(trajectories)
        for g in np.unique(b.group_index):
            valid_rows, invalid_rows = (b.group_index == g) & b.valid, (b.group_index == g) & ~b.valid
            if valid_rows.any() and invalid_rows.any():
                for adv in (grpo, gigpo):
                    assert adv[invalid_rows].max() < adv[valid_rows].min()


@settings(max_examples=60, deadline=None)
@given(batches(), st.randoms(use_true_random=False), st.sampled_from(["exact", "similarity"]), st.booleans())
def test_row_order_changes_nothing(trajectories, rnd, anchor_match, use_std):
    b = to_flat(trajectories)
    perm = np.arange(len(b))
    rnd.shuffle(perm)
    arrays = (b.group_index, b.traj_index, b.step_index, b.reward, b.valid)
    shuffled = tuple(a[perm] for a in arrays)
    grpo = grpo_advantages_flat(*arrays, norm_by_std=use_std)
    np.testing.assert_array_equal(grpo_advantages_flat(*shuffled, norm_by_std=use_std), grpo[perm])
    gigpo = gigpo_advantages_flat(*arrays, b.anchor, anchor_match=anchor_match)
    np.testing.assert_array_equal(gigpo_advantages_flat(*shuffled, b.anchor[perm], anchor_match=anchor_match), gigpo[perm])


@settings(max_examples=40, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_trajectory_order_changes_nothing(trajectories, rnd):
    shuffled = list(trajectories)
    rnd.shuffle(shuffled)
    for name in ("grpo", "gigpo"):
        ours = dict(zip([t.traj_id for t in trajectories], get_algorithm(name).compute(trajectories).advantages))
        theirs = dict(zip([t.traj_id for t in shuffled], get_algorithm(name).compute(shuffled).advantages))
        for tid, adv in ours.items():
            np.testing.assert_allclose(theirs[tid], adv, rtol=1e-12, atol=1e-12)  # trajectory labels change


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([("mean_norm", False), ("mean_std_norm", True)]), st.sampled_from(["steps", "trajectories"]))
def test_gigpo_without_repeated_anchors_equals_grpo(trajectories, modes, pool):
    mode, norm_by_std = modes
    for i, tr in enumerate(trajectories):
        for t, s in enumerate(tr.steps):
            s.anchor = (i, t)  # every anchor unique
    gigpo = get_algorithm("gigpo").compute(trajectories, {"mode": mode, "pool": pool}).advantages
    grpo = get_algorithm("grpo").compute(trajectories, {"norm_by_std": norm_by_std, "pool": pool}).advantages
    for a, b in zip(gigpo, grpo):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_singleton_anchor_groups_get_zero_step_advantage(trajectories, mode):
    b = to_flat(trajectories)
    layout = batch_layout(b.group_index, b.traj_index, b.step_index)
    config = GiGPOConfig(gamma=0.95, step_weight=1.0, mode=mode, anchor_match="exact",
                         anchor_similarity_threshold=0.95, pool="steps", invalid_penalty=0.1, epsilon=EPS)
    adv, parts = gigpo_parts(layout, b.reward, b.valid, b.anchor, config)
    singleton = parts["anchor_group_size"] == 1
    assert np.all(parts["step_advantage"][singleton] == 0.0)
    grpo = grpo_advantages_flat(b.group_index, b.traj_index, b.step_index, b.reward, b.valid,
                                norm_by_std=mode == "mean_std_norm")
    np.testing.assert_array_equal(adv[singleton], grpo[singleton])


@settings(max_examples=40, deadline=None)
@given(batches())
def test_dataclass_and_flat_forms_agree(trajectories):
    b, arrays = flat_args(trajectories)
    for name, flat in (
        ("grpo", grpo_advantages_flat(*arrays)),
        ("gigpo", gigpo_advantages_flat(*arrays, b.anchor)),
    ):
        np.testing.assert_array_equal(np.concatenate(get_algorithm(name).compute(trajectories).advantages), flat)
        np.testing.assert_array_equal(get_algorithm(name).compute_flat(b)[0], flat)
    # and the flat form survives a round trip through dataclasses
    again = to_flat(from_flat(b))
    for field in ("group_index", "traj_index", "step_index", "reward", "valid", "success", "anchor", "step_text"):
        np.testing.assert_array_equal(getattr(again, field), getattr(b, field))


def test_flat_functions_accept_plain_lists_and_reject_duplicates():
    adv = gigpo_advantages_flat([0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 10, 0], None, ["a", "b", "a"])
    assert adv.shape == (3,) and adv[0] > adv[2]
    with pytest.raises(BatchError, match="duplicate step"):
        grpo_advantages_flat([0, 0], [5, 5], [1, 1], [0.0, 1.0])
    with pytest.raises(BatchError):
        grpo_advantages_flat([0, 0], [5, 5], [0], [0.0, 1.0])


def test_configs_have_doc_defaults():
    assert GRPOConfig().norm_by_std is True and GRPOConfig().invalid_penalty == 0.1
    cfg = GiGPOConfig()
    assert (cfg.gamma, cfg.step_weight, cfg.mode, cfg.anchor_match, cfg.anchor_similarity_threshold) == (
        0.95, 1.0, "mean_norm", "exact", 0.95
    )
