"""The docs/spec/algorithms.md §1.4 loss by hand, and Learner.update on a real tiny Llama (full fine-tuning and LoRA)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_model import tiny_model_dir

from agentrl.errors import ConfigError
from agentrl.learner import Learner, LearnerConfig, TrainingSample, bf16_supported, ppo_token_loss
from agentrl.policy import GenerationConfig, HFPolicy, LoraSettings, configure_cpu_threads

USER_TURNS = ["go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.", "craft a plank", "look"]
CANDIDATES = [["go to cabinet 1", "open fridge 1", "look"], ["take apple 1", "inventory"]]


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread():
    """Tiny models gain nothing from threads and suffer the spin-wait trap on a shared 2-core machine."""
    previous = configure_cpu_threads(1)
    yield
    configure_cpu_threads(previous)


def fresh_policy(**kwargs) -> HFPolicy:
    return HFPolicy(tiny_model_dir(), **kwargs)


def rollout(policy: HFPolicy, advantages=(1.0, -1.0, 0.5, -0.5), choice_advantages=(1.0, -1.0),
            seed: int = 0) -> list[TrainingSample]:
    """Token rows from free generation plus scoring-mode rows, as the trainer would build them."""
    prompts = [policy.render([{"role": "user", "content": text}]) for text in USER_TURNS]
    generations = policy.generate(prompts, GenerationConfig(max_new_tokens=8), seed=seed)
    samples = [TrainingSample.from_generation(g, a) for g, a in zip(generations, advantages)]
    choices = policy.score_choices(prompts[:2], CANDIDATES, seed=seed)
    samples += [TrainingSample.from_choice(c, a) for c, a in zip(choices, choice_advantages)]
    return samples


def weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in policy.model.named_parameters()}


def exact_config(**overrides) -> LearnerConfig:
    """fp32 compute so that numbers can be compared tightly."""
    base = {"bf16": False, "mini_batch_size": 64, "micro_batch_size": 4}
    base.update(overrides)
    return LearnerConfig(**base)


# -- the loss by hand --------------------------------------------------------------------------------------------


def test_ratio_one_gives_minus_mean_advantage() -> None:
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.9, 0.3]]))
    advantages = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, stats = ppo_token_loss(logprobs, logprobs.clone(), logprobs.clone(), advantages, mask)
    # 5 tokens: A = 2, 2, 2, -1, -1 → -mean(A) = -(6 - 2) / 5 = -0.8; KL(π, π) = 0; no entropy given.
    assert loss.item() == pytest.approx(-0.8, abs=1e-6)
    assert stats["pg_loss"] == pytest.approx(-0.8, abs=1e-6)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-7)
    assert stats["clip_frac"] == 0.0 and stats["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert stats["ratio_mean"] == pytest.approx(1.0)

    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])  # the masked 100 must not count
    loss, stats = ppo_token_loss(logprobs, logprobs.clone(), None, advantages, mask, entropy)
    assert stats["entropy"] == pytest.approx(3.0)
    assert loss.item() == pytest.approx(-0.8 - 0.001 * 3.0, abs=1e-6)


def test_row_advantages_broadcast_to_tokens() -> None:
    logprobs = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    loss, _ = ppo_token_loss(logprobs, logprobs, None, torch.tensor([1.0, -2.0]), mask)
    assert loss.item() == pytest.approx(-(1 + 1 + 1 - 2) / 4)


def test_clipping_and_dual_clip_cases() -> None:
    # (A, ρ) → l_pg:
    #   ( 1, 1.5): max(-1.5, -1.2) = -1.2   clipped (ρ above 1 + ε_high)
    #   ( 1, 0.5): max(-0.5, -0.8) = -0.5   not clipped (a positive advantage may pull ρ back up)
    #   (-1, 0.5): max( 0.5,  0.8) =  0.8   clipped (ρ below 1 − ε_low)
    #   (-1, 1.5): max( 1.5,  1.2) =  1.5   not clipped
    #   (-1, 5.0): max( 5.0,  1.2) =  5.0 → dual clip min(5.0, 3·1) = 3.0
    #   (-2, 4.0): max( 8.0,  2.4) =  8.0 → dual clip min(8.0, 3·2) = 6.0
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, -2.0])
    ratios = torch.tensor([1.5, 0.5, 0.5, 1.5, 5.0, 4.0])
    old = torch.log(torch.tensor([0.2, 0.4, 0.4, 0.2, 0.1, 0.1]))
    new = old + torch.log(ratios)
    expected = torch.tensor([-1.2, -0.5, 0.8, 1.5, 3.0, 6.0])
    loss, stats = ppo_token_loss(new, old, None, advantages, torch.ones(6), kl_coef=0.0, entropy_coef=0.0)
    assert loss.item() == pytest.approx(expected.mean().item(), abs=1e-5)
    # The clipped branch wins the max for tokens 1 and 3; the dual clip caps tokens 5 and 6.
    assert stats["clip_frac"] == pytest.approx(2 / 6)
    assert stats["dual_clip_frac"] == pytest.approx(2 / 6)
    assert stats["approx_kl"] == pytest.approx(-torch.log(ratios).mean().item(), abs=1e-6)

    no_dual, _ = ppo_token_loss(new, old, None, advantages, torch.ones(6), dual_clip=None, kl_coef=0.0,
                                entropy_coef=0.0)
    assert no_dual.item() == pytest.approx(torch.tensor([-1.2, -0.5, 0.8, 1.5, 5.0, 8.0]).mean().item(), abs=1e-5)

    higher, _ = ppo_token_loss(new[:1], old[:1], None, advantages[:1], torch.ones(1), clip_high=0.28,
                               kl_coef=0.0, entropy_coef=0.0)
    assert higher.item() == pytest.approx(-1.28, abs=1e-6)


def test_low_var_kl_values_and_clamp() -> None:
    logprobs = torch.log(torch.tensor([0.5, 0.5, 1e-12]))
    ref = torch.log(torch.tensor([0.25, 0.5, 0.9]))
    # k3 = e^(ref − new) − (ref − new) − 1:  0.5 + ln 2 − 1,  0,  and a huge value clamped to 10.
    k3 = [0.5 + math.log(2) - 1, 0.0, 10.0]
    loss, stats = ppo_token_loss(logprobs, logprobs.clone(), ref, torch.zeros(3), torch.ones(3), kl_coef=0.5,
                                 entropy_coef=0.0)
    assert stats["kl"] == pytest.approx(sum(k3) / 3, abs=1e-5)
    assert loss.item() == pytest.approx(0.5 * sum(k3) / 3, abs=1e-5)


def test_gradient_at_ratio_one_is_minus_advantage_over_token_count() -> None:
    logprobs = torch.log(torch.tensor([0.3, 0.6, 0.1, 0.7])).requires_grad_()
    advantages = torch.tensor([1.0, -2.0, 0.5, 3.0])
    mask = torch.tensor([1, 1, 1, 0])
    loss, _ = ppo_token_loss(logprobs, logprobs.detach().clone(), None, advantages, mask, kl_coef=0.0,
                             entropy_coef=0.0)
    loss.backward()
    assert logprobs.grad.tolist() == pytest.approx([-1 / 3, 2 / 3, -0.5 / 3, 0.0], abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 5), st.floats(0.81, 1.19), st.booleans()), min_size=1, max_size=12),
       st.floats(-100, 100))
def test_inside_the_trust_region_the_loss_is_the_plain_surrogate(tokens, garbage) -> None:
    """With every ratio inside [1 − ε, 1 + ε] nothing is clipped; masked-out entries never matter."""
    advantages = torch.tensor([t[0] for t in tokens], dtype=torch.float64)
    ratios = torch.tensor([t[1] for t in tokens], dtype=torch.float64)
    mask = torch.tensor([t[2] for t in tokens])
    old = torch.full_like(ratios, -1.0)
    new = old + torch.log(ratios)
    loss, stats = ppo_token_loss(new, old, None, advantages, mask, kl_coef=0.0, entropy_coef=0.0)
    expected = (-advantages * ratios)[mask].mean().item() if mask.any() else 0.0
    assert loss.item() == pytest.approx(expected, abs=1e-9)
    assert stats["clip_frac"] == 0.0
    noisy = torch.where(mask, new, torch.full_like(new, garbage))
    assert ppo_token_loss(noisy, old, None, advantages, mask, kl_coef=0.0, entropy_coef=0.0)[0].item() == \
        pytest.approx(loss.item(), abs=1e-9)


# -- configuration ---------------------------------------------------------------------------------------------


def test_config_defaults_follow_the_spec() -> None:
    config = LearnerConfig()
    assert (config.lr, config.weight_decay, config.grad_clip) == (1e-6, 0.01, 1.0)
    assert (config.clip_low, config.clip_high, config.dual_clip) == (0.2, 0.2, 3.0)
    assert (config.kl_coef, config.entropy_coef) == (0.01, 0.001)
    assert (config.mini_batch_size, config.micro_batch_size, config.ppo_epochs) == (256, 32, 1)
    for bad in ({"lr": -1}, {"dual_clip": 1.0}, {"micro_batch_size": 0}, {"bf16": "yes"},
                {"token_mean_scope": "sequence"}, {"clip_low": 1.0}):
        with pytest.raises(ConfigError):
            LearnerConfig(**bad)


def test_sample_validation() -> None:
    with pytest.raises(ValueError, match="old log-probs"):
        TrainingSample([1, 2], [3, 4], [0.0], 1.0).validate()
    with pytest.raises(ValueError, match="choice_index"):
        TrainingSample([1, 2], [3], [0.0], 1.0, choice_ids=[[3]], choice_index=2).validate()


# -- updates ---------------------------------------------------------------------------------------------------


def test_update_changes_weights_and_reports_finite_stats() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    before = weights(policy)
    learner = Learner(policy, exact_config(lr=1e-3, mini_batch_size=3, micro_batch_size=2))
    stats = learner.update(samples)
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "grad_norm", "lr", "n_tokens",
                "skipped_steps", "optimizer_steps"):
        assert math.isfinite(stats[key]), key
    assert stats["optimizer_steps"] == 2 and stats["skipped_steps"] == 0
    assert stats["n_tokens"] == sum(len(s.response_ids) for s in samples[:4]) + 2
    assert stats["lr"] == 1e-3
    after = weights(policy)
    assert all(not torch.equal(before[name], after[name]) for name in before)


def test_first_step_starts_on_policy() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    stats = Learner(policy, exact_config(lr=1e-3)).update(samples)  # one mini-batch: one step, before any change
    assert stats["optimizer_steps"] == 1
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-4)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["clip_frac"] == 0.0


def test_zero_learning_rate_changes_nothing() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    before = weights(policy)
    stats = Learner(policy, exact_config(lr=0.0, mini_batch_size=2)).update(samples)
    assert stats["optimizer_steps"] == 3 and math.isfinite(stats["loss"])
    after = weights(policy)
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_non_finite_loss_skips_the_step() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    samples[1].advantage = float("nan")
    before = weights(policy)
    stats = Learner(policy, exact_config(lr=1e-3, shuffle=False, mini_batch_size=3)).update(samples)
    assert stats["skipped_steps"] == 1 and stats["optimizer_steps"] == 1
    assert math.isfinite(stats["loss"])
    samples = rollout(policy)
    samples[0].old_logprobs[0] = float("nan")
    policy_before = weights(policy)
    stats = Learner(policy, exact_config(lr=1e-3)).update(samples)
    assert stats["skipped_steps"] == 1 and stats["optimizer_steps"] == 0
    assert all(torch.equal(policy_before[n], p) for n, p in weights(policy).items())
    assert before.keys() == policy_before.keys()


def test_a_step_moves_the_log_probability_in_the_direction_of_the_advantage() -> None:
    policy = fresh_policy()
    token_row, choice_row = rollout(policy)[0], rollout(policy)[-1]
    for sample in (token_row, choice_row):
        for advantage in (1.0, -1.0):
            sample.advantage = advantage
            learner = Learner(policy, exact_config(lr=1e-4, kl_coef=0.0, entropy_coef=0.0))
            before = sum(learner.compute_log_probs([sample])[0])
            learner.update([sample])
            after = sum(learner.compute_log_probs([sample])[0])
            assert advantage * (after - before) > 0, (sample.is_choice, advantage)


def test_choice_rows_use_the_candidate_softmax() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    learner = Learner(policy, exact_config(temperature=1.0))
    recomputed = learner.compute_log_probs(samples)
    for sample, values in zip(samples, recomputed):
        assert values == pytest.approx(sample.old_logprobs, abs=1e-4)
        if sample.is_choice:
            assert len(values) == 1 and values[0] <= 0.0


def test_choice_rows_recompute_the_rule_they_were_scored_by() -> None:
    """Rows scored by the per-token mean and by the sum, in one batch, each recompute their own policy: the mean
    rule's old log-probs differ from the sum's on the same prompt, and the learner reproduces both."""
    policy = fresh_policy()
    prompts = [policy.render([{"role": "user", "content": text}]) for text in USER_TURNS[:2]]
    by_mean = policy.score_choices(prompts, CANDIDATES, sample=False, rule="mean")
    by_sum = policy.score_choices(prompts, CANDIDATES, sample=False, rule="sum")
    samples = [TrainingSample.from_choice(c, 1.0) for c in by_mean + by_sum]
    assert [s.choice_rule for s in samples] == ["mean", "mean", "sum", "sum"]
    assert not math.isclose(by_mean[0].probs[0], by_sum[0].probs[0], abs_tol=1e-3)
    recomputed = Learner(policy, exact_config(temperature=1.0)).compute_log_probs(samples)
    for sample, values in zip(samples, recomputed):
        assert values == pytest.approx(sample.old_logprobs, abs=1e-4)


def test_generation_sees_the_updated_weights() -> None:
    policy = fresh_policy()
    learner = Learner(policy, exact_config(lr=1e-2))
    assert learner.model is policy.model
    learner.update(rollout(policy))
    fresh = rollout(policy, seed=1)
    recomputed = learner.compute_log_probs(fresh)
    for sample, values in zip(fresh, recomputed):
        assert values == pytest.approx(sample.old_logprobs, abs=1e-4)


def test_micro_batching_is_a_memory_knob_with_mini_batch_token_mean() -> None:
    samples = rollout(fresh_policy())
    results = []
    for micro in (1, 6):
        config = exact_config(lr=1e-3, micro_batch_size=micro, token_mean_scope="mini_batch")
        results.append(Learner(fresh_policy(), config).update(samples))
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-4, abs=1e-6), key


def test_token_mean_scopes_weight_micro_batches_as_documented() -> None:
    """micro_batch (verl, default): mean of the micro-batch token means; mini_batch: one token mean."""
    samples = rollout(fresh_policy())[:2]
    samples[1].response_ids, samples[1].old_logprobs = samples[1].response_ids[:3], samples[1].old_logprobs[:3]
    n1, n2 = len(samples[0].response_ids), len(samples[1].response_ids)
    assert n1 != n2

    probe = Learner(fresh_policy(), exact_config(lr=0.0))
    grads = []
    for sample in samples:
        probe.optimizer.zero_grad()
        loss, _ = probe._micro_batch_loss([sample], torch.tensor(sample.old_logprobs))
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in probe.parameters]))
    expected = {"micro_batch": (grads[0] + grads[1]) / 2, "mini_batch": (n1 * grads[0] + n2 * grads[1]) / (n1 + n2)}

    for scope, gradient in expected.items():
        config = exact_config(lr=0.0, micro_batch_size=1, shuffle=False, grad_clip=None, token_mean_scope=scope)
        stats = Learner(fresh_policy(), config).update(samples)
        assert stats["grad_norm"] == pytest.approx(gradient.norm().item(), rel=1e-4), scope


def test_micro_batches_group_rows_by_width_without_changing_the_step() -> None:
    """Scoring rows (one loss token each) under verl's micro-batch token mean: 10 rows in micro-batches of 4. The
    full micro-batches regroup the shuffle's first 8 rows by width (less padding, and a packed row's attention is
    quadratic in its width); the short one keeps the shuffle's last 2, which that mean weighs double; so the step
    is the one over the shuffled micro-batches, computed here by hand."""
    policy = fresh_policy()
    texts = [" ".join(USER_TURNS[:1 + i % 4]) + " step" * (3 * i) for i in range(10)]
    prompts = [policy.render([{"role": "user", "content": text}]) for text in texts]
    pool = CANDIDATES[0] + CANDIDATES[1]
    candidates = [pool[:1 + (7 * i) % 5] for i in range(10)]
    choices = policy.score_choices(prompts, candidates, seed=0)
    samples = [TrainingSample.from_choice(c, a) for c, a in zip(choices, [1.0, -1.0, 0.5, -0.5, 2.0] * 2)]
    config = exact_config(lr=0.0, mini_batch_size=10, micro_batch_size=4, grad_clip=None, seed=3)

    order = torch.randperm(10, generator=torch.Generator().manual_seed(3)).tolist()
    [micro_batches] = Learner(fresh_policy(), config)._mini_batches(samples)
    assert [len(m) for m in micro_batches] == [4, 4, 2]
    assert micro_batches[2] == order[8:]
    regrouped = micro_batches[0] + micro_batches[1]
    assert sorted(regrouped) == sorted(order[:8])
    widths = [samples[i].width for i in regrouped]
    assert widths == sorted(widths) and widths != [samples[i].width for i in order[:8]]

    probe = Learner(fresh_policy(), config)
    gradient = 0
    for micro in (order[:4], order[4:8], order[8:]):
        probe.optimizer.zero_grad()
        batch = [samples[i] for i in micro]
        loss, _ = probe._micro_batch_loss(batch, torch.tensor([s.old_logprobs[0] for s in batch]))
        (loss / 3).backward()  # the mean of the 3 micro-batch token means
        gradient = gradient + torch.cat([p.grad.flatten() for p in probe.parameters])
    stats = Learner(fresh_policy(), config).update(samples)
    assert stats["grad_norm"] == pytest.approx(gradient.norm().item(), rel=1e-5)


def test_reference_is_the_initial_model() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    initial = Learner(HFPolicy(tiny_model_dir()), exact_config()).compute_log_probs(samples)
    learner = Learner(policy, exact_config(lr=1e-2))
    learner.update(samples)
    reference = learner.compute_log_probs(samples, reference=True)
    current = learner.compute_log_probs(samples)
    for ref, init, cur in zip(reference, initial, current):
        assert ref == pytest.approx(init, abs=1e-5)
    assert any(abs(a - b) > 1e-3 for ref, cur in zip(reference, current) for a, b in zip(ref, cur))
    assert Learner(fresh_policy(), exact_config(kl_coef=0.0))._reference_model is None


def test_lora_trains_only_the_adapter_and_references_the_base_model() -> None:
    policy = fresh_policy(lora=LoraSettings(r=4, alpha=8))
    samples = rollout(policy)
    before = weights(policy)
    learner = Learner(policy, exact_config(lr=1e-2))
    assert all(p.requires_grad == ("lora_" in n) for n, p in policy.model.named_parameters())
    stats = learner.update(samples)
    assert math.isfinite(stats["loss"])
    after = weights(policy)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all("lora_" in name for name in changed)
    assert any("lora_B" in name for name in changed)

    base = HFPolicy(tiny_model_dir())
    base_logprobs = Learner(base, exact_config()).compute_log_probs(samples)
    reference = learner.compute_log_probs(samples, reference=True)
    current = learner.compute_log_probs(samples)
    for ref, expected in zip(reference, base_logprobs):
        assert ref == pytest.approx(expected, abs=1e-5)
    assert any(abs(a - b) > 1e-3 for ref, cur in zip(reference, current) for a, b in zip(ref, cur))


def test_bf16_autocast_update_is_finite_and_recomputes_old_logprobs() -> None:
    policy = fresh_policy()
    samples = rollout(policy)
    learner = Learner(policy, LearnerConfig(bf16=True, lr=1e-3, mini_batch_size=64, micro_batch_size=4))
    assert learner.autocast and learner.recompute_old
    stats = learner.update(samples)
    assert math.isfinite(stats["loss"]) and stats["optimizer_steps"] == 1
    # Old log-probs recomputed under the same autocast: the single step starts exactly on-policy.
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert isinstance(bf16_supported("cpu"), bool)


def test_state_dict_round_trip_resumes_exactly(tmp_path) -> None:
    config = exact_config(lr=1e-3, mini_batch_size=3, micro_batch_size=2)
    first = fresh_policy()
    batch_one, batch_two = rollout(first, seed=0), rollout(first, seed=1)

    uninterrupted = Learner(first, config)
    uninterrupted.update(batch_one)
    uninterrupted.update(batch_two)

    interrupted_policy = fresh_policy()
    interrupted = Learner(interrupted_policy, config)
    interrupted.update(batch_one)
    interrupted_policy.save_pretrained(tmp_path / "model")
    torch.save(interrupted.state_dict(), tmp_path / "learner.pt")

    resumed_policy = HFPolicy(tmp_path / "model")
    # The reference stays the *initial* model across a resume: pass the original model.
    resumed = Learner(resumed_policy, config, reference=tiny_model_dir())
    resumed.load_state_dict(torch.load(tmp_path / "learner.pt", weights_only=True))
    assert resumed.num_updates == 1
    resumed.update(batch_two)
    expected = weights(first)
    for name, value in weights(resumed_policy).items():
        assert torch.allclose(value, expected[name], atol=1e-6), name


@pytest.mark.filterwarnings("error:.*checkpointing.*deprecated:FutureWarning")
def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    samples = rollout(fresh_policy())
    norms = []
    for checkpointing in (False, True):
        config = exact_config(lr=0.0, grad_clip=None, gradient_checkpointing=checkpointing)
        learner = Learner(fresh_policy(), config)
        # The decoder layers really recompute their activations (the flag transformers sets on the model).
        assert any(getattr(m, "gradient_checkpointing", False) for m in learner.model.modules()) == checkpointing
        norms.append(learner.update(samples)["grad_norm"])
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)


def test_lora_refuses_an_explicit_reference() -> None:
    with pytest.raises(ConfigError, match="adapter disabled"):
        Learner(fresh_policy(lora=LoraSettings(r=2)), exact_config(), reference=tiny_model_dir())


def test_skip_zero_advantage_leaves_zero_rows_out_and_keeps_the_signal() -> None:
    """Rows of advantage 0 are dropped (the step equals the one taken on the non-zero rows alone); an update
    whose rows are all 0 takes no step and reports finite statistics."""
    policy = fresh_policy()
    samples = rollout(policy, advantages=(1.0, 0.0, 0.5, 0.0), choice_advantages=(0.0, -1.0))
    before = weights(policy)
    config = {"lr": 1e-2, "kl_coef": 0.0, "entropy_coef": 0.0, "shuffle": False}
    stats = Learner(policy, exact_config(skip_zero_advantage=True, **config)).update(samples)
    assert stats["n_samples"] == 3 and stats["zero_advantage_rows_skipped"] == 3
    after_skip = weights(policy)
    assert any(not torch.equal(before[name], after_skip[name]) for name in before)

    policy.model.load_state_dict(before, strict=False)
    Learner(policy, exact_config(**config)).update([s for s in samples if s.advantage != 0.0])
    for name, value in weights(policy).items():
        torch.testing.assert_close(value, after_skip[name])

    policy.model.load_state_dict(before, strict=False)
    for sample in samples:
        sample.advantage = 0.0
    stats = Learner(policy, exact_config(skip_zero_advantage=True, **config)).update(samples)
    assert stats["optimizer_steps"] == 0 and stats["n_samples"] == 0
    assert all(math.isfinite(v) for v in stats.values())
    assert all(torch.equal(before[name], value) for name, value in weights(policy).items())
