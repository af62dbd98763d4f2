"""The ReAct agent: prompts from observations, env actions from model replies (docs/spec/algorithms.md §1.3, §1.5).

Pure text in, text out: the agent imports no model, tokenizer, trainer or environment. The policy renders
:meth:`ReActAgent.messages` with ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``,
generates a reply, and the rollout loop sends ``agent.parse(reply).action`` to the env, then calls
:meth:`ReActAgent.record` with the observation the reply answered and that env action.

**Reply format and validity** (docs/spec/algorithms.md §1.3, implemented by :func:`parse_reply`). The model answers
``<think>…</think><action>…</action>``. A reply is *valid* iff

(a) the lower-cased reply has an ``<action>`` followed later by ``</action>``;
(b) the reply (case-sensitive) contains ``<think>`` and ``</think>`` — think mode only;
(c) it contains no CJK ideograph (U+4E00–U+9FFF).

Validity is a format check only; it is never checked against the admissible actions.

**Env action** (docs/spec/algorithms.md §1.3). The lower-cased, stripped text between the first ``<action>`` and the first
``</action>`` after it. Without such a block, the last ``tail`` characters of the lower-cased reply (30 for
ALFWorld, TextWorld, crafting and generic envs; 20 for WebShop), stripped. In both cases the four format tags
(``<think>``, ``</think>``, ``<action>``, ``</action>``) are replaced by a space before stripping, so an env
action never contains them.

Two choices beyond the reference code, both for malformed replies only (a well-formed reply projects exactly as
in verl-agent): ``</action> … <action>`` with no closing tag after the opening one counts as *no* block (the
reference slices an empty action and calls it valid); and format tags inside the projected text are blanked
(the reference would send e.g. ``k> go to desk 1`` or ``<action>go to desk 1``).

**No-think mode** (``think=False``, for small models): the prompt asks only for ``<action>…</action>``, and
rule (b) is dropped; a ``<think>`` block the model writes anyway is still read into :attr:`ParsedReply.think`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrl.agents.prompts import (
    ACTION_CLOSE,
    ACTION_OPEN,
    PROMPT_FAMILIES,
    THINK_CLOSE,
    THINK_OPEN,
    PromptFamily,
    history_line,
)
from agentrl.errors import AgentRLError, UnknownNameError

_FORMAT_TAG = re.compile(r"</?(?:think|action)>")
_CJK = re.compile("[\u4e00-\u9fff]")

#: Names an env may go by (lower-cased, without namespace, version or an ``Env`` suffix) -> prompt family.
_FAMILY_OF_ENV_NAME = {
    "alfworld": "alfworld",
    "alfred": "alfworld",
    "alfredtw": "alfworld",
    "webshop": "webshop",
    "webagenttext": "webshop",  # WebShop's own gym id, WebAgentTextEnv-v0
    "textworld": "textworld",
    "crafting": "crafting",
    "generic": "generic",
}


@dataclass(frozen=True)
class ParsedReply:
    """What a model reply means to the env (docs/spec/algorithms.md §1.3)."""

    action: str  # the env action to send: always a str, without format tags
    valid: bool  # the docs/spec/algorithms.md §1.3 format rule (see the module docstring)
    think: str  # stripped text inside the first <think>…</think> ("" if none)


def parse_reply(reply: Any, *, require_think: bool = True, tail: int = 30) -> ParsedReply:
    """Validity and env-action projection of one reply (docs/spec/algorithms.md §1.3); never raises.

    Args:
        reply: the model's text. Anything else is read as text (``None`` as ``""``, bytes as UTF-8).
        require_think: rule (b); False in no-think mode.
        tail: characters of the lower-cased reply sent as the action when no ``<action>`` block exists.
    """
    text = _as_text(reply)
    lowered = text.lower()
    block = _first_block(lowered, ACTION_OPEN, ACTION_CLOSE)
    if block is None:
        projected = lowered[-tail:] if tail > 0 else ""  # lowered[-0:] would be the whole reply
    else:
        projected = block
    # A space, not "", so that removing a tag can never join its neighbours into a new tag.
    action = _FORMAT_TAG.sub(" ", projected).strip()

    has_think_tags = THINK_OPEN in text and THINK_CLOSE in text
    valid = block is not None and (has_think_tags or not require_think) and _CJK.search(text) is None
    think = _first_block(text, THINK_OPEN, THINK_CLOSE)
    return ParsedReply(action=action, valid=valid, think=(think or "").strip())


@dataclass
class _Episode:
    steps: list[tuple[str, str]] = field(default_factory=list)  # (observation before the step, env action)
    task: str = ""
    initial_observation: str | None = None


class ReActAgent:
    """Prompts and reply parsing for a language-model policy (docs/spec/algorithms.md §1.3, §1.5).

    Args:
        env_family: ``"alfworld"``, ``"webshop"``, ``"textworld"``, ``"crafting"`` or ``"generic"`` (user envs),
            or a :class:`~agentrl.agents.prompts.PromptFamily` of your own. :meth:`family_for_env` maps an env
            name to its family.
        history_length: k, the number of past steps shown in the prompt (2 in the reference setup, docs/spec/algorithms.md §1.6).
        think: ask for ``<think>`` reasoning before the action (rule (b) of validity applies); False for small
            models, which then answer with the ``<action>`` block only.
        max_history_chars: a history prompt longer than this falls back to the no-history template (13,000, as
            the reference).
        action_memory: besides the ``history_length`` steps shown in full, the env actions of up to this many
            older steps, in one line ("Your actions at steps 3-7 were: go to cabinet 1; open cabinet 1; ...").
            0 (the reference prompt) shows none. A few tokens a step tell a small policy where it has already
            been, which the last k observations do not (ALFWorld search otherwise revisits receptacles).
        action_projection_tail: characters of the reply's end sent as the action when the ``<action>`` block is
            missing. Default per family: 20 for WebShop, 30 for all others (the reference's ALFWorld value).
        list_actions: show the admissible actions in the prompt (the reference prompt does). A policy that scores
            the admissible actions (``mode: score``) sees each of them as a candidate reply anyway; without the
            list its ALFWorld prompts are about 45% shorter, so it trains and acts about twice as fast.
    """

    FAMILIES: tuple[str, ...] = ("alfworld", "webshop", "textworld", "crafting", "generic")

    def __init__(
        self,
        env_family: str | PromptFamily = "generic",
        history_length: int = 2,
        think: bool = True,
        max_history_chars: int = 13_000,
        action_projection_tail: int | None = None,
        action_memory: int = 0,
        list_actions: bool = True,
    ):
        if isinstance(env_family, PromptFamily):
            self.family = env_family
        elif env_family in PROMPT_FAMILIES:
            self.family = PROMPT_FAMILIES[env_family]
        else:
            raise UnknownNameError(
                f"unknown prompt family {env_family!r}. Known: {', '.join(PROMPT_FAMILIES)} "
                "(ReActAgent.family_for_env(name) maps an env name to its family)."
            )
        if not isinstance(history_length, int) or history_length < 0:
            raise AgentRLError(f"history_length must be an integer >= 0, got {history_length!r}")
        if not isinstance(max_history_chars, int) or max_history_chars <= 0:
            raise AgentRLError(f"max_history_chars must be a positive integer, got {max_history_chars!r}")
        if not isinstance(action_memory, int) or action_memory < 0:
            raise AgentRLError(f"action_memory must be an integer >= 0, got {action_memory!r}")
        tail = self.family.projection_tail if action_projection_tail is None else action_projection_tail
        if not isinstance(tail, int) or tail < 0:
            raise AgentRLError(f"action_projection_tail must be an integer >= 0, got {action_projection_tail!r}")
        self.history_length = history_length
        self.think = bool(think)
        self.max_history_chars = max_history_chars
        self.action_projection_tail = tail
        self.action_memory = action_memory
        self.list_actions = bool(list_actions)
        self._episodes: list[_Episode] = []

    @classmethod
    def for_env(cls, env_alias_or_id: str, **kwargs: Any) -> ReActAgent:
        """An agent with the prompt family of the named env: ``ReActAgent.for_env("alfworld")``."""
        return cls(cls.family_for_env(env_alias_or_id), **kwargs)

    @property
    def env_family(self) -> str:
        return self.family.name

    # ------------------------------------------------------------------ episodes and memory
    def reset(self, n: int) -> None:
        """Start ``n`` episodes, indexed 0..n-1; forgets everything about earlier ones."""
        if not isinstance(n, int) or n < 0:
            raise AgentRLError(f"the number of episodes must be an integer >= 0, got {n!r}")
        self._episodes = [_Episode() for _ in range(n)]

    def record(self, index: int, observation: str, action: str) -> None:
        """Remember one step of episode ``index``: the observation the reply answered (the one given to
        :meth:`messages`) and the env action actually sent (``parse(reply).action``), as in docs/spec/algorithms.md §1.5."""
        episode = self._episode(index)
        if episode.initial_observation is None:
            episode.initial_observation = observation
        episode.steps.append((observation, action))

    def history(self, index: int) -> list[tuple[str, str]]:
        """All remembered (observation, env action) steps of episode ``index``, oldest first."""
        return list(self._episode(index).steps)

    # ------------------------------------------------------------------ prompts
    def messages(self, index: int, observation: str, info: Mapping[str, Any]) -> list[dict[str, str]]:
        """The chat for episode ``index`` at its current step: a single user message (docs/spec/algorithms.md §1.5, no system prompt)."""
        return [{"role": "user", "content": self.prompt(index, observation, info)}]

    def prompt(self, index: int, observation: str, info: Mapping[str, Any]) -> str:
        """The text of the user message; see :mod:`agentrl.agents.prompts` for the two templates."""
        episode = self._episode(index)
        if not episode.steps and episode.initial_observation is None:
            episode.initial_observation = observation
        task = self._task(episode, observation, info)
        family = self.family
        current = family.format_observation(observation, task)
        actions_section = family.format_action_list(family.listed_actions(info)) if self.list_actions else ""

        if episode.steps and self.history_length > 0:
            shown = episode.steps[-self.history_length:]
            first_number = len(episode.steps) - len(shown) + 1
            older = episode.steps[:first_number - 1]
            earlier = [action for _, action in older[max(0, len(older) - self.action_memory):]]
            history = [
                history_line(first_number + i, family.format_observation(obs, task), action)
                for i, (obs, action) in enumerate(shown)
            ]
            # The first observation is shown again only once it has scrolled out of the history.
            context = ""
            if family.repeat_initial_observation and first_number > 1 and episode.initial_observation:
                context = family.format_observation(episode.initial_observation, task)
            text = family.render_with_history(
                task=task,
                step_count=len(episode.steps),
                history=history,
                current_observation=current,
                actions_section=actions_section,
                context=context,
                think=self.think,
                earlier_actions=earlier,
                first_earlier_step=first_number - len(earlier),
            )
            if len(text) <= self.max_history_chars:
                return text

        context = ""
        if family.repeat_initial_observation and episode.steps and episode.initial_observation:
            context = family.format_observation(episode.initial_observation, task)
        return family.render_without_history(
            task=task, current_observation=current, actions_section=actions_section, context=context, think=self.think
        )

    # ------------------------------------------------------------------ replies
    def parse(self, reply: str) -> ParsedReply:
        """Validity and env action of a reply (docs/spec/algorithms.md §1.3, see the module docstring); never raises."""
        return parse_reply(reply, require_think=self.think, tail=self.action_projection_tail)

    def candidate_actions(self, info: Mapping[str, Any]) -> list[str]:
        """The env actions the admissible-action scoring mode chooses among, one per :meth:`candidates` reply.

        The actions listed in the prompt (``help`` removed; WebShop's search placeholder filled with the
        instruction), in the form :meth:`parse` projects them to (lower-cased, stripped), without duplicates.
        Empty for free-form envs, which list no admissible actions.
        """
        return [action for _, action in self._candidate_pairs(info)]

    def candidates(self, info: Mapping[str, Any]) -> list[str]:
        """Reply strings whose log-likelihoods the policy scores, one per :meth:`candidate_actions` entry.

        ``<action>X</action>`` in no-think mode; ``<think></think><action>X</action>`` in think mode, where the
        empty think block keeps the reply valid (rule (b)) and, being identical in every candidate, adds the same
        log-probability to each: it cancels in the softmax over candidates. For every candidate ``c``,
        ``parse(c).valid`` is True (unless the action itself contains CJK text) and ``parse(c).action`` is the
        matching entry of :meth:`candidate_actions`, which equals the admissible action itself whenever that is
        lower-case and stripped (every built-in env's actions are).
        """
        return [reply for reply, _ in self._candidate_pairs(info)]

    def _candidate_pairs(self, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        prefix = f"{THINK_OPEN}{THINK_CLOSE}" if self.think else ""
        pairs: dict[str, str] = {}  # env action -> reply; two spellings of one env action are one choice
        for action in self.family.scoring_actions(info, self._task_for_info(info)):
            reply = f"{prefix}{ACTION_OPEN}{action}{ACTION_CLOSE}"
            pairs.setdefault(self.parse(reply).action, reply)
        return [(reply, action) for action, reply in pairs.items()]

    # ------------------------------------------------------------------ env names
    @staticmethod
    def family_for_env(env_alias_or_id: str) -> str:
        """The prompt family of an env name: ``"alfworld"``, ``"webshop"``, ``"textworld"``, ``"crafting"`` or
        ``"generic"``.

        Accepts an alias (``alfworld``), an id (``ALFWorld-v0``, ``agentrl/ALFWorld-v0``), a class path
        (``agentrl.envs.crafting:CraftingEnv``) or an env object. Matching is on the whole base name (case,
        namespace, ``-vN`` and an ``Env`` suffix ignored), so a user env merely *containing* "webshop" in its
        name stays ``generic``.
        """
        if not isinstance(env_alias_or_id, str):
            env = getattr(env_alias_or_id, "unwrapped", env_alias_or_id)
            env_alias_or_id = type(env).__name__ if not isinstance(env, type) else env.__name__
        name = env_alias_or_id.strip()
        name = name.rsplit(":", 1)[-1] if ":" in name else name.rsplit("/", 1)[-1]
        name = re.sub(r"-v\d+$", "", name).lower().replace("-", "").replace("_", "")
        if name.endswith("env") and len(name) > 3:
            name = name[: -len("env")]
        return _FAMILY_OF_ENV_NAME.get(name, "generic")

    # ------------------------------------------------------------------ helpers
    def _episode(self, index: int) -> _Episode:
        if not isinstance(index, int) or not 0 <= index < len(self._episodes):
            raise AgentRLError(
                f"episode index {index!r} out of range: reset(n) started {len(self._episodes)} episode(s)"
            )
        return self._episodes[index]

    def _task(self, episode: _Episode, observation: str, info: Mapping[str, Any]) -> str:
        """``info["instruction"]``, else the task found earlier in this episode, else "Your task is to: …"."""
        instruction = info.get("instruction") if isinstance(info, Mapping) else None
        if isinstance(instruction, str) and instruction.strip():
            episode.task = instruction.strip()
        elif not episode.task:
            episode.task = self.family.task_from_observation(observation)
            if not episode.task and episode.initial_observation:
                episode.task = self.family.task_from_observation(episode.initial_observation)
        return episode.task

    @staticmethod
    def _task_for_info(info: Mapping[str, Any]) -> str:
        instruction = info.get("instruction") if isinstance(info, Mapping) else None
        return instruction.strip() if isinstance(instruction, str) else ""


def _first_block(text: str, open_tag: str, close_tag: str) -> str | None:
    """Text between the first ``open_tag`` and the first ``close_tag`` after it; None if there is no such pair."""
    start = text.find(open_tag)
    if start < 0:
        return None
    end = text.find(close_tag, start + len(open_tag))
    if end < 0:
        return None
    return text[start + len(open_tag):end]


def _as_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    if reply is None:
        return ""
    if isinstance(reply, (bytes, bytearray)):
        return bytes(reply).decode("utf-8", errors="replace")
    try:
        return str(reply)
    except Exception:  # an object whose __str__ fails still gets a defined (invalid) verdict
        return ""
