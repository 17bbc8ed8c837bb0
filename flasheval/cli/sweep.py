"""``flasheval sweep``: a thin shell over :func:`flasheval.sweep` (many checkpoints, one budget, resumable).

Model specs are those of ``place``: ``replay:MODEL_ID`` replays a model recorded in the
reference; every replayed checkpoint is held out of the pool, and its full-data rank among the
pool is reported beside its placement (a backtest). ``--backtest N`` sweeps N reference
models spread evenly over the full-data ranking. Live specs ``[NAME=]gguf:FILE`` /
``[NAME=]hf:PATH_OR_ID`` run the models now against a built reference (DCLM-format or lm-eval,
as the reference records); one sweep takes replay or live specs, not both. The run folder
(:mod:`flasheval.sweeps.folder`) holds ``sweep-config.json`` (the settings),
``shards/`` (the results store, a shard per checkpoint) and ``sweep.json`` (the record); rerunning the
same command after a crash resumes from the store, and a second sweep on a folder in use is refused. Live checkpoints are loaded when a round first asks them
for examples, at most ``--max-loaded`` at once; live sweeps run data-parallel under
``accelerate launch -m flasheval sweep ...`` (only the main process writes the run folder).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from flasheval.api.sweep import SweepRun, spread_checkpoints, sweep
from flasheval.cli._options import (
    add_executor_options,
    add_live_options,
    add_lmeval_live_options,
    add_progress_options,
    budget_from,
    changed_settings,
    engine_from,
    executor_from,
    remember_defaults,
    step_printer,
)
from flasheval.errors import InputError
from flasheval.sweeps.schedule import SweepResult
from flasheval.records.run_record import default_run_folder
from flasheval.reference import MISSING_POLICIES, ReferenceLeaderboard, load_reference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "format_result"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="place many checkpoints at once under one budget (resumable)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--models", nargs="+", metavar="SPEC",
                       help="checkpoint specs: replay:MODEL_ID, or live [NAME=]gguf:FILE / [NAME=]hf:PATH_OR_ID "
                            "(live models are loaded when a round needs them, at most --max-loaded at once)")
    group.add_argument("--models-from", metavar="FILE", help="file with one spec per line (# comments)")
    group.add_argument("--backtest", type=int, metavar="N", help="sweep N reference models spread over the ranking")
    parser.add_argument("--reference", default="helm_lite", help="reference name or folder (default: %(default)s)")
    parser.add_argument("--budget-examples", type=int, help="total examples over all checkpoints")
    parser.add_argument("--budget-tokens", type=int, help="total tokens (needs scorers that report tokens)")
    parser.add_argument("--budget-flops", type=float, help="total FLOPs (needs --n-parameters and tokens)")
    parser.add_argument("--n-parameters", type=float, help="parameters per checkpoint, for FLOPs")
    parser.add_argument("--tiers", default="default", help="tier plan file or name (default: %(default)s)")
    parser.add_argument("--datasets", nargs="+", metavar="NAME", help="datasets the sweep needs (default: all)")
    parser.add_argument("--low-rank", type=int, help="racing: stop checkpoints whose interval lies at or below this "
                                                     "rank (default: first rank of the plan's last tier)")
    parser.add_argument("--seed", type=int, help="default: 0 (replay), the reference's build seed (live; no other)")
    parser.add_argument("--aggregate", choices=AGGREGATES, help="default: the reference's")
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--output", help="run folder (default: runs/sweep-<reference>/, 8 hex digits of the settings "
                        "appended when an option that decides the result is not its default)")
    parser.add_argument("--force", action="store_true", help="replace a sweep.json there that is not a sweep record")
    add_live_options(parser)
    parser.add_argument("--max-loaded", type=int, metavar="N",
                        help="live: most checkpoints held in memory at once; the least recently used is unloaded "
                             "(finished examples are never recomputed) (default: 1)")
    add_lmeval_live_options(parser)
    add_executor_options(parser)
    add_progress_options(parser)
    remember_defaults(parser, "budget_examples", "budget_tokens", "budget_flops", "n_parameters", "tiers", "datasets",
                      "low_rank", "seed", "aggregate", "missing", "task_dir", "dtype", "include_path", "num_fewshot")
    parser.set_defaults(func=run, runs_models=True)


def run_folder(output: str | None, reference: ReferenceLeaderboard, settings: dict[str, object]) -> str | Path:
    """``output`` (``--output``, as given: an empty one is refused by the API), or ``runs/sweep-<reference>/``
    (8 hex digits of ``settings`` appended where any option that decides the result is not its default)."""
    return default_run_folder("sweep", reference.name, settings=settings) if output is None else output


def _read_specs(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=path, field="--models-from") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file of model specs (byte {exc.start}: not UTF-8)", path=path,
                         field="--models-from") from None
    specs = [ln.split("#", 1)[0].strip() for ln in lines]
    if not any(specs):
        raise InputError("no model specs in the file", path=path)
    return [s for s in specs if s]


def format_result(result: SweepResult) -> str:
    """One line per checkpoint, the order among them, and the total saving."""
    truth = result.truth
    lines = [f"{'checkpoint':<40} {'rank':>4} {'interval':>10} {'tier':>5} {'status':<20} {'examples':>8} {'saving':>7}"
             + (f" {'full-data':>9}" if truth else "")]
    for c in sorted(result.checkpoints, key=lambda c: (c.rank or 10**9, c.model_id)):
        lines.append(f"{c.model_id:<40} {c.rank or '-':>4} {str(list(c.interval)):>10} {c.tier or '-':>5} {c.status:<20} "
                     f"{c.n_examples:>8} {c.saving:>6.1f}x" + (f" {truth.get(c.model_id, '-'):>9}" if truth else ""))
    lines.append(f"total: {result.n_examples} examples of {result.full_examples} for full runs of all "
                 f"{len(result.checkpoints)} (total saving {result.saving:.1f}x, median {result.median_saving:.1f}x), "
                 f"{result.n_rounds} rounds"
                 + (f"; {result.n_computed} computed now, the rest from the store" if result.n_computed < result.n_examples else ""))
    if result.order:
        lines.append("order among the checkpoints: " + ", ".join(
            f"{o.rank}. {o.model_id} [{o.interval[0]}, {o.interval[1]}]" for o in result.order))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    budget = budget_from(args.budget_examples, args.budget_tokens, args.budget_flops,
                         options=("--budget-examples", "--budget-tokens", "--budget-flops"))
    reference = load_reference(args.reference, missing=args.missing)
    if args.backtest is not None:
        specs = list(spread_checkpoints(reference, args.backtest, datasets=args.datasets))
    else:
        specs = list(args.models) if args.models else _read_specs(Path(args.models_from))
    start = time.perf_counter()
    outcome = sweep(specs, reference, budget=budget, plan=args.tiers, seed=args.seed, aggregate=args.aggregate,
                    missing=args.missing, datasets=args.datasets, low_rank=args.low_rank,
                    n_parameters=args.n_parameters, task_dir=args.task_dir, include_path=args.include_path,
                    num_fewshot=args.num_fewshot, engine=engine_from(args), max_loaded=args.max_loaded,
                    output=run_folder(args.output, reference, changed_settings(args)),
                    progress=step_printer(args), force=args.force, distributed=args.distributed,
                    executor=executor_from(args))
    if outcome.record_path is not None:  # not on the other processes of a launch
        print_swept(outcome, start)
    return 0


def print_swept(outcome: SweepRun, start: float) -> None:
    """The table, the backtest comparison (replay) and the record."""
    print(format_result(outcome.result))
    if outcome.separate_examples is not None:
        n = len(outcome.result.checkpoints)
        print(f"backtest: placing the {n} checkpoints one by one with `place` would spend {outcome.separate_examples} "
              f"examples ({outcome.separate_examples / max(outcome.result.n_examples, 1):.2f}x the sweep)")
    print(f"{time.perf_counter() - start:.1f} s; record: {outcome.record_path}")
