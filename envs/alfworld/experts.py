"""Experts that label ALFWorld states for imitation, from what an agent can know there.

The engine's planner (``info["expert_action"]`` of ``envs.make("alfworld", expert=True)``) knows where every object
is and walks straight to it; a policy that sees only the observations cannot learn that. These experts keep the
planner for what can be seen and replace the rest:

* :func:`search_prior`: how often each kind of object is taken from each kind of receptacle in the train
  walkthroughs (information a policy can have, not a game's answer);
* :class:`SearchingExpert`: search the likely receptacles until the task's object is in sight, then the planner;
* :func:`search_prefix`: the opening search moves of a demonstration episode (at most 5 likely receptacles);
* :class:`AnyInstanceExpert`: the planner, except that it takes any instance of the task's object in reach.

A game's walkthrough (:func:`walkthrough`) names what the task needs: :func:`wanted_object`, :func:`target_kind`.
The default policy's build (``scripts/default_policy``) labels its demonstrations and DAgger states with them; what
each variant measured is in ``docs/experiments.md``. Only the standard library is imported here.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "AnyInstanceExpert",
    "SearchingExpert",
    "object_type",
    "search_prefix",
    "search_prior",
    "target_kind",
    "walkthrough",
    "wanted_object",
]


def object_type(name: str) -> str:
    """``"apple 1"`` → ``"apple"``."""
    return re.sub(r"\s+\d+$", "", name.strip())


def search_prior(games_root: Path, task_ids: list[str]) -> dict[str, dict[str, int]]:
    """How often each kind of object is taken from each kind of receptacle in the train walkthroughs."""
    prior: dict[str, Counter] = defaultdict(Counter)
    for task_id in task_ids:
        commands = json.loads((games_root / task_id / "game.tw-pddl").read_text()).get("walkthrough") or []
        for command in commands:
            match = re.match(r"take (.+?) from (.+)$", command)
            if match:
                prior[object_type(match.group(1))][object_type(match.group(2))] += 1
    return {obj: dict(counts) for obj, counts in prior.items()}


def walkthrough(env: Any, task_id: str) -> list[str]:
    """The commands of the game's stored walkthrough (``[]`` when it has none)."""
    return json.loads(Path(env.unwrapped.task(task_id).gamefile).read_text()).get("walkthrough") or []


def wanted_object(env: Any, task_id: str) -> str | None:
    """The kind of the first object the game's walkthrough takes (``"soapbar"``): what the agent must find."""
    take = next((re.match(r"take (.+?) from", c) for c in walkthrough(env, task_id) if c.startswith("take ")), None)
    return object_type(take.group(1)) if take else None


def target_kind(env: Any, task_id: str) -> str | None:
    """The kind of receptacle the game's walkthrough puts the object in (``"coffeemachine"``), if any."""
    commands = walkthrough(env, task_id)
    move = next((re.match(r"move .+? to (.+)$", c) for c in reversed(commands) if c.startswith("move ")), None)
    return object_type(move.group(1)) if move else None


