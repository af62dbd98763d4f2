"""bench/compare.py's bookkeeping for long comparisons: an interrupted run resumes from its checkpoint, and results
from other starting weights are neither reused nor mixed into the table."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from tiny_model import tiny_model_dir

from agentrl.checkpoint import find_latest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def compare(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("compare_bench", ROOT / "bench" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = tmp_path / "start"
    shutil.copytree(tiny_model_dir(), model)
    monkeypatch.setitem(module.PRESETS, "tiny-crafting", {
        "model": str(model),
        "config": {"env.name": "crafting", "env.args": {"max_steps": 3}, "agent.mode": "score", "agent.think": False,
                   "rollout.tasks_per_iteration": 2, "rollout.group_size": 2, "rollout.workers": 0,
                   "generation.max_prompt_tokens": 192, "learner.lr": 1e-3, "learner.mini_batch_size": 8,
                   "learner.micro_batch_size": 4, "learner.bf16": False},
        "iterations": 2, "eval_every": 2, "eval_episodes": 2,
    })
    return module, model


ARGS = argparse.Namespace(iterations=None, eval_every=None, eval_episodes=None, scorer=None)


def with_warm_start(module, monkeypatch) -> None:
    """The tiny preset starts from a one-epoch SFT of its model on 2 expert episodes."""
    warm_start = {"env": "crafting", "tasks": 2, "epochs": 1, "lr": 1e-3, "mode": "score", "seed": 0}
    monkeypatch.setitem(module.PRESETS, "tiny-crafting", {**module.PRESETS["tiny-crafting"], "warm_start": warm_start})


def with_training_set(module, monkeypatch) -> None:
    """The tiny preset trains on a fixed set of 2 tasks, measured 2 attempts each."""
    preset = module.PRESETS["tiny-crafting"]
    monkeypatch.setitem(module.PRESETS, "tiny-crafting", {**preset, "config": {**preset["config"], "env.train_tasks": 2},
                                                          "train_set_attempts": 2})


def test_an_interrupted_run_resumes_from_its_checkpoint(compare, tmp_path, capsys):
    module, _ = compare
    out = tmp_path / "runs"
    first = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    run_dir = out / "tiny-crafting" / "grpo-s0"
    assert len(first["train_success"]) == 2 and first["final_eval_success"] is not None
    assert first["seconds"] > 0
    # Interrupted after iteration 1: no result, no checkpoint of iteration 2 (its log line is left behind).
    (run_dir / "result.json").unlink()
    shutil.rmtree(find_latest(run_dir))
    (run_dir / "checkpoints" / "latest").write_text("iter-000001\n")
    capsys.readouterr()
    resumed = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert "resuming" in capsys.readouterr().out
    assert resumed["train_success"][0] == first["train_success"][0]  # iteration 1 from the log, not rerun
    assert len(resumed["train_success"]) == 2 and resumed["final_eval_success"] is not None
    assert find_latest(run_dir).name == "iter-000002"
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == [1, 2]
    # Other settings (another budget) never resume: the run starts again.
    (run_dir / "result.json").unlink()
    again = module.run_one("tiny-crafting", "grpo", 0, argparse.Namespace(**{**vars(ARGS), "eval_episodes": 3}), out)
    assert "resuming" not in capsys.readouterr().out
    assert again["config"]["run.eval_episodes"] == 3


def test_results_of_other_settings_or_starting_weights_are_run_again(compare, tmp_path, capsys, monkeypatch):
    module, model = compare
    out = tmp_path / "runs"
    first = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert first["start_model"] == module.start_fingerprint(str(model))
    assert module.run_one("tiny-crafting", "grpo", 0, ARGS, out)["seconds"] == first["seconds"]  # cached
    # A finished run with other settings (here the reward) is not reused: it runs again with these.
    preset = module.PRESETS["tiny-crafting"]
    monkeypatch.setitem(preset, "config", {**preset["config"], "env.args": {"max_steps": 3, "success_reward": 1.0}})
    capsys.readouterr()
    other = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert "ran with other settings" in capsys.readouterr().out
    assert other["config"]["env.args"]["success_reward"] == 1.0 and other["seconds"] != first["seconds"]
    monkeypatch.setitem(preset, "config", {**preset["config"], "env.args": {"max_steps": 3}})
    first = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    shutil.copy(tiny_model_dir(seed=1) / "model.safetensors", model / "model.safetensors")  # a rebuilt policy
    capsys.readouterr()
    rerun = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert "running it again" in capsys.readouterr().out
    assert rerun["start_model"] == module.start_fingerprint(str(model)) != first["start_model"]


def test_a_warm_start_preset_builds_its_start_once_and_every_algorithm_starts_from_it(compare, tmp_path, monkeypatch):
    module, model = compare
    with_warm_start(module, monkeypatch)
    out = tmp_path / "runs"
    grpo = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    (warm,) = (out / "tiny-crafting").glob("warm-*")
    record = json.loads((warm / "warm-start.json").read_text())
    (measured,) = [json.loads(p.read_text()) for p in warm.glob("eval-*.json")]
    assert record["demonstrations"] >= 2 * 3 and len(record["losses"]) == 1
    assert measured["episodes"] == 2 and measured["env_args"] == {"max_steps": 3}  # the runs' own evaluation
    # The runs start from the fine-tuned policy, and its held-out success is their start.
    assert grpo["config"]["model.path"] == str(warm / "sft")
    assert grpo["start_eval_success"] == measured["success"]
    assert grpo["start_model"] == module.start_fingerprint(str(warm / "sft")) != module.start_fingerprint(str(model))
    built = (warm / "sft" / "model.safetensors").stat().st_mtime_ns
    gigpo = module.run_one("tiny-crafting", "gigpo", 0, ARGS, out)
    assert gigpo["config"]["model.path"] == str(warm / "sft") and gigpo["start_model"] == grpo["start_model"]
    assert (warm / "sft" / "model.safetensors").stat().st_mtime_ns == built  # built once, reused
    # Other env args for the runs (e.g. another reward) keep the SFT and measure the start again with them.
    preset = module.PRESETS["tiny-crafting"]
    monkeypatch.setitem(preset, "config", {**preset["config"], "env.args": {"max_steps": 4}})
    longer = module.run_one("tiny-crafting", "grpo", 1, ARGS, out)
    assert longer["config"]["model.path"] == str(warm / "sft") and len(list(warm.glob("eval-*.json"))) == 2
    assert (warm / "sft" / "model.safetensors").stat().st_mtime_ns == built
    # Other starting weights make another warm start (and so other runs).
    shutil.copy(tiny_model_dir(seed=1) / "model.safetensors", model / "model.safetensors")
    rerun = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert len(list((out / "tiny-crafting").glob("warm-*"))) == 2
    assert rerun["config"]["model.path"] != grpo["config"]["model.path"]


def test_runs_record_training_reward_and_eval_score_and_the_plot_shows_them_for_scored_envs(compare, tmp_path):
    module, _ = compare
    out = tmp_path / "runs"
    row = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    run_dir = out / "tiny-crafting" / "grpo-s0"
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["train_reward"] == [r["train/reward"] for r in logged if r["iteration"] >= 1]
    assert len(row["train_reward"]) == 2 and row["eval_score"] == []  # crafting reports no score
    # A result cached before the curves were recorded gets them from the run's log.
    cached = json.loads((run_dir / "result.json").read_text())
    for key in ("train_reward", "eval_score"):
        del cached[key]
    (run_dir / "result.json").write_text(json.dumps(cached))
    assert module.run_one("tiny-crafting", "grpo", 0, ARGS, out)["train_reward"] == row["train_reward"]

    import matplotlib.image

    def panels(rows):
        path = tmp_path / "plot.png"
        module.plot(rows, "tiny-crafting", path)
        return round(matplotlib.image.imread(path).shape[1] / (5.3 * 110))

    assert panels([row]) == 3  # success only: train, eval, SCPO
    scored = {**row, "start_eval_score": 40.0, "eval_score": [(2, 55.0)]}
    assert panels([scored, {**scored, "seed": 1, "train_reward": [1.0, 2.0], "eval_score": [(2, 45.0)]}]) == 5


def hand_made_rows(finals: dict[str, list[float]], **extra) -> list[dict]:
    return [{"env": "tiny-crafting", "algo": algo, "seed": seed, "final_eval_success": value, "final_eval_by_type": {},
             "scpo_diagnostics": [], "seconds": 60.0, "start_eval_success": 5.0, **extra}
            for algo, values in finals.items() for seed, value in enumerate(values)]


def test_paired_statistics_give_t_intervals_over_seeds_and_differences_seed_by_seed(compare, tmp_path):
    """Means with 95% t-intervals (t(0.975, 2) = 4.3027 for three seeds) and paired differences, on numbers worked
    out by hand; a seed only one algorithm ran is not paired."""
    module, _ = compare
    from paired import band, mean_ci, t975  # bench/paired.py, on the path since bench/compare.py was loaded

    assert t975(2) == pytest.approx(4.3027, abs=1e-4) and t975(30) == pytest.approx(2.0423, abs=1e-4)
    assert t975(40) == pytest.approx(2.0211, abs=1e-4)
    assert mean_ci([7.0]) == {"n": 1, "mean": 7.0, "std": None, "half": None, "low": None, "high": None}
    rows = hand_made_rows({"grpo": [10, 20, 30], "gigpo": [12, 24, 30], "scpo": [15, 25, 36, 90]})
    table = module.summarize(rows)
    grpo = table["tiny-crafting/grpo"]
    assert grpo["mean"] == 20 and grpo["std"] == 10 and grpo["seeds"] == 3
    assert grpo["ci"]["half"] == pytest.approx(t975(2) * 10 / 3 ** 0.5)  # 24.843
    differences = module.paired(rows)["tiny-crafting"]["final_eval_success"]
    assert set(differences) == {"scpo-gigpo", "gigpo-grpo", "scpo-grpo"}
    assert all(d["seeds"] == [0, 1, 2] for d in differences.values())  # seed 3: scpo only
    assert differences["gigpo-grpo"]["mean"] == 2 and differences["gigpo-grpo"]["std"] == 2  # diffs 2, 4, 0
    assert differences["gigpo-grpo"]["half"] == pytest.approx(t975(2) * 2 / 3 ** 0.5)  # 4.969
    scpo_grpo = differences["scpo-grpo"]  # diffs 5, 5, 6: s = 1/sqrt(3), so the half-width is t / 3
    assert scpo_grpo["mean"] == pytest.approx(16 / 3) and scpo_grpo["half"] == pytest.approx(t975(2) / 3)
    assert differences["scpo-gigpo"]["mean"] == pytest.approx(10 / 3)  # diffs 3, 1, 6
    assert differences["scpo-gigpo"]["half"] == pytest.approx(t975(2) * (19 / 3) ** 0.5 / 3 ** 0.5)
    # Learning-curve bands: the t-interval per iteration over seeds.
    mean, low, high = band([[0.0, 10.0], [10.0, 20.0], [20.0, 30.0]])
    assert mean == [10.0, 20.0] and high[0] - mean[0] == pytest.approx(t975(2) * 10 / 3 ** 0.5) and low[1] < 20.0

    results = tmp_path / "results.md"
    differences = module.paired(rows)
    module.write_markdown(table, rows, results, "hand-made", differences, module.power_analysis(differences))
    text = results.read_text()
    assert "| tiny-crafting | grpo | 3 | – | 5.0 → 20.0 [-4.8, 44.8] |" in text
    assert "| tiny-crafting | eval success | 3.3 [-2.9, 9.6], 3 seeds | 2.0 [-3.0, 7.0], 3 seeds | " \
           "5.3 [3.9, 6.8], 3 seeds |" in text
    assert "| tiny-crafting | eval success | scpo − grpo | 3 | 0.6 | 1.9 | 2 | 2 |" in text  # the power analysis
    # Runs with dynamic sampling on are another setting: compared among themselves, never paired with the others.
    filtered = hand_made_rows({"grpo": [40, 50], "scpo": [45, 55]}, filter_groups="outcome")
    both = module.paired(rows + filtered)
    assert both["tiny-crafting+outcome"]["final_eval_success"]["scpo-grpo"]["mean"] == 5
    assert both["tiny-crafting"]["final_eval_success"]["scpo-grpo"]["seeds"] == [0, 1, 2]
    assert set(module.summarize(rows + filtered)) == {"tiny-crafting/grpo", "tiny-crafting/gigpo",
                                                      "tiny-crafting/scpo", "tiny-crafting+outcome/grpo",
                                                      "tiny-crafting+outcome/scpo"}
    per_seed_start = hand_made_rows({"grpo": [40, 50]})
    per_seed_start[1]["start_eval_success"] = 15.0  # run.eval_before_train: each seed evaluates its own start
    assert module.summarize(per_seed_start)["tiny-crafting/grpo"]["start"] == 10.0
    one_seed = hand_made_rows({"grpo": [40], "scpo": [45]})
    differences = module.paired(one_seed)
    module.write_markdown(module.summarize(one_seed), one_seed, results, "hand-made", differences,
                          module.power_analysis(differences))
    assert "| tiny-crafting | eval success | – | – | 5.0 (1 seed) |" in results.read_text()


def test_the_power_analysis_matches_the_paired_t_test_tables(compare):
    """R's power.t.test(type="paired"): n=10, delta=1, sd=1 gives power 0.8031; 80% power at delta=0.5 needs 34."""
    from paired import detectable_difference, power, seeds_needed

    assert power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-4)
    assert power(0.5, 1.0, 34) == pytest.approx(0.8078, abs=1e-4) and power(0.5, 1.0, 33) < 0.8
    assert seeds_needed(0.5, 1.0) == 34 and seeds_needed(5.0, 2.0) == 4 and seeds_needed(0.0, 1.0) is None
    found = detectable_difference(8.0, 10)
    assert power(found, 8.0, 10) == pytest.approx(0.8, abs=1e-6) and found == pytest.approx(7.97, abs=0.01)
    module, _ = compare
    rows = hand_made_rows({"grpo": [10, 20, 30], "scpo": [15, 25, 36]})
    analysis = module.power_analysis(module.paired(rows))["tiny-crafting"]["final_eval_success"]["scpo-grpo"]
    assert analysis["std"] == pytest.approx(3 ** -0.5) and analysis["seeds"] == 3
    assert analysis["detectable"] == pytest.approx(detectable_difference(3 ** -0.5, 3))
    assert analysis["seeds_for_observed"] == seeds_needed(16 / 3, 3 ** -0.5) == 2
    assert analysis["seeds_for_5_points"] == seeds_needed(5.0, 3 ** -0.5)


