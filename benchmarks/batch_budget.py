"""Which token budget per forward pass is fastest per token on this machine: flasheval alone, one loaded model.

Scores the same requests as ``benchmarks/engine_throughput.py`` (HellaSwag and ARC-Easy, flasheval's prompts;
``--shots`` few-shot examples, 10 by default: long contexts; 0: short ones) with flasheval's ``HFBackend`` under
each ``--budgets`` token budget (rows x padded length per pass; rows at most ``--rows``), the budgets alternating
over ``--repeats`` repeats (the order reversed every other repeat); prints the median seconds and tokens/s per
budget and task, with the load average. This is the measurement behind ``flasheval.engine.batching.CPU_TOKENS``.

Run (from the repo root)::

    FLASHEVAL_SHARED=../shared python benchmarks/batch_budget.py --n-examples 4 --shots 10
    FLASHEVAL_SHARED=../shared python benchmarks/batch_budget.py --n-examples 16 --shots 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import engine_throughput as et  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    """Time flasheval under each budget; prints one line per budget and task."""
    parser = argparse.ArgumentParser(prog="batch_budget.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="as engine_throughput.py's --models (one model)")
    parser.add_argument("--n-examples", type=int, default=4)
    parser.add_argument("--shots", type=int, default=None, help="few-shot examples per prompt (default: 10)")
    parser.add_argument("--budgets", default="1024,2048,4096,8192,32768", help="token budgets, comma-separated")
    parser.add_argument("--rows", type=int, default=32, help="most rows per pass (default 32)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    import torch

    from flasheval.engine.hf.backend import HFBackend

    torch.set_num_threads(args.threads)
    loaded = et.load(argparse.Namespace(dtype=args.dtype, device="cpu", batch_size=args.rows), args.model)
    runs = et.task_runs(loaded, args.n_examples, 1234, shots=args.shots)
    backends = {b: HFBackend(loaded.model, loaded.tokenizer, fingerprint="budget", batch_size=args.rows,
                             max_batch_tokens=b) for b in budgets}
    seconds: dict[tuple[int, str], list[float]] = {}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        for budget in budgets if repeat % 2 == 0 else budgets[::-1]:
            for run in runs:
                started = time.perf_counter()
                backends[budget].loglikelihood(run.requests)
                seconds.setdefault((budget, run.name), []).append(time.perf_counter() - started)
    print(f"model {args.model}, {args.dtype}, {args.threads} threads, {args.n_examples} examples per task, "
          f"{'10' if args.shots is None else args.shots}-shot, rows <= {args.rows}, {args.repeats} repeats (medians); "
          f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs")
    for run in runs:
        mean_length = run.per_choice / len(run.requests)
        print(f"{run.name}: {run.tokens['flasheval']} tokens run, {mean_length:.0f} tokens per choice")
        for budget in budgets:
            median = statistics.median(seconds[(budget, run.name)])
            print(f"  budget {budget:6d}: {median:7.2f} s, {run.tokens['flasheval'] / median:8.1f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
