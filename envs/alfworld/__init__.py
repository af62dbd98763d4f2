"""ALFWorld (``agentrl/ALFWorld-v0``, alias ``alfworld``) on the real TextWorld-PDDL engine.

>>> from agentrl.envs.alfworld import ALFWorldEnv
>>> env = ALFWorldEnv(split="eval_out_of_distribution", data_dir="DIR")   # DIR/json_2.1.1/valid_unseen/...
>>> obs, info = env.reset(options={"task_index": 0})
>>> info["task_type"], info["admissible_actions"][:2]
('Look', ['go to bed 1', 'go to desk 1'])

Importing this package is cheap: textworld, fast-downward and alfworld are imported on the first ``reset()``.
"""

from agentrl.envs.alfworld.data import data_status, find_games_root, unpack_archive
from agentrl.envs.alfworld.env import ALFWorldEnv
from agentrl.envs.alfworld.experts import AnyInstanceExpert, SearchingExpert
from agentrl.envs.alfworld.tasks import (
    TABLE_COLUMNS,
    TASK_TYPE_LABELS,
    TASK_TYPES,
    ALFWorldTask,
    room_type,
    success_by_task_type,
    task_type_label,
)

__all__ = [
    "ALFWorldEnv",
    "ALFWorldTask",
    "AnyInstanceExpert",
    "SearchingExpert",
    "TABLE_COLUMNS",
    "TASK_TYPES",
    "TASK_TYPE_LABELS",
    "data_status",
    "find_games_root",
    "room_type",
    "success_by_task_type",
    "task_type_label",
    "unpack_archive",
]
