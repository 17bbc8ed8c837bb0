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

from flasheval.api.lm_eval import lm_eval
from flasheval.cli._options import add_device_map_options, add_progress_options, engine_from, progress_bar_from

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
    parser.add_argument("--dtype", help="auto, float32, bfloat16, float16 (default: float32)")
    parser.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: auto)")
    add_device_map_options(parser)
    _both(parser, "batch_size", type=int, help="continuations per forward pass (default: chosen for the device)")
    _both(parser, "max_length", type=int, help="lm-eval's max_length (default: the model config's)")
    add_progress_options(parser)
    parser.set_defaults(func=run, runs_models=True)


def run(args: argparse.Namespace) -> int:
    outcome = lm_eval(args.model, tasks=args.tasks, include_path=args.include_path, num_fewshot=args.num_fewshot,
                      fewshot_seed=args.fewshot_seed, limit=args.limit, log_samples=args.log_samples,
                      output=args.output_path, store=args.store, engine=engine_from(args),
                      progress=progress_bar_from(args), distributed=args.distributed)
    if outcome.results is None:
        return 0
    from lm_eval.utils import make_table

    print(make_table(dict(outcome.results)))
    print(f"flasheval: {outcome.n_requests} requests, {outcome.n_computed} computed, the rest from the store "
          f"{outcome.store}; {outcome.seconds:.1f} s")
    return 0
