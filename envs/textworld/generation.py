"""Generating TextWorld games offline with textworld 1.7's own ``tw-make``, and caching them on disk.

A game is fully described by a :class:`GameConfig` (the ``tw-make`` generator and its settings) and a seed.
Following docs/spec/environments.md §4:

* **Generators.** ``custom`` (``--world-size``, ``--nb-objects``, ``--quest-length``, ...) and the registered
  challenges ``tw-simple``, ``tw-coin_collector``, ``tw-treasure_hunter``, ``tw-cooking``. Settings are validated
  by ``tw-make``'s own argument parser, so every option ``tw-make <generator> --help`` lists is accepted, with
  its defaults and checks.
* **Reproducibility.** Each game is made by a ``tw-make`` subprocess run with ``PYTHONHASHSEED=0`` (without it,
  tw-cooking's set ordering changes the quests) inside a fresh folder with a fixed relative ``--output``, because
  tw-make records the output path in the game's ``.json``. The same config and seed then give a byte-identical
  ``.json`` and ``.z8``, except that Inform 7 stamps the compile date (YYMMDD) into the six serial-number bytes of
  the ``.z8`` header, which no observation shows; ``generation.json`` records the sha256 of the ``.json``.
* **Cache.** ``<root>/textworld-<version>/<generator>-<hash of settings>/seed-<seed>/game.{z8,json,ni}``. A game is
  generated once: a per-game file lock stops parallel workers from generating it twice, and it is built in a
  temporary folder that is renamed into place, so a reader sees either a complete game or none.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fcntl
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLError, ConfigError, MissingDataError, UnknownNameError

#: Generators of textworld 1.7's ``tw-make``: its ``custom`` subcommand and its registered challenges.
GENERATORS: tuple[str, ...] = ("custom", "tw-simple", "tw-coin_collector", "tw-treasure_hunter", "tw-cooking")
#: Environment variable naming the game cache folder (checked after an explicit ``cache_dir``).
CACHE_ENV_VAR = "AGENTRL_TEXTWORLD_CACHE"
DEFAULT_CACHE_DIR = Path("~/.cache/agentrl/textworld")
#: The files tw-make writes for one game; the ``.json`` beside the ``.z8`` enables admissible commands.
GAME_FILES: tuple[str, ...] = ("game.z8", "game.json", "game.ni")
#: tw-make options that are not game settings: agentrl sets them per game (seed, output) or they only print.
_NOT_SETTINGS = frozenset(
    {"subcommand", "third_party", "output", "seed", "format", "overview", "save_overview", "force", "silent", "verbose"}
)


class GenerationError(AgentRLError):
    """``tw-make`` failed to make a game (for instance, no quest satisfies the given constraints)."""


def textworld_version() -> str:
    return importlib.metadata.version("textworld")


@lru_cache(maxsize=1)
def tw_make_script() -> Path:
    """The ``tw-make`` script installed with the textworld distribution."""
    try:
        dist = importlib.metadata.distribution("textworld")
    except importlib.metadata.PackageNotFoundError:
        raise MissingDataError("textworld is not installed; pip install textworld==1.7.0") from None
    for file in dist.files or ():
        if Path(str(file)).name == "tw-make":
            path = Path(str(dist.locate_file(file))).resolve()
            if path.is_file():
                return path
    found = shutil.which("tw-make")
    if found:
        return Path(found)
    raise MissingDataError("textworld is installed without its tw-make script; reinstall textworld==1.7.0")


@lru_cache(maxsize=1)
def _tw_make_parsers() -> dict[str, argparse.ArgumentParser]:
    """tw-make's own subcommand parsers, by generator name (imports textworld; about a second)."""
    loader = importlib.machinery.SourceFileLoader("_agentrl_tw_make", str(tw_make_script()))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)  # defines build_parser; the script's main only runs under __main__
    _, custom_parser, challenge_parsers = module.build_parser(default_parser_only=False)
    parsers = {"custom": custom_parser}
    for parser in challenge_parsers:
        parsers[parser.prog.split()[-1]] = parser
    return parsers


