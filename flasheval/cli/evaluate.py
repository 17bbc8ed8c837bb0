"""``flasheval evaluate``: score the first N examples of each task's seeded order with a model.

Runs the same under ``accelerate launch -m flasheval evaluate ...`` (every process loads the
model and scores its share; only the main process writes). Finished requests are stored in a
crash-safe results store (``<output>/store`` unless ``--store``), so rerunning an interrupted
command recomputes nothing that had finished.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from flasheval.engine import evaluate as evaluation
from flasheval.engine import n_parameters, open_backend, parse_model_spec
from flasheval.engine.distributed import make_state
from flasheval.engine.throughput import throughput
from flasheval.errors import InputError
from flasheval.placement.replay import replay_records
from flasheval.records import write_record

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand."""
    parser = subparsers.add_parser("evaluate", help="score the first N examples of tasks with a model; per-example records")
    parser.add_argument("--model", required=True, metavar="SPEC", help="hf:PATH_OR_ID[@REVISION], gguf:FILE or replay:REFERENCE/MODEL")
    parser.add_argument("--task-dir", type=Path, metavar="DIR", help="task data, e.g. ../shared/data/tasks (not for replay:)")
    parser.add_argument("--tasks", required=True, metavar="T1,T2", help="comma-separated task names")
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


def _task_names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise InputError("no task names given", field="--tasks")
    if len(set(names)) != len(names):
        raise InputError(f"task listed twice in {text!r}", field="--tasks")
    return names


def run(args: argparse.Namespace) -> int:
    """Run ``flasheval evaluate``."""
    spec = parse_model_spec(args.model)
    if args.n_examples is not None and args.n_examples < 1:
        raise InputError(f"must be >= 1, got {args.n_examples}", field="--n-examples")
    if args.batch_size < 1:
        raise InputError(f"must be >= 1, got {args.batch_size}", field="--batch-size")
    if spec.kind == "replay":
        return _replay(args, spec.target)
    if args.task_dir is None:
        raise InputError("required for hf: and gguf: models", field="--task-dir")
    # Validate the tasks (cheap) before loading the model (slow).
    selections = evaluation.select_examples(_task_names(args.tasks), args.task_dir, n_examples=args.n_examples, seed=args.seed)
    state = make_state()
    backend = open_backend(spec, dtype=args.dtype, device=args.device, batch_size=args.batch_size, max_length=args.max_length)
    prefix_space = getattr(backend, "prefix_space", True)
    per_task = {s.spec.name: evaluation.task_requests(s, seed=args.seed, prefix_space=prefix_space) for s in selections}
    flat = [(task, example_id, r) for task, by_id in per_task.items() for example_id, rs in by_id.items() for r in rs]
    results, counts = evaluation.score_through_store(backend, [r for _, _, r in flat], args.store or args.output / "store", state)
    try:
        return _write_outputs(args, selections, per_task, flat, results, counts, backend, state) if state.is_main_process else 0
    finally:
        _shutdown(state)


def _shutdown(state: Any) -> None:
    """Wait for every process, then tear the process group down (an implicit teardown at
    interpreter exit can abort a gloo/NCCL process and fail the launch)."""
    if state.num_processes > 1:
        state.wait_for_everyone()
        state.destroy_process_group()


def _write_outputs(
    args: argparse.Namespace, selections: Any, per_task: Any, flat: Any, results: Any, counts: Any, backend: Any, state: Any
) -> int:
    """Records, accuracies, the examples file and the summary record (main process only)."""
    by_example: dict[str, dict[str, list[Any]]] = {task: {} for task in per_task}
    for (task, example_id, _), result in zip(flat, results):
        by_example[task].setdefault(example_id, []).append(result)
    records, scores = [], {}
    for selection in selections:
        name = selection.spec.name
        answers = {k: tuple(v) for k, v in by_example[name].items()}
        task_records, scores[name] = evaluation.example_records(selection, per_task[name], answers)
        records.extend(task_records)
    accuracy = evaluation.accuracies(selections, scores)
    examples_path = evaluation.write_example_records(records, args.output, args.format)
    n_examples = sum(len(s.example_ids) for s in selections)
    n_tokens = sum(evaluation.example_tokens(per_task[t][e], rs) for t, by_id in by_example.items() for e, rs in by_id.items())
    speed = throughput(n_examples=n_examples, n_tokens=n_tokens, seconds=counts["scoring_seconds"],
                       n_parameters=n_parameters(backend))
    payload = {
        "model": args.model,
        "fingerprint": backend.fingerprint,
        "seed": args.seed,
        "n_examples_per_task": args.n_examples,
        "tasks": {s.spec.name: {"n_examples": len(s.example_ids), "accuracy": accuracy[s.spec.name]} for s in selections},
        "n_examples": n_examples,
        "n_requests": len(flat),
        **counts,
        "n_parameters": n_parameters(backend),
        **speed,
        "world_size": state.num_processes,
        "examples_file": examples_path.name,
    }
    write_record(args.output / "summary.json", kind="evaluate", payload=payload)
    for selection in selections:
        print(f"{selection.spec.name:32} n={len(selection.example_ids):5d}  accuracy={accuracy[selection.spec.name]:.4f}")
    print(
        f"{n_examples} examples, {len(flat)} requests ({counts['n_requests_from_store']} from the store) in "
        f"{counts['scoring_seconds']:.1f}s on {state.num_processes} process(es); records: {examples_path}"
    )
    if speed["flops_per_second"] is not None:
        print(f"{speed['examples_per_second']:.2f} examples/s, {speed['tokens_per_second']:.0f} tokens/s, "
              f"{speed['flops_per_second'] / 1e9:.1f} GFLOP/s (2 x parameters x tokens)")
    return 0


def _replay(args: argparse.Namespace, target: str) -> int:
    """``replay:REFERENCE/MODEL``: records of recorded scores, no model run."""
    records, means, reference = replay_records(target, _task_names(args.tasks), n_examples=args.n_examples, seed=args.seed)
    examples_path = evaluation.write_example_records(records, args.output, args.format)
    counts = {name: sum(r.task_name == name for r in records) for name in means}
    payload = {
        "model": args.model,
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
