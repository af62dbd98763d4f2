"""Dynamic sampling (``rollout.filter_groups``, issue 41): only groups with a learning signal reach the update, further
waves of tasks fill the iteration up to a cap, and runs stay deterministic, worker-independent and exactly resumable.

The tiny random test model never wins a Crafting task (plans of 5+ steps), so the tests that need mixed groups use
Boxes: a one-guess env whose prize hides in one of four boxes; sampled at temperature 4, the tiny model's choice
varies, so groups of two attempts come out mixed or uniform. Crafting, where every group fails alike, checks the
draw cap and the "no update" line.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections import defaultdict

import numpy as np
import pytest
from conftest import put_module_on_path
from rich.console import Console
from safetensors.torch import load_file
from tiny_model import tiny_model_dir

from agentrl.algos import Step, Trajectory
from agentrl.checkpoint import find_latest
from agentrl.config import build_config
from agentrl.dynamic_sampling import SamplingTally, informative_groups, merge, select
from agentrl.errors import ConfigError
from agentrl.records import RolloutBatch, RolloutTrajectory, TrainingSample
from agentrl.trainer import Trainer

BOXES_ENV = textwrap.dedent('''
    from agentrl.envs import TextEnv

    ACTIONS = ["open box 1", "open box 2", "open box 3", "open box 4"]

    class Boxes(TextEnv):
        """Task k hides the prize in box k mod 4; an episode is one guess."""
        splits = ("train", "test")

        def task_ids(self, split=None):
            return [f"{split or self.split}-{k}" for k in range(40)]

        def _reset_task(self, task_id):
            self.prize = int(task_id.rsplit("-", 1)[1]) % 4
            return f"One of four boxes holds a prize ({task_id}).", {"admissible_actions": ACTIONS}

        def _step(self, action):
            won = action == ACTIONS[self.prize]
            return ("You found it!" if won else "Empty."), 10.0 * won, True, {"won": won, "admissible_actions": ACTIONS}
''')


@pytest.fixture()
def boxes(tmp_path, monkeypatch):
    put_module_on_path(tmp_path, monkeypatch, "boxes_env_mod", BOXES_ENV)
    return "boxes_env_mod:Boxes"


def config(env: str, iterations: int, **extra):
    overrides = {
        "env.name": env, "env.args": {}, "algo.name": "grpo", "model.path": str(tiny_model_dir()),
        "agent.mode": "score", "agent.think": False,
        "rollout.tasks_per_iteration": 3, "rollout.group_size": 2, "rollout.workers": 0,
        "rollout.filter_groups": "outcome", "rollout.max_task_draws": 10,
        "generation.max_new_tokens": 8, "generation.max_prompt_tokens": 192, "generation.temperature": 4.0,
        "learner.lr": 1e-2, "learner.mini_batch_size": 4, "learner.micro_batch_size": 4, "learner.bf16": False,
        "run.iterations": iterations, "run.eval_every": 0, "run.seed": 5, "run.sample_trajectories": 1000,
    }
    overrides.update(extra)
    return build_config(None, overrides)


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def groups_trained_on(run_dir) -> dict[tuple[int, str], list[bool]]:
    """(iteration, group id) → the outcomes of its attempts, from trajectories.jsonl (every trajectory of the
    update is written there: run.sample_trajectories exceeds the batch)."""
    groups = defaultdict(list)
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        record = json.loads(line)
        groups[record["iteration"], record["group_id"]].append(record["success"])
    return groups


def weights(run_dir):
    return load_file(str(find_latest(run_dir) / "model" / "model.safetensors"))


def test_with_outcome_filtering_every_group_in_the_update_is_mixed_and_the_draws_stay_under_the_cap(tmp_path, boxes):
    Trainer(config(boxes, 3, **{"rollout.filter_groups": "off"}), run_dir=tmp_path / "off").train()
    unfiltered = groups_trained_on(tmp_path / "off")
    assert any(len(set(outcomes)) == 1 for outcomes in unfiltered.values()), "no uniform group: the test proves nothing"

    Trainer(config(boxes, 3), run_dir=tmp_path / "on").train()
    filtered, logged = groups_trained_on(tmp_path / "on"), records(tmp_path / "on")
    assert filtered and all(len(set(outcomes)) == 2 for outcomes in filtered.values())
    for record in logged:
        kept, draws = record["sampling/kept_groups"], record["sampling/task_draws"]
        assert kept == record["sampling/mixed_groups"] == len([g for g in filtered if g[0] == record["iteration"]])
        assert kept + record["sampling/dropped_groups"] == draws <= 10
        assert kept == 3 or draws == 10  # filled up, or stopped by the cap
        assert record["sampling/dropped_episodes"] == 2 * record["sampling/dropped_groups"]
    assert any(r["sampling/waves"] > 1 for r in logged), "no further wave was drawn: the test proves nothing"
    # train/* are over the first draw: before any update, the very tasks and episodes played without filtering.
    assert logged[0]["train/success"] == records(tmp_path / "off")[0]["train/success"]
    # Every reply is a valid choice here, so GRPO's advantages are zero exactly in the uniform groups: filtering on
    # the advantages keeps the same groups.
    Trainer(config(boxes, 3, **{"rollout.filter_groups": "advantage"}), run_dir=tmp_path / "advantage").train()
    assert groups_trained_on(tmp_path / "advantage") == filtered


def test_filtered_runs_are_deterministic_worker_independent_and_resume_exactly(tmp_path, boxes):
    Trainer(config(boxes, 3), run_dir=tmp_path / "straight").train()
    Trainer(config(boxes, 3), run_dir=tmp_path / "again").train()
    Trainer(config(boxes, 3, **{"rollout.workers": 2}), run_dir=tmp_path / "workers").train()
    Trainer(config(boxes, 2), run_dir=tmp_path / "split").train()
    Trainer(config(boxes, 3), run_dir=tmp_path / "split", resume=True).train()

    def sampling(run_dir):
        return [{k: v for k, v in r.items() if k.startswith(("sampling/", "train/success"))}
                for r in records(run_dir)]

    straight = weights(tmp_path / "straight")
    assert any(r["learner/optimizer_steps"] for r in records(tmp_path / "straight"))
    for other in ("again", "workers", "split"):
        assert sampling(tmp_path / other) == sampling(tmp_path / "straight"), other
        assert (tmp_path / other / "trajectories.jsonl").read_text() == \
            (tmp_path / "straight" / "trajectories.jsonl").read_text(), other
        found = weights(tmp_path / other)
        assert all((found[k] == straight[k]).all() for k in straight), other


def test_the_draw_cap_holds_and_an_iteration_without_a_mixed_group_says_no_update(tmp_path):
    """On Crafting the tiny random model never wins: every group fails alike, so each iteration draws up to the cap
    in waves of the missing number of tasks (3, 3, 1), keeps none and makes no update, and says so."""
    out = io.StringIO()
    cfg = config("crafting", 2, **{"env.args": {"max_steps": 2}, "rollout.max_task_draws": 7})
    Trainer(cfg, run_dir=tmp_path / "run", console=Console(file=out, width=300)).train()
    for record in records(tmp_path / "run"):
        assert record["sampling/task_draws"] == 7 and record["sampling/waves"] == 3
        assert record["sampling/kept_groups"] == 0 and record["sampling/dropped_groups"] == 7
        assert record["sampling/dropped_steps"] == record["rollout/steps"] > 0
        assert "learner/optimizer_steps" not in record and "sampling/extra_steps_per_kept_group" not in record
    lines = [line for line in out.getvalue().splitlines() if line.startswith("iter ")]
    assert len(lines) == 2 and all("groups kept 0/7" in line and "no update: no group of the 7 drawn passed "
                                   "filter_groups=outcome" in line for line in lines)
    base, trained = load_file(str(tiny_model_dir() / "model.safetensors")), weights(tmp_path / "run")
    assert all((base[k] == trained[k]).all() for k in base)
    with pytest.raises(ConfigError, match="max_task_draws"):
        config("crafting", 1, **{"rollout.max_task_draws": 2})
    with pytest.raises(ConfigError, match="filter_groups"):
        config("crafting", 1, **{"rollout.filter_groups": "mixed"})


def test_before_and_after_evaluations_play_the_same_episodes(tmp_path, boxes):
    """Every evaluation plays the same tasks with the same reset and sampling seeds, so that a difference between two
    of them is the policy's: the same policy evaluated at iterations 0 and 7 makes the very same choices."""
    trainer = Trainer(config(boxes, 1, **{"run.eval_every": 1, "run.eval_episodes": 24}), run_dir=tmp_path / "run")
    played = []
    rollouts = trainer._rollouts

    def recording(*args, **kwargs):
        batch = rollouts(*args, **kwargs)
        played.append([(rt.task_id, rt.replies) for rt in batch.trajectories])
        return batch

    trainer._rollouts = recording
    try:
        first, later = trainer.evaluate(0), trainer.evaluate(7)
    finally:
        trainer.close()
    assert len(played) == 2 and len(played[0]) == 24 and played[0] == played[1]
    assert len({tuple(replies) for _, replies in played[0]}) > 1  # sampled choices, not one fixed reply
    assert {k: v for k, v in first.items() if k != "time/eval"} == {k: v for k, v in later.items() if k != "time/eval"}