class SearchingExpert:
    """The expert a policy can imitate from what it sees, for labelling states the policy reaches (DAgger).

    Until the task's object has been in sight in this episode: open the receptacle the agent stands at if it is
    closed, else go to the next receptacle not yet visited, the kinds where that object is most often found in the
    train walkthroughs first (``prior``, as the search episodes do). From then on: the engine's planner. The planner
    alone knows where the object is and goes straight there, which a policy cannot learn from its observations.
    Call it once per state, in order from the episode's first (whose "go to" actions name the receptacles to
    search), with the observation, the info and the action the policy ``proposed`` there; ``None`` when there is
    no label.

    A search has many right moves: any receptacle not yet visited where the object is found in the train games. The
    policy's own such move is the label; the expert's order is used only when the policy's move is not one of them
    (labels in the expert's order alone disagreed with most of the policy's moves: docs/experiments.md, DAgger)."""

    def __init__(self, wanted: str | None, prior: dict[str, dict[str, int]], rng: random.Random | None = None):
        self.counts = prior.get(wanted or "", {})
        self.rng = rng  # given: ties and near-ties of the prior broken at random, so that demonstrations differ
        self.order: list[str] | None = None
        self.search_labels = 0  # states labelled with a search move (before the object was in sight)
        self.sighting = re.compile(rf"\b{re.escape(wanted)} \d+") if wanted else None
        self.seen = wanted is None
        self.visited: set[str] = set()
        self.here: str | None = None
        self.closed = False

    def __call__(self, obs: str, info: dict, proposed: str | None = None) -> str | None:
        admissible = info.get("admissible_actions") or []
        if self.order is None:
            places = [a[len("go to "):] for a in admissible if a.startswith("go to ")]
            if self.rng is None:
                self.order = sorted(places, key=lambda p: (-self.counts.get(object_type(p), 0), p))
            else:
                noisy = {p: -(self.counts.get(object_type(p), 0) + self.rng.random() * 0.5) for p in places}
                self.order = sorted(places, key=lambda p: (noisy[p], self.rng.random()))
        arrival = re.match(r"You arrive at (.+?)\.", obs)
        if arrival:
            self.here = arrival.group(1)
            self.visited.add(self.here)
            self.closed = f"The {self.here} is closed" in obs
        elif self.here and obs.startswith(f"You open the {self.here}"):
            self.closed = False
        if self.sighting is not None and self.sighting.search(obs):
            self.seen = True
        if not self.seen:
            label = self._search_move(admissible, proposed)
            if label is not None:
                self.search_labels += 1
                return label
        return info.get("expert_action")

    def _search_move(self, admissible: list[str], proposed: str | None) -> str | None:
        if self.here and self.closed and f"open {self.here}" in admissible:
            return f"open {self.here}"
        if proposed in admissible and proposed.startswith("go to "):
            place = proposed[len("go to "):]
            if place not in self.visited and self.counts.get(object_type(place), 0) > 0:
                return proposed
        for place in self.order or []:
            if place not in self.visited and f"go to {place}" in admissible:
                return f"go to {place}"
        return None


class AnyInstanceExpert:
    """The engine's planner (or another labeller), except that it takes the task's object wherever one is in reach.

    The planner follows the game's walkthrough, which names one instance of the object (``tomato 1``); from a state
    where another (``tomato 2``) lies on the receptacle the agent stands at, it walks away to the named one. Nothing
    the agent sees tells the two apart, so these labels teach it to pass by the object it looks for. Here the label
    in such a state takes the first instance in reach; the planner re-plans from the new state (the object held is
    in its focus, and ALFWorld's goals are over object kinds). For two-object tasks an object on a receptacle of the
    target's kind is not taken back: it may be the first one, already put there. Not used by the default policy's
    build: trained on, these labels did not raise closed-loop success (docs/experiments.md, "Any instance").

    ``base(obs, info, proposed)`` gives the label otherwise (default: the planner, ``info["expert_action"]``);
    ``relabelled`` counts the states labelled by this rule."""

    def __init__(self, wanted: str | None, target_kind: str | None, two_objects: bool,
                 base: Callable[..., str | None] | None = None):
        self.take = re.compile(rf"take {re.escape(wanted)} \d+ from (.+)$") if wanted else None
        self.keep_off = target_kind if two_objects else None
        self.base = base
        self.relabelled = 0

    def __call__(self, obs: str, info: dict, proposed: str | None = None) -> str | None:
        label = self.base(obs, info, proposed) if self.base else info.get("expert_action")
        if label is None or self.take is None or self.take.match(label):
            return label
        for action in info.get("admissible_actions") or []:
            match = self.take.match(action)
            if match and object_type(match.group(1)) != self.keep_off:
                self.relabelled += 1
                return action
        return label


def search_prefix(env: Any, task_id: str, prior: dict[str, dict[str, int]], rng: random.Random,
                  max_visits: int = 5) -> list[str]:
    """The search actions of a search episode: visit likely receptacles (opening closed ones) until the task's
    first object is in sight. Plays them on ``env`` to know when to stop; returns them for replay as labels."""
    wanted = wanted_object(env, task_id)
    if wanted is None:
        return []
    counts = prior.get(wanted, {})
    obs, info = env.reset(options={"task_id": task_id})
    places = [a[len("go to "):] for a in info["admissible_actions"] if a.startswith("go to ")]
    # Most likely receptacle kinds first; ties (and unseen kinds) in random order, a little noise so that
    # episodes differ.
    keyed = [(-(counts.get(object_type(p), 0) + rng.random() * 0.5), rng.random(), p) for p in places]
    order = [p for *_, p in sorted(keyed) if counts.get(object_type(p), 0) > 0][:max_visits]
    sighting = re.compile(rf"\b{re.escape(wanted)} \d+")
    actions: list[str] = []
    for place in order:
        if sighting.search(obs):
            break
        for action in (f"go to {place}", f"open {place}"):
            if action not in info["admissible_actions"]:
                continue
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated or sighting.search(obs):
                return actions
    return actions
