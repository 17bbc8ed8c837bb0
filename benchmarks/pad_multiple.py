"""What float32's padded-width rounding costs and buys (issue 46): pad multiple 16 against 1 on one loaded model.

In a 2-byte float type a request's sums depend on its companions unless every padded width is rounded up to a
multiple of 16 (``docs/engine.md``, "Batch invariance"); float32 runs without it by default
(:func:`~flasheval.engine.hf.forward.default_pad_multiple`). This prints, for each multiple, on the same loaded model
(float32, CPU):

* **buys**: every request of ``--n-invariance`` examples per task (0-shot) scored alone, then in four batchings
  (the automatic budget, batch 4, batch 3 shuffled, batch 16 reversed), the largest |difference| and how many
  choices moved at all;
* **costs**: columns run per real token (the planner's batches at the automatic budget, no forward pass) and the
  seconds of one ``loglikelihood`` call per task (``--n-timing`` examples, task defaults: 0-shot here), the two
  multiples alternating, ``--repeats`` times, the fastest of each; the ratio is 16's seconds over 1's.

Run (repo root)::

    FLASHEVAL_SHARED=../shared python benchmarks/pad_multiple.py                       # SmolLM2-135M
    FLASHEVAL_SHARED=../shared python benchmarks/pad_multiple.py --model qwen2.5-coder-0.5b --n-timing 50
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine_throughput as et  # noqa: E402

INVARIANCE_TASKS = "hellaswag,arc_easy,winogrande,openbook_qa,lambada_openai"
TIMING_TASKS = "openbook_qa,winograd,winogrande,lambada_openai,hellaswag,arc_easy"
MULTIPLES = (16, 1)


def requests_of(tasks: str, n_examples: int, seed: int, shots: int | None) -> dict[str, list[object]]:
    """Each task's requests for its first ``n_examples`` seeded examples (``shots``: None keeps the task's own)."""
    from flasheval.evaluation.selection import select_examples, task_requests

    out = {}
    for selection in select_examples(tuple(tasks.split(",")), et.task_dir(), n_examples=n_examples, seed=seed):
        if shots is not None:
            selection = replace(selection, spec=replace(selection.spec, n_shots=shots))
        by_id = task_requests(selection, seed=seed, prefix_space=True)
        out[selection.spec.name] = [r for reqs in by_id.values() for r in reqs]
    return out


def batch_effect(loaded: object, requests: Sequence[object], multiple: int) -> tuple[float, int]:
    """Largest |log-likelihood in a batch - alone| over four batchings, and the most choices any of them moved."""
    def run(batch_size: int | None, order: Sequence[object]) -> dict[tuple[str, str, int], float]:
        scored = et.cell_backend(loaded, batch_size, multiple).loglikelihood(list(order))
        return {(r.task_name, r.example_id, r.choice_index): x.logprob_sum for r, x in zip(order, scored)}

    alone: dict[tuple[str, str, int], float] = {}
    for request in requests:
        alone.update(run(1, [request]))
    shuffled = list(requests)
    random.Random(1).shuffle(shuffled)
    batched = [run(None, requests), run(4, requests), run(3, shuffled), run(16, shuffled[::-1])]
    largest = max(abs(b[k] - alone[k]) for b in batched for k in alone)
    return largest, max(sum(b[k] != alone[k] for k in alone) for b in batched)


def columns_per_token(loaded: object, requests: Sequence[object], multiple: int) -> float:
    """Columns the automatic budget's batches run (pass 1 + pass 2 as they run) over the real tokens."""
    from padding_columns import columns

    b = et.cell_backend(loaded, None, multiple)
    c = columns(b._batches(b._items(list(requests))), multiple, b._pass.one_pass)  # noqa: SLF001 - the planner's
    return (c["pass1"] + c["pass2"]) / c["real"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pad_multiple.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="as engine_throughput.py's --model")
    parser.add_argument("--n-invariance", type=int, default=12, help="examples per task, each request alone too")
    parser.add_argument("--n-timing", type=int, default=150, help="examples per task for the timed calls")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    loaded = et.load(SimpleNamespace(dtype="float32", device="cpu"), args.model)
    print(f"{args.model}, float32, {args.threads} threads, pad multiples {MULTIPLES}")
    small = [r for reqs in requests_of(INVARIANCE_TASKS, args.n_invariance, args.seed, 0).values() for r in reqs]
    print(f"batch effect: {len(small)} requests ({args.n_invariance} examples each of {INVARIANCE_TASKS}, 0-shot), "
          "alone against 4 batchings")
    for multiple in MULTIPLES:
        largest, moved = batch_effect(loaded, small, multiple)
        print(f"  multiple {multiple:2d}: largest {largest:.2e} nats, choices moved {moved} of {len(small)}", flush=True)
    print(f"cost: {args.n_timing} examples per task, task defaults, automatic budget, fastest of {args.repeats}")
    print(f"  {'task':15s} {'requests':>8s} " + " ".join(f"{'cols/tok ' + str(m):>12s}" for m in MULTIPLES)
          + " " + " ".join(f"{'s ' + str(m):>8s}" for m in MULTIPLES) + f" {'16 / 1':>7s}")
    worst = None
    for task, requests in requests_of(TIMING_TASKS, args.n_timing, args.seed, None).items():
        cols = [columns_per_token(loaded, requests, m) for m in MULTIPLES]
        seconds: dict[int, list[float]] = {m: [] for m in MULTIPLES}
        for _ in range(args.repeats):
            for m in MULTIPLES:
                b = et.cell_backend(loaded, None, m)
                started = time.perf_counter()
                b.loglikelihood(requests)
                seconds[m].append(time.perf_counter() - started)
        fastest = [min(seconds[m]) for m in MULTIPLES]
        ratio = fastest[0] / fastest[1]
        worst = ratio if worst is None else min(worst, ratio)
        print(f"  {task:15s} {len(requests):8d} " + " ".join(f"{c:12.3f}" for c in cols) + " "
              + " ".join(f"{s:8.2f}" for s in fastest) + f" {ratio:7.2f}x", flush=True)
    print(f"worst task: multiple 1 {worst:.2f}x the speed of multiple 16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
