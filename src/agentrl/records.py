"""Plain records that flow between the stages: a policy's reply, a learner's row, an episode of a rollout.

They hold token ids, floats and text only and import nothing heavy, so any stage (and any other trainer) can build
and read them without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.algos.types import Trajectory
from agentrl.config import DEFAULT_CHOICE_RULE

__all__ = ["Choice", "Generation", "RolloutBatch", "RolloutTrajectory", "TrainingSample"]


@dataclass
class Generation:
    """One sampled reply."""

    prompt_ids: list[int]
    """The prompt the model actually saw (after left truncation)."""
    response_ids: list[int]
    """Sampled ids, kept as sampled (the end-of-turn token included when one was produced)."""
    text: str
    """``response_ids`` decoded with special tokens skipped."""
    logprobs: list[float]
    """One per response token: ``log_softmax(logits / temperature)`` at the sampled id (module docstring)."""
    truncated: bool
    """The reply hit ``max_new_tokens`` without an end-of-turn token."""
    prompt_truncated: bool = False
    """The prompt was longer than ``max_prompt_tokens`` and lost its beginning."""


@dataclass
class Choice:
    """The outcome of scoring one prompt's candidate replies (:meth:`HFPolicy.score_choices`)."""

    index: int
    """The chosen candidate."""
    text: str
    """The chosen candidate string."""
    response_ids: list[int]
    """The chosen candidate's token ids (``choice_ids[index]``)."""
    logprob: float
    """``log softmax(score / temperature)[index]`` (score: ``seq_logliks`` under ``rule``): the log-probability with
    which it was chosen."""
    choice_ids: list[list[int]]
    """Every candidate's token ids, in order; the learner recomputes the same distribution from these."""
    probs: list[float]
    """The policy over the candidates (sums to 1)."""
    seq_logliks: list[float]
    """Each candidate's sequence log-likelihood under the model (temperature 1)."""
    prompt_ids: list[int] = field(default_factory=list)
    rule: str = DEFAULT_CHOICE_RULE
    """How the scores were made from the log-likelihoods (``agentrl.config.CHOICE_RULES``)."""


@dataclass
class TrainingSample:
    """One (trajectory, step) row."""

    prompt_ids: list[int]
    response_ids: list[int]
    """The ids as sampled (scoring mode: the chosen candidate's ids)."""
    old_logprobs: list[float]
    """One per response token (scoring mode: one value, the chosen candidate's log-probability)."""
    advantage: float
    choice_ids: list[list[int]] | None = None
    """Scoring-mode rows: every candidate's ids, as in :attr:`agentrl.policy.Choice.choice_ids`."""
    choice_index: int | None = None
    choice_rule: str = DEFAULT_CHOICE_RULE
    """Scoring-mode rows: the rule the candidates were scored by; the learner recomputes the policy with it."""

    @classmethod
    def from_generation(cls, generation: Generation, advantage: float) -> TrainingSample:
        """A row for a freely generated reply."""
        return cls(prompt_ids=list(generation.prompt_ids), response_ids=list(generation.response_ids),
                   old_logprobs=list(generation.logprobs), advantage=float(advantage))

    @classmethod
    def from_choice(cls, choice: Choice, advantage: float) -> TrainingSample:
        """A row for a reply chosen by admissible-action scoring."""
        return cls(prompt_ids=list(choice.prompt_ids), response_ids=list(choice.response_ids),
                   old_logprobs=[float(choice.logprob)], advantage=float(advantage),
                   choice_ids=[list(ids) for ids in choice.choice_ids], choice_index=int(choice.index),
                   choice_rule=choice.rule)

    @property
    def is_choice(self) -> bool:
        return self.choice_ids is not None

    @property
    def width(self) -> int:
        """Tokens in this row's forward pass: prompt and reply (scoring mode: prompt and every candidate, packed)."""
        if self.is_choice:
            return len(self.prompt_ids) + sum(len(ids) for ids in self.choice_ids)
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def n_loss_tokens(self) -> int:
        """Tokens this row contributes to the token mean (1 for a scoring-mode row)."""
        return 1 if self.is_choice else len(self.response_ids)

    def validate(self) -> None:
        if not self.prompt_ids:
            raise ValueError("a training sample needs a non-empty prompt")
        if self.is_choice:
            if self.choice_index is None or not 0 <= self.choice_index < len(self.choice_ids):
                raise ValueError(f"choice_index {self.choice_index} is not an index into {len(self.choice_ids)} "
                                 "candidates")
            if len(self.old_logprobs) != 1:
                raise ValueError("a scoring-mode sample has exactly one old log-prob (that of the chosen candidate)")
        else:
            if not self.response_ids:
                raise ValueError("a training sample needs at least one response token")
            if len(self.old_logprobs) != len(self.response_ids):
                raise ValueError(f"{len(self.old_logprobs)} old log-probs for {len(self.response_ids)} response "
                                 "tokens")


@dataclass
class RolloutTrajectory:
    """One episode: the algorithms' view (``trajectory``) and the learner's rows (``samples``, one per step)."""

    trajectory: Trajectory
    samples: list[TrainingSample]
    task_id: str
    task_type: str
    replies: list[str] = field(default_factory=list)  # the policy's raw reply per step
    score: float | None = None
    truncated_by_budget: bool = False
    #: the env planner's distance to the goal before each step and after the last (``info["distance_to_goal"]``,
    #: for envs built with ``progress_labels=True``); empty when the env gives none
    distances: list[float | None] = field(default_factory=list)


@dataclass
class RolloutBatch:
    trajectories: list[RolloutTrajectory]
    dropped: int = 0  # trajectories lost to env failures
    failures: list[tuple[str, str]] = field(default_factory=list)  # (task_id, error) of dropped trajectories
    stats: dict[str, float] = field(default_factory=dict)
