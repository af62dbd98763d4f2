#!/usr/bin/env bash
# verl and SkyRL for the integration tests, into the active venv, on CPU, leaving its torch/transformers as they are.
# Their own requirements cannot be met next to agentrl's (verl 0.9.1: transformers<5.11 and, resolved fresh, a CUDA
# torch 2.14; skyrl 0.3.0: transformers<=5.8, peft==0.18.1, Python 3.12), so each goes in with --no-deps plus the
# few packages its advantage-estimator modules import (docs/integrations.md, "Installing"). TRL is in the dev extra.
set -euo pipefail
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
pip freeze | grep -iE '^(torch|transformers|numpy|ray|peft)==' > "$pins"
pip install -q --no-deps "verl==0.9.1" "skyrl==0.3.0" "skyrl-gym==0.4.0"
# verl.trainer.ppo.core_algos + DataProto: tensordict, omegaconf, codetiming; its ray_trainer adds the other four.
# skyrl's ppo_utils: jaxtyping, loguru.
pip install -q -c "$pins" "tensordict>=0.8,<=0.10.0,!=0.9.0" omegaconf codetiming torchdata cachetools fastapi uvicorn \
  jaxtyping loguru
