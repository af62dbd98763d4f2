"""The parts of ``bench/throughput.py`` (see its docstring): what each measures, and the paths and targets they share.

* :mod:`throughput_parts.machine`: the machine and its load;
* :mod:`throughput_parts.prompts`: real ReAct prompts of env states, and the small models that read them;
* :mod:`throughput_parts.generation`: part 1, batched vs one-at-a-time generation;
* :mod:`throughput_parts.phases`: part 2, where a trainer iteration's wall time goes, and the ALFWorld parse memo;
* :mod:`throughput_parts.report`: headline numbers, targets, and the results file.

Env workers are spawned processes that re-import ``bench/throughput.py`` (and so these modules) as ``__mp_main__``:
their top level is the standard library only, so that the workers do not import torch (envpool.py: "workers import
no torch").
"""

from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/
REPO = HERE.parent
RESULT = HERE / "results" / "throughput.json"
SHARED_ALFWORLD = REPO.parent / "shared" / "data" / "alfworld"
ALFWORLD_CONFIG = REPO / "examples" / "configs" / "alfworld-cpu.yaml"
TARGET_RATIO, TARGET_N, TARGET_SHARE = 4.0, 16, 0.15
PHASES = ("generation", "env_step", "env_reset", "credit_assignment", "learner")
