"""WebShop (``agentrl/WebShop-v0``, alias ``webshop``): a faithful text WebShop on the real product files.

>>> from agentrl.envs.webshop import WebShopEnv
>>> env = WebShopEnv(data_dir="../shared/data/webshop")          # or $WEBSHOP_DATA, or ~/.cache/webshop
>>> obs, info = env.reset(options={"split": "eval", "task_index": 0})
>>> obs.startswith("WebShop [SEP] Instruction: [SEP] ")
True

Modules: :mod:`.catalog` (data files, products, prices, goals), :mod:`.search` (BM25), :mod:`.pages` (page text),
:mod:`.session` (actions), :mod:`.reward` (the original score), :mod:`.expert` (scripted expert), :mod:`.env` (the
Gymnasium env) and :mod:`.data` (``agentrl data webshop``). Heavy modules load on first use, so that listing the
environments stays fast. See docs/webshop.md for what is faithful and what is approximated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv", "data_status"]


def data_status() -> str | None:
    """None when the 1k WebShop files are at ``$WEBSHOP_DATA`` or ``~/.cache/webshop``, else a one-line reason."""
    from agentrl.envs.webshop.catalog import default_data_status

    return default_data_status()


def __getattr__(name: str) -> Any:
    if name == "WebShopEnv":
        from agentrl.envs.webshop.env import WebShopEnv

        return WebShopEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