def test_filter_groups_passes_through_to_the_runs_and_keeps_them_apart(compare, tmp_path):
    module, _ = compare
    out = tmp_path / "runs"
    args = argparse.Namespace(**{**vars(ARGS), "filter_groups": "outcome"})
    row = module.run_one("tiny-crafting", "grpo", 0, args, out)
    assert (out / "tiny-crafting" / "grpo-s0-outcome" / "result.json").is_file()
    assert row["config"]["rollout.filter_groups"] == "outcome" and module.setting(row) == "tiny-crafting+outcome"
    # The tiny random model never wins a Crafting task: every iteration draws up to the cap (4 × 2 tasks), keeps
    # no group and makes no update.
    assert row["sampling"] == {"mixed_share": 0.0, "update_share": 0.0, "draws": 8.0, "kept": 0.0,
                               "extra_steps_per_kept_group": None, "extra_tokens_per_kept_group": None}


def test_every_preset_builds_a_valid_config(compare):
    """A preset's settings are real config keys with valid values (a typo would only surface hours into a study)."""
    from agentrl.config import build_config

    module, _ = compare
    for name, preset in module.PRESETS.items():
        if preset["model"] == "learning-warm-start":
            continue  # bench/learning.py's recipe, built by its own code
        config = build_config(None, {**preset["config"], "model.path": "tiny-random"})
        assert config.env.name == preset["config"]["env.name"], name
        if "warm_start" in preset:
            assert {"env", "tasks", "epochs", "lr", "mode", "seed"} <= set(preset["warm_start"]), name


