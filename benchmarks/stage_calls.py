"""A placement's stage calls against one call of the same requests, greedy batch filling against least-cost cuts.

A live placement sends each stage's few new examples per task to the backend in one call; ``evaluate`` sends
all of its requests in one. This replays the calls one placement made (its run record's ``asked`` list, stage
by stage: one call per stage of the asks of the datasets that grew in it, fewer once a dataset is used up) with one
model, through :class:`flasheval.engine.hf.backend.HFBackend`:

* ``stages``: one ``score_requests`` call per stage, as ``flasheval.place`` made them;
* ``one call``: the same requests in one call, as ``flasheval.evaluate`` would send them;

each under two packers of the planned groups into batches: ``greedy`` (the peer: every batch filled to the row
limit or token budget, ``batching.pack_batches``, the engine's packing before this benchmark) and ``least-cost``
(``batching.pack_least_cost``, the engine's packing now). Runs alternate (greedy first in even repeats, least-cost
first in odd ones) so that a drift of the shared machine's load falls on both. Prints wall seconds, forward seconds, tokens/s
and batches per run, the medians, and the ratio least-cost / greedy; checks that both packers give the same
log-likelihoods (batch invariance) within 1e-3 (float32's floor at pad multiple 1 reaches 1.9e-4).

Usage (repo root; a reference and a placement record made by ``benchmarks/seconds_saved.py``)::

    python benchmarks/stage_calls.py --reference runs/seconds_saved/gguf/refs/seconds \\
        --record runs/seconds_saved/gguf/run-1/place/place.json \\
        --model runs/seconds_saved/gguf/models/smollm2-135m-noise0.125-float32 [--repeats 1] [--stages 7]

``--columns`` runs no forward pass: it prints the columns the planner's batches run per real token, for the stage
calls and for one call, at pad multiples 16 (bf16's) and 1 (float32's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def stage_requests(reference: Path, record: Path) -> tuple[list[list], int]:
    """The requests of each stage call the placement made, and the reference's seed."""
    import flasheval
    from flasheval.evaluation.evaluate import build_example_requests
    from flasheval.reference.live import prepare_live

    live = prepare_live(flasheval.load_reference(reference), seed=None, dtype=None, task_dir=None)
    tasks = {t.name: t for t in live.tasks}
    stages = []
    for asks in stage_asks(json.loads(record.read_text())["payload"], where=str(record)):
        requests = []
        for ask in asks:
            by_id = build_example_requests(tasks[ask["task_name"]], ask["example_ids"], seed=live.seed,
                                           prefix_space=live.settings.prefix_space)
            requests += [r for rs in by_id.values() for r in rs]
        stages.append(requests)
    return stages, live.seed


def stage_asks(payload: dict, *, where: str) -> list[list[dict]]:
    """A placement record's ``asked`` list cut into its stage calls: a stage asks every dataset that grew in it
    (``stages[k].n_examples`` over ``stages[k - 1]``'s), in the record's order, so fewer once a dataset is used up.

    >>> stage_asks({"stages": [{"n_examples": [2, 2]}, {"n_examples": [4, 2]}, {"n_examples": [6, 2]}],
    ...             "live": {"asked": ["a1", "b1", "a2", "a3"]}}, where="r")
    [['a1', 'b1'], ['a2'], ['a3']]
    """
    asked, out, start, before = payload["live"]["asked"], [], 0, None
    for stage in payload["stages"]:
        counts = stage["n_examples"]
        n_asks = sum(n > b for n, b in zip(counts, before or [0] * len(counts)))
        out.append(asked[start:start + n_asks])
        start, before = start + n_asks, counts
    if start != len(asked):
        raise SystemExit(f"{where}: its stages grow {start} datasets in all, it asked {len(asked)} times")
    return out


def run(model, tokenizer, calls, packer: str) -> dict:
    """Score ``calls`` (lists of requests) in order with a fresh backend under ``packer``; seconds and results."""
    import torch

    import flasheval.engine.planning as planning
    from flasheval.engine.batching import pack_batches
    from flasheval.engine.hf.backend import HFBackend
    from flasheval.evaluation.evaluate import score_requests

    least_cost = planning.pack_groups

    def greedy(groups, *, max_rows, max_tokens, overhead, packed=None, pad_multiple=1, one_pass=0, window=None,
               attention_width=0):  # one group per unit, in order: no shared or wider rows planned
        units = [planning.batch_shape([g], packed=packed, pad_multiple=pad_multiple, one_pass=one_pass, window=window)
                 for g in groups]
        return [[groups[i] for i in b] for b in pack_batches(units, max_rows=max_rows, max_tokens=max_tokens)]

    import flasheval.engine.hf.backend as hf

    hf.pack_groups = greedy if packer == "greedy" else least_cost
    try:
        backend = HFBackend(model, tokenizer, fingerprint="stage-calls")
        n_batches = sum(len(backend.plan_batches(c)) for c in calls)
        started = time.perf_counter()
        results = []
        with torch.inference_mode():
            for c in calls:
                results += score_requests(backend, c)
        seconds = time.perf_counter() - started
    finally:
        hf.pack_groups = least_cost
    return {"seconds": seconds, "forward_seconds": backend.forward_seconds, "tokens": backend.forward_tokens,
            "batches": n_batches, "logprobs": [r.logprob_sum for r in results]}