# ------------------------------------------------------------------------------------------- the pure parts
def rollout(group: str, i: int, success: bool, ret: float, steps: int = 2) -> RolloutTrajectory:
    rows = [TrainingSample(prompt_ids=[1], response_ids=[2, 3], old_logprobs=[0.0, 0.0], advantage=0.0)] * steps
    trajectory = Trajectory(group, f"{group}/{i}", success,
                            [Step(obs="o", action="a", reward=ret if t == steps - 1 else 0.0, done=t == steps - 1)
                             for t in range(steps)])
    return RolloutTrajectory(trajectory=trajectory, samples=rows, task_id=group, task_type="-")


def test_informative_groups_by_outcome_and_by_advantage():
    trajectories = [rollout("won-lost", 0, True, 10.0), rollout("won-lost", 1, False, 0.0),
                    rollout("lost", 0, False, 0.0), rollout("lost", 1, False, 0.0),
                    rollout("scores", 0, False, 3.0), rollout("scores", 1, False, 5.0)]
    assert informative_groups(trajectories, "off") == ["won-lost", "lost", "scores"]
    assert informative_groups(trajectories, "outcome") == ["won-lost", "scores"]
    # An all-failed group can still carry advantages (GRPO's penalty on invalid steps); 1e-9 counts as zero.
    advantages = [np.array([1.0, 1.0]), np.array([-1.0, -1.0]), np.array([0.0, 0.1]), np.array([0.0, 0.0]),
                  np.array([1e-9, -1e-9]), np.array([0.0, 0.0])]
    assert informative_groups(trajectories, "advantage", advantages) == ["won-lost", "lost"]
    assert informative_groups([], "advantage") == []
    with pytest.raises(ValueError, match="known: off, outcome, advantage"):
        informative_groups(trajectories, "mixed")

    batch = RolloutBatch(trajectories, dropped=1, failures=[("t", "boom")], stats={"rollout/steps": 12.0})
    kept, dropped = select(batch, ["scores"])
    assert [rt.trajectory.traj_id for rt in kept.trajectories] == ["scores/0", "scores/1"]
    assert len(dropped.trajectories) == 4 and kept.dropped == 1 and kept.stats == {"rollout/steps": 12.0}
    both = merge([kept, RolloutBatch(trajectories[:2], dropped=2, stats={"rollout/steps": 4.0, "x": 1.0})])
    assert len(both.trajectories) == 4 and both.dropped == 3 and both.stats == {"rollout/steps": 16.0, "x": 1.0}

    tally = SamplingTally()
    tally.add_wave(4, kept, dropped)  # 4 tasks drawn: 1 kept, 2 dropped, 1 lost whole to env failures
    assert tally.metrics() == {
        "sampling/task_draws": 4.0, "sampling/waves": 1.0, "sampling/kept_groups": 1.0,
        "sampling/dropped_groups": 3.0, "sampling/mixed_groups": 1.0, "sampling/dropped_episodes": 4.0,
        "sampling/dropped_steps": 8.0, "sampling/dropped_tokens": 16.0,
        "sampling/extra_steps_per_kept_group": 8.0, "sampling/extra_tokens_per_kept_group": 16.0}