def test_a_fixed_training_set_is_measured_with_the_presets_attempts_and_the_start_remeasured_when_they_change(
        compare, tmp_path, monkeypatch):
    module, _ = compare
    out = tmp_path / "runs"
    learning = module._learning()
    calls = []
    real = learning.train_set_success

    def spy(path, overrides, attempts=32, seed=0):
        calls.append((Path(path).name, attempts))
        return real(path, overrides, attempts, seed)

    monkeypatch.setattr(learning, "train_set_success", spy)
    with_training_set(module, monkeypatch)
    row = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    assert calls == [("start", 2), ("model", 2)]  # the start once, then the run's final policy
    assert 0 <= row["start_train_set_success"] <= 100 and 0 <= row["final_train_set_success"] <= 100
    assert json.loads((out / "tiny-crafting" / "start-train-set.json").read_text())["attempts"] == 2
    module.run_one("tiny-crafting", "gigpo", 0, ARGS, out)
    assert calls[2:] == [("model", 2)]  # the start's measurement is reused
    monkeypatch.setitem(module.PRESETS["tiny-crafting"], "train_set_attempts", 3)
    module.run_one("tiny-crafting", "grpo", 1, ARGS, out)
    assert calls[3:] == [("start", 3), ("model", 3)]  # other attempts: the start is measured again
    preset = module.PRESETS["tiny-crafting"]
    monkeypatch.setitem(preset, "config", {**preset["config"], "env.train_tasks": 1})
    module.run_one("tiny-crafting", "grpo", 2, ARGS, out)
    assert calls[5:] == [("start", 3), ("model", 3)]  # another training set: measured again
    monkeypatch.setitem(preset, "start_train_set_attempts", 5)
    module.run_one("tiny-crafting", "grpo", 3, ARGS, out)
    assert calls[7:] == [("start", 5), ("model", 3)]  # the start measured more often than each final policy
    assert json.loads((out / "tiny-crafting" / "start-train-set.json").read_text())["attempts"] == 5


