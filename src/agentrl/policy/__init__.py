"""The policy: a causal language model that turns prompts into sampled replies and their log-probabilities.

Data flows env → agent → **policy** → trajectory → algorithm → learner. The policy knows token ids and text only;
it never imports environments or agents.

:class:`HFPolicy` is the default backend (Hugging Face ``transformers``). It offers two ways to act:

* :meth:`HFPolicy.generate` — free generation. The prompts are encoded (on CPU each distinct prompt on its own,
  without padding, and a prefix that several share once: :data:`PREFILL_MODES`), their KV caches laid out
  left-padded side by side in a preallocated cache, and the batch is decoded token by token under
  ``torch.inference_mode``. Each reply comes back as the sampled token ids (kept exactly as sampled; the learner
  trains on these ids, never on a re-tokenization of the text), the decoded text and one log-probability per
  token.
* :meth:`HFPolicy.score_choices` — admissible-action scoring. For each prompt, every candidate reply string is
  scored by its sequence log-likelihood in a forward pass (each prompt is packed with all its candidates into one
  row under a block attention mask, so the prompt is encoded once; one prompt per forward on CPU, where that is
  fastest, and identical prompts once); the policy is the softmax of the candidates' scores (the summed or the
  per-token mean log-likelihood, ``agent.choice_rule``) divided by a temperature, and an index is sampled from it.
  The learner recomputes exactly this distribution with the current weights (:func:`choice_log_probs`), so the PPO
  ratio compares like with like.

Which log-probability is reported
    For generation with temperature ``T > 0`` every token's log-probability is ``log_softmax(logits / T)`` at the
    sampled id: the temperature-adjusted distribution the token was sampled from. With the default
    ``top_p = 1`` and ``top_k = -1`` this is exactly the sampling distribution. With nucleus or top-k truncation
    the token is drawn from the truncated, renormalised distribution, but the reported value stays the
    untruncated ``log_softmax(logits / T)``, as in verl (which recomputes old log-probs with a plain forward at
    temperature ``T``): that is the quantity the learner can recompute, so the ratio starts at 1. With ``T = 0``
    (greedy) the reported value is the plain ``log_softmax(logits)``. The learner recomputes log-probs at
    ``LearnerConfig.temperature``, which must therefore equal the rollout temperature.

Weights are shared, not copied
    The learner optimises ``policy.model`` in place, and generation runs on that same module, so every optimizer
    step is visible to the next :meth:`~HFPolicy.generate` call with no synchronisation. A backend that keeps its
    own copy of the weights (vLLM) implements the same interface and receives updates through
    :meth:`HFPolicy.state_dict_for_inference` / :meth:`HFPolicy.load_weights`.

CPU threads
    See :func:`configure_cpu_threads` (:mod:`agentrl.hardware`); the library never changes the global thread count
    by itself.

Where things live
    :mod:`agentrl.policy.hf` loads models and holds :class:`HFPolicy`; :mod:`agentrl.policy.logprobs` the
    log-probability maths and the transformers shims that the learner shares; :mod:`agentrl.policy.prefill` the
    KV-cache layouts and :data:`PREFILL_MODES`. Every public name is importable from ``agentrl.policy`` itself, and
    so are the records (:mod:`agentrl.records`), the settings (:mod:`agentrl.config`) and the thread helpers
    (:mod:`agentrl.hardware`) the policy uses.
"""

from __future__ import annotations

from agentrl.config import GenerationConfig, LoraSettings
from agentrl.hardware import configure_cpu_threads, default_cpu_threads
from agentrl.policy.hf import HFPolicy, quiet_progress_bars
from agentrl.policy.logprobs import (
    choice_and_prompt_logliks,
    choice_log_probs,
    choice_policy,
    choice_scores,
    choice_sequence_logliks,
    token_log_probs,
)
from agentrl.policy.prefill import PREFILL_MODES
from agentrl.records import Choice, Generation

__all__ = [
    "PREFILL_MODES",
    "Choice",
    "Generation",
    "GenerationConfig",
    "HFPolicy",
    "quiet_progress_bars",
    "LoraSettings",
    "choice_and_prompt_logliks",
    "choice_log_probs",
    "choice_policy",
    "choice_scores",
    "choice_sequence_logliks",
    "configure_cpu_threads",
    "default_cpu_threads",
    "token_log_probs",
]
