"""HFPolicy on a real (tiny, random-weight) Llama loaded through from_pretrained, with an offline tokenizer."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from tiny_model import (
    build_tiny_model,
    build_tiny_tokenizer,
    save_tiny_model,
    tiny_model_dir,
)

from agentrl.errors import AgentRLError, ConfigError, MissingDataError
from agentrl.policy import (
    PREFILL_MODES,
    GenerationConfig,
    HFPolicy,
    LoraSettings,
    choice_scores,
    choice_sequence_logliks,
    configure_cpu_threads,
    default_cpu_threads,
    token_log_probs,
)
from agentrl.policy import prefill as prefill_module

USER_TURNS = [
    "go to cabinet 1",
    "You arrive at cabinet 1. The cabinet 1 is closed. What do you do next?",
    "Your task is to: put a clean apple in the fridge. You are in the middle of a room.",
]


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread():
    """Tiny models gain nothing from threads and suffer the spin-wait trap on a shared 2-core machine."""
    previous = configure_cpu_threads(1)
    yield
    configure_cpu_threads(previous)


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy(tiny_model_dir())


@pytest.fixture(scope="module")
def prompts(policy: HFPolicy) -> list[list[int]]:
    return [policy.render([{"role": "user", "content": text}]) for text in USER_TURNS]


def reference_log_probs(policy: HFPolicy, prompt: list[int], response: list[int], temperature: float) -> list[float]:
    """An independent recomputation: one unpadded sequence through the plain model, log_softmax(logits / T)."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(response)]


# -- loading ---------------------------------------------------------------------------------------------------


def test_loads_model_and_tokenizer_from_a_folder(policy: HFPolicy) -> None:
    assert policy.model.config.num_hidden_layers == 2
    assert next(policy.model.parameters()).dtype == torch.float32
    assert policy.tokenizer.eos_token_id in policy.eos_token_ids
    assert not policy.model.training


def test_missing_model_folder_names_what_to_pass(tmp_path) -> None:
    with pytest.raises(MissingDataError, match="model=") as info:
        HFPolicy(tmp_path / "no-such-model")
    assert isinstance(info.value, AgentRLError)


def test_folder_without_config_is_not_a_model(tmp_path) -> None:
    with pytest.raises(MissingDataError, match="config.json"):
        HFPolicy(tmp_path)


def test_uncached_hub_name_fails_offline_with_a_clear_error() -> None:
    with pytest.raises(MissingDataError, match="offline"):
        HFPolicy("agentrl-tests/definitely-not-a-cached-model")


def test_model_object_needs_a_tokenizer() -> None:
    model = build_tiny_model(build_tiny_tokenizer())
    with pytest.raises(ConfigError, match="tokenizer"):
        HFPolicy(model)


def test_generation_config_validation() -> None:
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": 0}, {"max_new_tokens": 0}, {"batch_size": 0}):
        with pytest.raises(ConfigError):
            GenerationConfig(**bad)


# -- prompts ---------------------------------------------------------------------------------------------------


def test_render_applies_the_chat_template(policy: HFPolicy) -> None:
    ids = policy.render([{"role": "user", "content": "open fridge 1"}])
    assert policy.tokenizer.decode(ids) == "<|im_start|>user\nopen fridge 1<|im_end|>\n<|im_start|>assistant\n"


def test_render_falls_back_without_a_chat_template() -> None:
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = None
    policy = HFPolicy(build_tiny_model(tokenizer), tokenizer)
    ids = policy.render([{"role": "user", "content": "look"}])
    assert policy.tokenizer.decode(ids) == "user: look\nassistant: "


# -- free generation -------------------------------------------------------------------------------------------


def test_greedy_generation_is_the_same_alone_and_in_a_left_padded_batch(policy, prompts) -> None:
    config = GenerationConfig(max_new_tokens=12, temperature=0)
    batched = policy.generate(prompts, config)
    assert len({len(p) for p in prompts}) == len(prompts), "prompts of different lengths exercise the padding"
    for prompt, together in zip(prompts, batched):
        alone = policy.generate([prompt], config)[0]
        assert alone.response_ids == together.response_ids
        assert alone.prompt_ids == together.prompt_ids == prompt
        assert alone.logprobs == pytest.approx(together.logprobs, abs=1e-4)


