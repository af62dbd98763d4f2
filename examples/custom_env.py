"""Train on your own environment: a combination lock, registered as a Gymnasium text env.

The lock has a secret 3-digit code derived from the task id. Each step the agent dials one digit
("dial 4"); the lock clicks when the digit is right for the current position. Three right digits open it
(reward 10); a wrong digit resets the lock to the first position. Long enough to need credit assignment,
small enough to run anywhere.

From Python (this file):      python examples/custom_env.py
From the CLI (any env name):  PYTHONPATH=examples agentrl train --env custom_env:ComboLockEnv --algo gigpo \\
                                  --model tiny-random --set agent.mode=score --set agent.think=false \\
                                  --set rollout.workers=0 --set run.iterations=2
"""

from __future__ import annotations

import sys
import zlib

import agentrl
import agentrl.envs as envs
from agentrl.testing import check_text_env


class ComboLockEnv(envs.TextEnv):
    splits = ("train", "test")
    description = "Dial a 3-digit combination; a wrong digit resets the lock"
    default_max_steps = 12

    def task_ids(self, split=None):
        split = split or self.split
        return [f"{split}-{i}" for i in range(100)]

    def _reset_task(self, task_id):
        code = zlib.crc32(task_id.encode()) % 1000
        self.code, self.position = f"{code:03d}", 0
        return "The lock is closed. Dial the first digit.", self._info()

    def _step(self, action):
        digit = action.strip().removeprefix("dial ").strip()
        if digit == self.code[self.position]:
            self.position += 1
            won = self.position == 3
            obs = "The lock opens!" if won else f"Click. Digit {self.position} is right."
        else:
            won, self.position = False, 0
            obs = "Clunk. The lock resets."
        return obs, 10.0 if won else 0.0, won, {**self._info(), "won": won}

    def _info(self):
        return {"instruction": "open the combination lock",
                "admissible_actions": [f"dial {d}" for d in range(10)],
                "anchor": f"position {self.position}"}


envs.register("ComboLock-v0", ComboLockEnv, description=ComboLockEnv.description)


def main(run_dir: str = "runs/combolock", iterations: int = 2) -> agentrl.TrainResult:
    check_text_env(envs.make("combolock"))
    return agentrl.train(
        env="combolock", algo="scpo", model="tiny-random", run_dir=run_dir,
        algo_options={"scorer": "lexical"},
        agent={"mode": "score", "think": False},
        rollout={"tasks_per_iteration": 2, "group_size": 4, "workers": 0},
        learner={"lr": 1e-3, "bf16": False},
        run={"iterations": iterations, "eval_every": iterations, "eval_episodes": 4},
    )


if __name__ == "__main__":
    result = main(*sys.argv[1:2])
    print(f"trained {result.iterations_done} iterations; metrics in {result.run_dir}/metrics.jsonl")
