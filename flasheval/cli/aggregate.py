"""``flasheval aggregate``: suite aggregates (CORE, EXTENDED, MMLU, Gadre top-1 error) from a score table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flasheval.errors import InputError
from flasheval.records import atomic_write_text
from flasheval.tasks import aggregate_table, load_suite, read_scores, suite_names

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``aggregate`` subcommand."""
    parser = subparsers.add_parser(
        "aggregate", help="suite aggregates per model from a CSV of per-task accuracies",
        description="One row per model with the suite's aggregate: CORE / EXTENDED (mean centered accuracy), "
                    "MMLU (accuracy) or Gadre's mean top-1 error.")
    parser.add_argument("--suite", required=True, action="append",
                        help=f"suite name, repeatable ({', '.join(suite_names())})")
    parser.add_argument("--scores", required=True, type=Path, nargs="+", metavar="FILE",
                        help="CSV (.gz allowed): a model id column and one column of accuracies (0-1) per task label; "
                             "or flasheval evaluate records (summary.json), one model each; several files are stacked")
    parser.add_argument("--baselines", default="v2", choices=("v1", "v2"),
                        help="DCLM random-baseline version for centering (default v2, as the published results)")
    parser.add_argument("--partial", action="store_true",
                        help="aggregate models that lack some suite tasks over the tasks they have, labelled partial")
    parser.add_argument("--output", type=Path, help="write the CSV here instead of standard output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compute the requested suites' aggregates and write them as CSV."""
    import pandas as pd

    suites = [load_suite(name) for name in args.suite]
    id_column, blocks, sources = "", [], {}
    for path in args.scores:
        file_id_column, table = read_scores(path)
        id_column = id_column or file_id_column
        for model_id in table.index:
            if model_id in sources:
                raise InputError(f"model {model_id!r} also in {sources[model_id]}", path=path, field=file_id_column)
            sources[model_id] = path
        parts = [aggregate_table(table, s, path=path, baselines=args.baselines, partial=args.partial) for s in suites]
        blocks.append(pd.concat(parts, axis=1))
    out = pd.concat(blocks, axis=0)
    out.insert(0, "baselines", args.baselines)
    text = out.reset_index().rename(columns={"index": id_column}).to_csv(index=False, float_format="%.17g")
    if args.output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(args.output, text)
        n_partial = sum(int((out[f"{s.name}_missing"] != "").sum()) for s in suites)
        print(f"wrote {len(out)} models x {len(suites)} suites to {args.output}"
              + (f" ({n_partial} partial aggregates)" if n_partial else ""), file=sys.stderr)
    return 0
