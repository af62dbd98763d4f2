"""The recipe of agentrl's embedded default CPU policy, ``agentrl-tiny`` (``scripts/build_default_policy.py``).

One module per stage, in the order the data flows (the table and the driver are in :mod:`default_policy.stages`):

* :mod:`default_policy.collect`: expert demonstrations of the envs, rendered as the ReAct agent prompts;
* :mod:`default_policy.tokenizer`: a byte-level BPE trained on them;
* :mod:`default_policy.train`: a small Llama trained on them from scratch by SFT;
* :mod:`default_policy.dagger`: optional DAgger rounds on ALFWorld;
* :mod:`default_policy.evaluate`: success per task type, of the policy and of scripted agents;
* :mod:`default_policy.package` and :mod:`default_policy.card`: the packaged policy and its model card.

:mod:`default_policy.common` holds what they share and :mod:`default_policy.options` the command line. The ALFWorld
experts that label the demonstrations are the env's own, :mod:`agentrl.envs.alfworld.experts`.
"""

import os

# Every process of the build, spawned workers included, loads models from local folders only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