def test_older_rows_of_the_same_start_take_its_latest_training_set_measurement(compare, tmp_path, monkeypatch):
    module, _ = compare
    out = tmp_path / "runs"
    with_training_set(module, monkeypatch)
    older = module.run_one("tiny-crafting", "grpo", 0, ARGS, out)
    older = {**older, "start_train_set_success": 123.0}  # as if measured by an older, coarser start measurement
    other_env = {**older, "env": "elsewhere"}
    monkeypatch.setitem(module.PRESETS["tiny-crafting"], "start_train_set_attempts", 3)
    newer = module.run_one("tiny-crafting", "gigpo", 0, ARGS, out)
    rows = module.with_latest_start([older, other_env], {"tiny-crafting"}, out)
    assert rows[0]["start_train_set_success"] == newer["start_train_set_success"] != 123.0
    assert rows[1]["start_train_set_success"] == 123.0  # not this call's start: left as it was
    elsewhere = {**older, "start_train_set_success": 7.0, "config": {**older["config"], "env.train_tasks": 1}}
    stale = module.with_latest_start([elsewhere], {"tiny-crafting"}, out)
    assert stale[0]["start_train_set_success"] == 7.0  # another training set's start is not this row's


def test_a_committed_start_is_used_instead_of_building_one(compare, tmp_path, monkeypatch):
    module, _ = compare
    with_warm_start(module, monkeypatch)
    built = tmp_path / "built"
    grpo = module.run_one("tiny-crafting", "grpo", 0, ARGS, built)
    (warm,) = (built / "tiny-crafting").glob("warm-*")
    starts = tmp_path / "starts"
    shutil.copytree(warm, starts / "tiny-crafting" / warm.name, ignore=shutil.ignore_patterns("sft-checkpoints"))
    monkeypatch.setattr(module, "STARTS", starts)
    out = tmp_path / "elsewhere"  # another machine: nothing built there
    gigpo = module.run_one("tiny-crafting", "gigpo", 0, ARGS, out)
    assert gigpo["config"]["model.path"] == str(starts / "tiny-crafting" / warm.name / "sft")
    assert gigpo["start_model"] == grpo["start_model"] and gigpo["start_eval_success"] == grpo["start_eval_success"]
    assert not list((out / "tiny-crafting").glob("warm-*"))  # no SFT was built
