"""TextWorld games generated offline with textworld 1.7's ``tw-make`` (``agentrl/TextWorld-v0``, alias ``textworld``).

>>> from agentrl import envs
>>> env = envs.make("textworld", challenge="tw-coin_collector", settings={"level": 1}, expert=True)
>>> obs, info = env.reset(options={"split": "train", "task_index": 0})   # generates the game on first use
>>> info["instruction"], info["expert_action"]
('Your objective is to retrieve the coin from the floor of the cellar.', 'take coin')
>>> env.step("take coin")[1:4]     # reward, terminated, truncated
(10.0, True, False)

Pre-build a task set in parallel: ``agentrl data textworld --challenge tw-cooking --games 1000``. See
:mod:`agentrl.envs.textworld.env` for splits, reward and observations, and
:mod:`agentrl.envs.textworld.generation` for generation and the cache. textworld itself is imported only when a
game is generated or played, so importing this package is cheap.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from agentrl.envs.textworld.env import TextWorldEnv
from agentrl.envs.textworld.generation import GENERATORS, GameCache, GameConfig, GenerationError

__all__ = ["GENERATORS", "GameCache", "GameConfig", "GenerationError", "TextWorldEnv", "data_status"]


def data_status() -> str | None:
    """None when games can be generated and played here, else why not (one line).

    TextWorld needs no downloaded data: games are generated on first use. This checks, without importing
    textworld, that its engine pieces are installed: the package with its tw-make script and bundled Inform 7
    compilers (docs/spec/environments.md §4), and jericho, which runs the compiled games.
    """
    from agentrl.envs.textworld.generation import tw_make_script
    from agentrl.errors import MissingDataError

    spec = importlib.util.find_spec("textworld")
    if spec is None or spec.origin is None:
        return "textworld is not installed (pip install textworld==1.7.0)"
    if importlib.util.find_spec("jericho") is None:
        return "jericho (textworld's game interpreter) is not installed"
    inform_home = os.environ.get("INFORM_HOME") or Path(spec.origin).parent / "thirdparty" / "inform7-6M62"
    compilers = Path(inform_home) / "share" / "inform7" / "Compilers"
    for name in ("ni", "inform6"):
        if not os.access(compilers / name, os.X_OK):
            return f"textworld's Inform 7 compiler {compilers / name} is missing or not executable"
    try:
        tw_make_script()
    except MissingDataError as exc:
        return str(exc)
    return None
