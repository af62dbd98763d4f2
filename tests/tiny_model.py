"""The tiny random-weight Llama of :mod:`agentrl.models` (``tiny-random``), cached per test process.

Nothing here touches a model hub. Use :func:`tiny_model_dir` for a per-process cached folder (built once, < 1 s), or
:func:`save_tiny_model` to write a fresh one (for example with a different seed) into a folder of your own::

    from tiny_model import tiny_model_dir
    policy = HFPolicy(tiny_model_dir())
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from agentrl.models.tiny import (  # noqa: F401  (re-exported for the tests)
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    OUTPUT_SCALE,
    PAD,
    build_tiny_model,
    build_tiny_tokenizer,
    save_tiny_model,
)


@functools.cache
def tiny_model_dir(seed: int = 0) -> Path:
    """A per-process cached folder holding the tiny model (``seed``) and tokenizer; removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="agentrl-tiny-model-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return save_tiny_model(root / f"tiny-llama-seed{seed}", seed=seed)
