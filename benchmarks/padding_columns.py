"""Columns a packed pass runs over the real tokens it scores: what padding costs per task (issue 46, item 2).

The linear layers take 82-86% of a 0-shot pass on a CPU (cProfile, SmolLM2, 1 thread) and run at the matrix
product's own speed, so a pass costs its columns, padding included. For each task and shot count this plans the
first ``--n-examples`` examples of flasheval's seeded order exactly as :class:`~flasheval.engine.hf.backend.HFBackend`
does at ``--batch-size`` (its own planner: groups, batches) and counts, per batch, pass 1's rows x padded context
width and pass 2's rows x padded segment width, under the current layout
(:func:`~flasheval.engine.planning.segment_columns`, ``SCORING_VERSION`` 6) and under version 5's (every choice's
segment on a 16-column block edge: each choice's width rounded up to 16, summed; both on the batches the current
planner makes), over the real tokens (each context once, each choice's ``len - 1`` inputs). No forward pass runs;
the model is loaded for its tokenizer and its planner settings.

``--time-passes`` also runs the current layout's batches, at ``--batch-size`` and at the automatic budget (the
``auto`` cells of ``engine_throughput.py``), once untimed and once timed, and prints each pass's rows, columns,
seconds and milliseconds per column: whether a wider pass costs more per column than a narrower one (``--threads``
torch threads, default 1).

Run (repo root)::

    FLASHEVAL_SHARED=../shared python benchmarks/padding_columns.py            # SmolLM2, 200 examples, 0 and 10 shots
    FLASHEVAL_SHARED=../shared python benchmarks/padding_columns.py --model qwen2.5-coder-0.5b --tasks arc_easy
    FLASHEVAL_SHARED=../shared python benchmarks/padding_columns.py --model qwen2.5-coder-0.5b --tasks hellaswag \
        --shots 0 --n-examples 6 --time-passes                                # the grid's 0-shot passes, timed
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine_throughput as et  # noqa: E402

TASKS = "hellaswag,arc_easy,openbook_qa,piqa,copa,winogrande"


def columns(batches: Sequence[Sequence[object]], multiple: int, one_pass: int = 0,
            row_width: Callable[[Sequence[object]], int] | None = None) -> dict[str, int]:
    """Real tokens, pass-1 columns, and pass-2 columns (rows that have segments only, as the pass runs them) under the
    planner's layout for ``one_pass`` (:func:`~flasheval.engine.planning.group_passes`: 0, version 6's two passes for
    every group; a context of at most ``one_pass`` tokens runs in one pass, version 7), and pass 2 under version 5's
    (every segment on a block edge). ``row_width``: a one-pass batch's row width (the backend's ``_row_width``;
    ``None``: as wide as its widest group)."""
    from flasheval.engine.planning import group_passes, padded_width
    from flasheval.engine.rows import row_layout

    out = {"real": 0, "pass1": 0, "pass2": 0, "pass2_v5": 0}
    for batch in batches:
        out["real"] += sum(len(g.context) + sum(len(i.continuation) - 1 for i in g.items) for g in batch)
        passes = [group_passes(g, pad_multiple=multiple, packed=True, one_pass=one_pass) for g in batch]
        one = all(len(g.context) <= one_pass for g in batch)  # several groups to a row (rows.row_layout)
        widths = [p[0][1] for p in passes]
        if one:  # the tensor a pass runs: its rows, as wide as the widest row's groups reach
            n_rows, places = row_layout(widths, row_width(batch) if row_width else 0)
            out["pass1"] += n_rows * max(offset + w for (_, offset), w in zip(places, widths))
        else:
            out["pass1"] += len(batch) * max(widths)
        out["pass2"] += sum(1 for p in passes if p[1][0]) * max(p[1][1] for p in passes)
        v5 = [sum(padded_width(len(i.continuation) - 1, multiple) for i in g.items) for g in batch]
        out["pass2_v5"] += sum(1 for w in v5 if w) * max(v5)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="padding_columns.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="as engine_throughput.py's --model (default smollm2-135m)")
    parser.add_argument("--tasks", default=TASKS, help=f"comma-separated (default {TASKS})")
    parser.add_argument("--n-examples", type=int, default=200)
    parser.add_argument("--shots", default="0,10", help="comma-separated (default 0,10)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--time-passes", action="store_true", help="run and time each pass at --batch-size and auto")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for --time-passes (default 1)")
    parser.add_argument("--pad-multiple", type=int, default=16,
                        help="the padded-width multiple planned and timed (default 16, the layouts' own; float32 "
                             "runs at 1 by default: benchmarks/pad_multiple.py)")
    args = parser.parse_args(argv)
    from flasheval.evaluation.selection import select_examples, task_requests

    loaded = et.load(SimpleNamespace(dtype="float32", device="cpu"), args.model)
    backend = et.cell_backend(loaded, args.batch_size, args.pad_multiple)
    if backend._packed is None:  # noqa: SLF001 - the planner's own setting
        raise SystemExit(f"padding_columns.py: {args.model} has sliding-window layers: only its short groups run packed "
                         "(one pass), and this count compares the packed layouts")
    multiple = backend._pass.pad_multiple  # noqa: SLF001
    print(f"{args.model}, batch {args.batch_size}, first {args.n_examples} examples, pad multiple {multiple}; "
          "columns run / real tokens (pass 1 + pass 2)")
    one_pass = backend._pass.one_pass  # noqa: SLF001
    version6 = et.cell_backend(loaded, args.batch_size, args.pad_multiple)
    version6._pass = replace(version6._pass, one_pass=0)  # noqa: SLF001 - the planner as it was: two passes always
    print(f"version 7 runs a context of at most {one_pass} tokens and its choices in one pass")
    print(f"{'task':12s} {'shots':>5s} {'real':>8s} {'version 5':>10s} {'version 6':>10s} {'version 7':>10s}")
    for shots in (int(x) for x in args.shots.split(",")):
        for selection in select_examples(tuple(args.tasks.split(",")), et.task_dir(), n_examples=args.n_examples,
                                         seed=args.seed):
            selection = replace(selection, spec=replace(selection.spec, n_shots=shots))
            by_id = task_requests(selection, seed=args.seed, prefix_space=backend.info.prefix_space)
            requests = [r for reqs in by_id.values() for r in reqs]
            c = columns(version6._batches(version6._items(requests)), multiple)  # noqa: SLF001
            c7 = columns(backend._batches(backend._items(requests)), multiple, one_pass)  # noqa: SLF001
            v5, v6 = (c["pass1"] + c["pass2_v5"]) / c["real"], (c["pass1"] + c["pass2"]) / c["real"]
            v7 = (c7["pass1"] + c7["pass2"]) / c7["real"]
            print(f"{selection.spec.name:12s} {shots:5d} {c['real']:8d} {v5:9.2f}x {v6:9.2f}x {v7:9.2f}x")
            if args.time_passes:
                time_passes(loaded, requests, args.batch_size, args.threads, args.pad_multiple)
    return 0


def time_passes(loaded: object, requests: Sequence[object], batch_size: int, threads: int, multiple: int = 16) -> None:
    """Run the batches the backend plans for ``requests`` at ``batch_size`` and at its automatic budget, once
    untimed, then once timed; print each pass's rows, padded columns (:func:`columns`), seconds, ms per column."""
    import time

    import torch

    torch.set_num_threads(threads)
    for size in (batch_size, None):
        backend = et.cell_backend(loaded, size, multiple)
        batches = backend._batches(backend._items(requests))  # noqa: SLF001 - the planner's own batches
        for batch in batches:  # warm-up
            backend._forward(batch)  # noqa: SLF001
        label = "auto" if size is None else f"batch {size}"
        for batch in batches:
            c = columns([batch], backend._pass.pad_multiple, backend._pass.one_pass)  # noqa: SLF001
            start = time.perf_counter()
            backend._forward(batch)  # noqa: SLF001
            seconds = time.perf_counter() - start
            n = c["pass1"] + c["pass2"]
            print(f"    {label:8s} {len(batch):3d} rows {n:6d} columns {seconds:8.3f} s {1000 * seconds / n:7.2f} ms/column")


if __name__ == "__main__":
    sys.exit(main())
