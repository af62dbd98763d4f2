"""``agentrl data textworld``: pre-build a TextWorld task set, tw-make processes in parallel, with progress.

The games land in the same cache the env reads (:mod:`agentrl.envs.textworld.generation`), so an env built with
the same challenge, settings and cache dir plays them without generating anything. Imports stay light here;
textworld is loaded inside :func:`command`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def parse_settings(
    setting: list[str] | None = None,
    level: int | None = None,
    world_size: int | None = None,
    nb_objects: int | None = None,
    quest_length: int | None = None,
) -> dict[str, Any] | None:
    """The tw-make settings given on the command line, or None when none was (the env's defaults then apply)."""
    import yaml

    from agentrl.errors import ConfigError

    settings: dict[str, Any] = {}
    for key, value in (("level", level), ("world_size", world_size), ("nb_objects", nb_objects),
                       ("quest_length", quest_length)):
        if value is not None:
            settings[key] = value
    for item in setting or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--setting must look like KEY=VALUE (e.g. recipe=2, open=true), got {item!r}")
        settings[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return settings or None


def command(
    games: Annotated[int, typer.Option(min=1, help="Number of games (tasks) to build, from --start on.")] = 100,
    challenge: Annotated[
        str,
        typer.Option(help="tw-make generator: tw-cooking, tw-simple, tw-coin_collector, tw-treasure_hunter, custom."),
    ] = "tw-cooking",
    split: Annotated[
        str, typer.Option(help="train, eval_in_distribution or eval_out_of_distribution (tw-cooking, tw-simple).")
    ] = "train",
    start: Annotated[int, typer.Option(min=0, help="Index of the first task to build.")] = 0,
    level: Annotated[Optional[int], typer.Option(help="--level of tw-coin_collector / tw-treasure_hunter.")] = None,
    world_size: Annotated[Optional[int], typer.Option(help="--world-size (rooms) of custom games.")] = None,
    nb_objects: Annotated[Optional[int], typer.Option(help="--nb-objects of custom games.")] = None,
    quest_length: Annotated[Optional[int], typer.Option(help="--quest-length of custom games.")] = None,
    setting: Annotated[
        Optional[list[str]],
        typer.Option(help="Any other tw-make option KEY=VALUE, repeatable (--setting recipe=3 --setting cut=true)."),
    ] = None,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option(help="Game cache (default: $AGENTRL_TEXTWORLD_CACHE, else ~/.cache/agentrl/textworld)."),
    ] = None,
    workers: Annotated[
        Optional[int], typer.Option(min=1, help="Parallel tw-make processes (default: CPU count).")
    ] = None,
) -> None:
    """Pre-build TextWorld games with tw-make (seeded, PYTHONHASHSEED=0) into the env's cache, in parallel.

    Without settings a challenge uses the env's defaults; settings given replace them, as in tw-make.

    Task i is seed i (train), 1,000,000 + i (eval_in_distribution) or 2,000,000 + i (eval_out_of_distribution).

    Build the env with the same challenge, settings and cache dir to play the games.
    """
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentrl.envs.textworld.env import default_cache_dir, split_config, split_seed
    from agentrl.envs.textworld.generation import GameCache, GenerationError
    from agentrl.errors import AgentRLError

    console = Console(stderr=True)
    settings = parse_settings(setting, level, world_size, nb_objects, quest_length)
    config = split_config(challenge, settings, split)
    cache = GameCache(default_cache_dir(cache_dir), config)
    seeds = [split_seed(split, index) for index in range(start, start + games)]
    console.print(f"[bold]{config.describe()}[/] seeds {seeds[0]}..{seeds[-1]} -> {cache.directory}", highlight=False)

    generated, cached, failures, generation_s = 0, 0, [], 0.0
    began = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[detail]}"), console=console) as progress:
        bar = progress.add_task(f"{config.generator}/{split}", total=len(seeds), detail="")
        for result in cache.build(seeds, workers=workers):
            if isinstance(result, GenerationError):
                failures.append(result)
            elif result.generated:
                generated += 1
                generation_s += result.seconds
            else:
                cached += 1
            progress.update(bar, advance=1, detail=f"{generated} generated, {cached} cached, {len(failures)} failed")
    wall_s = time.perf_counter() - began
    per_game = f", {generation_s / generated:.1f} s per game" if generated else ""
    console.print(f"{len(seeds) - len(failures)} games ready in {cache.directory} ({generated} generated, {cached} "
                  f"cached, {len(failures)} failed; {wall_s:.1f} s wall{per_game})", highlight=False)
    if failures:
        shown = "; ".join(str(f) for f in failures[:3])
        raise AgentRLError(f"{len(failures)} of {len(seeds)} games could not be generated: {shown}")
