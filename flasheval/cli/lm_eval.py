"""``flasheval lm-eval``: run lm-evaluation-harness tasks with flasheval's engine as the model.

lm-eval has no entry point for outside models, so this command is lm-eval's ``run`` with
``--model`` replaced by a flasheval model spec: the same task options (``--tasks``,
``--num_fewshot``, ``--include_path``, ``--limit``, ``--log_samples``, ``--output_path``, each also
spelled with hyphens), the same output files (lm-eval's ``EvaluationTracker``), and flasheval's
engine underneath: shared-context scoring, a crash-safe results store (a rerun resumes) and data
parallelism under ``accelerate launch``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from flasheval.cli._options import add_device_map_options, add_progress_options, progress_bar_from
from flasheval.engine import check_model_files, parse_named_models
from flasheval.engine.device_map import device_map_from
from flasheval.errors import InputError
from flasheval.records import slug

__all__ = ["register", "run", "add_lm_eval_task_options"]


def _both(parser: argparse.ArgumentParser, name: str, **kwargs: object) -> None:
    """An option under lm-eval's spelling (``--num_fewshot``) and flasheval's (``--num-fewshot``)."""
    parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", dest=name, **kwargs)  # type: ignore[arg-type]


def add_lm_eval_task_options(parser: argparse.ArgumentParser) -> None:
    """``--include_path``, ``--num_fewshot``, ``--fewshot_seed``: how lm-eval tasks are found and prompted."""
    _both(parser, "include_path", help="folder of custom lm-eval task YAMLs")
    _both(parser, "num_fewshot", type=int, help="few-shot examples per prompt (default: each task's own)")
    _both(parser, "fewshot_seed", type=int, default=1234, help="lm-eval's few-shot sampler seed (default: %(default)s)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("lm-eval",
                                   help="run lm-evaluation-harness tasks with flasheval's engine as the model")
    parser.add_argument("--model", required=True, metavar="[NAME=]SPEC", help="gguf:FILE or hf:PATH_OR_ID")
    parser.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    add_lm_eval_task_options(parser)
    parser.add_argument("--limit", type=float, help="lm-eval's --limit: the first N docs (or a fraction) per task")
    _both(parser, "log_samples", action="store_true", help="write per-sample logs (with --output_path)")
    _both(parser, "output_path", help="lm-eval's output folder (results_*.json, samples_*.jsonl per model)")
    parser.add_argument("--store", help="results store folder (default: OUTPUT_PATH/store or runs/lm-eval-MODEL/store)")
    parser.add_argument("--dtype", default="float32", help="auto, float32, bfloat16, float16 (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    add_device_map_options(parser)
    _both(parser, "batch_size", type=int, default=32, help="continuations per forward pass (default: %(default)s)")
    _both(parser, "max_length", type=int, help="lm-eval's max_length (default: the model config's)")
    add_progress_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from flasheval.lmeval import require_lm_eval

    require_lm_eval()
    from flasheval.lmeval.loading import open_lmeval_model
    from flasheval.lmeval.tasks import make_task_manager, run_tasks

    if args.log_samples and not args.output_path:
        raise InputError("--log_samples needs --output_path (where lm-eval writes the samples)", field="--log_samples")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise InputError("no task named", field="--tasks")
    model = parse_named_models([args.model], field="--model")[0]
    check_model_files([model], field="--model")
    placement = device_map_from(args.device_map, max_memory=args.max_memory, offload_folder=args.offload_folder,
                                device=args.device)
    manager = make_task_manager(args.include_path)
    store = Path(args.store or (Path(args.output_path) / "store" if args.output_path else
                                Path("runs") / f"lm-eval-{slug(model.model_id)}" / "store"))
    start = time.perf_counter()
    opened = open_lmeval_model(model, store, dtype=args.dtype, device=args.device, batch_size=args.batch_size,
                               max_length=args.max_length, progress_bar=progress_bar_from(args), device_map=placement)
    tracker = None
    if args.output_path and opened.is_main_process:
        from lm_eval.loggers import EvaluationTracker

        tracker = EvaluationTracker(output_path=args.output_path)
    try:
        results = run_tasks(opened.lm, tasks, task_manager=manager, num_fewshot=args.num_fewshot, limit=args.limit,
                            fewshot_seed=args.fewshot_seed, log_samples=args.log_samples, evaluation_tracker=tracker,
                            model_args=f"pretrained={model.model_id}")
    finally:
        opened.close()
    if results is None or not opened.is_main_process:
        return 0
    if tracker is not None:
        samples = results.pop("samples", None)
        tracker.save_results_aggregated(results=results, samples=samples)
        if args.log_samples and samples:
            for task_name in results["configs"]:
                tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    from lm_eval.utils import make_table

    print(make_table(results))
    n = opened.lm.n_requests
    print(f"flasheval: {n} requests, {opened.cached.n_computed} computed, the rest from the store {store}; "
          f"{time.perf_counter() - start:.1f} s")
    return 0
