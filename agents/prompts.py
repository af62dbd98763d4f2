"""Prompt families of the ReAct agent: one per kind of environment (docs/spec/algorithms.md §1.5, docs/spec/environments.md §6).

Every family follows the structure of verl-agent's prompts, written in our own words. There is one user message
(no system prompt) in one of two shapes:

* **without history** (the first step, ``history_length = 0``, or a history prompt longer than
  ``max_history_chars``): who the agent is, the task (only when the observation does not already state it),
  the current observation, the admissible actions (unless the agent's ``list_actions`` is off), the closing
  instruction;
* **with history**: who the agent is, the task, how many steps were taken (with the ReAct agent's
  ``action_memory``, also the env actions of older steps, one line), the last k steps as
  ``[Observation k: '...', Action k: '...']`` lines, the current step number, the current observation, the
  admissible actions, the closing instruction.

The closing instruction asks for reasoning inside ``<think> </think>`` and then one admissible action inside
``<action> </action>``; in no-think mode (small models) it asks for the ``<action>`` block only.

Families differ in their introduction, a hint in the closing instruction, how the observation and the action
list are shown (WebShop quotes the page parts after the instruction and lists ``search[...]`` / ``click[...]``
actions), and the tail length of the env-action projection (docs/spec/algorithms.md §1.3). Add your own by subclassing
:class:`PromptFamily` and passing an instance to :class:`~agentrl.agents.react.ReActAgent`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The two reply-format tags (docs/spec/algorithms.md §1.5).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"

#: Marker that precedes the task in ALFWorld, TextWorld and crafting observations (docs/spec/algorithms.md §1.5).
TASK_MARKER = "Your task is to:"

NO_HISTORY_TEMPLATE = (
    "{intro}\n"
    "{task_section}"
    "{context_section}"
    "Your current observation is: {current_observation}\n"
    "{actions_section}"
    "\n"
    "{closing}"
)

HISTORY_TEMPLATE = (
    "{intro}\n"
    "{task_section}"
    "{context_section}"
    "You have already taken {step_count} step(s).{earlier_actions_section} Here are the last {history_length}, "
    "each with the observation you saw and the action you then took:\n"
    "{action_history}\n"
    "You are now at step {current_step}. Your current observation is: {current_observation}\n"
    "{actions_section}"
    "\n"
    "{closing}"
)

CLOSING_THINK = (
    "Now choose your next action. First reason step by step about the current situation{goal_hint}, and put "
    "that reasoning inside <think> </think> tags. Then write exactly one admissible action inside "
    "<action> </action> tags."
)

CLOSING_NO_THINK = (
    "Now choose your next action. Reply with exactly one admissible action inside <action> </action> tags, "
    "and nothing else."
)

NO_ACTION_LIST = "No list of admissible actions is given: write the command you want to issue."


def _earlier_actions_section(actions: Sequence[str], first_step: int) -> str:
    """The actions of steps older than the shown history, one clause (empty when there are none)."""
    if not actions:
        return ""
    if len(actions) == 1:
        return f" Your action at step {first_step} was: {actions[0]}."
    return f" Your actions at steps {first_step}-{first_step + len(actions) - 1} were: {'; '.join(actions)}."


def history_line(step_number: int, observation: str, action: str) -> str:
    """One remembered step, in the reference memory format (docs/spec/algorithms.md §1.5)."""
    return f"[Observation {step_number}: '{observation}', Action {step_number}: '{action}']"


@dataclass(frozen=True)
class PromptFamily:
    """How one kind of environment is put into words.

    Attributes:
        name: the family name (``ReActAgent(env_family=name)``).
        intro: first paragraph: who the agent is and what the world is.
        goal_hint: inserted into the think-mode closing instruction after "the current situation".
        projection_tail: characters of the reply's end sent to the env when the ``<action>`` block is missing
            (docs/spec/algorithms.md §1.3: 30 for ALFWorld, 20 for WebShop).
        repeat_initial_observation: show the episode's first observation in every later prompt. For envs whose
            first observation holds facts never repeated later (the crafting recipes).
    """

    name: str
    intro: str
    goal_hint: str = ""
    projection_tail: int = 30
    repeat_initial_observation: bool = False

    # ------------------------------------------------------------ what the env says, as shown to the model
    def task_from_observation(self, observation: str) -> str:
        """The task text when ``info["instruction"]`` is empty: the rest of the line after "Your task is to:"."""
        start = observation.find(TASK_MARKER)
        if start < 0:
            return ""
        rest = observation[start + len(TASK_MARKER):].strip()
        return rest.split("\n", 1)[0].strip()

    def format_observation(self, observation: str, task: str) -> str:
        """The observation as it appears in the prompt (current and remembered ones alike)."""
        return observation

    def listed_actions(self, info: Mapping[str, Any]) -> list[str]:
        """The admissible actions shown in the prompt: ``info["admissible_actions"]`` in order, ``help`` removed,
        duplicates dropped."""
        return _unique(a for a in _admissible(info) if a.strip().lower() != "help")

    def format_action_list(self, actions: Sequence[str]) -> str:
        """Each action single-quoted, joined by a newline and a space, in brackets (the ALFWorld layout)."""
        if not actions:
            return NO_ACTION_LIST
        quoted = "\n ".join(f"'{a}'" for a in actions)
        return f"Your admissible actions in the current situation are: [{quoted}]."

    def scoring_actions(self, info: Mapping[str, Any], task: str) -> list[str]:
        """Actions offered when the policy scores admissible actions instead of generating freely."""
        return self.listed_actions(info)

    # ------------------------------------------------------------ rendering
    def closing(self, think: bool) -> str:
        return CLOSING_THINK.format(goal_hint=self.goal_hint) if think else CLOSING_NO_THINK

    def render_without_history(
        self, *, task: str, current_observation: str, actions_section: str, context: str, think: bool
    ) -> str:
        # The first observation of ALFWorld-like envs already states the task; saying it twice wastes tokens.
        show_task = bool(task) and task not in current_observation
        return NO_HISTORY_TEMPLATE.format(
            intro=self.intro,
            task_section=f"Your task is to: {task}\n" if show_task else "",
            context_section=_context_section(context),
            current_observation=current_observation,
            actions_section=_section(actions_section),
            closing=self.closing(think),
        )

    def render_with_history(
        self,
        *,
        task: str,
        step_count: int,
        history: Sequence[str],
        current_observation: str,
        actions_section: str,
        context: str,
        think: bool,
        earlier_actions: Sequence[str] = (),
        first_earlier_step: int = 1,
    ) -> str:
        return HISTORY_TEMPLATE.format(
            intro=self.intro,
            task_section=f"Your task is to: {task}\n" if task else "",
            context_section=_context_section(context),
            step_count=step_count,
            earlier_actions_section=_earlier_actions_section(earlier_actions, first_earlier_step),
            history_length=len(history),
            action_history="\n".join(history),
            current_step=step_count + 1,
            current_observation=current_observation,
            actions_section=_section(actions_section),
            closing=self.closing(think),
        )


@dataclass(frozen=True)
class WebShopFamily(PromptFamily):
    """WebShop pages and actions (docs/spec/environments.md §6).

    The observation shows the page parts after the instruction, each single-quoted and joined by ``" [SEP] "``;
    the actions are ``search[<your query>]`` when the page has a search bar plus ``click[<x>]`` for every
    clickable, one per line with a trailing comma. Actions come from ``info["available_actions"]``
    (``{"has_search_bar": bool, "clickables": [...]}``, WebShop's own form) when present, else from
    ``info["admissible_actions"]`` (bare clickables are wrapped in ``click[...]``).
    """

    SEARCH_PLACEHOLDER = "search[<your query>]"

    def task_from_observation(self, observation: str) -> str:
        parts = [p.strip() for p in observation.split("[SEP]")]
        for i, part in enumerate(parts[:-1]):
            if part.lower().rstrip(":") == "instruction":
                return parts[i + 1]
        return super().task_from_observation(observation)

    def format_observation(self, observation: str, task: str) -> str:
        parts = observation.split(" [SEP] ")
        lowered = [p.strip().lower() for p in parts]
        if task and task.strip().lower() in lowered:
            after = parts[lowered.index(task.strip().lower()) + 1:]
            return " [SEP] ".join(f"'{p}'" for p in after)
        return observation

    def listed_actions(self, info: Mapping[str, Any]) -> list[str]:
        available = info.get("available_actions")
        if isinstance(available, Mapping):
            actions = [self.SEARCH_PLACEHOLDER] if available.get("has_search_bar") else []
            actions += [f"click[{c}]" for c in available.get("clickables") or []]
            return _unique(actions)
        actions = []
        for action in _admissible(info):
            if action.strip().lower() == "help":
                continue
            if _is_search_placeholder(action):
                actions.append(self.SEARCH_PLACEHOLDER)
            else:
                actions.append(action if re.fullmatch(r"\w+\[.*\]", action.strip(), re.S) else f"click[{action}]")
        return _unique(actions)

    def format_action_list(self, actions: Sequence[str]) -> str:
        if not actions:
            return NO_ACTION_LIST
        lines = "\n".join(f"'{a}'," for a in actions)
        return f"Your admissible actions in the current situation are:\n[\n{lines}\n]."

    def scoring_actions(self, info: Mapping[str, Any], task: str) -> list[str]:
        """As listed, with the search placeholder filled by the task instruction.

        A free-form query cannot be scored; searching with the instruction itself is what WebShop's scripted
        expert does, and it is the one query every task has.
        """
        query = " ".join(task.split())
        actions = []
        for action in self.listed_actions(info):
            if action == self.SEARCH_PLACEHOLDER:
                if not query:
                    continue
                action = f"search[{query}]"
            actions.append(action)
        return _unique(actions)


PROMPT_FAMILIES: dict[str, PromptFamily] = {
    "alfworld": PromptFamily(
        name="alfworld",
        intro=(
            "You are an expert agent in the ALFRED household, a home simulated in text. You complete a household "
            "task by giving one command at a time: go to furniture and appliances, open and close them, take and "
            "put objects, and use them."
        ),
        projection_tail=30,
    ),
    "webshop": WebShopFamily(
        name="webshop",
        intro=(
            "You are an expert autonomous agent shopping on WebShop, an e-commerce website. You find and buy the "
            "product the instruction describes by searching and clicking, one action at a time."
        ),
        goal_hint=", then weigh which admissible action moves you closest to buying the requested product",
        projection_tail=20,
    ),
    "textworld": PromptFamily(
        name="textworld",
        intro=(
            "You are an expert player of a TextWorld text adventure. You reach the goal by giving one text "
            "command at a time: move between rooms, open containers and doors, take, drop and use objects."
        ),
        projection_tail=30,
    ),
    "crafting": PromptFamily(
        name="crafting",
        intro=(
            "You are an expert crafter in a text world of places and stations. You craft the requested item one "
            "action at a time: go to the places where raw materials lie and gather them, then go to the right "
            "station and craft each ingredient and finally the item, following the recipes."
        ),
        projection_tail=30,
        repeat_initial_observation=True,
    ),
    "generic": PromptFamily(
        name="generic",
        intro="You are an expert agent acting in a text-based environment. You complete the task one action at a time.",
        projection_tail=30,
    ),
}


def _section(text: str) -> str:
    """A paragraph of the prompt ending its line, or nothing when there is no text (no stray empty line)."""
    return f"{text}\n" if text else ""


def _context_section(context: str) -> str:
    return f"At the start of this episode you observed:\n{context}\n" if context else ""


def _admissible(info: Mapping[str, Any]) -> list[str]:
    actions = info.get("admissible_actions") if isinstance(info, Mapping) else None
    if actions is None or isinstance(actions, (str, bytes)):
        return []
    return [a for a in actions if isinstance(a, str)]


def _is_search_placeholder(action: str) -> bool:
    action = action.strip().lower()
    return action.startswith("search[") and "<" in action


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))
