#!/usr/bin/env bash
# GPU check: the learner on CUDA in bf16 with a model built from config; tokens/s of generation (HF, and vLLM when
# installed) and of training; then `agentrl train` end to end on the GPU. Under 8 minutes on one H200 (hard limit:
# 480 s). Results: bench/results/gpu_check.json. Fails loudly (exit 1) without a CUDA GPU.
#
#   pip install -e ".[vllm]"        # optional: adds the vLLM phase (agentrl itself needs a CUDA torch here)
#   bash bench/gpu_check.sh
#
# Extra arguments go to bench/gpu_check.py (e.g. --hidden 2048 --layers 16 for a larger model).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python}"

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "ERROR: bench/gpu_check.sh needs a CUDA GPU, and torch sees none." >&2
  "$PYTHON" -c "import torch; print(f'  torch {torch.__version__}, CUDA build {torch.version.cuda}, devices {torch.cuda.device_count()}')" >&2 || true
  command -v nvidia-smi >/dev/null && nvidia-smi -L >&2 || echo "  nvidia-smi: not found" >&2
  echo "  (a +cpu torch cannot use a GPU: install a CUDA build of torch first, then pip install -e .)" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec timeout 480 "$PYTHON" bench/gpu_check.py "$@"
