"""Text environments: the :class:`TextEnv` contract, the registry, and the built-in environments.

>>> import agentrl.envs as envs
>>> env = envs.make("crafting")                     # or gymnasium.make("agentrl/Crafting-v0")
>>> obs, info = env.reset(options={"split": "train", "task_index": 0})
>>> info["admissible_actions"][:2]
['go to forest', 'go to mine']

Register your own with :func:`register` (or the ``agentrl.envs`` entry-point group of your package).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from agentrl.envs.core import INFO_KEYS, PrintableText, TextEnv
from agentrl.envs.registration import ENTRY_POINT_GROUP, EnvEntry, list_envs, make, register, resolve

__all__ = [
    "INFO_KEYS",
    "ENTRY_POINT_GROUP",
    "EnvEntry",
    "PrintableText",
    "TextEnv",
    "list_envs",
    "make",
    "register",
    "resolve",
]


def _data_status_of(module: str) -> Callable[[], str | None]:
    """Defer to ``<module>.data_status()`` so that listing envs imports no engine until asked."""

    def check() -> str | None:
        return importlib.import_module(module).data_status()

    return check


register(
    "Crafting-v0",
    "agentrl.envs.crafting:CraftingEnv",
    alias="crafting",
    description="Built-in long-horizon crafting world: 5-15 steps, sparse reward, partial progress, no data needed",
)
register(
    "ALFWorld-v0",
    "agentrl.envs.alfworld:ALFWorldEnv",
    alias="alfworld",
    description="ALFWorld household tasks on the real TextWorld-PDDL engine (3553 train games, 140 + 134 eval)",
    data_check=_data_status_of("agentrl.envs.alfworld"),
)
register(
    "WebShop-v0",
    "agentrl.envs.webshop:WebShopEnv",
    alias="webshop",
    description="WebShop on the 1,000-product set: BM25 search, product pages, the original reward",
    data_check=_data_status_of("agentrl.envs.webshop"),
)
register(
    "TextWorld-v0",
    "agentrl.envs.textworld:TextWorldEnv",
    alias="textworld",
    description="TextWorld games generated offline with tw-make (seeded, cached on disk)",
    data_check=_data_status_of("agentrl.envs.textworld"),
)
