"""The training loop: grouped rollouts → per-step advantages → PPO-clip update → metrics and checkpoints.

One iteration (docs/spec/algorithms.md §1.1, §1.4):

1. draw N tasks of the training split (a pure function of ``(seed, iteration)``, so a resumed run draws the same);
2. play G episodes of each from the same initial state (:func:`agentrl.rollout.collect_rollouts`); with
   ``rollout.filter_groups`` on, drop the groups without signal and play further waves of tasks until N groups are
   kept or ``rollout.max_task_draws`` tasks were drawn (:mod:`agentrl.dynamic_sampling`);
3. compute one advantage per (trajectory, step) with the configured algorithm (GRPO, GiGPO, SCPO, ...);
4. broadcast each step's advantage to its response tokens and take PPO-clip steps (:class:`agentrl.learner.Learner`);
5. log metrics, sampled trajectories and the learning curve; evaluate every ``eval_every`` iterations; checkpoint.

SIGINT/SIGTERM finish the current iteration, write a checkpoint and stop; ``resume=True`` continues from the
latest checkpoint of the run directory.

Scaling out (docs/scaling.md):

- ``rollout.generator`` picks the generation backend (:mod:`agentrl.generators`): the HF policy itself, or a vLLM
  engine that receives the learner's weights after every update (:func:`agentrl.generators.sync_weights`);
- ``run.ray_address`` runs the env workers as Ray actors (:class:`agentrl.raypool.RayEnvPool`) instead of local
  processes;
- under ``torchrun`` (``WORLD_SIZE`` > 1) every rank plays its share of the iteration's groups, the trajectories
  are gathered so every rank computes the same advantages, and :class:`agentrl.distributed.DistributedLearner`
  all-reduces the gradients; rank 0 alone writes logs and checkpoints (:mod:`agentrl.distributed`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl import algos
from agentrl.agents.react import ReActAgent
from agentrl.checkpoint import find_latest, load_checkpoint, restore_rng, save_checkpoint
from agentrl.config import GenerationConfig, TrainConfig, build_config, save_config, to_dict
from agentrl.diagnostics import fidelity_metrics, progress_from_distances, progress_records
from agentrl.distributed import DistInfo, DistributedLearner, all_ranks_agree, gather_rollouts, init_distributed
from agentrl.dynamic_sampling import SamplingTally, informative_groups, merge, select
from agentrl.envpool import EnvPool, PendingReplies, SlotPool
from agentrl.errors import AgentRLError, ConfigError
from agentrl.evaluation import report_from_rollouts, split_tasks
from agentrl.generators import build_generator, resolve_generator_kind, sync_weights
from agentrl.hardware import configure_cpu_threads, cuda_available, default_cpu_threads
from agentrl.inspector import record_groups
from agentrl.learner import Learner
from agentrl.models import AGENT_SETTINGS_FILE, resolve_model
from agentrl.policy import HFPolicy, quiet_progress_bars
from agentrl.records import RolloutBatch
from agentrl.rollout import collect_rollouts, reset_requests
from agentrl.runlog import RunLogger


@dataclass
class TrainResult:
    run_dir: Path
    iterations_done: int
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False


class _NullLogger:
    """The run log of ranks other than 0 under torch.distributed: rank 0 writes the one log of the run."""

    def log(self, *args: Any, **kwargs: Any) -> None: ...
    def log_trajectories(self, *args: Any, **kwargs: Any) -> None: ...
    def plot(self, *args: Any, **kwargs: Any) -> None: ...
    def truncate_after(self, *args: Any, **kwargs: Any) -> None: ...
    def close(self) -> None: ...

    def history(self) -> list[dict[str, Any]]:
        return []


def _train_device(choice: str, dist: DistInfo) -> str:
    """``model.device``: ``"auto"`` is this rank's GPU (``cuda:LOCAL_RANK``) when CUDA is available, else the CPU."""
    if choice == "auto":
        return f"cuda:{dist.local_rank}" if cuda_available() else "cpu"
    return choice


def _make_pool(cfg: TrainConfig) -> SlotPool:
    """Local env worker processes, or Ray actors when ``run.ray_address`` is set (both a :class:`SlotPool`)."""
    if cfg.run.ray_address:
        from agentrl.raypool import RayEnvPool, connect

        connect(cfg.run.ray_address)
        return RayEnvPool(cfg.env.name, cfg.env.args, workers=max(1, cfg.rollout.workers),
                          slots_per_group=cfg.rollout.group_size)
    return EnvPool(cfg.env.name, cfg.env.args, workers=cfg.rollout.workers, slots_per_group=cfg.rollout.group_size)