def resolve_generator(name: str) -> str:
    """The tw-make generator called ``name``; the ``tw-`` prefix may be left out (``cooking``)."""
    if name in GENERATORS:
        return name
    if f"tw-{name}" in GENERATORS:
        return f"tw-{name}"
    containing = [g for g in GENERATORS if name and name.lower() in g]
    spellings = {g: g for g in GENERATORS} | {g.removeprefix("tw-"): g for g in GENERATORS}
    close = [spellings[c] for c in difflib.get_close_matches(name, list(spellings), n=1, cutoff=0.5)]
    suggestion = containing if len(containing) == 1 else close
    hint = f" Did you mean {suggestion[0]!r}?" if suggestion else ""
    raise UnknownNameError(f"unknown TextWorld challenge {name!r}.{hint} Known: {', '.join(GENERATORS)}.")


def settings_to_args(settings: Mapping[str, Any]) -> list[str]:
    """``{"world_size": 5, "open": True}`` -> ``["--world-size", "5", "--open"]``; False and None are left out."""
    args: list[str] = []
    for key, value in settings.items():
        option = "--" + str(key).strip().lstrip("-").replace("_", "-")
        if value is True:
            args.append(option)
        elif value is not None and value is not False:
            args += [option, str(value)]
    return args


@dataclass(frozen=True)
class GameConfig:
    """A tw-make generator with all its settings (defaults filled in): everything but the seed.

    Build it with :meth:`create`, which validates the settings with tw-make's own parser. Two configs that
    differ only in how the settings were spelled (``quest_length`` vs ``quest-length``, a default given or left
    out) are equal and share a cache folder.
    """

    generator: str
    settings: tuple[tuple[str, Any], ...]

    @classmethod
    def create(cls, generator: str, settings: Mapping[str, Any] | None = None) -> GameConfig:
        generator = resolve_generator(generator)
        settings = dict(settings or {})
        reserved = sorted(k for k in settings if str(k).replace("-", "_") in _NOT_SETTINGS)
        if reserved:
            raise ConfigError(
                f"TextWorld settings may not set {reserved}: the seed comes from the split and task index, and "
                "agentrl chooses where games are written"
            )
        parser = _tw_make_parsers()[generator]
        args = settings_to_args(settings)
        message = io.StringIO()
        try:
            with contextlib.redirect_stderr(message), contextlib.redirect_stdout(message):
                namespace = parser.parse_args(args)
        except SystemExit:
            lines = message.getvalue().strip().splitlines() or ["invalid settings"]
            reason = lines[-1].split(": error: ", 1)[-1]  # drop argparse's "<prog> <generator>: error: "
            raise ConfigError(f"invalid settings {settings} for tw-make {generator}: {reason}") from None
        canonical = tuple(sorted((k, v) for k, v in vars(namespace).items() if k not in _NOT_SETTINGS))
        return cls(generator, canonical)

    def with_settings(self, **overrides: Any) -> GameConfig:
        """This config with some settings replaced (validated again)."""
        return GameConfig.create(self.generator, {**dict(self.settings), **overrides})

    def tw_make_args(self) -> list[str]:
        """The tw-make arguments after the generator name: every setting spelled out explicitly."""
        return settings_to_args(dict(self.settings))

    @property
    def key(self) -> str:
        """Folder name of this config's games: the generator and a digest of the settings."""
        payload = json.dumps([self.generator, list(self.settings)], sort_keys=True, default=str)
        return f"{self.generator}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"

    def describe(self) -> str:
        return f"tw-make {self.generator} " + " ".join(self.tw_make_args())


@dataclass(frozen=True)
class GeneratedGame:
    """One game in the cache, and how it got there."""

    seed: int
    game_file: Path  # the .z8; its .json sits beside it
    generated: bool  # False when it was already in the cache
    seconds: float  # generation time (0 when cached)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that concurrent readers see the old file or the new one, never half of one."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as f:
        f.write(text)
    os.replace(f.name, path)