def test_sampled_logprobs_are_those_of_the_tempered_distribution(policy, prompts) -> None:
    temperature = 0.7
    generations = policy.generate(prompts, GenerationConfig(max_new_tokens=10, temperature=temperature), seed=3)
    for prompt, generation in zip(prompts, generations):
        assert len(generation.logprobs) == len(generation.response_ids) > 0
        expected = reference_log_probs(policy, prompt, generation.response_ids, temperature)
        assert generation.logprobs == pytest.approx(expected, abs=1e-4)
    # The batched helper the learner uses agrees too.
    batched, _, mask = token_log_probs(policy.model, prompts, [g.response_ids for g in generations],
                                       temperature=temperature)
    for row, generation in enumerate(generations):
        n = len(generation.response_ids)
        assert mask[row, :n].all() and not mask[row, n:].any()
        assert batched[row, :n].tolist() == pytest.approx(generation.logprobs, abs=1e-4)


def test_sampling_is_seeded_and_varies(policy, prompts) -> None:
    config = GenerationConfig(max_new_tokens=8)
    first = policy.generate(prompts, config, seed=11)
    again = policy.generate(prompts, config, seed=11)
    assert [g.response_ids for g in first] == [g.response_ids for g in again]
    draws = {tuple(g.response_ids) for g in policy.generate([prompts[0]] * 8, config, seed=12)}
    assert len(draws) > 1
    torch.manual_seed(5)
    global_a = policy.generate(prompts, config)
    torch.manual_seed(5)
    global_b = policy.generate(prompts, config)
    assert [g.response_ids for g in global_a] == [g.response_ids for g in global_b]


def test_top_k_one_and_tiny_top_p_reduce_to_greedy(policy, prompts) -> None:
    greedy = policy.generate(prompts, GenerationConfig(max_new_tokens=6, temperature=0))
    top_k = policy.generate(prompts, GenerationConfig(max_new_tokens=6, top_k=1), seed=0)
    top_p = policy.generate(prompts, GenerationConfig(max_new_tokens=6, top_p=1e-6), seed=0)
    for g, k, p in zip(greedy, top_k, top_p):
        assert g.response_ids == k.response_ids == p.response_ids
        # The reported log-prob stays that of the untruncated tempered distribution (T = 1 here).
        assert k.logprobs == pytest.approx(g.logprobs, abs=1e-5)


def test_forward_passes_use_the_current_transformers_cache_names(policy, prompts) -> None:
    """Generation, scoring and choice scoring read and pass the KV cache by the name the installed transformers
    uses: no "past_key_values is deprecated" log line (transformers logs it once per process, so forget that)."""
    from transformers.utils import logging as hf_logging

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    root = hf_logging.get_logger("transformers")
    root.addHandler(handler)
    hf_logging.warning_once.cache_clear()
    try:
        generations = policy.generate(prompts, GenerationConfig(max_new_tokens=4, temperature=0.0))
        token_log_probs(policy.model, prompts, [g.response_ids for g in generations])
        policy.score_choices(prompts, CANDIDATES, sample=False)
    finally:
        root.removeHandler(handler)
    assert not [r for r in records if "deprecated" in r], records


def test_budget_truncation_is_flagged(policy, prompts) -> None:
    generations = policy.generate(prompts, GenerationConfig(max_new_tokens=5, temperature=0))
    for generation in generations:
        assert len(generation.response_ids) == 5
        assert generation.truncated
        assert generation.text == policy.decode(generation.response_ids)


def test_stop_token_ends_the_reply_and_is_kept(policy, prompts) -> None:
    greedy = policy.generate([prompts[0]], GenerationConfig(max_new_tokens=12, temperature=0))[0]
    stop = greedy.response_ids[2]
    first = greedy.response_ids.index(stop)
    stopped = policy.generate([prompts[0], prompts[1]],
                              GenerationConfig(max_new_tokens=12, temperature=0, stop_token_ids=(stop,)))
    assert stopped[0].response_ids == greedy.response_ids[: first + 1]
    assert not stopped[0].truncated
    assert len(stopped[0].logprobs) == first + 1


def test_end_of_turn_token_is_kept_and_skipped_in_text(policy, prompts) -> None:
    eos = policy.tokenizer.eos_token_id
    with torch.no_grad():  # make the end-of-turn token the greedy choice somewhere in the reply
        policy.model.lm_head.weight[eos].mul_(1000.0)
    try:
        generation = policy.generate([prompts[0]], GenerationConfig(max_new_tokens=8, temperature=0))[0]
    finally:
        with torch.no_grad():
            policy.model.lm_head.weight[eos].div_(1000.0)
    assert generation.response_ids[-1] == eos and eos not in generation.response_ids[:-1]
    assert len(generation.response_ids) < 8 and not generation.truncated
    assert generation.text == policy.decode(generation.response_ids[:-1])
    assert "<|im_end|>" not in generation.text


