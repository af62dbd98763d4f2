"""Environment speed, all envs at once: runs every ``bench/envs_<name>.py`` and writes their numbers as JSON.

    python bench/envs.py                       # every env
    python bench/envs.py webshop crafting      # a selection

Each ``envs_<name>.py`` has a ``main()`` that prints its own table and returns a dict. The built-in Crafting env is
measured here. The combined result goes to ``bench/results/envs.json`` so the next run can be compared with this one.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def crafting() -> dict:
    import agentrl.envs as envs

    env = envs.make("crafting", expert=True)
    start, steps = time.perf_counter(), 0
    for index in range(500):
        _, info = env.reset(options={"task_index": index})
        while True:
            _, _, terminated, truncated, info = env.step(info["expert_action"])
            steps += 1
            if terminated or truncated:
                break
    seconds = time.perf_counter() - start
    result = {"episodes": 500, "steps": steps, "steps_per_s": steps / seconds, "us_per_step": 1e6 * seconds / steps}
    print(f"crafting: {result['steps_per_s']:.0f} steps/s ({result['us_per_step']:.0f} us/step incl. resets)")
    return result


def load_bench(name: str):
    path = HERE / f"envs_{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_envs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(names: list[str]) -> dict:
    available = ["crafting"] + sorted(p.stem.removeprefix("envs_") for p in HERE.glob("envs_*.py"))
    names = names or available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SystemExit(f"unknown env bench {unknown}; known: {', '.join(available)}")
    results = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                           "processor": platform.processor()}}
    for name in names:
        print(f"== {name}", flush=True)
        results[name] = crafting() if name == "crafting" else load_bench(name).main()
    (HERE / "results").mkdir(exist_ok=True)
    out = HERE / "results" / "envs.json"
    previous = json.loads(out.read_text()) if out.is_file() else {}
    out.write_text(json.dumps({**previous, **results}, indent=1, default=str))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
