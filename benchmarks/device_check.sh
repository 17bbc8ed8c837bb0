#!/usr/bin/env bash
# GPU check on one CUDA device, two steps, at most LIMIT_S + SECONDS_LIMIT_S (default 360 + 300 s) on an H200
# (the CPU smoke: 360 + 900 s; about 8 minutes on 2 loaded cores):
# 1. engine throughput (benchmarks/device_check.py): flasheval's HFBackend against lm-eval's HFLM(pretrained=<the
#    same loaded model>) on the same requests (HellaSwag + ARC-Easy, 10-shot), in bf16, for a random-init Llama of
#    ~1B (hidden 2048, 16 layers; 200 examples per task), one of Llama-3-8B's shapes (100 per task) and, where its
#    GGUF is installed, SmolLM2-135M (200 per task): examples/s, tokens/s and the fraction of the dense bf16 peak
#    (PEAK_FLOPS, default 989e12). A model's figures print as it finishes.
# 2. placement against evaluate in seconds (benchmarks/seconds_saved.py --source random): a pool of 6 models made
#    in the script (a random-init Llama of hidden 2048 x 16 layers from a seeded torch.Generator, and noisy copies),
#    4 tasks x SECONDS_EXAMPLES (default 200) examples; 3 held-out noisy copies each placed (flasheval.place) and
#    evaluated on every reference example (flasheval.evaluate), fresh stores, alternating order, one round
#    (SECONDS_REPEATS) to fit the limit. Every model is
#    near chance, so only the time / token ratios mean anything, not the ranks.
#
# Run from the repo root:           OUT=/tmp/devcheck bash benchmarks/device_check.sh
# CPU smoke (same path, tiny Llamas): DEVICE=cpu SMALL=1 bash benchmarks/device_check.sh
# A machine without the GGUFs (the device machine: no network, 64 MiB carried): save SmolLM2's tokenizer here
#   (python benchmarks/device_check.py --device cpu --save-tokenizer runs/device-tokenizer), carry that folder and
#   run with TOKENIZER=runs/device-tokenizer (without it the random models get a byte-level tokenizer made in code,
#   and the SmolLM2 model of step 1 is left out).
# Needs: torch with CUDA, the project with lm-eval (pip install -e ".[lm-eval]"), ../shared (or FLASHEVAL_SHARED).
# Shared-context against independent scoring on CUDA: benchmarks/gpu_equivalence.py.
set -euo pipefail
OUT=${OUT:-/tmp/flasheval-device-check}
PY=${PY:-python}
DEVICE=${DEVICE:-cuda}
LIMIT_S=${LIMIT_S:-360}
SECONDS_LIMIT_S=${SECONDS_LIMIT_S:-$([[ -n ${SMALL:-} ]] && echo 900 || echo 300)}
export FLASHEVAL_SHARED=${FLASHEVAL_SHARED:-../shared}
export PEAK_FLOPS=${PEAK_FLOPS:-989e12}
if [[ $DEVICE == cuda* ]] && ! $PY -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "device_check: no CUDA device ($($PY -c 'import torch; print("torch", torch.__version__, "built for CUDA", torch.version.cuda)' 2>&1 | tail -n 1)); run it on a GPU machine, or DEVICE=cpu SMALL=1 for the CPU smoke" >&2
  exit 1
fi
TOK=()
if [[ -n ${TOKENIZER:-} ]]; then TOK=(--tokenizer "$TOKENIZER"); fi
SMOLLM=()
if $PY -c "import sys; sys.path.insert(0, '.'); from benchmarks import engine_throughput as et; et.model_location('smollm2-135m')" \
    >/dev/null 2>&1; then
  SMOLLM=(smollm2-135m)
fi
if [[ -z ${TOKENIZER:-} && ${#SMOLLM[@]} == 0 ]]; then
  echo "device_check: neither TOKENIZER nor SmolLM2's GGUF here: see the header for how to carry a tokenizer" >&2
  exit 1
fi
if [[ -n ${SMALL:-} ]]; then
  ARGS=(--small --models llama-1b llama-8b --n-examples 1 --batch-size 4 --dtype "${DTYPE:-bfloat16}")
  SECONDS_ARGS=(--hidden-size 64 --layers 2 --examples-per-task 20 --repeats 1 --dtype "${DTYPE:-bfloat16}")
else
  ARGS=(--models llama-1b llama-8b "${SMOLLM[@]}" --n-examples 200 100 $([[ ${#SMOLLM[@]} == 1 ]] && echo 200) \
        --batch-size "${BATCH_SIZE:-32}" --dtype "${DTYPE:-bfloat16}")
  SECONDS_ARGS=(--hidden-size 2048 --layers 16 --examples-per-task "${SECONDS_EXAMPLES:-200}" --repeats "${SECONDS_REPEATS:-1}"
                --dtype "${DTYPE:-bfloat16}")
fi
mkdir -p "$OUT"
status=0
timeout "$LIMIT_S" "$PY" benchmarks/device_check.py --device "$DEVICE" "${TOK[@]}" "${ARGS[@]}" 2>&1 \
  | tee "$OUT/device_check.txt" || status=$?
if [[ $status == 124 ]]; then
  echo "device_check: stopped after ${LIMIT_S} s (LIMIT_S); the models above finished" | tee -a "$OUT/device_check.txt" >&2
fi
seconds_status=0
timeout "$SECONDS_LIMIT_S" "$PY" benchmarks/seconds_saved.py --source random --device "$DEVICE" "${TOK[@]}" \
  "${SECONDS_ARGS[@]}" --work-dir "$OUT/seconds_saved" --output-json "$OUT/seconds_saved.json" 2>&1 \
  | tee "$OUT/seconds_saved.txt" || seconds_status=$?
if [[ $seconds_status == 124 ]]; then
  echo "device_check: seconds_saved stopped after ${SECONDS_LIMIT_S} s (SECONDS_LIMIT_S)" | tee -a "$OUT/seconds_saved.txt" >&2
fi
exit $(( status != 0 ? status : seconds_status ))