class GameCache:
    """The on-disk games of one :class:`GameConfig` under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: str | os.PathLike, config: GameConfig, *, timeout_s: float = 600.0):
        self.root = Path(root).expanduser()
        self.config = config
        self.timeout_s = timeout_s
        self.directory = self.root / f"textworld-{textworld_version()}" / config.key

    def game_dir(self, seed: int) -> Path:
        return self.directory / f"seed-{seed:07d}"

    def game_file(self, seed: int) -> Path:
        return self.game_dir(seed) / "game.z8"

    def has(self, seed: int) -> bool:
        folder = self.game_dir(seed)
        return all((folder / name).is_file() for name in GAME_FILES)

    def ensure(self, seed: int) -> GeneratedGame:
        """The game of ``seed``, generated now unless it is already cached."""
        if self.has(seed):
            return GeneratedGame(seed, self.game_file(seed), generated=False, seconds=0.0)
        self._write_config()
        lock_path = self.directory / ".locks" / f"seed-{seed:07d}.lock"
        lock_path.parent.mkdir(exist_ok=True)
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be generating this very game
            try:
                if self.has(seed):
                    return GeneratedGame(seed, self.game_file(seed), generated=False, seconds=0.0)
                start = time.perf_counter()
                self._generate(seed)
                return GeneratedGame(seed, self.game_file(seed), generated=True, seconds=time.perf_counter() - start)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def build(self, seeds: Iterable[int], workers: int | None = None) -> Iterator[GeneratedGame | GenerationError]:
        """Make sure every game of ``seeds`` is cached, ``workers`` tw-make processes at a time.

        Yields each game (or the :class:`GenerationError` of a seed that failed) as it completes, so that the
        caller can show progress; the other seeds go on when one fails.
        """
        seeds = list(seeds)
        workers = max(1, workers or os.cpu_count() or 1)
        # Threads suffice: each one waits on a tw-make subprocess.
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self.ensure, seed) for seed in seeds]
            for future in as_completed(futures):
                try:
                    yield future.result()
                except GenerationError as exc:
                    yield exc

    def command(self, seed: int) -> list[str]:
        """The tw-make command line that generates the game of ``seed`` (run with ``PYTHONHASHSEED=0``)."""
        return [
            sys.executable, str(tw_make_script()), self.config.generator, *self.config.tw_make_args(),
            "--seed", str(seed), "--output", "game.z8", "--silent",
        ]

    # ------------------------------------------------------------------ internals
    def _write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "config.json"
        if not path.is_file():
            description = {
                "generator": self.config.generator,
                "settings": dict(self.config.settings),
                "tw_make": self.config.describe(),
                "textworld": textworld_version(),
            }
            _write_atomic(path, json.dumps(description, indent=2, default=str) + "\n")

    def _generate(self, seed: int) -> None:
        workdir = Path(tempfile.mkdtemp(prefix=f".tmp-seed-{seed}-", dir=self.directory))
        try:
            command = self.command(seed)
            start = time.perf_counter()
            try:
                done = subprocess.run(
                    command, cwd=workdir, env={**os.environ, "PYTHONHASHSEED": "0"},
                    capture_output=True, text=True, timeout=self.timeout_s,
                )
            except subprocess.TimeoutExpired:
                raise GenerationError(
                    f"tw-make took over {self.timeout_s:.0f} s for seed {seed} ({self.config.describe()})"
                ) from None
            missing = [name for name in GAME_FILES if not (workdir / name).is_file()]
            if done.returncode != 0 or missing:
                output = (done.stderr.strip() or done.stdout.strip()).splitlines()
                reason = " | ".join(line.strip() for line in output[-3:] if line.strip()) or f"missing {missing}"
                raise GenerationError(
                    f"tw-make failed for seed {seed} (exit {done.returncode}): {reason}. "
                    f"Reproduce with: PYTHONHASHSEED=0 {self.config.describe()} --seed {seed} --output game.z8"
                )
            record = {
                "seed": seed,
                "command": ["tw-make", *command[2:]],
                "environment": {"PYTHONHASHSEED": "0"},
                "textworld": textworld_version(),
                "seconds": round(time.perf_counter() - start, 3),
                "json_sha256": hashlib.sha256((workdir / "game.json").read_bytes()).hexdigest(),
            }
            (workdir / "generation.json").write_text(json.dumps(record, indent=2) + "\n")
            try:
                os.rename(workdir, self.game_dir(seed))  # atomic: readers see a complete game or none
            except OSError:
                if not self.has(seed):  # not a concurrent writer that got there first
                    raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