class Trainer:
    """Runs :class:`~agentrl.config.TrainConfig` end to end. See the module docstring."""

    def __init__(self, config: TrainConfig, *, run_dir: str | Path | None = None, resume: bool = False,
                 console: Any = None):
        self.config = config.validate()
        cfg = self.config
        if cfg.model.path is None:
            raise ConfigError("no model given: pass --model PATH (a local Hugging Face folder, e.g. Qwen2.5-1.5B-"
                              "Instruct on a GPU) or a name from `agentrl models list`, or set model.path")
        self.run_dir = Path(run_dir or cfg.run.output_dir or
                            f"runs/{cfg.env.name.replace('/', '_')}-{cfg.algo.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        self.console = console
        self.checkpoint = None
        # Fail fast on a backend that cannot run here, before any model is loaded.
        self.generator_kind = resolve_generator_kind(cfg.rollout.generator, mode=cfg.agent.mode)
        if cfg.run.ray_address:
            from agentrl.raypool import _ray

            _ray()  # names the extra to install when ray is missing
        self.dist = init_distributed()
        self.device = _train_device(cfg.model.device, self.dist)
        if resume:
            latest = find_latest(self.run_dir)
            if latest is None:
                raise AgentRLError(f"--resume: no checkpoint in {self.run_dir / 'checkpoints'}")
            self.checkpoint = load_checkpoint(latest)

        configure_cpu_threads(cfg.run.torch_threads or default_cpu_threads(cfg.rollout.workers))
        torch.manual_seed(cfg.run.seed)

        self.algorithm = algos.get_algorithm(cfg.algo.name)
        self.algo_config = self.algorithm.make_config(cfg.algo.options)

        evaluates = bool(cfg.run.eval_every) or cfg.run.eval_before_train  # else the eval split need not exist
        splits = split_tasks(cfg.env.name, cfg.env.args, [(cfg.env.train_split, False)]
                             + ([(cfg.env.eval_split, True)] if evaluates else []))
        (self.train_split, self.train_tasks), (self.eval_split, self.eval_tasks) = (*splits, (None, []))[:2]
        if cfg.env.train_tasks is not None:  # a fixed training set (verl-agent's train_data_size)
            self.train_tasks = self.train_tasks[: cfg.env.train_tasks]
        self.agent = ReActAgent(env_family=ReActAgent.family_for_env(cfg.env.name),
                                history_length=cfg.agent.history_length, think=cfg.agent.think,
                                action_memory=cfg.agent.action_memory, list_actions=cfg.agent.list_actions)
        # Names (algorithm, env, split) are checked above and the model loads below before config.yaml is
        # (re)written, so a bad name given for an existing run directory leaves that run as it was.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.policy, self.learner = self._load_policy_and_learner()
        self.start_iteration = 1
        if self.dist.is_main:
            save_config(cfg, self.run_dir / "config.yaml")
        self.logger: Any = RunLogger(self.run_dir) if self.dist.is_main else _NullLogger()
        if self.checkpoint is not None:
            self.learner.load_state_dict(self.checkpoint.trainer_state["learner"])
            restore_rng(self.checkpoint)
            self.start_iteration = self.checkpoint.iteration + 1
            self.logger.truncate_after(self.checkpoint.iteration)
        self.generator = build_generator(self.generator_kind, self.policy, model_dir=self.base_model,
                                         mode=cfg.agent.mode, seed=cfg.run.seed + self.dist.rank,
                                         options=self._vllm_options())
        sync_weights(self.generator, self.policy)  # a resumed or LoRA policy differs from the folder's weights
        self.pool = _make_pool(cfg)
        self._stop_requested = False
        self._sent_resets: tuple[int, PendingReplies] | None = None  # (iteration, its resets sent ahead)
        self._task_failures: Counter = Counter()
        self._nonfinite_updates = 0

    def _load_policy_and_learner(self) -> tuple[HFPolicy, Learner]:
        """The policy (the model, or the checkpoint's weights or adapter when resuming) and its learner."""
        cfg = self.config
        # A named model is built once: rank 0 first, the other ranks then find it (or, without a shared file
        # system, build the identical one themselves).
        self._barrier(before_main=True)
        self.base_model = resolve_model(cfg.model.path, self.run_dir)
        self._barrier(before_main=False)
        model_source = self.base_model
        if self.checkpoint is not None and cfg.model.lora is None:
            model_source = str(self.checkpoint.model_dir)
        policy = HFPolicy(model_source, device=self.device, dtype=cfg.model.dtype, lora=cfg.model.lora)
        if self.checkpoint is not None and cfg.model.lora is not None:
            policy.load_adapter(self.checkpoint.model_dir)
        learner_config = cfg.learner
        if self.generator_kind == "vllm" and (cfg.generation.top_p < 1 or cfg.generation.top_k != -1):
            # vLLM reports log-probs of the truncated distribution (agentrl.vllm_generator): recompute them.
            if cfg.learner.recompute_old_logprobs is False:
                raise ConfigError("learner.recompute_old_logprobs=false cannot train on vLLM's log-probs with "
                                  "generation.top_p < 1 or top_k set (they are of the truncated distribution)")
            learner_config = dataclasses.replace(cfg.learner, recompute_old_logprobs=True)
        # On a resumed full fine-tune the KL reference stays the original model, not the checkpoint.
        reference = self.base_model if self.checkpoint is not None and cfg.model.lora is None else None
        learner_class = DistributedLearner if self.dist.enabled else Learner
        return policy, learner_class(policy, learner_config, reference=reference)

    # ------------------------------------------------------------------------------------------------ loop
    def train(self) -> TrainResult:
        cfg = self.config
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, self._request_stop)
        done = self.start_iteration - 1
        try:
            if cfg.run.eval_before_train and self.start_iteration == 1:  # a resumed run has logged it already
                metrics = self.evaluate(0)
                self.logger.log(0, metrics)
                self._say(f"before training: eval success {metrics['eval/success']:.1f}% "
                          f"({metrics['eval/episodes']} episodes, {metrics['time/eval']:.0f}s)")
            for iteration in range(self.start_iteration, cfg.run.iterations + 1):
                metrics = self.run_iteration(iteration)
                done = iteration
                if self._evaluates_after(iteration):
                    metrics.update(self.evaluate(iteration))
                if self.dist.enabled:  # a signal that reached one rank stops them all after this iteration
                    self._stop_requested = all_ranks_agree(self._stop_requested)
                self.logger.log(iteration, metrics)
                self.logger.plot(title=f"{cfg.env.name} · {cfg.algo.name}")
                self._print(iteration, metrics)
                if iteration % cfg.run.save_every == 0 or iteration == cfg.run.iterations or self._stop_requested:
                    self.save(iteration)
                if self._stop_requested:
                    self._say(f"stopped at iteration {iteration}; resume with: agentrl train --run-dir "
                              f"{shlex.quote(str(self.run_dir))} --resume")
                    break
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()
        return TrainResult(run_dir=self.run_dir, iterations_done=done, history=self.logger.history(),
                           stopped_early=self._stop_requested)

    def run_iteration(self, iteration: int) -> dict[str, Any]:
        cfg = self.config
        start = time.perf_counter()
        rng = np.random.default_rng([cfg.run.seed, iteration])
        batch, first, tally = self._sample_groups(iteration, rng)
        if self._next_is_a_rollout(iteration):
            # The env workers ground the next iteration's games while credit assignment and the learner run here.
            self._sent_resets = (iteration + 1, self._send_resets(iteration + 1))
        trajectories = [rt.trajectory for rt in batch.trajectories]

        t0 = time.perf_counter()
        result = self.algorithm.compute(trajectories, self.algo_config) if trajectories else None
        credit_time = time.perf_counter() - t0

        samples = []
        if result is not None:
            for rt, advantages in zip(batch.trajectories, result.advantages):
                for sample, advantage in zip(rt.samples, advantages):
                    sample.advantage = float(advantage)
                    samples.append(sample)
        t0 = time.perf_counter()
        learner_stats = self.learner.update(samples) if samples else {}
        learner_time = time.perf_counter() - t0
        self._check_finite(learner_stats)
        t0 = time.perf_counter()
        pushed = bool(samples) and sync_weights(self.generator, self.policy)
        sync_time = time.perf_counter() - t0

        wall = time.perf_counter() - start
        played = [rt.trajectory for rt in first.trajectories]  # the first draw: comparable with filtering off
        steps = [s for t in played for s in t.steps]
        metrics: dict[str, Any] = {
            "train/success": 100.0 * float(np.mean([t.success for t in played])) if played else 0.0,
            "train/reward": float(np.mean([t.episode_return for t in played])) if played else 0.0,
            "train/episode_length": float(np.mean([len(t.steps) for t in played])) if played else 0.0,
            "train/valid_action_ratio": float(np.mean([s.valid for s in steps])) if steps else 0.0,
            "train/dropped_trajectories": float(batch.dropped),
            "train/env_worker_restarts": float(self.pool.restarts),
            "time/credit_assignment": credit_time,
            "time/learner": learner_time,
            "time/iteration": wall,
            "time/weight_sync": sync_time if pushed else 0.0,
            "throughput/tokens_per_s": batch.stats.get("rollout/generated_tokens", 0.0) / max(
                batch.stats.get("time/generation", 0.0), 1e-9),
        }
        metrics.update(batch.stats)
        metrics.update(tally.metrics())
        if result is not None:
            metrics.update({f"algo/{k}": v for k, v in result.diagnostics.items()})
            metrics.update(self._credit_fidelity(batch, result.advantages))
        metrics.update({f"learner/{k}": v for k, v in learner_stats.items()})
        self.logger.log_trajectories(iteration, self._sample_trajectories(batch, cfg.run.sample_trajectories, rng))
        if result is not None:
            self._record_groups(iteration, batch, result.advantages)
        return metrics

    def evaluate(self, iteration: int) -> dict[str, Any]:
        cfg = self.config
        start = time.perf_counter()
        tasks = self.eval_tasks[: cfg.run.eval_episodes]
        generation = dataclasses.replace(cfg.generation, temperature=cfg.run.eval_temperature)
        # The same episodes at every evaluation: the same tasks, reset seeds and sampling seeds (common random
        # numbers), so that a difference between two evaluations is the policy's, not the dice's.
        batch = self._rollouts(tasks, 1, generation, seed=cfg.run.seed * 7_919, group_prefix=f"eval{iteration}/")
        report = report_from_rollouts(batch, cfg.env.name, self.eval_split, "policy")
        summary = report.by_type()
        out = {"eval/success": summary["All"]["success"], "eval/reward": summary["All"]["reward"],
               "eval/episodes": summary["All"]["n"]}
        for task_type, row in summary.items():
            if task_type != "All":
                out[f"eval/success/{task_type}"] = row["success"]
        if "score" in summary["All"]:
            out["eval/score"] = summary["All"]["score"]
        out["time/eval"] = time.perf_counter() - start
        return out

    def _sample_groups(self, iteration: int, rng: np.random.Generator
                       ) -> tuple[RolloutBatch, RolloutBatch, SamplingTally]:
        """The iteration's groups for the update, its first draw (``tasks_per_iteration`` tasks, the ``train/*``
        metrics) and the tally. With ``rollout.filter_groups`` on, uninformative groups are dropped and further
        waves of the missing number of tasks are played until enough are kept or ``max_task_draws`` is reached;
        wave ``k``'s tasks and seeds are functions of ``(seed, iteration, k)``, so runs stay exact and resumable."""
        cfg = self.config
        mode, wanted, cap = cfg.rollout.filter_groups, cfg.rollout.tasks_per_iteration, cfg.rollout.task_draw_cap
        tally, kept_waves, first = SamplingTally(), [], None
        while first is None or (mode != "off" and tally.kept < wanted and tally.draws < cap):
            wave = tally.waves
            if wave == 0:
                tasks = self._draw_tasks(rng)
                sent, self._sent_resets = self._sent_resets, None
                sent_resets = sent[1] if sent and sent[0] == iteration else None
            else:
                tasks = self._draw_tasks(np.random.default_rng([cfg.run.seed, iteration, 2, wave]),
                                         min(wanted - tally.kept, cap - tally.draws))
                sent_resets = None
            played = self._rollouts(tasks, cfg.rollout.group_size, cfg.generation,
                                    seed=self._rollout_seed(iteration, wave),
                                    group_prefix=f"{iteration}/" if wave == 0 else f"{iteration}/w{wave}.",
                                    sent_resets=sent_resets)
            self._check_failures(tasks, played)
            first = played if wave == 0 else first
            advantages = None
            if mode == "advantage" and played.trajectories:
                advantages = self.algorithm.compute([rt.trajectory for rt in played.trajectories],
                                                    self.algo_config).advantages
            kept, dropped = select(played, informative_groups(played.trajectories, mode, advantages))
            tally.add_wave(len(tasks), kept, dropped)
            kept_waves.append(kept)
        return merge(kept_waves), first, tally

    # ------------------------------------------------------------------------------------------------ helpers
    def _draw_tasks(self, rng: np.random.Generator, n: int | None = None) -> list[str]:
        """``n`` training tasks (default ``tasks_per_iteration``), drawn with the given generator (seeded by run seed,
        iteration and, for dynamic sampling's further waves, the wave)."""
        n = self.config.rollout.tasks_per_iteration if n is None else n
        picks = rng.choice(len(self.train_tasks), size=n, replace=len(self.train_tasks) < n)
        return [self.train_tasks[i] for i in picks]

    def _rollout_seed(self, iteration: int, wave: int = 0) -> int:
        return self.config.run.seed * 100_003 + iteration + 1_000_003 * wave

    def _rank_share(self, tasks: list[str], seed: int, group_prefix: str) -> tuple[list[str], int, str]:
        """Under torch.distributed, this rank's whole groups of ``tasks``, its seed and its group-id prefix."""
        if not self.dist.enabled:
            return tasks, seed, group_prefix
        rank, world = self.dist.rank, self.dist.world_size
        # Each rank samples its own episodes, reproducibly, and group ids stay unique once gathered.
        return tasks[rank::world], seed + 10_000_019 * rank, f"{group_prefix}r{rank}."

    def _evaluates_after(self, iteration: int) -> bool:
        every, last = self.config.run.eval_every, self.config.run.iterations
        return bool(every) and (iteration % every == 0 or iteration == last)

    def _next_is_a_rollout(self, iteration: int) -> bool:
        """Whether the pool's next work is iteration + 1's rollout (not an evaluation, not the end of the run), so
        that its resets can be sent now (``rollout.prefetch_resets``). With envs in this process (workers 0) a reset
        sent now would run now: nothing to overlap."""
        cfg = self.config
        return (cfg.rollout.prefetch_resets and cfg.rollout.workers > 0 and hasattr(self.pool, "reset_async")
                and iteration < cfg.run.iterations and not self._evaluates_after(iteration)
                and not self._stop_requested)

    def _send_resets(self, iteration: int) -> PendingReplies:
        """Send ``iteration``'s resets to the env workers now; its rollout reads them (``sent_resets``)."""
        cfg = self.config
        tasks = self._draw_tasks(np.random.default_rng([cfg.run.seed, iteration]))
        tasks, seed, _ = self._rank_share(tasks, self._rollout_seed(iteration), "")
        return self.pool.reset_async(reset_requests(tasks, cfg.rollout.group_size, seed))

    def _rollouts(self, tasks: list[str], group_size: int, generation: GenerationConfig, *, seed: int,
                  group_prefix: str, sent_resets: PendingReplies | None = None) -> RolloutBatch:
        """Play ``tasks``; under torch.distributed each rank plays whole groups of its share and all are gathered."""
        tasks, seed, group_prefix = self._rank_share(tasks, seed, group_prefix)
        what = "evaluation" if group_prefix.startswith("eval") else f"iteration {group_prefix.split('/')[0]} rollouts"
        with self._progress(what) as on_step:
            batch = collect_rollouts(self.pool, self.agent, self.policy, tasks, group_size, generation,
                                     mode=self.config.agent.mode, choice_rule=self.config.agent.choice_rule,
                                     seed=seed, group_prefix=group_prefix,
                                     max_trajectory_tokens=self.config.rollout.max_trajectory_tokens,
                                     generator=self.generator, overlap_env_steps=self.config.rollout.overlap_env_steps,
                                     sent_resets=sent_resets, on_step=on_step)
        return gather_rollouts(batch) if self.dist.enabled else batch

    @contextlib.contextmanager
    def _progress(self, what: str) -> Iterator[Callable[[int, int, int], None] | None]:
        """A live bar of episodes done (and won) while rollouts run, on the console (rank 0); it vanishes after."""
        if self.console is None or not self.dist.is_main or not getattr(self.console, "is_terminal", False):
            yield None  # no bar in a log file: the iteration lines say it all
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
                      TimeElapsedColumn(), TextColumn("won {task.fields[wins]}"), console=self.console,
                      transient=True) as progress:
            bar = progress.add_task(what, total=None, wins=0)
            yield lambda done, total, wins: progress.update(bar, completed=done, total=total, wins=wins)

    def _vllm_options(self) -> dict[str, Any]:
        options = dataclasses.asdict(self.config.vllm)
        if self.device.startswith("cuda") and self.config.vllm.tensor_parallel_size == 1:
            options["device_index"] = torch.device(self.device).index or 0
        return options

    def _barrier(self, *, before_main: bool) -> None:
        """Under torch.distributed: ranks > 0 wait here until rank 0 has passed the matching call."""
        if not self.dist.enabled or self.dist.is_main == before_main:
            return
        import torch.distributed as dist

        dist.barrier()

    def save(self, iteration: int) -> Path:
        path = self.run_dir / "checkpoints" / f"iter-{iteration:06d}"
        if self.dist.is_main:
            with quiet_progress_bars():
                path = save_checkpoint(self.run_dir, iteration, self.policy, self.learner,
                                       {"config": to_dict(self.config)}, keep=self.config.run.keep_checkpoints,
                                       model_files={AGENT_SETTINGS_FILE: self._agent_settings_record(iteration)})
        if self.dist.enabled:
            import torch.distributed as dist

            dist.barrier()
        return path

    def _agent_settings_record(self, iteration: int) -> str:
        """The model folder's ``agentrl.json``: the agent settings it was trained with, so that ``agentrl eval`` and
        further training drive it the same way (:func:`agentrl.models.recommended_agent_settings`)."""
        cfg = self.config
        return json.dumps({"agent": dataclasses.asdict(cfg.agent),
                           "trained": {"env": cfg.env.name, "algo": cfg.algo.name, "iteration": iteration,
                                       "from": cfg.model.path}}, indent=1)

    def _check_failures(self, tasks: list[str], batch: RolloutBatch) -> None:
        failed_tasks = {task for task, _ in batch.failures}
        for task in set(tasks):
            self._task_failures[task] = self._task_failures[task] + 1 if task in failed_tasks else 0
            if self._task_failures[task] >= self.config.rollout.max_consecutive_failures:
                error = next(err for t, err in batch.failures if t == task)
                raise AgentRLError(f"task {task!r} failed {self._task_failures[task]} times in a row; last error:\n{error}")

    def _check_finite(self, stats: dict[str, float]) -> None:
        if stats.get("skipped_steps", 0) > 0 or not all(math.isfinite(v) for v in stats.values()):
            self._nonfinite_updates += 1
            if self._nonfinite_updates >= self.config.run.max_nonfinite_updates:
                raise AgentRLError(f"{self._nonfinite_updates} consecutive updates had a NaN/inf loss; stopping "
                                   "(lower learner.lr or check the rewards)")
        else:
            self._nonfinite_updates = 0

    @staticmethod
    def _credit_fidelity(batch: RolloutBatch, advantages: list[np.ndarray]) -> dict[str, float]:
        """``credit/*``: how well this iteration's advantages single out the steps that made progress, when the env
        recorded planner distances (``progress_labels=True``; :mod:`agentrl.diagnostics`)."""
        if not batch.trajectories or not all(rt.distances for rt in batch.trajectories):
            return {}
        progress = [progress_from_distances(rt.distances) for rt in batch.trajectories]
        found = fidelity_metrics([rt.trajectory for rt in batch.trajectories], progress, advantages)
        return {f"credit/{k}": v for k, v in found.items() if not math.isnan(v)}

    def _sample_trajectories(self, batch: RolloutBatch, k: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        if not batch.trajectories or k <= 0:
            return []
        picks = rng.choice(len(batch.trajectories), size=min(k, len(batch.trajectories)), replace=False)
        out = []
        for i in sorted(picks):
            rt = batch.trajectories[int(i)]
            progress = progress_records(rt.distances, len(rt.samples))
            out.append({
                "task_id": rt.task_id, "group_id": rt.trajectory.group_id, "success": rt.trajectory.success,
                "return": rt.trajectory.episode_return,
                "steps": [{"obs": s.obs, "reply": r, "action": s.action, "valid": s.valid, "reward": s.reward,
                           "advantage": sample.advantage, **labels}
                          for s, r, sample, labels in zip(rt.trajectory.steps, rt.replies, rt.samples, progress)],
                **({"final_distance_to_goal": rt.distances[-1]} if rt.distances else {}),
            })
        return out

    def _record_groups(self, iteration: int, batch: RolloutBatch, advantages: list[np.ndarray]) -> None:
        """Write ``run.sample_groups`` whole rollout groups of this iteration, mixed ones first, to groups.jsonl
        with their credit (:func:`agentrl.inspector.record_groups`; rank 0 only)."""
        k = self.config.run.sample_groups
        if k > 0 and self.dist.is_main:
            rng = np.random.default_rng([self.config.run.seed, iteration, 1])  # leaves the iteration's draws alone
            self.logger.log_groups(iteration, record_groups(batch.trajectories, advantages, k, rng, self.algo_config))

    def _request_stop(self, signum, frame) -> None:
        if self._stop_requested:  # a second signal: stop now, the last checkpoint stays intact
            raise KeyboardInterrupt
        self._stop_requested = True
        self._say(f"signal {signum}: finishing this iteration, then saving and stopping")

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)

    def _print(self, iteration: int, metrics: dict[str, Any]) -> None:
        if self.console is None:
            return
        parts = [f"iter {iteration}/{self.config.run.iterations}",
                 f"success {metrics['train/success']:.1f}%", f"reward {metrics['train/reward']:.2f}",
                 f"tok/s {metrics['throughput/tokens_per_s']:.0f}",
                 f"gen {metrics.get('time/generation', 0):.1f}s env {metrics.get('time/env_step', 0):.1f}s "
                 f"credit {metrics['time/credit_assignment']:.2f}s learn {metrics['time/learner']:.1f}s"]
        filtering = self.config.rollout.filter_groups
        if filtering != "off":
            parts.append(f"groups kept {metrics['sampling/kept_groups']:.0f}/{metrics['sampling/task_draws']:.0f}")
        if not metrics.get("learner/optimizer_steps"):
            if filtering != "off" and not metrics["sampling/kept_groups"]:
                parts.append(f"no update: no group of the {metrics['sampling/task_draws']:.0f} drawn passed "
                             f"filter_groups={filtering}")
            else:
                parts.append("no update: every advantage was 0" if metrics.get("learner/zero_advantage_rows_skipped")
                             else "no update")
        if "eval/success" in metrics:
            parts.append(f"[bold]eval {metrics['eval/success']:.1f}%[/]")
        self.console.print(" | ".join(parts))

    def close(self) -> None:
        if self._sent_resets is not None:  # read what the workers answer, so that none blocks on a full pipe
            self._sent_resets[1].result()
            self._sent_resets = None
        self.pool.close()
        self.logger.close()
        if self.generator is not self.policy and hasattr(self.generator, "close"):
            self.generator.close()
        if self.config.run.ray_address:
            from agentrl.raypool import shutdown_if_started

            shutdown_if_started()
        if self.dist.initialized_here:
            import torch.distributed as dist

            dist.destroy_process_group()