def test_long_prompts_are_left_truncated_and_flagged(policy, prompts) -> None:
    config = GenerationConfig(max_new_tokens=3, temperature=0, max_prompt_tokens=8)
    long, short = policy.generate([prompts[1], prompts[0][-8:]], config)
    assert long.prompt_truncated and long.prompt_ids == prompts[1][-8:]
    assert not short.prompt_truncated


def test_chunked_generation_keeps_the_order(policy, prompts) -> None:
    config = GenerationConfig(max_new_tokens=6, temperature=0)
    whole = policy.generate(prompts, config)
    chunked = policy.generate(prompts, GenerationConfig(max_new_tokens=6, temperature=0, batch_size=1))
    assert [g.response_ids for g in whole] == [g.response_ids for g in chunked]


# -- prefill: prefix tree without padding (CPU default) against one padded batch --------------------------------

SHARED_INSTRUCTIONS = ("You are an expert agent in a household simulated in text. Give one command at a time, "
                       "chosen among the admissible actions, inside <action> </action> tags.")


@pytest.fixture(scope="module")
def group_prompts(policy: HFPolicy) -> list[list[int]]:
    """Prompts as a rollout group makes them: a shared instruction block, identical first-step prompts, histories
    that diverge at different points, and one prompt that is a strict prefix of another."""
    def render(*turns: str) -> list[int]:
        return policy.render([{"role": "user", "content": SHARED_INSTRUCTIONS + " " + " ".join(turns)}])

    step0 = render("Your task is to: put a clean apple in the fridge.")
    longer = render("Your task is to: put a clean apple in the fridge.", "Step 1: go to cabinet 1.")
    prompts = [
        step0, step0, step0,
        longer,
        render("Your task is to: put a clean apple in the fridge.", "Step 1: go to cabinet 1.", "Step 2: look."),
        render("Your task is to: put a clean apple in the fridge.", "Step 1: open fridge 1."),
        render("Your task is to: examine the alarm clock under the desk lamp."),
        longer[:-3],  # a strict prefix of `longer`
        render("x"),
    ]
    assert any(longer[:len(p)] == p and p != longer for p in prompts)
    return prompts


def _encoded_tokens(model: torch.nn.Module) -> tuple[list[int], object]:
    """Counts the input tokens of every forward pass of ``model`` (a hook; remove the returned handle)."""
    seen: list[int] = []
    handle = _unwrapped_model(model).model.embed_tokens.register_forward_hook(
        lambda module, args, output: seen.append(int(args[0].numel())))
    return seen, handle


