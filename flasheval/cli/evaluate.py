"""``flasheval evaluate``: score the first N examples of each task's seeded order with a model.

Tasks come from ``--tasks`` and/or whole suites (``--suite dclm-core``; ``--tasks`` then narrows
them); the record holds each task's accuracy with its standard error, each suite's aggregate
(labelled partial when some of its tasks could not be scored) and, with ``--heldout``, the
validation loss of held-out text, plus the compute spent in placement's units.

Runs the same under ``accelerate launch -m flasheval evaluate ...`` (every process loads the
model and scores its share; only the main process writes). Finished requests are stored in a
crash-safe results store (``<output>/store`` unless ``--store``), so rerunning an interrupted
command recomputes nothing that had finished.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flasheval.api.evaluate import evaluate
from flasheval.cli._options import (
    add_device_map_options,
    add_progress_options,
    engine_from,
    progress_bar_from,
    step_printer,
)
from flasheval.evaluation.example_records import EXAMPLE_FORMATS
from flasheval.report.markdown import render_text
from flasheval.report.sections import evaluate_summary_blocks
from flasheval.tasks import suite_names

__all__ = ["register", "run"]

def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand."""
    parser = subparsers.add_parser(
        "evaluate", help="score tasks or whole suites with a model; per-example records, aggregates, validation loss")
    parser.add_argument("--model", required=True, metavar="SPEC", help="hf:PATH_OR_ID[@REVISION], gguf:FILE or replay:REFERENCE/MODEL")
    parser.add_argument("--model-id", metavar="NAME",
                        help="the model's id in the record, for scaling fit / aggregate (default: the file or folder name)")
    parser.add_argument("--task-dir", metavar="DIR", help="task data, e.g. ../shared/data/tasks (not for replay:)")
    parser.add_argument("--tasks", metavar="T1,T2", help="comma-separated task names (with --suite: a subset of the suites)")
    parser.add_argument("--suite", action="append", default=[], metavar="SUITE",
                        help=f"score every task of a suite and report its aggregate, repeatable ({', '.join(suite_names())})")
    parser.add_argument("--baselines", default="v2", choices=("v1", "v2"),
                        help="DCLM random-baseline version for CORE / EXTENDED centering (default v2)")
    parser.add_argument("--heldout", action="append", default=[], type=Path, metavar="FILE",
                        help="held-out text (JSON lines with 'text', or plain text) for validation loss, repeatable")
    parser.add_argument("--n-examples", type=int, default=None, metavar="N", help="first N of each task's seeded order (default: all)")
    parser.add_argument("--seed", type=int, default=1234, help="order and few-shot seed (default 1234)")
    parser.add_argument("--output", required=True, metavar="DIR", help="where records and the summary go")
    parser.add_argument("--force", action="store_true",
                        help="replace a summary.json there that another model or command wrote")
    parser.add_argument("--format", choices=EXAMPLE_FORMATS, default="parquet", help="per-example records format")
    parser.add_argument("--store", metavar="DIR", help="results store folder (default OUTPUT/store)")
    parser.add_argument("--dtype", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16")
    parser.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: auto)")
    add_device_map_options(parser)
    parser.add_argument("--batch-size", type=int, help="continuations per forward pass, halved on OOM (default: chosen for the device by a token budget)")
    parser.add_argument("--max-length", type=int, default=None, help="max tokens per sequence (default: the model's)")
    parser.add_argument("--compare-dtype", metavar="DTYPE",
                        help="then score the same examples with the weights in DTYPE (float32, bfloat16, float16) and "
                             "report per task the predictions that flip and the per-choice log-likelihood differences")
    add_progress_options(parser)
    parser.set_defaults(func=run, runs_models=True)


def run(args: argparse.Namespace) -> int:
    """Run ``flasheval evaluate``."""
    outcome = evaluate(args.model, tasks=args.tasks, suites=args.suite, task_dir=args.task_dir, heldout=args.heldout,
                       n_examples=args.n_examples, seed=args.seed, baselines=args.baselines, model_id=args.model_id,
                       output=args.output, format=args.format, store=args.store, engine=engine_from(args),
                       compare_dtype=args.compare_dtype, force=args.force,
                       progress=step_printer(args, steps=("start", "load")) or progress_bar_from(args),
                       distributed=args.distributed)
    if outcome.record_path is None:  # the other processes of a launch
        return 0
    payload = outcome.summary.to_json()
    if outcome.summary.replayed:  # recorded scores
        for name, task in payload["tasks"].items():
            print(f"{name:32} n={task['n_examples']:5d}  mean score={task['accuracy']:.4f}")
        print(f"{payload['n_examples']} examples replayed from {payload['reference']}; records: {outcome.examples_path}")
        return 0
    print(render_text(evaluate_summary_blocks(payload)))
    first, *rates = format_compute(payload)
    print(f"{first}; records: {outcome.examples_path}; summary: {outcome.record_path}")
    for line in rates:
        print(line)
    return 0


def format_compute(payload: dict) -> list[str]:
    """What was computed and what the store served; rates only over what was computed (none when nothing was)."""
    n, computed = payload["n_requests"], payload["n_requests_computed"]
    if computed == 0:
        return [f"{payload['n_examples']} examples: all {n} requests served from the store (nothing computed)"]
    same = n - computed - payload["n_requests_from_store"]  # requests identical to another one, scored once
    lines = [f"{payload['n_examples']} examples, {n} requests: {computed} computed in "
             f"{payload['scoring_seconds']:.1f} s on {payload['world_size']} process(es), "
             f"{payload['n_requests_from_store']} from the store"
             + (f", {same} identical to another request (scored once)" if same > 0 else "")]
    if payload["examples_per_second"] is not None:
        lines.append(f"{payload['examples_per_second']:.2f} examples/s, {payload['tokens_per_second']:.0f} tokens/s"
                     + ("" if payload["flops_per_second"] is None else
                        f", {payload['flops_per_second'] / 1e9:.1f} GFLOP/s (2 x parameters x tokens)")
                     + f" over the {payload['n_examples_computed']} examples computed")
    return lines
