"""A plain Gymnasium text env, written as a user would: no agentrl import at all.

Errands: fetch an object from one room of a small house and put it down in another. The reset seed draws the
house, the object and the rooms; ``info`` lists the admissible actions (of very different lengths: ``look`` next to
``put the watering can in the garden``), says when the errand is done (``won``), gives the instruction and the
shortest next move (``expert_action``). agentrl trains it as it is: tasks are reset seeds, the anchor is the
observation.

    PYTHONPATH=examples agentrl check-env errands_env:Errands
    PYTHONPATH=examples agentrl eval --env errands_env:Errands --model agentrl-tiny --episodes 20
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces

ROOMS = ("kitchen", "bedroom", "garage", "garden", "bathroom", "living room")
OBJECTS = ("red mug", "hammer", "watering can", "towel", "book", "flashlight", "blue pillow", "toothbrush")


class Errands(gym.Env):
    """Bring the asked-for object from where it lies to the asked-for room (reward 1 on success)."""

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 15):
        self.observation_space = spaces.Text(1000, charset=" abcdefghijklmnopqrstuvwxyz.,:")
        self.action_space = spaces.Text(100, charset=" abcdefghijklmnopqrstuvwxyz")
        self.max_steps = max_steps

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = self.np_random
        self.objects = [str(o) for o in rng.choice(OBJECTS, size=3, replace=False)]
        self.place = {o: str(rng.choice(ROOMS)) for o in self.objects}
        self.target = self.objects[0]
        self.goal = str(rng.choice([r for r in ROOMS if r != self.place[self.target]]))
        self.room, self.holding, self.steps = str(rng.choice(ROOMS)), None, 0
        return self._observation(f"You are in the {self.room}."), self._info()

    def step(self, action):
        self.steps += 1
        reward, done = 0.0, False
        if action.startswith("go to the ") and action[10:] in ROOMS:
            self.room = action[10:]
            text = f"You walk to the {self.room}."
        elif action.startswith("take the ") and self.place.get(action[9:]) == self.room and self.holding is None:
            self.holding = action[9:]
            del self.place[self.holding]
            text = f"You pick up the {self.holding}."
        elif self.holding and action == f"put the {self.holding} in the {self.room}":
            self.place[self.holding], done = self.room, self.holding == self.target and self.room == self.goal
            text = f"You put down the {self.holding}." + (" Errand done!" if done else "")
            self.holding, reward = None, float(done)
        elif action == "look":
            text = "You look around."
        else:
            text = "Nothing happens."
        truncated = not done and self.steps >= self.max_steps
        return self._observation(text), reward, done, truncated, self._info(won=done)

    def _observation(self, text: str) -> str:
        here = [o for o, r in self.place.items() if r == self.room]
        seen = f" You see: {', '.join('the ' + o for o in here)}." if here else " The room is empty."
        held = f" You hold the {self.holding}." if self.holding else ""
        return text + seen + held

    def _info(self, won: bool = False) -> dict:
        actions = ["look"] + [f"go to the {r}" for r in ROOMS if r != self.room]
        if self.holding is None:
            actions += [f"take the {o}" for o, r in self.place.items() if r == self.room]
        else:
            actions.append(f"put the {self.holding} in the {self.room}")
        return {"admissible_actions": actions, "won": won, "expert_action": self._expert(),
                "instruction": f"bring the {self.target} to the {self.goal}"}

    def _expert(self) -> str:
        """The shortest errand from here (agentrl reads ``expert_action`` for check-env, SFT and benchmarks)."""
        if self.holding == self.target:
            return f"put the {self.target} in the {self.room}" if self.room == self.goal else f"go to the {self.goal}"
        if self.holding is not None:
            return f"put the {self.holding} in the {self.room}"
        where = self.place[self.target]
        return f"take the {self.target}" if where == self.room else f"go to the {where}"
