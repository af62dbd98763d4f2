"""TextWorld: games generated offline with textworld 1.7's ``tw-make`` (``agentrl/TextWorld-v0``, alias ``textworld``).

A task set is one tw-make generator with fixed settings (see :mod:`agentrl.envs.textworld.generation`); a task
is one seed. Games are generated on the first reset of their task (a few seconds each, docs/spec/environments.md §4) and
cached on disk, or pre-built in parallel with ``agentrl data textworld``. They are played through textworld's
own engine (``textworld.start``, what ``textworld.gym`` wraps) with ``EnvInfos(admissible_commands=True,
won=True, ...)``, plus ``policy_commands=True`` when the env is built with ``expert`` or ``progress_labels``.

**Splits are seed ranges**, disjoint by construction (task ``i`` of a split is one seed):

* ``train``: seeds ``0 .. train_games-1``, the generator's training distribution;
* ``eval_in_distribution``: seeds ``1_000_000 + i``, the same distribution on unseen seeds;
* ``eval_out_of_distribution``: seeds ``2_000_000 + i``, textworld's own held-out distribution.

``eval_out_of_distribution`` exists only for the generators that have a held-out distribution of their own:
tw-cooking (``--split test``: unseen foods and preparations; train and eval_in_distribution use ``--split
train``) and tw-simple (``--test``: held-out foods). For ``custom``, ``tw-coin_collector`` and
``tw-treasure_hunter`` the env has the first two splits only.

**Reward** (the convention of the other agentrl envs, verl-agent's ``10 * won``): ``success_reward`` (10) on the
step that wins, else 0; set ``points_reward`` to also pay that much per point of the game's own score
(tw-simple ``--rewards dense`` awards points for sub-goals). A game can also be lost (tw-cooking: eating an
ingredient the recipe needs), which ends the episode with ``won=False`` and ``info["lost"]``.

**Observations** are the game's text with the TextWorld logo of the first screen, Inform's trailing ``>`` prompt
and status line, and the end-of-game RESTART/RESTORE menu removed, and runs of blank lines collapsed.
``info["anchor"]`` is a digest of the true world state (the game's sorted logical facts) rather than the text:
feedback such as "You take the knife." says little about the state, and a state is reached with different texts.

**Actions** are sent as one line (whitespace collapsed, backslashes dropped: dumb-frotz reads them as its own
escape commands, and ``\\q`` hangs it). Inform's out-of-world commands that would write files into the working
directory (``save``, ``script``) or quit, restart or restore the game behind textworld's state tracking
(:data:`BLOCKED_COMMANDS`) are answered "That command is not available in this game." and change nothing.

**Expert:** ``info["expert_action"]`` is the first of textworld's ``policy_commands``, the walkthrough re-planned
from the current state, so it still wins after the agent wandered off (docs/spec/environments.md §4: replaying it won every
generated game). It is None once the game is over or cannot be won any more.

**Progress labels** (``progress_labels=True``): ``info["distance_to_goal"]`` is the number of those policy commands
(0 once won; None once the game is lost or over, or when textworld can no longer track the quest). Following the
expert counts it down by one per step (30 games of the five generators checked); a move off the policy adds the
move back, and textworld shortens the policy when the state allows, so it is textworld's tracked quest length rather
than a shortest path (one ``custom`` game: 5 at the start, 2 after a ``go east`` that the walkthrough did not take).
Reading it costs microseconds; the cost is textworld tracking the quest on every step (the expert's cost too):
median steps of 2-10 ms instead of 2-7 ms (tw-cooking defaults: 6.8 instead of 4.6 ms).

Extra ``info`` keys: ``task_type`` (the generator, e.g. ``tw-cooking``), ``seed``, ``game_file``, ``points`` and
``max_points`` (the game's score), ``score`` (``points / max_points``, TextWorld's normalized score), ``lost``.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from agentrl.envs.core import TextEnv
from agentrl.envs.datadir import candidate_dirs
from agentrl.envs.textworld.generation import (
    CACHE_ENV_VAR,
    DEFAULT_CACHE_DIR,
    GameCache,
    GameConfig,
    resolve_generator,
)
from agentrl.errors import AgentRLError, ConfigError, MissingDataError

#: First seed of each split; a split holds at most SEEDS_PER_SPLIT games, so the ranges never overlap.
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "eval_in_distribution": 1_000_000, "eval_out_of_distribution": 2_000_000}
SEEDS_PER_SPLIT = 1_000_000

#: tw-make settings used when none are given: the examples of docs/spec/environments.md §4.
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "custom": {"world_size": 5, "nb_objects": 10, "quest_length": 5},
    "tw-simple": {"rewards": "dense", "goal": "detailed"},
    "tw-coin_collector": {"level": 5},
    "tw-treasure_hunter": {"level": 5},
    "tw-cooking": {"recipe": 2, "take": 2, "go": 6, "open": True, "cook": True, "cut": True},
}
#: The tw-make settings that select a generator's own train / held-out distributions, per agentrl split.
#: The env owns these options, so they may not appear in the user's settings.
SPLIT_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "tw-cooking": {
        "train": {"split": "train"},
        "eval_in_distribution": {"split": "train"},
        "eval_out_of_distribution": {"split": "test"},
    },
    "tw-simple": {"train": {}, "eval_in_distribution": {}, "eval_out_of_distribution": {"test": True}},
}
ALL_SPLITS: tuple[str, ...] = tuple(SPLIT_SEED_BASE)

_LOGO_LINE = re.compile(r"^[\s_$|\\/<>]*$")  # lines of the ASCII-art "TextWorld" logo
_TRAILING_PROMPT = re.compile(r"\n>[^\n]*$")  # Inform's prompt, followed by the status line ("-= Kitchen =-0/3")
_END_MENU = re.compile(r"\n*Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command\?\s*")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")
#: Inform's out-of-world commands that write files into the working directory (save, script) or quit, restart or
#: restore the interpreter behind textworld's state tracking. They are answered without reaching the game.
BLOCKED_COMMANDS = frozenset(
    {"quit", "q", "restart", "restore", "save", "script", "transcript", "unscript", "noscript"}
)
BLOCKED_REPLY = "That command is not available in this game."
_UNSAFE_CHARS = re.compile(r"[\\\x00-\x1f\x7f]")  # backslash and control characters (newlines included)
_CLAUSE_SEPARATOR = re.compile(r"[.,;]|\bthen\b")  # Inform runs "take coin. go north" as two commands


def splits_of(generator: str) -> tuple[str, ...]:
    """The splits of a generator: all three when textworld has a held-out distribution for it."""
    generator = resolve_generator(generator)
    return ALL_SPLITS if generator in SPLIT_SETTINGS else ALL_SPLITS[:2]


def split_config(generator: str, settings: Mapping[str, Any] | None, split: str) -> GameConfig:
    """The tw-make config of ``split``'s games: ``settings`` (or the defaults) plus the split's own options."""
    generator = resolve_generator(generator)
    if split not in splits_of(generator):
        raise ConfigError(f"{generator} has no split {split!r}; its splits: {', '.join(splits_of(generator))}")
    settings = dict(DEFAULT_SETTINGS[generator] if settings is None else settings)
    owned = SPLIT_SETTINGS.get(generator, {}).get("eval_out_of_distribution", {})
    clash = sorted(k for k in settings if str(k).replace("-", "_") in owned)
    if clash:
        raise ConfigError(
            f"{generator}'s {clash} option is set by the agentrl split (train: the training distribution, "
            "eval_out_of_distribution: the held-out one); remove it from the settings"
        )
    return GameConfig.create(generator, {**settings, **SPLIT_SETTINGS.get(generator, {}).get(split, {})})


def split_seed(split: str, index: int) -> int:
    """The tw-make seed of task ``index`` of ``split``."""
    return SPLIT_SEED_BASE[split] + index


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where games are cached: ``cache_dir``, else ``$AGENTRL_TEXTWORLD_CACHE``, else ``~/.cache/agentrl/textworld``."""
    return candidate_dirs(cache_dir, CACHE_ENV_VAR, DEFAULT_CACHE_DIR)[0]


