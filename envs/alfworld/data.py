"""Finding and unpacking ALFWorld games (docs/spec/environments.md §1.1, §3.2-§3.3), and the ``agentrl data alfworld`` command.

Where the games are looked for, in order: an explicit ``data_dir``, else ``$ALFWORLD_DATA``, else
``~/.cache/alfworld`` (where ``alfworld-download`` writes). A data folder holds the standard layout
``json_2.1.1/{train,valid_seen,valid_unseen}/<task dir>/<trial dir>/game.tw-pddl``; the ``json_2.1.1`` folder itself
is accepted too. Which games are playable follows ``AlfredTWEnv.collect_game_files``: paths containing ``movable``
or ``Sliced`` are skipped, the game must say ``"solvable": true``, and the task type comes from ``traj_data.json``
when it is present (user downloads) or else from the task directory name (the project's archives carry no
``traj_data.json``).

This module imports nothing heavy: the CLI imports it on every start.
"""

import functools
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Annotated, Optional

import typer

from agentrl.envs.alfworld.tasks import TASK_TYPE_LABELS, ALFWorldTask, scene_of_task_dir
from agentrl.envs.datadir import candidate_dirs, find_data_dir
from agentrl.errors import AgentRLError, MissingDataError

ENV_VAR = "ALFWORLD_DATA"
DEFAULT_DIR = "~/.cache/alfworld"
GAMES_DIRNAME = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
#: agentrl split -> ALFWorld folder (AlfredTWEnv's train / eval_in_distribution / eval_out_of_distribution).
SPLIT_FOLDERS: dict[str, str] = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
#: Playable games per split in the standard ALFWorld release (docs/spec/environments.md §1.1).
STANDARD_COUNTS: dict[str, int] = {"train": 3553, "eval_in_distribution": 140, "eval_out_of_distribution": 134}
HOW_TO_GET = (
    "Get the games with `alfworld-download` (it writes to $ALFWORLD_DATA, default ~/.cache/alfworld), or unpack an "
    "archive of json_2.1.1 (such as json_2.1.1-eval.tar.gz) with `agentrl data alfworld --archive FILE [--dest DIR]`."
)

# The "solvable" flag sits near the end of an ALFWorld 0.4 game file; reading the tail avoids parsing 85 kB of JSON
# per game (3553 train games). An escaped quote means the text is inside a string, not the key.
_SOLVABLE_KEY = re.compile(rb'(?<!\\)"solvable"\s*:\s*(true|false)')
_TAIL_BYTES = 16_384


def games_root(folder: Path) -> Path | None:
    """The ``json_2.1.1`` folder inside ``folder`` (or ``folder`` itself when it directly holds split folders)."""
    for candidate in (folder / GAMES_DIRNAME, folder):
        if any((candidate / name).is_dir() for name in SPLIT_FOLDERS.values()):
            return candidate
    return None


def _layout_problem(folder: Path) -> str | None:
    """None when ``folder`` holds at least one game in the standard layout, else why not (for ``find_data_dir``)."""
    root = games_root(folder)
    if root is None:
        return f"no {GAMES_DIRNAME}/{{{','.join(SPLIT_FOLDERS.values())}}} folders"
    for name in SPLIT_FOLDERS.values():
        for _dirpath, _dirs, files in os.walk(root / name):
            if GAME_FILE in files:
                return None
    return f"no {GAME_FILE} files under {root}"


