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
import logging
import time
from pathlib import Path
from typing import Any

from flasheval.engine import evaluate as evaluation
from flasheval.engine import n_parameters, open_backend, parse_model_spec
from flasheval.engine.distributed import make_state, shutdown
from flasheval.engine.throughput import throughput
from flasheval.errors import InputError
from flasheval.placement.replay import replay_records
from flasheval.records import write_record
from flasheval.report.markdown import render_text
from flasheval.report.sections import evaluate_summary_blocks
from flasheval.tasks import suite_names

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand."""
    parser = subparsers.add_parser(
        "evaluate", help="score tasks or whole suites with a model; per-example records, aggregates, validation loss")
    parser.add_argument("--model", required=True, metavar="SPEC", help="hf:PATH_OR_ID[@REVISION], gguf:FILE or replay:REFERENCE/MODEL")
    parser.add_argument("--model-id", metavar="NAME",
                        help="the model's id in the record, for scaling fit / aggregate (default: the file or folder name)")
    parser.add_argument("--task-dir", type=Path, metavar="DIR", help="task data, e.g. ../shared/data/tasks (not for replay:)")
    parser.add_argument("--tasks", metavar="T1,T2", help="comma-separated task names (with --suite: a subset of the suites)")
    parser.add_argument("--suite", action="append", default=[], metavar="SUITE",
                        help=f"score every task of a suite and report its aggregate, repeatable ({', '.join(suite_names())})")
    parser.add_argument("--baselines", default="v2", choices=("v1", "v2"),
                        help="DCLM random-baseline version for CORE / EXTENDED centering (default v2)")
    parser.add_argument("--heldout", action="append", default=[], type=Path, metavar="FILE",
                        help="held-out text (JSON lines with 'text', or plain text) for validation loss, repeatable")
    parser.add_argument("--n-examples", type=int, default=None, metavar="N", help="first N of each task's seeded order (default: all)")
    parser.add_argument("--seed", type=int, default=1234, help="order and few-shot seed (default 1234)")
    parser.add_argument("--output", required=True, type=Path, metavar="DIR", help="where records and the summary go")
    parser.add_argument("--format", choices=evaluation.EXAMPLE_FORMATS, default="parquet", help="per-example records format")
    parser.add_argument("--store", type=Path, metavar="DIR", help="results store folder (default OUTPUT/store)")
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--batch-size", type=int, default=32, help="continuations per forward pass (halved on OOM)")
    parser.add_argument("--max-length", type=int, default=None, help="max tokens per sequence (default: the model's)")
    parser.set_defaults(func=run)


def _task_names(text: str | None) -> list[str]:
    if text is None:
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise InputError("no task names given", field="--tasks")
    if len(set(names)) != len(names):
        raise InputError(f"task listed twice in {text!r}", field="--tasks")
    return names


def _model_id(args: argparse.Namespace, spec: Any) -> str:
    if args.model_id:
        return args.model_id
    target = Path(spec.target)
    return target.stem if spec.kind == "gguf" else (target.name or spec.target)


def run(args: argparse.Namespace) -> int:
    """Run ``flasheval evaluate``."""
    spec = parse_model_spec(args.model)
    if args.n_examples is not None and args.n_examples < 1:
        raise InputError(f"must be >= 1, got {args.n_examples}", field="--n-examples")
    if args.batch_size < 1:
        raise InputError(f"must be >= 1, got {args.batch_size}", field="--batch-size")
    if spec.kind == "replay":
        return _replay(args, spec.target)
    started = time.perf_counter()
    if args.task_dir is None and (args.tasks or args.suite):
        raise InputError("required for hf: and gguf: models", field="--task-dir")
    # Validate the tasks and held-out files (cheap) before loading the model (slow).
    plan = evaluation.TaskPlan(suites=(), task_names=())
    if args.tasks or args.suite or not args.heldout:
        plan = evaluation.plan_tasks(args.suite, _task_names(args.tasks), args.task_dir or ".")
    for task in plan.without_data:
        logger.warning("%s: no file in %s; suites that include it are reported as partial", task, args.task_dir)
    selections = evaluation.select_examples(plan.task_names, args.task_dir or ".", n_examples=args.n_examples, seed=args.seed)
    heldout = evaluation.load_heldout(args.heldout)
    state = make_state()
    load_started = time.perf_counter()
    backend = open_backend(spec, dtype=args.dtype, device=args.device, batch_size=args.batch_size, max_length=args.max_length)
    load_seconds = time.perf_counter() - load_started
    prefix_space = getattr(backend, "prefix_space", True)
    per_task = {s.spec.name: evaluation.task_requests(s, seed=args.seed, prefix_space=prefix_space) for s in selections}
    flat = evaluation.evaluation_requests(per_task, heldout)
    results, counts = evaluation.score_through_store(backend, flat, args.store or args.output / "store", state)
    counts = {**counts, "load_seconds": load_seconds, "wall_seconds": time.perf_counter() - started}
    try:
        if not state.is_main_process:
            return 0
        outcome = evaluation.evaluation_results(selections, per_task, heldout, results)
        return _write_outputs(args, _model_id(args, spec), plan, outcome, len(flat), counts, backend, state)
    finally:
        shutdown(state)


def _write_outputs(args: argparse.Namespace, model_id: str, plan: evaluation.TaskPlan, outcome: evaluation.Evaluation,
                   n_requests: int, counts: dict[str, Any], backend: Any, state: Any) -> int:
    """The examples file, the summary record and the printed tables (main process only)."""
    examples_path = evaluation.write_example_records(outcome.records, args.output, args.format)
    aggregates = evaluation.suite_summaries(plan.suites, outcome.tasks, baselines=args.baselines)
    summary = evaluation.evaluation_summary(outcome, plan, aggregates, n_parameters=n_parameters(backend))
    summary["compute"].update(load_seconds=counts["load_seconds"], scoring_seconds=counts["scoring_seconds"],
                              wall_seconds=counts["wall_seconds"])
    n_examples = outcome.n_examples
    compute = summary["compute"]
    # The hardware's rate counts every token scored in the timed call, held-out text included.
    speed = throughput(n_examples=n_examples, n_tokens=compute["n_tokens"] + (compute["heldout_n_tokens"] or 0),
                       seconds=counts["scoring_seconds"], n_parameters=compute["n_parameters"])
    payload = {
        "model": args.model,
        "model_id": model_id,
        "fingerprint": backend.fingerprint,
        "seed": args.seed,
        "n_examples_per_task": args.n_examples,
        "baselines": args.baselines,
        **summary,
        "n_examples": n_examples,
        "n_requests": n_requests,
        **{k: v for k, v in counts.items() if k not in ("load_seconds", "wall_seconds")},
        "n_parameters": compute["n_parameters"],
        **speed,
        "world_size": state.num_processes,
        "examples_file": examples_path.name,
    }
    path = write_record(args.output / "summary.json", kind="evaluate", payload=payload)
    print(render_text(evaluate_summary_blocks(payload)))
    print(
        f"{n_examples} examples, {n_requests} requests ({counts['n_requests_from_store']} from the store) in "
        f"{counts['scoring_seconds']:.1f}s on {state.num_processes} process(es); records: {examples_path}; summary: {path}"
    )
    if speed["flops_per_second"] is not None:
        print(f"{speed['examples_per_second']:.2f} examples/s, {speed['tokens_per_second']:.0f} tokens/s, "
              f"{speed['flops_per_second'] / 1e9:.1f} GFLOP/s (2 x parameters x tokens)")
    return 0


def _replay(args: argparse.Namespace, target: str) -> int:
    """``replay:REFERENCE/MODEL``: records of recorded scores, no model run."""
    if args.suite or args.heldout:
        raise InputError("replay: models serve recorded scores of a reference's datasets; --suite and --heldout "
                         "need a model to run", field="--model")
    if not args.tasks:
        raise InputError("required for replay: models", field="--tasks")
    records, means, reference = replay_records(target, _task_names(args.tasks), n_examples=args.n_examples, seed=args.seed)
    examples_path = evaluation.write_example_records(records, args.output, args.format)
    counts = {name: sum(r.task_name == name for r in records) for name in means}
    payload = {
        "model": args.model,
        "model_id": args.model_id or target.partition("/")[2] or target,
        "reference": reference,
        "seed": args.seed,
        "n_examples_per_task": args.n_examples,
        "tasks": {name: {"n_examples": counts[name], "accuracy": means[name]} for name in means},
        "n_examples": len(records),
        "examples_file": examples_path.name,
    }
    write_record(args.output / "summary.json", kind="evaluate", payload=payload)
    for name, mean in means.items():
        print(f"{name:32} n={counts[name]:5d}  mean score={mean:.4f}")
    print(f"{len(records)} examples replayed from {reference}; records: {examples_path}")
    return 0
