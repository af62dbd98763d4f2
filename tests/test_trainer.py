"""The main job on CPU: real iterations of grouped rollouts + credit assignment + PPO updates, checkpoints, resume."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from safetensors.torch import load_file
from tiny_model import tiny_model_dir

from agentrl.checkpoint import find_latest
from agentrl.config import build_config
from agentrl.errors import AgentRLError, ConfigError
from agentrl.evaluation import evaluate_model
from agentrl.trainer import Trainer


def small_config(algo: str, mode: str, iterations: int, **extra):
    overrides = {
        "env.name": "crafting", "env.args": {"max_steps": 3},
        "algo.name": algo, "model.path": str(tiny_model_dir()),
        "agent.mode": mode, "agent.think": False,
        "rollout.tasks_per_iteration": 2, "rollout.group_size": 2, "rollout.workers": 0,
        "generation.max_new_tokens": 8, "generation.max_prompt_tokens": 192,
        "learner.lr": 1e-3, "learner.mini_batch_size": 8, "learner.micro_batch_size": 4, "learner.bf16": False,
        "run.iterations": iterations, "run.eval_every": 2, "run.eval_episodes": 2, "run.seed": 3,
    }
    if algo == "scpo":
        overrides["algo.options"] = {"scorer": "lexical"}
    overrides.update(extra)
    return build_config(None, overrides)


def weights(path):
    return load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("algo, mode", [("grpo", "generate"), ("gigpo", "score"), ("scpo", "score")])
def test_iterations_update_weights_write_checkpoints_and_resume(tmp_path, algo, mode):
    run_dir = tmp_path / "run"
    result = Trainer(small_config(algo, mode, 2), run_dir=run_dir).train()
    assert result.iterations_done == 2
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["learner/loss"]) and record["learner/optimizer_steps"] >= 1
        assert record["rollout/steps"] > 0
    assert "eval/success" in records[1]
    latest = find_latest(run_dir)
    assert latest.name == "iter-000002" and (latest / "COMPLETE").exists()
    base, trained = weights(tiny_model_dir()), weights(latest / "model")
    assert any(not (base[k] == trained[k]).all() for k in base), "training left every weight unchanged"
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert (run_dir / "trajectories.jsonl").read_text().count("\n") >= 1
    assert list((run_dir / "tensorboard").glob("events.*"))

    resumed = Trainer(small_config(algo, mode, 3), run_dir=run_dir, resume=True)
    assert resumed.start_iteration == 3
    resumed.train()
    assert find_latest(run_dir).name == "iter-000003"
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == [1, 2, 3]


def test_resumed_run_reaches_the_same_weights_as_an_uninterrupted_one(tmp_path):
    """Exact resume: task draws and sampling seeds are functions of (seed, iteration); optimizer, learner shuffle
    RNG and torch RNG come back from the checkpoint. On CPU in float32 the result is bitwise identical."""
    Trainer(small_config("gigpo", "score", 3), run_dir=tmp_path / "straight").train()
    Trainer(small_config("gigpo", "score", 2), run_dir=tmp_path / "split").train()
    Trainer(small_config("gigpo", "score", 3), run_dir=tmp_path / "split", resume=True).train()
    straight = weights(find_latest(tmp_path / "straight") / "model")
    split = weights(find_latest(tmp_path / "split") / "model")
    for key in straight:
        assert (straight[key] == split[key]).all(), key


def test_eval_before_train_logs_the_starting_policy_as_iteration_zero_once(tmp_path):
    """run.eval_before_train (verl's val_before_train): the learning curve starts from the policy trained from."""
    run_dir = tmp_path / "run"
    config = small_config("grpo", "score", 1, **{"run.eval_before_train": True, "run.eval_episodes": 4})
    Trainer(config, run_dir=run_dir).train()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    start = records[0]
    assert start["eval/episodes"] == 4 and start["time/eval"] > 0 and "train/success" not in start
    # The same evaluation of the untrained model (its seed depends only on run.seed and the iteration).
    untrained = Trainer(small_config("grpo", "score", 1, **{"run.eval_episodes": 4}), run_dir=tmp_path / "fresh")
    try:
        again = untrained.evaluate(0)
    finally:
        untrained.close()
    assert {k: v for k, v in again.items() if k != "time/eval"} == {k: v for k, v in start.items()
                                                                    if k not in ("iteration", "time/eval")}
    resumed = Trainer(small_config("grpo", "score", 2, **{"run.eval_before_train": True, "run.eval_episodes": 4}),
                      run_dir=run_dir, resume=True)
    resumed.train()
    assert [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_the_trainers_agent_prompts_as_configured(tmp_path):
    trainer = Trainer(small_config("grpo", "score", 1, **{"agent.list_actions": False, "agent.action_memory": 3}),
                      run_dir=tmp_path / "run")
    assert (trainer.agent.list_actions, trainer.agent.action_memory, trainer.agent.think) == (False, 3, False)


def test_missing_model_and_bad_algo_options(tmp_path):
    no_model = build_config(None, {"env.name": "crafting", "model.path": "tiny-random"})
    no_model.model.path = None  # what a GPU machine gets when no --model is given (models.default_model)
    with pytest.raises(ConfigError, match="no model given"):
        Trainer(no_model, run_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) gama"):
        Trainer(small_config("gigpo", "score", 1, **{"algo.options": {"gama": 0.9}}), run_dir=tmp_path / "b")
    with pytest.raises(AgentRLError, match="no checkpoint"):
        Trainer(small_config("gigpo", "score", 1), run_dir=tmp_path / "c", resume=True)


def test_evaluate_model_reports_per_task_type():
    report = evaluate_model("crafting", str(tiny_model_dir()), episodes=3, mode="score", think=False,
                            env_args={"max_steps": 3})
    summary = report.by_type()
    assert summary["All"]["n"] == 3 and report.split == "eval_out_of_distribution"


def test_evaluate_model_attempts_each_task_several_times():
    report = evaluate_model("crafting", str(tiny_model_dir()), episodes=2, attempts=3, mode="score", think=False,
                            temperature=1.0, env_args={"max_steps": 3})
    ids = [e.task_id for e in report.episodes]
    assert len(ids) == 6 and len(set(ids)) == 2 and all(ids.count(i) == 3 for i in ids)
    assert report.by_type()["All"]["n"] == 6
    with pytest.raises(ConfigError, match="attempts"):
        evaluate_model("crafting", str(tiny_model_dir()), episodes=1, attempts=0)


def test_evaluate_model_reports_progress_after_every_step():
    calls = []
    report = evaluate_model("crafting", str(tiny_model_dir()), episodes=3, mode="score",
                            think=False, temperature=1.0, env_args={"max_steps": 4},
                            on_step=lambda done, total, wins: calls.append((done, total, wins)))
    # One call per batched step of each wave (tasks 0 and 2, task 1: rollout.py); done never decreases and ends
    # at total.
    steps = [e.steps for e in report.episodes]
    assert len(calls) == max(steps[0], steps[2]) + steps[1]
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[-1][:2] == (3, 3)
    assert calls[-1][2] == sum(e.won for e in report.episodes)


def test_cli_train_then_resume(tmp_path, agentrl_cli):
    run_dir = tmp_path / "cli-run"
    common = ["--env", "crafting", "--algo", "gigpo", "--model", "tiny-random", "--run-dir", str(run_dir),
              "-e", "max_steps=2", "--set", "rollout.tasks_per_iteration=2", "--set", "rollout.group_size=2",
              "--set", "rollout.workers=0", "--set", "agent.mode=score", "--set", "agent.think=false",
              "--set", "generation.max_prompt_tokens=128", "--set", "run.eval_every=0"]
    first = subprocess.run([*agentrl_cli, "train", *common, "--set", "run.iterations=1"], capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "iter 1/1" in first.stdout
    second = subprocess.run([*agentrl_cli, "train", "--run-dir", str(run_dir), "--resume", "--set",
                             "run.iterations=2"], capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "iter 2/2" in second.stdout and "iter 1/" not in second.stdout
    bad = subprocess.run([*agentrl_cli, "train", *common, "--set", "rollout.group_size=zero"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "rollout.group_size must be an integer" in bad.stderr


def test_scoring_mode_needs_admissible_actions(tmp_path):
    import agentrl.envs as envs
    from agentrl.envs import TextEnv

    class FreeForm(TextEnv):
        def task_ids(self, split=None):
            return ["t"]

        def _reset_task(self, task_id):
            return "say anything", {"instruction": "say anything"}

        def _step(self, action):
            return "ok", 0.0, True, {"won": False}

    envs.register("FreeForm-v0", FreeForm)
    try:
        with pytest.raises(ConfigError, match="use agent.mode=generate"):
            Trainer(small_config("grpo", "score", 1, **{"env.name": "freeform", "env.args": {}}),
                    run_dir=tmp_path / "r").train()
    finally:
        envs.registration.ENVS._items.pop("freeform", None)


def test_train_tasks_fixes_the_training_set(tmp_path):
    from agentrl import envs

    first_three = list(envs.make("crafting").unwrapped.task_ids("train"))[:3]
    trainer = Trainer(small_config("grpo", "score", 2, **{"env.train_tasks": 3, "rollout.tasks_per_iteration": 3,
                                                         "rollout.group_size": 1, "run.eval_every": 0}),
                      run_dir=tmp_path / "run")
    attempted = []
    rollouts = trainer._rollouts

    def recording(tasks, *args, **kwargs):
        attempted.append(sorted(tasks))
        return rollouts(tasks, *args, **kwargs)

    trainer._rollouts = recording
    trainer.train()
    # Every iteration attempts exactly the first three train tasks (drawn without replacement from the pool of 3).
    assert attempted == [sorted(first_three)] * 2
    with pytest.raises(ConfigError, match="env.train_tasks"):
        small_config("grpo", "score", 1, **{"env.train_tasks": 0})


def test_the_next_iterations_resets_are_sent_before_the_learner_runs_and_change_nothing(tmp_path):
    """rollout.prefetch_resets: right after iteration i's rollout the env workers get iteration i+1's resets, so they
    reset (ALFWorld: ground the games) while credit assignment and the learner run; none is sent when an evaluation
    comes next or after the last iteration, and the run plays and learns exactly as without it."""
    import numpy as np

    def run(name, **extra):
        config = small_config("gigpo", "score", 4, **{"rollout.workers": 1, "run.eval_every": 3, **extra})
        trainer = Trainer(config, run_dir=tmp_path / name)
        group = config.rollout.group_size
        draws = {tuple(t for t in trainer._draw_tasks(np.random.default_rng([3, it])) for _ in range(group)): f"i{it}"
                 for it in range(1, 5)}
        events = []
        reset_async, update = trainer.pool.reset_async, trainer.learner.update
        trainer.pool.reset_async = lambda requests: events.append(
            draws.get(tuple(r[2]["task_id"] for r in requests), "eval")) or reset_async(requests)
        trainer.learner.update = lambda samples: events.append("update") or update(samples)
        trainer.train()
        return events

    assert run("ahead") == ["i1", "i2", "update", "i3", "update", "update", "eval", "i4", "update", "eval"]
    assert run("plain", **{"rollout.prefetch_resets": False}) == [
        "i1", "update", "i2", "update", "i3", "update", "eval", "i4", "update", "eval"]
    assert (tmp_path / "ahead" / "trajectories.jsonl").read_text() == \
        (tmp_path / "plain" / "trajectories.jsonl").read_text()
    ahead, plain = weights(find_latest(tmp_path / "ahead") / "model"), weights(find_latest(tmp_path / "plain") / "model")
    assert all((ahead[k] == plain[k]).all() for k in ahead)