def clean_feedback(text: str, *, first: bool = False) -> str:
    """The game's text without the logo (first screen), the trailing prompt/status line and the end menu."""
    if first:
        lines = text.split("\n")
        start = 0
        while start < len(lines) and _LOGO_LINE.match(lines[start]):
            start += 1
        text = "\n".join(lines[start:])
    text = _TRAILING_PROMPT.sub("", text)
    text = _END_MENU.sub("\n", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def sanitize_command(action: str) -> str:
    """The action as one interpreter line: a newline would make the interpreter run two commands (and fall out
    of step with the env), and dumb-frotz reads a backslash as the start of its own escape commands."""
    return " ".join(_UNSAFE_CHARS.sub(" ", action).split())


def is_blocked(command: str) -> bool:
    """Whether any clause of ``command`` starts with one of :data:`BLOCKED_COMMANDS`."""
    clauses = (clause.split() for clause in _CLAUSE_SEPARATOR.split(command.lower()))
    return any(words and words[0] in BLOCKED_COMMANDS for words in clauses)


def state_digest(facts: Sequence[Any]) -> str:
    """A short stable key of a world state: the digest of its sorted facts."""
    canonical = "\n".join(sorted(str(fact) for fact in facts))
    return hashlib.blake2b(canonical.encode(), digest_size=12).hexdigest()


class TextWorldEnv(TextEnv):
    """TextWorld games of one tw-make generator; see the module docstring.

    Args:
        split, max_steps, expert, render_mode, progress_labels: as in :class:`~agentrl.envs.TextEnv`.
        challenge: ``custom``, ``tw-simple``, ``tw-coin_collector``, ``tw-treasure_hunter`` or ``tw-cooking``
            (the ``tw-`` prefix may be left out).
        settings: tw-make options of the generator, as ``tw-make <challenge> --help`` names them
            (``{"level": 3}``, ``{"world_size": 3, "nb_objects": 5, "quest_length": 3}``). None: the defaults
            of :data:`DEFAULT_SETTINGS`. Given settings are taken as on the tw-make command line (tw-make's own
            defaults fill the rest).
        train_games, eval_games: number of tasks of ``train`` and of each eval split.
        cache_dir: game cache folder (default ``$AGENTRL_TEXTWORLD_CACHE``, else ``~/.cache/agentrl/textworld``).
        generate: generate missing games on reset (default). False: a missing game raises
            :class:`~agentrl.errors.MissingDataError` (for runs that must only use pre-built games).
        success_reward: reward on the winning step.
        points_reward: reward per point of the game's own score gained (0: sparse reward).
        generation_timeout_s: limit for generating one game.
    """

    splits: ClassVar[tuple[str, ...]] = ALL_SPLITS
    description: ClassVar[str] = "TextWorld games generated offline with tw-make (seeded, cached on disk)"
    default_max_steps: ClassVar[int | None] = 50
    provides_distance: ClassVar[bool] = True

    def __init__(
        self,
        split: str | None = None,
        max_steps: int | None = -1,
        expert: bool = False,
        render_mode: str | None = None,
        progress_labels: bool = False,
        *,
        challenge: str = "tw-cooking",
        settings: Mapping[str, Any] | None = None,
        train_games: int = 1_000,
        eval_games: int = 100,
        cache_dir: str | os.PathLike | None = None,
        generate: bool = True,
        success_reward: float = 10.0,
        points_reward: float = 0.0,
        generation_timeout_s: float = 600.0,
    ):
        self.challenge = resolve_generator(challenge)
        # The splits depend on the generator (see the module docstring), so they are set per instance.
        self.splits = splits_of(self.challenge)  # type: ignore[misc]
        super().__init__(split=split, max_steps=max_steps, expert=expert, render_mode=render_mode,
                         progress_labels=progress_labels)
        for name, count in (("train_games", train_games), ("eval_games", eval_games)):
            if not 1 <= int(count) <= SEEDS_PER_SPLIT:
                raise ConfigError(f"{name} must be between 1 and {SEEDS_PER_SPLIT:,}, got {count}")
        self.split_sizes = {s: int(train_games if s == "train" else eval_games) for s in self.splits}
        self.cache_dir = default_cache_dir(cache_dir)
        self.caches = {
            s: GameCache(self.cache_dir, split_config(self.challenge, settings, s), timeout_s=generation_timeout_s)
            for s in self.splits
        }
        self.generate = generate
        self.success_reward = float(success_reward)
        self.points_reward = float(points_reward)
        self._game: Any = None  # the running textworld environment
        self._game_file: Path | None = None
        self._state: Any = None  # textworld's GameState after the last reset/step
        self._seed = -1
        self._game_over = False

    # ---------------------------------------------------------------- tasks
    def task_ids(self, split: str | None = None) -> Sequence[str]:
        split = split or self.split
        self._check_split(split)
        return _task_ids(split, self.split_sizes[split])

    def _has_task(self, task_id: str) -> bool:
        split, _, index = task_id.partition("/")
        return split in self.split_sizes and index.isdigit() and int(index) < self.split_sizes[split]

    def game_file(self, task_id: str) -> Path:
        """The ``.z8`` of a task, generated now if it is not cached (and ``generate`` is on)."""
        split, _, index = task_id.partition("/")
        seed = split_seed(split, int(index))
        cache = self.caches[split]
        if not cache.has(seed) and not self.generate:
            raise MissingDataError(
                f"TextWorld game {task_id} (seed {seed}) is not in {cache.directory}; pre-build it with "
                f"`agentrl data textworld --challenge {self.challenge} --split {split} --games {int(index) + 1}` "
                "(with the same settings and cache dir), or build the env with generate=True"
            )
        return cache.ensure(seed).game_file

    # ---------------------------------------------------------------- dynamics
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        import textworld

        game_file = self.game_file(task_id)
        if game_file != self._game_file:
            self.close()
            infos = textworld.EnvInfos(
                admissible_commands=True, won=True, lost=True, score=True, max_score=True, objective=True,
                policy_commands=self.expert or self.progress_labels,
            )
            with warnings.catch_warnings():
                # Jericho does not know TextWorld's games and warns that it cannot track their score; textworld's
                # own state tracking does that.
                warnings.filterwarnings("ignore", message=".*is not fully supported", module="jericho")
                self._game = textworld.start(str(game_file), request_infos=infos)
            self._game_file = game_file
        self._state = self._game.reset()
        self._seed = int(game_file.parent.name.removeprefix("seed-"))
        self._game_over = False
        return clean_feedback(self._state["feedback"], first=True), self._info()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._game is None:
            raise AgentRLError("the game was closed; call reset() before step()")
        if self._game_over:  # the interpreter would now only answer its RESTART/RESTORE menu
            return "The game is over.", 0.0, True, self._info()
        command = sanitize_command(action)
        if is_blocked(command):
            return BLOCKED_REPLY, 0.0, False, self._info()
        points_before = self._state["score"]
        self._state, _, done = self._game.step(command)
        self._game_over = bool(done)
        won = bool(self._state["won"])
        reward = (self.success_reward if won else 0.0) + self.points_reward * (self._state["score"] - points_before)
        return clean_feedback(self._state["feedback"]), reward, self._game_over, self._info()

    def _expert_action(self) -> str | None:
        policy = self._state["policy_commands"] if self._state is not None and not self._game_over else None
        return policy[0] if policy else None

    def _distance_to_goal(self) -> int | None:
        if self._state["won"]:
            return 0
        policy = None if self._game_over else self._state["policy_commands"]
        return len(policy) if policy else None

    def _info(self) -> dict[str, Any]:
        state = self._state
        max_points = state["max_score"] or 0
        return {
            "admissible_actions": [] if self._game_over else list(state["admissible_commands"] or []),
            "instruction": (state["objective"] or "").strip(),
            "task_type": self.challenge,
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "anchor": state_digest(state["_facts"]),
            "seed": self._seed,
            "game_file": str(self._game_file),
            "points": state["score"],
            "max_points": max_points,
            "score": state["score"] / max_points if max_points else float(bool(state["won"])),
        }

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
        self._game, self._game_file, self._state = None, None, None
        super().close()


@lru_cache(maxsize=64)
def _task_ids(split: str, count: int) -> tuple[str, ...]:
    return tuple(f"{split}/{i:05d}" for i in range(count))
