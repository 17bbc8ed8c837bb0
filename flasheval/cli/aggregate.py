"""``flasheval aggregate``: suite aggregates (CORE, EXTENDED, MMLU, Gadre top-1 error) from a score table."""

from __future__ import annotations

import argparse
import sys

from flasheval.api.aggregate import aggregate
from flasheval.tasks import suite_names

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``aggregate`` subcommand."""
    parser = subparsers.add_parser(
        "aggregate", help="suite aggregates per model from a CSV of per-task accuracies",
        description="One row per model with the suite's aggregate: CORE / EXTENDED (mean centered accuracy), "
                    "MMLU (accuracy) or Gadre's mean top-1 error.")
    parser.add_argument("--suite", required=True, action="append",
                        help=f"suite name, repeatable ({', '.join(suite_names())})")
    parser.add_argument("--scores", required=True, nargs="+", metavar="FILE",
                        help="CSV (.gz allowed): a model id column and one column of accuracies (0-1) per task label; "
                             "or flasheval evaluate records (summary.json), one model each; several files are stacked")
    parser.add_argument("--baselines", default="v2", choices=("v1", "v2"),
                        help="DCLM random-baseline version for centering (default v2, as the published results)")
    parser.add_argument("--partial", action="store_true",
                        help="aggregate models that lack some suite tasks over the tasks they have, labelled partial")
    parser.add_argument("--output", help="write the CSV here instead of standard output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compute the requested suites' aggregates and write them as CSV."""
    outcome = aggregate(args.scores, suites=args.suite, baselines=args.baselines, partial=args.partial,
                        output=args.output)
    if outcome.output is None:
        sys.stdout.write(outcome.to_csv())
    else:
        print(f"wrote {len(outcome.table)} models x {len(args.suite)} suites to {outcome.output}"
              + (f" ({outcome.n_partial} partial aggregates)" if outcome.n_partial else ""), file=sys.stderr)
    return 0