def _unwrapped_model(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def test_prefill_modes_are_validated() -> None:
    assert PREFILL_MODES == ("auto", "tree", "padded")
    with pytest.raises(ConfigError, match="prefill"):
        HFPolicy(tiny_model_dir(), prefill="bucketed")


def test_tree_prefill_logprobs_equal_a_full_forward_recomputation(policy, group_prompts) -> None:
    temperature = 0.7
    config = GenerationConfig(max_new_tokens=10, temperature=temperature)
    generations = policy.generate(group_prompts, config, seed=5)
    assert policy._tree_prefill_enabled()  # the CPU default
    with torch.no_grad():
        full, _, mask = token_log_probs(policy.model, [g.prompt_ids for g in generations],
                                        [g.response_ids for g in generations], temperature=temperature)
    for row, (prompt, generation) in enumerate(zip(group_prompts, generations)):
        n = len(generation.response_ids)
        assert generation.prompt_ids == prompt
        assert mask[row, :n].all() and n == len(generation.logprobs)
        assert generation.logprobs == pytest.approx(full[row, :n].tolist(), abs=1e-4)
        assert generation.logprobs == pytest.approx(
            reference_log_probs(policy, prompt, generation.response_ids, temperature), abs=1e-4)


def test_tree_prefill_greedy_equals_one_prompt_at_a_time(policy, group_prompts) -> None:
    config = GenerationConfig(max_new_tokens=12, temperature=0)
    together = policy.generate(group_prompts, config)
    for prompt, generation in zip(group_prompts, together):
        alone = policy.generate([prompt], config)[0]
        assert generation.response_ids == alone.response_ids
        assert generation.truncated == alone.truncated
        assert generation.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tree_and_padded_prefill_sample_the_same_replies(group_prompts, temperature, attention) -> None:
    tree = HFPolicy(tiny_model_dir(), prefill="tree")
    padded = HFPolicy(tiny_model_dir(), prefill="padded")
    for policy in (tree, padded):
        policy.model.set_attn_implementation(attention)
    for config in (GenerationConfig(max_new_tokens=9, temperature=temperature),
                   GenerationConfig(max_new_tokens=9, temperature=temperature, batch_size=4),
                   GenerationConfig(max_new_tokens=1, temperature=temperature)):
        a = tree.generate(group_prompts, config, seed=7)
        b = padded.generate(group_prompts, config, seed=7)
        assert [g.response_ids for g in a] == [g.response_ids for g in b]
        assert [g.truncated for g in a] == [g.truncated for g in b]
        for x, y in zip(a, b):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_tree_prefill_encodes_shared_prefixes_and_repeated_prompts_once(policy, group_prompts) -> None:
    seen, handle = _encoded_tokens(policy.model)
    try:
        policy.generate(group_prompts, GenerationConfig(max_new_tokens=1, temperature=0))
        tree_tokens = sum(seen)
        seen.clear()
        policy.generate([group_prompts[0]] * 8, GenerationConfig(max_new_tokens=1, temperature=0))
        repeated = list(seen)
    finally:
        handle.remove()
    distinct = {tuple(p) for p in group_prompts}
    assert tree_tokens < sum(len(p) for p in distinct) - len(SHARED_INSTRUCTIONS) // 2
    assert repeated == [len(group_prompts[0])]  # eight identical prompts: one forward pass over one prompt


def test_tree_prefill_falls_back_to_padding_for_caches_it_cannot_lay_out(group_prompts, monkeypatch) -> None:
    policy = HFPolicy(tiny_model_dir())
    expected = policy.generate(group_prompts, GenerationConfig(max_new_tokens=6, temperature=0))
    monkeypatch.setattr(prefill_module, "_plain_kv", lambda cache: None)
    fallback = policy.generate(group_prompts, GenerationConfig(max_new_tokens=6, temperature=0))
    assert policy._tree_prefill_supported is False and not policy._tree_prefill_enabled()
    assert [g.response_ids for g in fallback] == [g.response_ids for g in expected]


# -- admissible-action scoring ---------------------------------------------------------------------------------

CANDIDATES = [["go to cabinet 1", "open fridge 1", "look"], ["take apple 1 from countertop 1", "inventory"],
              ["examine sinkbasin 1"]]


def test_score_choices_is_a_distribution_and_matches_a_recomputation(policy, prompts) -> None:
    choices = policy.score_choices(prompts, CANDIDATES, temperature=0.8, seed=0)
    for prompt, candidates, choice in zip(prompts, CANDIDATES, choices):
        assert math.isclose(sum(choice.probs), 1.0, abs_tol=1e-5)
        assert choice.text == candidates[choice.index]
        assert choice.response_ids == choice.choice_ids[choice.index]
        assert all(ids[-1] == policy.tokenizer.eos_token_id for ids in choice.choice_ids)
        # Recompute: every (prompt, candidate) as its own full sequence, summed log-probs, tempered softmax.
        seq = torch.tensor([sum(reference_log_probs(policy, prompt, ids, 1.0)) for ids in choice.choice_ids])
        assert choice.seq_logliks == pytest.approx(seq.tolist(), abs=1e-3)
        expected = torch.log_softmax(seq / 0.8, dim=0)[choice.index].item()
        assert choice.logprob == pytest.approx(expected, abs=1e-4)
    assert len(choices[2].probs) == 1 and choices[2].logprob == pytest.approx(0.0, abs=1e-6)


def test_mean_rule_divides_each_candidates_loglik_by_its_token_count(policy, prompts) -> None:
    choices = policy.score_choices(prompts, CANDIDATES, temperature=0.7, seed=0, rule="mean")
    for choice in choices:
        assert choice.rule == "mean"
        lengths = torch.tensor([len(ids) for ids in choice.choice_ids], dtype=torch.float64)
        scores = torch.tensor(choice.seq_logliks, dtype=torch.float64) / lengths  # seq_logliks stay the plain sums
        assert choice.probs == pytest.approx(torch.softmax(scores / 0.7, dim=0).tolist(), abs=1e-5)
    # A candidate twice as long with the same per-token log-likelihood scores the same under "mean", not "sum".
    assert choice_scores(torch.tensor([-2.0, -4.0]), [1, 2], "mean").tolist() == [-2.0, -2.0]
    assert choice_scores(torch.tensor([-2.0, -4.0]), [1, 2], "sum").tolist() == [-2.0, -4.0]
    with pytest.raises(ConfigError, match="unknown choice rule 'max'; known: sum, mean"):
        policy.score_choices(prompts[:1], CANDIDATES[:1], rule="max")


def test_score_choices_greedy_and_seeded_sampling(policy, prompts) -> None:
    greedy = policy.score_choices(prompts, CANDIDATES, sample=False)
    for choice in greedy:
        assert choice.index == max(range(len(choice.probs)), key=choice.probs.__getitem__)
    a = policy.score_choices(prompts, CANDIDATES, seed=4)
    b = policy.score_choices(prompts, CANDIDATES, seed=4)
    assert [c.index for c in a] == [c.index for c in b]
    hot = policy.score_choices(prompts[:1], CANDIDATES[:1], temperature=1e3)[0]
    assert max(hot.probs) - min(hot.probs) < 0.05


def test_score_choices_sampling_follows_the_probabilities(policy, prompts) -> None:
    n = 300
    choices = policy.score_choices([prompts[0]] * n, [CANDIDATES[0]] * n, temperature=30.0, seed=0)
    probs = choices[0].probs
    counts = [sum(c.index == k for c in choices) for k in range(len(probs))]
    for p, count in zip(probs, counts):
        assert abs(count / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3


@pytest.mark.parametrize("method", ["packed", "shared_cache"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_both_scoring_methods_equal_full_sequences(policy, prompts, method, attention) -> None:
    choice_ids = [[policy.choice_token_ids(t) for t in cands] for cands in CANDIDATES]
    choice_ids[0].append([7])  # a one-token candidate beside longer ones
    previous = policy.model.config._attn_implementation
    policy.model.set_attn_implementation(attention)
    try:
        with torch.no_grad():
            scored = choice_sequence_logliks(policy.model, prompts, choice_ids, method=method)
            full = [token_log_probs(policy.model, [p] * len(ids), ids)[0].sum(dim=1)
                    for p, ids in zip(prompts, choice_ids)]
    finally:
        policy.model.set_attn_implementation(previous)
    for scores, expected in zip(scored, full):
        assert scores.tolist() == pytest.approx(expected.tolist(), abs=1e-3)


def test_packed_scoring_has_gradients(policy, prompts) -> None:
    choice_ids = [[policy.choice_token_ids(t) for t in cands] for cands in CANDIDATES]
    scores = choice_sequence_logliks(policy.model, prompts, choice_ids, method="packed")
    torch.stack([s.sum() for s in scores]).sum().backward()
    grads = [p.grad for p in policy.model.parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)


def test_batched_scoring_chunks_give_the_same_result(policy, prompts) -> None:
    whole = policy.score_choices(prompts, CANDIDATES, sample=False, batch_size=len(prompts))
    chunked = policy.score_choices(prompts, CANDIDATES, sample=False, batch_size=1)
    default = policy.score_choices(prompts, CANDIDATES, sample=False)  # one prompt per forward on CPU
    for a, b, c in zip(whole, chunked, default):
        assert a.probs == pytest.approx(b.probs, abs=1e-5)
        assert c.seq_logliks == pytest.approx(a.seq_logliks, abs=1e-4)


def test_scoring_samples_the_same_indices_however_it_is_chunked(policy, prompts) -> None:
    many, cands = prompts * 3, CANDIDATES * 3
    reference = policy.score_choices(many, cands, temperature=5.0, seed=9, batch_size=len(many))
    for batch_size in (None, 1, 2):
        chunked = policy.score_choices(many, cands, temperature=5.0, seed=9, batch_size=batch_size)
        assert [c.index for c in chunked] == [c.index for c in reference]
        for a, b in zip(chunked, reference):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_scoring_scores_repeated_prompts_once_across_chunks(policy, prompts) -> None:
    seen, handle = _encoded_tokens(policy.model)
    try:
        choices = policy.score_choices([prompts[0]] * 5 + [prompts[1]], [CANDIDATES[0]] * 5 + [CANDIDATES[1]],
                                       seed=0, batch_size=1)
    finally:
        handle.remove()
    assert len(seen) == 2 and len(choices) == 6
    assert all(c.probs == choices[0].probs for c in choices[:5])


# -- weights, LoRA, saving -------------------------------------------------------------------------------------


def test_load_weights_in_place_changes_what_is_generated(tmp_path, prompts) -> None:
    policy = HFPolicy(tiny_model_dir())
    other = HFPolicy(save_tiny_model(tmp_path / "other", seed=1))
    config = GenerationConfig(max_new_tokens=8, temperature=0)
    expected = [g.response_ids for g in other.generate(prompts, config)]
    assert [g.response_ids for g in policy.generate(prompts, config)] != expected
    policy.load_weights(other.state_dict_for_inference())
    assert [g.response_ids for g in policy.generate(prompts, config)] == expected


def test_lora_trains_only_the_adapter_and_merges_for_inference(prompts) -> None:
    policy = HFPolicy(tiny_model_dir(), lora=LoraSettings(r=4, alpha=8))
    trainable = [name for name, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert policy.num_parameters(trainable_only=True) < policy.num_parameters() / 2
    with torch.no_grad():  # give the adapter an effect (B starts at zero)
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    merged = policy.state_dict_for_inference()
    plain = HFPolicy(tiny_model_dir())
    assert set(merged) == set(plain.model.state_dict())
    plain.load_weights(merged)
    responses = [[5, 6, 7]] * len(prompts)
    with torch.no_grad():
        adapted, _, _ = token_log_probs(policy.model, prompts, responses)
        merged_lp, _, _ = token_log_probs(plain.model, prompts, responses)
        base = HFPolicy(tiny_model_dir())
        base_lp, _, _ = token_log_probs(base.model, prompts, responses)
    assert torch.allclose(adapted, merged_lp, atol=1e-4)
    assert not torch.allclose(adapted, base_lp, atol=1e-3)


def test_save_and_reload_full_model_and_adapter(tmp_path, prompts) -> None:
    config = GenerationConfig(max_new_tokens=6, temperature=0)
    policy = HFPolicy(tiny_model_dir(), lora=LoraSettings(r=4))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    expected = [g.response_ids for g in policy.generate(prompts, config)]
    adapter_dir = policy.save_pretrained(tmp_path / "adapter")
    assert (adapter_dir / "adapter_config.json").is_file()
    reloaded = HFPolicy(adapter_dir, base_model=tiny_model_dir())
    assert reloaded.is_peft
    assert [g.response_ids for g in reloaded.generate(prompts, config)] == expected
    assert any(p.requires_grad for p in reloaded.model.parameters())
    resumed = HFPolicy(tiny_model_dir(), lora=LoraSettings(r=4))
    resumed.load_adapter(adapter_dir)
    assert [g.response_ids for g in resumed.generate(prompts, config)] == expected
    with pytest.raises(ConfigError, match="LoRA settings"):
        HFPolicy(tiny_model_dir(), lora=LoraSettings(r=4, target_modules=("q_proj",))).load_adapter(adapter_dir)
    with pytest.raises(ConfigError, match="LoRA settings"):
        HFPolicy(tiny_model_dir(), lora=LoraSettings(r=8)).load_adapter(adapter_dir)
    with pytest.raises(MissingDataError):
        resumed.load_adapter(tmp_path)

    full = HFPolicy(tiny_model_dir())
    expected_full = [g.response_ids for g in full.generate(prompts, config)]
    again = HFPolicy(full.save_pretrained(tmp_path / "full"))
    assert [g.response_ids for g in again.generate(prompts, config)] == expected_full


def test_configure_cpu_threads_returns_the_previous_count() -> None:
    before = torch.get_num_threads()
    try:
        assert configure_cpu_threads(1) == before
        assert torch.get_num_threads() == 1
        assert configure_cpu_threads(None) == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError):
        configure_cpu_threads(0)


def test_default_cpu_threads_is_one_beside_env_workers_or_on_two_cores() -> None:
    assert default_cpu_threads(0, cores=2) == 1 and default_cpu_threads(0, cores=1) == 1
    assert default_cpu_threads(0, cores=8) == 8
    assert default_cpu_threads(2, cores=8) == 1