def column_count(model, tokenizer, calls, multiple: int) -> tuple[float, int]:
    """Columns the planner's batches run over the real tokens (``padding_columns.columns``) over ``calls``, each
    planned on its own as the backend plans it, at pad multiple ``multiple``; and the number of batches."""
    from flasheval.engine.hf.backend import HFBackend

    sys.path.insert(0, str(REPO / "benchmarks"))
    from padding_columns import columns

    backend = HFBackend(model, tokenizer, fingerprint="stage-calls", pad_multiple=multiple)
    real = run = n_batches = 0
    for c in calls:
        batches = backend._batches(backend._items(c))  # noqa: SLF001 - the planner's own batches
        counted = columns(batches, multiple, backend._pass.one_pass, backend._row_width)  # noqa: SLF001
        real, run = real + counted["real"], run + counted["pass1"] + counted["pass2"]
        n_batches += len(batches)
    return run / real, n_batches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="stage_calls.py", description=__doc__.split("\n")[0])
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--record", type=Path, required=True, help="a live placement's run record (place.json)")
    p.add_argument("--model", type=Path, required=True, help="a Hugging Face folder (the placed model)")
    p.add_argument("--stages", type=int, help="replay only the first N stages")
    p.add_argument("--repeats", type=int, default=1, help="pairs of runs per packer and call shape")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--columns", action="store_true",
                   help="no forward pass: columns per real token, stage calls and one call, pad multiples 16 and 1")
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stages, _ = stage_requests(args.reference, args.record)
    stages = stages[:args.stages] if args.stages else stages
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    shapes = {"stages": stages, "one call": [[r for s in stages for r in s]]}
    print(f"stage_calls: {len(stages)} stages, {sum(map(len, stages))} requests, {args.model.name}, "
          f"torch threads {torch.get_num_threads()}", flush=True)
    if args.columns:
        for multiple in (16, 1):
            counts = {shape: column_count(model, tokenizer, calls, multiple) for shape, calls in shapes.items()}
            print(f"  pad multiple {multiple:2d}: columns per real token, stage calls {counts['stages'][0]:.3f} "
                  f"({counts['stages'][1]} batches), one call {counts['one call'][0]:.3f} ({counts['one call'][1]} "
                  "batches)")
        return 0
    seconds: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats):
        for shape, calls in shapes.items():
            order = ("greedy", "least-cost") if repeat % 2 == 0 else ("least-cost", "greedy")
            runs = {}
            for packer in order:
                r = run(model, tokenizer, calls, packer)
                runs.setdefault(packer, r)
                seconds.setdefault((shape, packer), []).append(r["seconds"])
                print(f"  {shape:<8} {packer:<10} {r['seconds']:7.1f} s (forward {r['forward_seconds']:.1f} s), "
                      f"{r['tokens']} tokens, {r['tokens'] / r['seconds']:.0f} tokens/s, {r['batches']} batches",
                      flush=True)
            worst = max(abs(a - b) for a, b in zip(runs["greedy"]["logprobs"], runs["least-cost"]["logprobs"]))
            # float32 at pad multiple 1: companions move a sum by the float32 floor, 1.9e-4 nats at most on the noisy
            # copies' 5,546 requests (the same before and after several groups per row); a wrong layout moves nats
            assert worst <= 1e-3, f"packers disagree by {worst:.2e} nats"
            print(f"  {shape}: largest |greedy - least-cost| log-likelihood {worst:.1e} nats", flush=True)
    print("\nmedian seconds (greedy = the peer)")
    for shape in shapes:
        g, c = (statistics.median(seconds[(shape, k)]) for k in ("greedy", "least-cost"))
        print(f"  {shape:<8} greedy {g:7.1f} s  least-cost {c:7.1f} s  speed-up {g / c:.2f}x")
    s, o = (statistics.median(seconds[(k, "least-cost")]) for k in ("stages", "one call"))
    print(f"  least-cost: stages / one call {s / o:.2f} (1.00: a stage's calls cost no more than one call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
