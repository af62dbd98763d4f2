"""Reliability (issue 11): env faults, interruption, numerical safety, bad input and checkpoint security.

Every test drives real parts (the Trainer, the installed ``agentrl`` command, the learner, the registered
algorithms, torch checkpoints); docs/reliability.md maps each fault to the test here that proves it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import put_module_on_path
import torch
from tiny_model import tiny_model_dir

from agentrl import algos
from agentrl.algos import Step, Trajectory
from agentrl.checkpoint import CheckpointError, find_latest, load_checkpoint
from agentrl.config import build_config
from agentrl.errors import AgentRLError
from agentrl.learner import Learner, LearnerConfig, TrainingSample, ppo_token_loss
from agentrl.policy import GenerationConfig, HFPolicy
from agentrl.trainer import Trainer

FLAKY_ENV = textwrap.dedent('''
    from agentrl.envs import TextEnv

    class Flaky(TextEnv):
        """Task 'bad' crashes its engine on every step; task 'good' is won by two ticks."""
        splits = ("train",)

        def task_ids(self, split=None):
            return ["good", "bad"]

        def _reset_task(self, task_id):
            self.task, self.n = task_id, 0
            return f"start {task_id}", {"admissible_actions": ["tick", "wait"]}

        def _step(self, action):
            if self.task == "bad":
                raise RuntimeError("engine crashed on task bad")
            self.n += action == "tick"
            return (f"tick {self.n}", float(action == "tick"), self.n >= 2,
                    {"won": self.n >= 2, "admissible_actions": ["tick", "wait"]})
''')


def config(iterations: int = 2, **extra):
    """A fast trainer config (tests/test_trainer.py::small_config): crafting, tiny model, score mode, workers 0."""
    overrides = {
        "env.name": "crafting", "env.args": {"max_steps": 3},
        "algo.name": "grpo", "model.path": str(tiny_model_dir()),
        "agent.mode": "score", "agent.think": False,
        "rollout.tasks_per_iteration": 2, "rollout.group_size": 2, "rollout.workers": 0,
        "generation.max_new_tokens": 8, "generation.max_prompt_tokens": 192,
        "learner.lr": 1e-3, "learner.mini_batch_size": 8, "learner.micro_batch_size": 4, "learner.bf16": False,
        "run.iterations": iterations, "run.eval_every": 0, "run.seed": 3,
    }
    overrides.update(extra)
    return build_config(None, overrides)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its bytes (and its mtime), to prove nothing was touched."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() + f"@{p.stat().st_mtime_ns}"
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def flaky_env(tmp_path, monkeypatch):
    put_module_on_path(tmp_path, monkeypatch, "flaky_env_mod", FLAKY_ENV)
    return "flaky_env_mod:Flaky"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A finished 2-iteration run with a checkpoint per iteration, shared by the read-only tests."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    Trainer(config(2, **{"run.save_every": 1, "run.keep_checkpoints": 3}), run_dir=run_dir).train()
    return run_dir


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------------------- 1. env faults
def test_env_raising_in_step_drops_and_counts_the_trajectories_and_the_run_continues(tmp_path, flaky_env):
    run_dir = tmp_path / "run"
    cfg = config(2, **{"env.name": flaky_env, "env.args": {}, "rollout.max_consecutive_failures": 5})
    result = Trainer(cfg, run_dir=run_dir).train()
    assert result.iterations_done == 2 and not result.stopped_early
    for record in records(run_dir):
        # both tasks are drawn every iteration; the 2 episodes (group_size) of 'bad' are dropped
        assert record["train/dropped_trajectories"] == 2.0
        assert record["rollout/steps"] > 0 and math.isfinite(record["learner/loss"])
    assert (find_latest(run_dir) / "COMPLETE").exists()


def test_a_task_failing_max_consecutive_failures_times_stops_the_run_naming_it(tmp_path, flaky_env):
    cfg = config(5, **{"env.name": flaky_env, "env.args": {}, "rollout.max_consecutive_failures": 2})
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    with pytest.raises(AgentRLError) as err:
        trainer.train()
    message = str(err.value)
    assert "'bad'" in message and "2 times in a row" in message and "engine crashed on task bad" in message
    assert [r["iteration"] for r in records(tmp_path / "run")] == [1]  # stopped during iteration 2


# ------------------------------------------------------------------------------------------- 2. interruption
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_train_interrupted_by_signal_saves_a_complete_checkpoint_and_resumes_to_the_end(tmp_path, agentrl_cli,
                                                                                            sig):
    run_dir = tmp_path / "run"
    settings = ["--env", "crafting", "--algo", "grpo", "--model", "tiny-random", "--run-dir", str(run_dir),
                "-e", "max_steps=3", "--set", "agent.mode=score", "--set", "agent.think=false",
                "--set", "rollout.tasks_per_iteration=2", "--set", "rollout.group_size=2",
                "--set", "rollout.workers=0", "--set", "run.eval_every=0", "--set", "run.save_every=1",
                "--set", "learner.bf16=false", "--set", "run.iterations=200"]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*agentrl_cli, "train", *settings], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while find_latest(run_dir) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err  # interrupted: the shell's convention (issue 40)
    assert "stopped at iteration" in out
    hint = " ".join(out.split()).split("resume with: ")[1].split(" --resume")[0] + " --resume"
    assert hint == f"agentrl train --run-dir {run_dir} --resume"  # the printed command is the one run below
    latest = find_latest(run_dir)
    stopped_at = load_checkpoint(latest).iteration
    assert (latest / "COMPLETE").is_file() and 1 <= stopped_at < 200
    assert records(run_dir)[-1]["iteration"] == stopped_at  # the checkpoint is of the last finished iteration

    end = stopped_at + 1
    resumed = subprocess.run([*agentrl_cli, "train", "--run-dir", str(run_dir), "--resume",
                              "--set", f"run.iterations={end}"], capture_output=True, text=True, env=env, check=False,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(find_latest(run_dir)).iteration == end
    assert [r["iteration"] for r in records(run_dir)] == list(range(1, end + 1))


def test_crash_mid_checkpoint_write_leaves_latest_on_the_previous_checkpoint_and_resume_works(tmp_path, trained_run):
    run_dir = copy_run(trained_run, tmp_path / "run")
    root = run_dir / "checkpoints"
    # a crash while writing iteration 3: a half-written temporary folder, and a renamed folder without COMPLETE
    leftover = root / ".iter-000003.tmp-99999"
    (leftover / "model").mkdir(parents=True)
    (leftover / "trainer.pt").write_bytes(b"\x80\x02half")
    broken = root / "iter-000003"
    (broken / "model").mkdir(parents=True)
    (broken / "state.json").write_text('{"iteration": 3')
    assert find_latest(run_dir).name == "iter-000002"
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(broken)

    trainer = Trainer(config(3, **{"run.save_every": 1, "run.keep_checkpoints": 3}), run_dir=run_dir, resume=True)
    assert trainer.start_iteration == 3
    assert trainer.train().iterations_done == 3
    latest = find_latest(run_dir)
    assert latest.name == "iter-000003" and (latest / "COMPLETE").is_file()
    assert load_checkpoint(latest).iteration == 3
    assert [r["iteration"] for r in records(run_dir)] == [1, 2, 3]


# ------------------------------------------------------------------------------------------- 3. numerical safety
def traj(group, tid, success, rewards, valid=True):
    steps = [Step(obs=f"o{t}", action=f"a{t}", reward=float(r), done=t == len(rewards) - 1, valid=valid,
                  next_obs=f"o{t + 1}") for t, r in enumerate(rewards)]
    return Trajectory(group, tid, success, steps)


DEGENERATE_BATCHES = {
    "identical_outcomes": [traj("g", i, True, [0.0, 1.0]) for i in range(4)],
    "identical_failures": [traj("g", i, False, [0.0, 0.0, 0.0]) for i in range(4)],
    "all_invalid": [traj("g", i, False, [0.0, 0.0], valid=False) for i in range(4)],
    "all_invalid_identical_success": [traj("g", i, True, [1.0], valid=False) for i in range(3)],
    "single_member_groups": [traj(f"g{i}", 0, i % 2 == 0, [float(i % 2)]) for i in range(3)],
    "one_step_each": [traj("g", i, False, [0.0]) for i in range(2)],
}


@pytest.mark.parametrize("case", sorted(DEGENERATE_BATCHES))
@pytest.mark.parametrize("algo", [spec.name for spec in algos.list_algorithms()])
def test_degenerate_groups_give_finite_advantages_for_every_algorithm(algo, case):
    spec = algos.get_algorithm(algo)
    options = {"scorer": "lexical"} if algo.startswith("scpo") else {}
    trajectories = DEGENERATE_BATCHES[case]
    result = spec.compute(trajectories, spec.make_config(options))
    assert [len(a) for a in result.advantages] == [len(t.steps) for t in trajectories]
    for advantages in result.advantages:
        assert np.all(np.isfinite(np.asarray(advantages, dtype=float))), (algo, case, result.advantages)


def test_ppo_loss_is_finite_for_zero_length_responses_and_zero_advantages():
    shape = (3, 5)
    logprobs = torch.full(shape, -2.0, requires_grad=True)
    old = torch.full(shape, -2.0)
    ref = torch.full(shape, -2.5)
    for mask, advantages in [(torch.zeros(shape), torch.tensor([1.0, -1.0, 0.0])),  # every response empty
                             (torch.tensor([[1, 1, 0, 0, 0], [0] * 5, [0] * 5]), torch.zeros(3)),  # one token
                             (torch.ones(shape), torch.zeros(3))]:  # identical outcomes: advantage 0
        loss, stats = ppo_token_loss(logprobs, old, ref, advantages, mask, entropy=torch.ones(shape))
        assert torch.isfinite(loss) and all(math.isfinite(v) for v in stats.values()), stats
        (grad,) = torch.autograd.grad(loss, logprobs)
        assert torch.isfinite(grad).all()


def test_learner_update_is_finite_for_zero_advantage_groups_and_rejects_empty_responses():
    policy = HFPolicy(tiny_model_dir())
    prompt = policy.render([{"role": "user", "content": "go"}])
    learner = Learner(policy, LearnerConfig(bf16=False, lr=1e-3, mini_batch_size=8, micro_batch_size=4))
    choices = policy.score_choices([prompt, prompt], [["tick", "wait"], ["tick", "wait"]], seed=0)
    samples = [TrainingSample.from_choice(c, 0.0) for c in choices]  # an all-identical group: advantage 0
    generated = policy.generate([prompt], GenerationConfig(max_new_tokens=1), seed=0)
    samples.append(TrainingSample.from_generation(generated[0], 0.0))  # the shortest possible reply
    stats = learner.update(samples)
    assert stats["skipped_steps"] == 0 and all(math.isfinite(v) for v in stats.values()), stats
    with pytest.raises(ValueError, match="at least one response token"):  # never a silent 0/0
        learner.update([TrainingSample(prompt_ids=list(prompt), response_ids=[], old_logprobs=[], advantage=1.0)])


def test_nan_loss_is_skipped_counted_and_stops_the_run_after_max_nonfinite_updates(tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(config(5, **{"run.max_nonfinite_updates": 2, "learner.kl_coef": 0.01}), run_dir=run_dir)
    # NaN in the frozen KL reference: rollouts (the policy) stay sound, every loss is NaN
    with torch.no_grad():
        for p in trainer.learner._reference_model.parameters():
            p.fill_(float("nan"))
    before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    with pytest.raises(AgentRLError, match="2 consecutive updates had a NaN/inf loss"):
        trainer.train()
    (first,) = records(run_dir)
    assert first["learner/skipped_steps"] >= 1 and first["learner/optimizer_steps"] == 0
    assert all(torch.equal(before[n], p) for n, p in trainer.policy.model.named_parameters()), "a NaN step was taken"


# ------------------------------------------------------------------------------------------- 4. bad input
def cli(agentrl_cli, *args, timeout=120):
    return subprocess.run([*agentrl_cli, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "COLUMNS": "300"})


def assert_one_line_error(result, *needles):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


BAD_TRAIN_INPUT = {
    "unknown_env": (["--env", "crafitng"], ["crafitng"]),
    "unknown_algo": (["--algo", "gipgo"], ["gipgo"]),
    "unknown_model": (["--model", "no-such-model-xyz"], ["no-such-model-xyz"]),
    "wrong_type_in_set": (["--set", "rollout.group_size=many"], ["rollout.group_size"]),
    "unknown_key_in_set": (["--set", "rollout.gruop_size=4"], ["gruop_size"]),
    "malformed_config": (["--config", "{bad_config}"], ["bad.yaml"]),
    "missing_data_dir": (["--env", "alfworld", "-e", "data_dir=/nonexistent/alfworld"], ["/nonexistent/alfworld"]),
}


@pytest.mark.parametrize("case", sorted(BAD_TRAIN_INPUT))
def test_bad_train_input_exits_2_with_one_line_and_leaves_an_existing_run_untouched(tmp_path, agentrl_cli,
                                                                                    trained_run, case):
    run_dir = copy_run(trained_run, tmp_path / "run")
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("env: {name: crafting\nalgo: [grpo\n")
    args, needles = BAD_TRAIN_INPUT[case]
    args = [a.replace("{bad_config}", str(bad_config)) for a in args]
    before = snapshot(run_dir)
    base = {"--env": "crafting", "--algo": "grpo", "--model": str(tiny_model_dir())}
    flags = [x for flag, value in base.items() if flag not in args for x in (flag, value)]
    result = cli(agentrl_cli, "train", "--run-dir", str(run_dir), *flags, *args)
    assert_one_line_error(result, *needles)
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("damage", ["truncate_trainer_pt", "truncate_state_json", "empty_trainer_pt",
                                    "state_json_without_iteration"])
def test_corrupted_checkpoint_on_resume_exits_2_and_changes_nothing(tmp_path, agentrl_cli, trained_run, damage):
    run_dir = copy_run(trained_run, tmp_path / "run")
    ckpt = find_latest(run_dir)
    target = ckpt / ("trainer.pt" if "trainer_pt" in damage else "state.json")
    data = target.read_bytes()
    if damage == "state_json_without_iteration":
        target.write_text(json.dumps({k: v for k, v in json.loads(data).items() if k != "iteration"}))
    else:
        target.write_bytes(b"" if damage.startswith("empty") else data[: len(data) // 2])
    before = snapshot(run_dir)
    result = cli(agentrl_cli, "train", "--run-dir", str(run_dir), "--resume", "--set", "run.iterations=3")
    assert_one_line_error(result, "corrupted", ckpt.name)
    assert snapshot(run_dir) == before


# ------------------------------------------------------------------------------------------- 5. security
class _Exploit:
    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_malicious_pickle_in_trainer_pt_is_refused_and_never_executed(tmp_path, trained_run):
    run_dir = copy_run(trained_run, tmp_path / "run")
    ckpt = find_latest(run_dir)
    marker = tmp_path / "pwned"
    _Exploit.marker = str(marker)
    torch.save({"learner": _Exploit(), "torch_rng": torch.get_rng_state()}, ckpt / "trainer.pt")
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(ckpt)
    with pytest.raises(CheckpointError):
        Trainer(config(3), run_dir=run_dir, resume=True)
    assert not marker.exists(), "the checkpoint's pickle was executed"


def test_training_writes_only_inside_the_run_dir(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model_before = snapshot(tiny_model_dir())
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    run_dir = tmp_path / "run"
    Trainer(config(1, **{"model.path": "tiny-random"}), run_dir=run_dir).train()
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*outside_before, "run"])
    assert snapshot(tiny_model_dir()) == model_before
    assert (run_dir / "tiny-random" / "config.json").is_file()  # a named model is built inside the run


def test_model_replies_are_parsed_never_executed(tmp_path):
    from agentrl.agents.react import ReActAgent

    marker = tmp_path / "executed"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    agent = ReActAgent(env_family="crafting", think=False)
    for reply in [f"<action>{payload}</action>", f"<action>{{{{ {payload} }}}}</action>",
                  f"<action>`{payload}`</action>", f"<think>{payload}</think><action>eval({payload})</action>"]:
        parsed = agent.parse(reply)
        assert isinstance(parsed.action, str)
    assert not marker.exists()
