"""Env workers as Ray actors on a real local Ray instance (2 CPUs, 2 actors), against the local EnvPool.

"The same results" here is exact: env stepping is deterministic given (task, seed, actions) and the policy runs in
the trainer's process either way, so a Ray-pool run with a fixed seed yields the very same trajectories and
bitwise the same weights as the single-process run (``rollout.workers=0``).
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from safetensors.torch import load_file
from tiny_model import tiny_model_dir

from agentrl.checkpoint import find_latest
from agentrl.config import build_config
from agentrl.envpool import EnvFailure, EnvPool
from agentrl.errors import ConfigError
from agentrl.raypool import RayEnvPool, connect
from agentrl.trainer import Trainer

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'agentrl[ray]')")


@pytest.fixture(scope="module")
def local_ray():
    """One private Ray instance for the module (starting one takes seconds)."""
    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    print(f"ray.init: {time.perf_counter() - start:.1f} s")
    yield ray
    ray.shutdown()


def play(pool, n_slots: int = 4, group: int = 2, steps: int = 4) -> list:
    """Reset every slot on a task, then step each with its first admissible action; all results in order."""
    out = []
    resets = pool.reset([(s, 7, {"task_index": s // group}) for s in range(n_slots)])
    out.append(sorted(resets.items()))
    infos = {s: r[1] for s, r in resets.items()}
    for _ in range(steps):
        results = pool.step([(s, infos[s]["admissible_actions"][s % len(infos[s]["admissible_actions"])])
                             for s in infos])
        out.append(sorted(results.items()))
        infos = {s: r[4] for s, r in results.items() if not (r[2] or r[3])}
        if not infos:
            break
    return out


def test_ray_pool_gives_the_same_results_as_the_local_pool(local_ray):
    with EnvPool("crafting", {"max_steps": 5}, workers=0) as local:
        expected = play(local)
    with RayEnvPool("crafting", {"max_steps": 5}, workers=2, slots_per_group=2) as pool:
        got = play(pool)
        pids = pool.worker_pids()
    assert got == expected
    assert len(set(pids)) == 2 and sys.platform != "win32"


def _wait_until_gone(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"actor process {pid} still alive {timeout} s after ray.kill")


def test_a_killed_actor_is_restarted_and_only_its_slots_fail(local_ray):
    with RayEnvPool("crafting", {"max_steps": 5}, workers=2, slots_per_group=2) as pool:
        resets = pool.reset([(s, 0, {"task_index": 0}) for s in range(4)])
        assert not any(isinstance(r, EnvFailure) for r in resets.values())
        old_pid = pool.worker_pids()[0]
        ray.kill(pool._actors[0], no_restart=True)
        _wait_until_gone(old_pid)  # ray.kill is asynchronous: under load the actor could still answer one call
        action = resets[0][1]["admissible_actions"][0]
        results = pool.step([(s, action) for s in range(4)])
        failed = sorted(s for s, r in results.items() if isinstance(r, EnvFailure))
        assert failed == [0, 1]  # slots of actor 0 (a group shares its actor)
        assert "died" in results[0].error and pool.restarts == 1
        assert not isinstance(results[2], EnvFailure) and not isinstance(results[3], EnvFailure)
        # the replacement serves new episodes
        again = pool.reset([(0, 0, {"task_index": 1}), (1, 0, {"task_index": 1})])
        assert not any(isinstance(r, EnvFailure) for r in again.values())
        assert pool.worker_pids()[0] != old_pid


def test_rollouts_drop_and_count_the_episodes_of_a_crashed_actor(local_ray):
    """An actor dies mid-rollout: its group's trajectories are dropped and counted, the other group finishes."""
    from agentrl.agents.react import ReActAgent

    from agentrl.policy import GenerationConfig, HFPolicy
    from agentrl.rollout import collect_rollouts

    class CrashAfterFirstStep(RayEnvPool):
        steps = 0

        def step_async(self, actions):  # the rollout loop's way to step (two waves, one group each here)
            self.steps += 1
            if self.steps == 3:  # group 0's second step
                ray.kill(self._actors[0], no_restart=True)
            return super().step_async(actions)

    policy = HFPolicy(tiny_model_dir())
    agent = ReActAgent(env_family="crafting", think=False)
    with CrashAfterFirstStep("crafting", {"max_steps": 4}, workers=2, slots_per_group=2) as pool:
        batch = collect_rollouts(pool, agent, policy, ["train/00000", "train/00001"], 2,
                                 GenerationConfig(max_prompt_tokens=192), mode="score", seed=0)
        assert pool.restarts == 1
    assert batch.dropped == 2 and len(batch.failures) == 2
    assert {t.trajectory.group_id for t in batch.trajectories} == {"1"}  # group 0 lived on actor 0
    assert all("died" in error for _, error in batch.failures)


def test_an_env_that_raises_fails_only_its_slot_and_keeps_the_actor(local_ray):
    with RayEnvPool("crafting", {}, workers=1) as pool:
        results = pool.reset([(0, 0, {"task_id": "no-such-task"}), (1, 0, {"task_index": 0})])
        assert isinstance(results[0], EnvFailure) and "no-such-task" in results[0].error
        assert not isinstance(results[1], EnvFailure)
        assert pool.restarts == 0


def small_config(**extra):
    overrides = {
        "env.name": "crafting", "env.args": {"max_steps": 3}, "algo.name": "gigpo", "model.path": str(tiny_model_dir()),
        "agent.mode": "score", "agent.think": False, "rollout.tasks_per_iteration": 2, "rollout.group_size": 2,
        "rollout.workers": 0, "generation.max_prompt_tokens": 192, "learner.lr": 1e-3, "learner.mini_batch_size": 8,
        "learner.micro_batch_size": 4, "learner.bf16": False, "run.iterations": 2, "run.eval_every": 0,
        "run.seed": 3, "run.torch_threads": 1,
    }
    overrides.update(extra)
    return build_config(None, overrides)


def test_training_with_ray_env_workers_matches_the_single_process_run(local_ray, tmp_path):
    start = time.perf_counter()
    Trainer(small_config(**{"rollout.workers": 2, "run.ray_address": "auto"}), run_dir=tmp_path / "ray").train()
    ray_s = time.perf_counter() - start
    Trainer(small_config(), run_dir=tmp_path / "local").train()
    assert ray.is_initialized()  # the trainer joined the running instance and left it running

    def records(run):
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "throughput/"))}
                for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    assert records("ray") == records("local")
    a = load_file(str(find_latest(tmp_path / "ray") / "model" / "model.safetensors"))
    b = load_file(str(find_latest(tmp_path / "local") / "model" / "model.safetensors"))
    assert all((a[k] == b[k]).all() for k in a)
    print(f"2 iterations with 2 Ray env actors: {ray_s:.1f} s")


def test_connect_without_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"agentrl\[ray\]"):
        connect("auto")
    with pytest.raises(ConfigError, match=r"agentrl\[ray\]"):
        Trainer(small_config(**{"run.ray_address": "auto"}))