def find_games_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The ``json_2.1.1`` folder to play from; raises :class:`MissingDataError` saying where it looked and how to
    get the games when there is none."""
    folder = find_data_dir(data_dir, ENV_VAR, DEFAULT_DIR, _layout_problem, HOW_TO_GET, "ALFWorld games")
    root = games_root(folder)
    assert root is not None  # _layout_problem accepted the folder
    return root


def data_status() -> str | None:
    """None when games are found at the default locations ($ALFWORLD_DATA, ~/.cache/alfworld), else why not."""
    try:
        find_games_root(None)
    except MissingDataError as exc:
        return str(exc)
    return None


def _is_solvable(gamefile: Path) -> bool:
    with open(gamefile, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - _TAIL_BYTES))
        found = _SOLVABLE_KEY.findall(f.read())
    if found:
        return found[-1] == b"true"
    with open(gamefile, encoding="utf-8") as f:  # another key order: parse it all
        return json.load(f).get("solvable") is True  # AlfredTWEnv skips games without the key


def _task_type(trial_dir: Path, task_dir_name: str) -> str:
    traj = trial_dir / TRAJ_FILE
    if traj.is_file():
        with open(traj, encoding="utf-8") as f:
            return str(json.load(f)["task_type"])
    return task_dir_name.split("-", 1)[0]


def scan_split(root: Path, split: str) -> tuple[ALFWorldTask, ...]:
    """The playable games of ``split`` under the games root, sorted by task id; empty when the folder is absent.

    Cached per process (keyed by the folder's path and modification time), since every env of a worker asks.
    """
    folder = root / SPLIT_FOLDERS[split]
    try:
        mtime = folder.stat().st_mtime_ns
    except FileNotFoundError:
        return ()
    return _scan_folder(str(root), SPLIT_FOLDERS[split], mtime)


@functools.lru_cache(maxsize=32)
def _scan_folder(root: str, folder_name: str, _mtime: int) -> tuple[ALFWorldTask, ...]:
    games = []
    for dirpath, dirnames, filenames in os.walk(Path(root) / folder_name):
        dirnames.sort()
        if GAME_FILE not in filenames:
            continue
        trial_dir = Path(dirpath)
        task_id = trial_dir.relative_to(root).as_posix()
        if "movable" in task_id or "Sliced" in task_id:  # not supported by the text engine (AlfredTWEnv)
            continue
        gamefile = trial_dir / GAME_FILE
        task_dir_name = trial_dir.parent.name
        task_type = _task_type(trial_dir, task_dir_name)
        if task_type not in TASK_TYPE_LABELS or not _is_solvable(gamefile):
            continue
        games.append(ALFWorldTask(task_id, gamefile, task_type, scene_of_task_dir(task_dir_name)))
    games.sort(key=lambda t: t.task_id)
    return tuple(games)


# ------------------------------------------------------------------------------------------- unpacking archives
def _archive_members(archive: Path) -> list[str]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            return zf.namelist()
    try:
        with tarfile.open(archive) as tf:
            return tf.getnames()
    except tarfile.TarError as exc:
        raise AgentRLError(f"{archive} is neither a tar nor a zip archive ({exc})") from exc


def _extract(archive: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                parts = PurePosixPath(name).parts
                if name.startswith("/") or ".." in parts:
                    raise AgentRLError(f"refusing to unpack {archive}: member {name!r} would land outside {target}")
            zf.extractall(target)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(target, filter="data")  # the "data" filter refuses absolute paths, links out, devices


def unpack_archive(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack an archive of ALFWorld games into ``dest`` so that they lie in ``dest/json_2.1.1/<split>/...``.

    Accepts tar (``.tar.gz``, ``.tgz``, ...) and zip archives whose top level is ``json_2.1.1/`` (like the project's
    ``json_2.1.1-eval.tar.gz`` and alfworld's release zips) or the split folders themselves. Returns the games root.
    """
    archive, dest = Path(archive).expanduser(), Path(dest).expanduser()
    if not archive.is_file():
        raise MissingDataError(f"archive {archive} not found")
    tops = {parts[0] for parts in (PurePosixPath(name.removeprefix("./")).parts for name in _archive_members(archive))
            if parts}
    if GAMES_DIRNAME in tops:
        _extract(archive, dest)
    elif tops and tops <= set(SPLIT_FOLDERS.values()) | {"valid_train"}:
        _extract(archive, dest / GAMES_DIRNAME)
    else:
        shown = ", ".join(sorted(tops)[:5]) or "nothing"
        raise AgentRLError(
            f"{archive} does not hold ALFWorld games: expected a top-level {GAMES_DIRNAME}/ folder or split folders "
            f"({', '.join(SPLIT_FOLDERS.values())}), found {shown}"
        )
    return dest / GAMES_DIRNAME


def split_summary(root: Path) -> dict[str, int]:
    """Playable games per agentrl split under a games root (0 for an absent split folder)."""
    return {split: len(scan_split(root, split)) for split in SPLIT_FOLDERS}


def command(
    archive: Annotated[
        Optional[Path],
        typer.Option(help="A .tar.gz/.tgz/.zip archive of ALFWorld games (top level json_2.1.1/) to unpack."),
    ] = None,
    dest: Annotated[
        Optional[Path],
        typer.Option(help="Folder to unpack into (without --archive: the data folder to inspect); "
                          "default $ALFWORLD_DATA, else ~/.cache/alfworld."),
    ] = None,
) -> None:
    """Unpack ALFWorld games from an archive, or show where the games are found and how many each split has."""
    if archive is not None:
        target = dest if dest is not None else candidate_dirs(None, ENV_VAR, DEFAULT_DIR)[0]
        root = unpack_archive(archive, target)
        typer.echo(f"unpacked {archive} into {root}")
        if target.expanduser().resolve() not in {p.expanduser().resolve()
                                                 for p in candidate_dirs(None, ENV_VAR, DEFAULT_DIR)}:
            typer.echo(f"this is not a default location: pass data_dir={target} or set {ENV_VAR}={target}")
    else:
        root = find_games_root(dest)
        typer.echo(f"ALFWorld games found in {root}")
    for split, count in split_summary(root).items():
        folder = SPLIT_FOLDERS[split]
        note = "" if (root / folder).is_dir() else " (folder absent)"
        typer.echo(f"  {split:<26} {folder + '/':<14} {count:>5} games{note}")