def train(env: str = "crafting", algo: str = "scpo", model: str | None = None, *, config: TrainConfig | None = None,
          run_dir: str | Path | None = None, resume: bool = False, console: Any = None, quiet: bool = False,
          env_args: dict[str, Any] | None = None, algo_options: dict[str, Any] | None = None,
          **sections: dict[str, Any]) -> TrainResult:
    """Train from Python in one call: ``agentrl.train(env="crafting", algo="gigpo", model="path/to/model")``.

    ``sections`` are the other config sections as dicts (``rollout={"group_size": 4}``, ``run={"iterations": 10}``);
    see :class:`~agentrl.config.TrainConfig`. The configuration is built as ``agentrl train`` builds it
    (:func:`~agentrl.config.build_config`: no model means the default one, and the model's ``agentrl.json`` sets
    the agent settings not given). ``config`` replaces all of it with a ready configuration. Progress (a line per
    iteration, a bar during rollouts) goes to ``console`` (default: a rich console on stdout) unless ``quiet``.
    """
    if config is None:
        data: dict[str, Any] = {"env": {"name": env, "args": dict(env_args or {})},
                                "algo": {"name": algo, "options": dict(algo_options or {})},
                                "model": {"path": model}}
        for key, value in sections.items():
            data[key] = {**data.get(key, {}), **value}
        config = build_config(base=data)
    if console is None and not quiet:
        from rich.console import Console

        console = Console()
    return Trainer(config, run_dir=run_dir, resume=resume, console=None if quiet else console).train()
