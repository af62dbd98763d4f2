"""``agentrl data webshop``: copy WebShop's data files into place and check that the env loads them.

WebShop's own setup (``setup.sh -d small``) downloads the files from Google Drive; users who have them (from that
script, a WebShop checkout's ``data/`` folder, or a copy such as the project's ``../shared/data/webshop``) point
this command at the folder. It copies the files the chosen catalogue needs, under WebShop's own names, into
``--dest`` (default ``$WEBSHOP_DATA`` or ``~/.cache/webshop``), then loads them as the env would and prints the
counts (products, goals per split).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer


def command(
    source: Annotated[
        Path, typer.Option(help="Folder holding WebShop's data files (or a WebShop checkout whose data/ does).")
    ],
    dest: Annotated[
        Path | None,
        typer.Option(help="Where to put them (default: $WEBSHOP_DATA, else ~/.cache/webshop)."),
    ] = None,
    catalog: Annotated[
        str, typer.Option(help="'small' (items_shuffle_1000.json, items_ins_v2_1000.json) or 'full'.")
    ] = "small",
    force: Annotated[bool, typer.Option(help="Overwrite files that already exist in the destination.")] = False,
) -> None:
    """Copy WebShop's data files (products, attributes, human instructions) into place and validate them."""
    import shutil

    from agentrl.envs.webshop.catalog import DEFAULT_DIR, ENV_VAR, HOW_TO_GET, load_catalog, resolve_files
    from agentrl.envs.webshop.env import EVAL_GOALS
    from agentrl.errors import ConfigError, MissingDataError

    if catalog not in ("small", "full"):
        raise ConfigError(f"--catalog must be 'small' or 'full', got {catalog!r}")
    source = source.expanduser()
    files = resolve_files(source, catalog) if source.is_dir() else "no such folder"
    if isinstance(files, str):
        raise MissingDataError(f"WebShop data not found in {source} ({files}). {HOW_TO_GET}")
    target = (dest or Path(os.environ.get(ENV_VAR) or DEFAULT_DIR)).expanduser()
    target.mkdir(parents=True, exist_ok=True)
    for path in (files.products, files.attributes, files.human_instructions):
        if path is None:
            continue
        destination = target / path.name
        if destination.exists() and not force:
            if destination.stat().st_size != path.stat().st_size:
                raise ConfigError(f"{destination} exists and differs from {path}; pass --force to overwrite it")
            typer.echo(f"kept    {destination}")
            continue
        if destination.resolve() != path.resolve():
            shutil.copyfile(path, destination)
        typer.echo(f"copied  {path} -> {destination}")

    copied = resolve_files(target, catalog)
    assert not isinstance(copied, str)
    world = load_catalog(copied)
    n_goals = len(world.goals)
    typer.echo(
        f"ok: {len(world.products)} products, {n_goals} synthetic goals "
        f"(eval {min(EVAL_GOALS, n_goals)}, train {max(0, n_goals - EVAL_GOALS)}) in {target}"
    )
    if target != Path(os.environ.get(ENV_VAR) or DEFAULT_DIR).expanduser():
        typer.echo(f"use it with data_dir={target} or export {ENV_VAR}={target}")
