"""The env worker pool: parallel workers agree with in-process envs; faults lose only the affected episodes."""

from __future__ import annotations

import os
import signal
import textwrap

import pytest
from conftest import put_module_on_path

from agentrl.envpool import EnvFailure, EnvPool

FAULTY_ENV = textwrap.dedent('''
    from agentrl.envs import TextEnv

    class Faulty(TextEnv):
        """Raises on the action 'explode'; otherwise counts steps."""
        splits = ("train",)

        def task_ids(self, split=None):
            return ["a", "b", "broken"]

        def _reset_task(self, task_id):
            if task_id == "broken":
                raise OSError("game file unreadable")
            self.n = 0
            return f"start {task_id}", {"admissible_actions": ["tick", "explode"]}

        def _step(self, action):
            if action == "explode":
                raise RuntimeError("engine crashed")
            self.n += 1
            return f"tick {self.n}", 0.0, self.n >= 3, {"won": self.n >= 3}
''')


@pytest.fixture()
def faulty_module(tmp_path, monkeypatch):
    put_module_on_path(tmp_path, monkeypatch, "faulty_env_mod", FAULTY_ENV)
    return "faulty_env_mod:Faulty"


def play(pool, slots, actions):
    resets = pool.reset([(s, s, {"task_index": s % 5}) for s in slots])
    observations = {s: resets[s][0] for s in slots}
    for action in actions:
        results = pool.step([(s, action) for s in slots])
        for s in slots:
            observations[s] += " | " + results[s][0]
    return observations


def test_workers_match_in_process_envs():
    actions = ["go to forest", "go to mine", "look", "inventory"]
    with EnvPool("crafting", workers=0) as local, EnvPool("crafting", workers=2, slots_per_group=2) as remote:
        assert play(local, range(6), actions) == play(remote, range(6), actions)
        assert len(set(remote.worker_pids())) == 2


def test_group_members_share_a_worker():
    pool = EnvPool("crafting", workers=0, slots_per_group=4)
    pool.workers = 3  # only the mapping is under test
    assert {pool.worker_of(s) for s in range(4)} == {0}
    assert {pool.worker_of(s) for s in range(4, 8)} == {1}


@pytest.mark.parametrize("workers", [0, 1])
def test_env_exception_fails_only_that_slot(faulty_module, workers):
    with EnvPool(faulty_module, workers=workers) as pool:
        pool.reset([(0, 0, {"task_id": "a"}), (1, 0, {"task_id": "b"})])
        results = pool.step([(0, "explode"), (1, "tick")])
        assert isinstance(results[0], EnvFailure) and "engine crashed" in results[0].error
        assert results[1][0] == "tick 1"
        assert pool.restarts == 0


@pytest.mark.parametrize("workers", [0, 1])
def test_env_exception_in_reset_fails_only_that_slot(faulty_module, workers):
    with EnvPool(faulty_module, workers=workers) as pool:
        results = pool.reset([(0, 0, {"task_id": "broken"}), (1, 0, {"task_id": "a"})])
        assert isinstance(results[0], EnvFailure) and "game file unreadable" in results[0].error
        assert results[1][0] == "start a"
        assert pool.step([(1, "tick")])[1][0] == "tick 1"


def test_killed_worker_is_restarted_and_its_slots_fail():
    with EnvPool("crafting", workers=2, slots_per_group=1) as pool:
        pool.reset([(s, 0, {"task_index": s}) for s in range(4)])
        victim = pool.worker_of(1)
        os.kill(pool.worker_pids()[victim], signal.SIGKILL)
        results = pool.step([(s, "look") for s in range(4)])
        lost = [s for s in range(4) if isinstance(results[s], EnvFailure)]
        assert lost == [s for s in range(4) if pool.worker_of(s) == victim]
        assert all("died" in results[s].error for s in lost)
        assert pool.restarts == 1
        # the restarted worker serves new episodes
        again = pool.reset([(s, 0, {"task_index": s}) for s in range(4)])
        assert not any(isinstance(r, EnvFailure) for r in again.values())


def observations(results):
    return {s: r[0] for s, r in sorted(results.items())}


def test_async_batches_in_flight_together_are_read_in_any_order():
    """Two batches to the same worker before either is read: each handle gets its own replies, whichever is asked
    first, and they equal the synchronous steps of in-process envs."""
    with EnvPool("crafting", workers=1, slots_per_group=2) as pool, EnvPool("crafting", workers=0) as local:
        for p in (pool, local):
            p.reset([(s, s, {"task_index": s}) for s in range(4)])
        first = pool.step_async([(0, "look"), (1, "go to forest")])
        second = pool.step_async([(2, "inventory"), (3, "look")])
        assert observations(second.result()) == observations(local.step([(2, "inventory"), (3, "look")]))
        assert observations(first.result()) == observations(local.step([(0, "look"), (1, "go to forest")]))
        assert first.result() is first.result()  # read once, kept
        assert observations(pool.step([(0, "look")])) == observations(local.step([(0, "look")]))  # in step after


def test_a_worker_dead_with_two_batches_in_flight_fails_both_and_is_restarted_once():
    with EnvPool("crafting", workers=1) as pool:
        pool.reset([(s, 0, {"task_index": s}) for s in range(2)])
        pid = pool.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        pool._procs[0].join(timeout=10)
        first, second = pool.step_async([(0, "look")]), pool.step_async([(1, "look")])
        results = {**second.result(), **first.result()}
        assert all(isinstance(r, EnvFailure) and "died" in r.error for r in results.values())
        assert sorted(results) == [0, 1] and pool.restarts == 1
        again = pool.reset([(s, 0, {"task_index": s}) for s in range(2)])
        assert not any(isinstance(r, EnvFailure) for r in again.values()) and pool.worker_pids() != [pid]
