"""The ReAct agent: prompts on real observations of the built-in env, history, fallback, parsing (docs/spec/algorithms.md
§1.3, §1.5), admissible-action candidates, family detection, and rendering through a real chat template."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentrl.envs as envs
from agentrl.agents import ParsedReply, ReActAgent, parse_reply
from agentrl.errors import AgentRLError, UnknownNameError

CLOSING_ACTION_ONLY = "Reply with exactly one admissible action inside <action> </action> tags"


def quoted(actions):
    return [f"'{a}'" for a in actions]


@pytest.fixture
def crafting():
    return envs.make("crafting", expert=True)


def start(env, task_index=2):  # train/00002 takes the expert 13 steps
    return env.reset(options={"split": "train", "task_index": task_index})


def play_expert(env, agent, index, obs, info, steps):
    """Play ``steps`` expert actions through the agent's reply format; returns the latest (obs, info)."""
    for _ in range(steps):
        reply = f"<think>the expert says so</think><action>{info['expert_action']}</action>"
        parsed = agent.parse(reply)
        assert parsed.valid
        agent.record(index, obs, parsed.action)
        obs, _, terminated, truncated, info = env.step(parsed.action)
        assert not (terminated or truncated)
    return obs, info


# ----------------------------------------------------------------------------------------------- prompts
def test_first_step_prompt_from_the_real_env(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting")
    agent.reset(1)
    messages = agent.messages(0, obs, info)

    assert [m["role"] for m in messages] == ["user"]  # one user message, no system prompt (docs/spec/algorithms.md §1.5)
    text = messages[0]["content"]
    assert obs in text
    assert "You have already taken" not in text and "[Observation" not in text
    # The first observation states the task: it is not repeated.
    assert text.count(info["instruction"]) == 1
    listing = text[text.index("Your admissible actions"):]
    for action in quoted(info["admissible_actions"]):
        assert action in listing
    assert "'go to forest'\n 'go to mine'" in listing  # the reference layout: quoted, joined by newline + space
    assert "<think> </think>" in text and "<action> </action>" in text
    assert text.rstrip().endswith("<action> </action> tags.")


def test_help_is_not_listed():
    agent = ReActAgent("alfworld")
    agent.reset(1)
    info = {"admissible_actions": ["go to desk 1", "help", "inventory"], "instruction": "put a pen on the desk"}
    text = agent.prompt(0, "You are in a room. Your task is to: put a pen on the desk.", info)
    assert "'help'" not in text
    assert "'go to desk 1'\n 'inventory'" in text


@pytest.mark.parametrize("k", [1, 2, 3])
def test_history_shows_the_last_k_steps(crafting, k):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", history_length=k)
    agent.reset(1)
    seen = []
    for _ in range(5):
        seen.append((obs, info["expert_action"]))
        obs, info = play_expert(crafting, agent, 0, obs, info, 1)
    text = agent.prompt(0, obs, info)

    assert "You have already taken 5 step(s)" in text
    assert f"Here are the last {k}," in text
    assert "You are now at step 6. Your current observation is: " + obs in text
    assert f"Your task is to: {info['instruction']}\n" in text
    for number in range(1, 6):
        line = f"[Observation {number}: '{seen[number - 1][0]}', Action {number}: '{seen[number - 1][1]}']"
        assert (line in text) == (number > 5 - k), number
    lines = [line for line in text.splitlines() if line.startswith("[Observation ")]
    assert [int(line.split()[1].rstrip(":")) for line in lines] == list(range(6 - k, 6))


def test_history_before_k_steps_shows_what_there_is(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", history_length=2)
    agent.reset(1)
    first_obs, first_action = obs, info["expert_action"]
    obs, info = play_expert(crafting, agent, 0, obs, info, 1)
    text = agent.prompt(0, obs, info)
    assert "You have already taken 1 step(s). Here are the last 1," in text
    assert f"[Observation 1: '{first_obs}', Action 1: '{first_action}']" in text
    assert "You are now at step 2." in text


def test_crafting_repeats_the_recipes_once_they_scroll_out(crafting):
    obs, info = start(crafting)
    first = obs
    agent = ReActAgent("crafting", history_length=1)
    agent.reset(1)
    obs, info = play_expert(crafting, agent, 0, obs, info, 1)
    assert agent.prompt(0, obs, info).count("Recipes you know") == 1  # still in the history line
    obs, info = play_expert(crafting, agent, 0, obs, info, 1)
    text = agent.prompt(0, obs, info)
    assert f"At the start of this episode you observed:\n{first}\n" in text
    assert "[Observation 1:" not in text

    generic = ReActAgent("generic", history_length=1)
    generic.reset(1)
    generic.record(0, first, "go to mine")
    generic.record(0, "You arrive at the mine.", "gather coal")
    assert "Recipes you know" not in generic.prompt(0, "You gather coal.", info)


def test_action_memory_lists_the_actions_older_than_the_history(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", history_length=2, action_memory=3)
    reference = ReActAgent("crafting", history_length=2)
    agent.reset(1)
    reference.reset(1)
    actions = []
    for steps in range(1, 7):
        actions.append(info["expert_action"])
        reference.record(0, obs, actions[-1])
        obs, info = play_expert(crafting, agent, 0, obs, info, 1)
        text, plain = agent.prompt(0, obs, info), reference.prompt(0, obs, info)
        if steps <= 2:  # everything is still in the history: the reference prompt
            assert text == plain
        elif steps == 3:
            assert f"You have already taken 3 step(s). Your action at step 1 was: {actions[0]}. Here are" in text
        else:  # at most 3 of the older actions, the most recent ones, in order
            older = actions[:-2][-3:]
            first = steps - 2 - len(older) + 1
            assert (f"Your actions at steps {first}-{steps - 2} were: {'; '.join(older)}. Here are the last 2,"
                    in text)
            assert text.replace(f" Your actions at steps {first}-{steps - 2} were: {'; '.join(older)}.", "") == plain


def test_list_actions_off_drops_only_the_action_list_and_keeps_the_candidates(crafting):
    obs, info = start(crafting)
    listed, bare = ReActAgent("crafting", think=False), ReActAgent("crafting", think=False, list_actions=False)
    for agent in (listed, bare):
        agent.reset(1)
    for step in range(4):  # the no-history prompt first, then history prompts
        full, short = listed.prompt(0, obs, info), bare.prompt(0, obs, info)
        section = full[full.index("Your admissible actions"):full.index("\n\nNow choose")] + "\n"
        assert "Your admissible actions" not in short and len(short) < len(full)
        assert short == full.replace(section, "")  # nothing else changes, and no empty line is left behind
        assert obs in short and short.rstrip().endswith("and nothing else.")
        assert bare.candidates(info) == listed.candidates(info) and bare.candidate_actions(info)
        for agent in (listed, bare):
            agent.record(0, obs, info["expert_action"])
        obs, _, _, _, info = crafting.step(info["expert_action"])


def test_history_length_zero_never_shows_history(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", history_length=0)
    agent.reset(1)
    obs, info = play_expert(crafting, agent, 0, obs, info, 3)
    text = agent.prompt(0, obs, info)
    assert "[Observation" not in text and "You have already taken" not in text
    # Later observations do not state the task, so the no-history template does.
    assert f"Your task is to: {info['instruction']}\n" in text


def test_falls_back_to_no_history_above_the_char_limit(crafting):
    obs, info = start(crafting)
    roomy = ReActAgent("crafting", max_history_chars=10**9)
    roomy.reset(1)
    obs, info = play_expert(crafting, roomy, 0, obs, info, 3)
    with_history = roomy.prompt(0, obs, info)
    assert "[Observation 3:" in with_history

    at_limit = ReActAgent("crafting", max_history_chars=len(with_history))
    below_limit = ReActAgent("crafting", max_history_chars=len(with_history) - 1)
    for agent in (at_limit, below_limit):
        agent.reset(1)
        for observation, action in roomy.history(0):
            agent.record(0, observation, action)
    assert at_limit.prompt(0, obs, info) == with_history
    fallback = below_limit.prompt(0, obs, info)
    assert "[Observation" not in fallback and "You have already taken" not in fallback
    assert obs in fallback and f"Your task is to: {info['instruction']}" in fallback
    assert "Recipes you know" in fallback  # crafting keeps its recipes even without history


def test_default_limit_is_13000_chars_and_a_huge_step_triggers_it(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("generic")
    assert agent.max_history_chars == 13_000
    agent.reset(1)
    agent.record(0, obs + " x" * 7_000, "look")
    text = agent.prompt(0, obs, info)
    assert len(text) < 13_000 and "[Observation" not in text


def test_task_from_instruction_or_parsed_from_the_observation():
    agent = ReActAgent("alfworld")
    agent.reset(2)
    first = "-= Welcome =-\nYou are in the middle of a room.\n\nYour task is to: put a clean cloth in bathtubbasin."
    no_instruction = {"admissible_actions": ["go to bathtubbasin 1"]}
    agent.record(0, first, "go to bathtubbasin 1")
    text = agent.prompt(0, "You arrive at bathtubbasin 1.", no_instruction)
    assert "Your task is to: put a clean cloth in bathtubbasin.\n" in text

    text = agent.prompt(1, "You are somewhere.", {"instruction": "heat an egg", "admissible_actions": []})
    assert "Your task is to: heat an egg\n" in text
    assert "No list of admissible actions is given" in text


def test_reset_forgets_earlier_episodes(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting")
    agent.reset(2)
    obs2, info2 = play_expert(crafting, agent, 1, obs, info, 2)
    assert agent.history(1) and not agent.history(0)
    agent.reset(2)
    assert agent.history(1) == []
    assert "[Observation" not in agent.prompt(1, obs2, info2)
    with pytest.raises(AgentRLError, match="out of range"):
        agent.prompt(2, obs, info)


def test_no_think_mode_asks_for_the_action_only(crafting):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", think=False)
    agent.reset(1)
    text = agent.prompt(0, obs, info)
    assert CLOSING_ACTION_ONLY in text
    assert "<think>" not in text


def test_webshop_page_and_action_list():
    agent = ReActAgent("webshop")
    agent.reset(1)
    goal = "i need a red cotton shirt under 30 dollars"
    page = f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] B01"
    info = {
        "instruction": goal,
        "available_actions": {"has_search_bar": True, "clickables": ["back to search", "next >", "b01"]},
    }
    text = agent.prompt(0, page, info)
    assert "Your current observation is: 'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'B01'\n" in text
    assert "[\n'search[<your query>]',\n'click[back to search]',\n'click[next >]',\n'click[b01]',\n]" in text
    assert f"Your task is to: {goal}\n" in text
    assert "closest to buying the requested product" in text

    # The same list from a plain admissible_actions list, bare clickables wrapped in click[...].
    listed = ["search[<query>]", "click[back to search]", "next >", "help"]
    text = agent.prompt(0, page, {"instruction": goal, "admissible_actions": listed})
    assert "'search[<your query>]',\n'click[back to search]',\n'click[next >]',\n]" in text
    # No instruction in info: taken from the page.
    agent.reset(1)
    assert f"Your task is to: {goal}\n" in agent.prompt(0, page, {"admissible_actions": listed})


def test_webshop_prompts_on_the_real_env(shared_data):
    """A whole expert episode on the real WebShop env, played through the agent's prompts and parser."""
    env = envs.make("webshop", data_dir=shared_data / "webshop", expert=True)
    obs, info = env.reset(options={"split": "eval", "task_index": 0})
    agent = ReActAgent.for_env("webshop", think=False)
    agent.reset(1)
    assert agent.prompt(0, obs, info).count(info["instruction"]) == 1
    for step in range(1, 16):
        text = agent.prompt(0, obs, info)
        page_parts = obs.split(" [SEP] ")
        after_goal = page_parts[page_parts.index(info["instruction"]) + 1:]
        assert "Your current observation is: " + " [SEP] ".join(f"'{p}'" for p in after_goal) + "\n" in text
        for action in info["admissible_actions"]:
            assert f"\n'{action}',\n" in text
        if step > 1:
            assert f"You are now at step {step}." in text
        candidates = agent.candidate_actions(info)
        assert [agent.parse(c).action for c in agent.candidates(info)] == candidates
        assert all(not a.startswith("search[<") for a in candidates)
        parsed = agent.parse(f"<action>{info['expert_action']}</action>")
        assert parsed.valid
        agent.record(0, obs, parsed.action)
        obs, reward, terminated, truncated, info = env.step(parsed.action)
        if terminated or truncated:
            break
    assert info["won"] and reward > 0


# ----------------------------------------------------------------------------------------------- parsing (docs/spec/algorithms.md §1.3)
PARSE_CASES = [
    # (reply, expected action, valid in think mode, valid in no-think mode)
    ("<think>I need coal.</think><action>Go To Mine</action>", "go to mine", True, True),
    ("<think>x</think>\n<action>  gather coal \n</action>", "gather coal", True, True),
    ("<action>look</action>", "look", False, True),  # missing think
    ("<think>x</think>", "x", False, False),  # missing action: the tail, tags blanked
    ("<think>x</think><ACTION>Open Drawer 1</ACTION>", "open drawer 1", True, True),  # action tags: any case
    ("<THINK>x</THINK><action>look</action>", "look", False, True),  # think tags: case-sensitive
    ("<think>我想</think><action>look</action>", "look", False, False),  # CJK U+4E00-U+9FFF
    ("<think>\u9fff</think><action>look</action>", "look", False, False),
    ("<think>\u4dff \ua000 ぁ é</think><action>look</action>", "look", True, True),  # just outside the range
    ("<think>a</think><action>look</action><action>inventory</action>", "look", True, True),  # first block
    ("<think>a</think></action>look<action>", "a  look", False, False),  # no closing tag after the opening one
    ("<think>a</think><action>go to", "a  go to", False, False),  # unclosed
    ("<action><action>go to mine</action></action><think></think>", "go to mine", True, True),  # nested
    ("", "", False, False),
]


@pytest.mark.parametrize("reply, action, valid_think, valid_no_think", PARSE_CASES)
def test_parse_cases(reply, action, valid_think, valid_no_think):
    for think, valid in ((True, valid_think), (False, valid_no_think)):
        parsed = ReActAgent("alfworld", think=think).parse(reply)
        assert parsed == ParsedReply(action=action, valid=valid, think=parsed.think)


def test_parse_reads_the_think_text():
    assert parse_reply("<think> step by step </think><action>look</action>").think == "step by step"
    assert parse_reply("<action>look</action>").think == ""
    assert ReActAgent(think=False).parse("<think>why</think><action>look</action>").think == "why"


def test_tail_projection_lengths():
    reply = "I think the answer is to Go To The Kitchen Counter number three"
    lowered = reply.lower()
    assert ReActAgent("alfworld").parse(reply) == ParsedReply(lowered[-30:].strip(), False, "")
    assert ReActAgent("generic").parse(reply).action == lowered[-30:].strip()
    assert ReActAgent("webshop").parse(reply).action == lowered[-20:].strip()
    assert ReActAgent("webshop").action_projection_tail == 20
    assert ReActAgent("alfworld", action_projection_tail=5).parse(reply).action == "three"
    assert ReActAgent("alfworld", action_projection_tail=0).parse(reply).action == ""
    # Whole format tags are blanked; a tag cut by the tail stays as text.
    assert ReActAgent("alfworld").parse("<think>hm</think>go to desk 1").action == "hm go to desk 1"
    cut = ReActAgent("alfworld").parse("<think>long</think>go to the desk number 1 now")
    assert cut.action == "nk>go to the desk number 1 now"


def test_parse_never_executes_or_fails_on_odd_input():
    for reply in (None, b"<action>look</action>", 42, "\x00" * 10, "<" * 10_000 + "action>"):
        parsed = parse_reply(reply)
        assert isinstance(parsed.action, str) and isinstance(parsed.valid, bool)
    assert parse_reply(b"<think></think><action>Look</action>") == ParsedReply("look", True, "")


# ----------------------------------------------------------------------------------------------- candidates
@pytest.mark.parametrize("think", [True, False])
def test_candidates_round_trip_on_real_states(crafting, think):
    obs, info = start(crafting)
    agent = ReActAgent("crafting", think=think)
    agent.reset(1)
    for _ in range(6):
        replies = agent.candidates(info)
        actions = agent.candidate_actions(info)
        assert actions == [a for a in info["admissible_actions"] if a != "help"]
        assert len(replies) == len(actions)
        for reply, action in zip(replies, actions):
            parsed = agent.parse(reply)
            assert parsed == ParsedReply(action=action, valid=True, think="")
            assert reply.startswith("<think></think><action>") == think
        assert info["expert_action"] in actions
        obs, info = play_expert(crafting, agent, 0, obs, info, 1)


def test_candidates_drop_help_and_duplicates_and_fill_the_webshop_search():
    agent = ReActAgent("alfworld", think=False)
    info = {"admissible_actions": ["look", "help", "look", "go to desk 1"]}
    assert agent.candidates(info) == ["<action>look</action>", "<action>go to desk 1</action>"]
    assert agent.candidates({"admissible_actions": []}) == []

    shop = ReActAgent("webshop")
    info = {"instruction": "a red shirt", "available_actions": {"has_search_bar": True, "clickables": ["search"]}}
    assert shop.candidate_actions(info) == ["search[a red shirt]", "click[search]"]
    assert all(shop.parse(c).valid for c in shop.candidates(info))


# ----------------------------------------------------------------------------------------------- families
@pytest.mark.parametrize(
    "name, family",
    [
        ("alfworld", "alfworld"),
        ("ALFWorld-v0", "alfworld"),
        ("agentrl/ALFWorld-v0", "alfworld"),
        ("webshop", "webshop"),
        ("agentrl/WebShop-v0", "webshop"),
        ("WebAgentTextEnv-v0", "webshop"),
        ("TextWorld-v0", "textworld"),
        ("crafting", "crafting"),
        ("agentrl/Crafting-v0", "crafting"),
        ("agentrl.envs.crafting:CraftingEnv", "crafting"),
        ("mypkg.envs:MyShopEnv", "generic"),
        ("my-webshop-clone", "generic"),
        ("CartPole-v1", "generic"),
        ("", "generic"),
    ],
)
def test_family_for_env(name, family):
    assert ReActAgent.family_for_env(name) == family


def test_family_for_env_objects_and_for_env(crafting):
    assert ReActAgent.family_for_env(crafting) == "crafting"
    agent = ReActAgent.for_env("agentrl/WebShop-v0", think=False)
    assert agent.env_family == "webshop" and agent.think is False
    for name in ReActAgent.FAMILIES:
        assert ReActAgent(name).env_family == name


def test_bad_arguments_are_clear_errors():
    with pytest.raises(UnknownNameError, match="unknown prompt family 'alfwrld'"):
        ReActAgent("alfwrld")
    for kwargs in ({"history_length": -1}, {"max_history_chars": 0}, {"action_projection_tail": -2},
                   {"action_memory": -1}):
        with pytest.raises(AgentRLError):
            ReActAgent("generic", **kwargs)


def test_agent_imports_no_model_trainer_or_env():
    code = (
        "import sys, agentrl.agents.react\n"
        "heavy = [m for m in ('torch', 'transformers', 'agentrl.envs', 'agentrl.trainer') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------------------------- chat template
def tiny_chat_tokenizer():
    """A byte-level BPE trained in memory, with a Jinja chat template: no files, no hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|user|>", "<|assistant|>", "<|end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["You are at the camp.", "go to forest", "gather coal", "craft a torch", "<think> </think>",
              "<action> </action>", "Your admissible actions in the current situation are:"]
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|end|>", pad_token="<|end|>")
    fast.chat_template = (
        "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    return fast


def test_prompt_renders_through_a_real_chat_template(crafting):
    tokenizer = tiny_chat_tokenizer()
    obs, info = start(crafting)
    agent = ReActAgent("crafting")
    agent.reset(1)
    obs, info = play_expert(crafting, agent, 0, obs, info, 3)
    messages = agent.messages(0, obs, info)

    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == f"<|user|>\n{messages[0]['content']}<|end|>\n<|assistant|>\n"
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|user|>")
    assert ids[-2] == tokenizer.convert_tokens_to_ids("<|assistant|>")
    assert tokenizer.decode(ids) == rendered

    # A candidate reply appended after the generation prompt parses back to its action.
    reply = agent.candidates(info)[0]
    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    assert agent.parse(tokenizer.decode(reply_ids)).action == agent.candidate_actions(info)[0]
