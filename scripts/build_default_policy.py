"""Build agentrl's embedded default CPU policy, agentrl-tiny, end to end and seeded.

Expert demonstrations of agentrl's own envs, a byte-level BPE, a small Llama trained on them from scratch by SFT,
evaluation, and the package (bf16 weights, tokenizer, agentrl.json, model card) in src/agentrl/assets/policies/tiny.
Every stage caches its output under --work, so a rerun resumes. The recipe is scripts/default_policy/; the variants
that were tried and lost, with their numbers, are in docs/experiments.md.

    python scripts/build_default_policy.py                       # all stages (about 2 hours on 2 cores)
    python scripts/build_default_policy.py --stages collect      # one stage
    python scripts/build_default_policy.py --stages eval --eval-jobs alfworld-unseen-greedy
    python scripts/build_default_policy.py --work runs/tiny-card --stages eval,card --eval-packaged \\
        --eval-jobs webshop-score,crafting-score,textworld-score   # results on the packaged weights, into its card
"""

from default_policy.stages import main

if __name__ == "__main__":
    main(description=__doc__)
