"""``flasheval aggregate``: suite aggregates (CORE, EXTENDED, MMLU, Gadre top-1 error) from a score table."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flasheval.errors import InputError
from flasheval.records import atomic_write_text
from flasheval.scoring import suite_aggregate
from flasheval.tasks import Suite, load_suite, suite_names

if TYPE_CHECKING:  # pandas is imported when the command runs, so `flasheval --help` stays fast
    import pandas as pd

__all__ = ["register", "run", "read_scores", "aggregate_table"]

_ID_COLUMNS = ("model", "model_id", "eval_file", "name", "model_name")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``aggregate`` subcommand."""
    parser = subparsers.add_parser(
        "aggregate", help="suite aggregates per model from a CSV of per-task accuracies",
        description="One row per model with the suite's aggregate: CORE / EXTENDED (mean centered accuracy), "
                    "MMLU (accuracy) or Gadre's mean top-1 error.")
    parser.add_argument("--suite", required=True, action="append",
                        help=f"suite name, repeatable ({', '.join(suite_names())})")
    parser.add_argument("--scores", required=True, type=Path,
                        help="CSV (.gz allowed): a model id column and one column of accuracies (0-1) per task label")
    parser.add_argument("--baselines", default="v2", choices=("v1", "v2"),
                        help="DCLM random-baseline version for centering (default v2, as the published results)")
    parser.add_argument("--partial", action="store_true",
                        help="aggregate models that lack some suite tasks over the tasks they have, labelled partial")
    parser.add_argument("--output", type=Path, help="write the CSV here instead of standard output")
    parser.set_defaults(func=run)


def read_scores(path: Path) -> tuple[str, pd.DataFrame]:
    """Read a score table; returns the id column's name and the table indexed by it."""
    import pandas as pd

    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, EOFError, ValueError) as exc:
        raise InputError(f"cannot read as CSV: {str(exc).splitlines()[0]}", path=path) from None
    if table.empty:
        raise InputError("no rows", path=path)
    id_column = next((c for c in _ID_COLUMNS if c in table.columns), None)
    if id_column is None:
        raise InputError("no model id column", path=path, allowed=_ID_COLUMNS)
    duplicated = table[id_column][table[id_column].duplicated()]
    if len(duplicated):
        row = int(duplicated.index[0]) + 2
        raise InputError(f"duplicate model id {duplicated.iloc[0]!r}", path=path, line=row, field=id_column)
    return id_column, table.set_index(id_column)


def _accuracy(raw: str, *, path: Path, line: int, column: str) -> float:
    if raw.strip() in ("", "nan", "NaN", "NA", "N/A"):
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"not a number: {raw!r}", path=path, line=line, field=column) from None
    if not 0 <= value <= 1:
        raise InputError(f"accuracy {value} outside [0, 1] (give fractions, not percent)", path=path, line=line,
                         field=column)
    return value


def _column(suite: Suite, task: str, table: pd.DataFrame) -> str | None:
    for label in (task, *suite.aliases(task)):
        if label in table.columns:
            return label
    return None


def aggregate_table(table: pd.DataFrame, suite: Suite, *, path: Path, baselines: str, partial: bool) -> pd.DataFrame:
    """Per-model aggregate of ``suite``: columns ``<suite>``, ``<suite>_n_tasks``, ``<suite>_missing``."""
    import pandas as pd

    columns = {task: _column(suite, task, table) for task in suite.task_names}
    rows, incomplete = [], []
    for position, (model_id, row) in enumerate(table.iterrows()):
        accuracies = {
            task: _accuracy(row[col], path=path, line=position + 2, column=col)
            for task, col in columns.items() if col is not None
        }
        if not any(math.isfinite(a) for a in accuracies.values()):  # nothing to aggregate for this model
            missing = suite.task_names
            value, n_tasks = math.nan, 0
        else:
            result = suite_aggregate(suite, accuracies, baselines=baselines, partial=True)
            missing, value, n_tasks = result.missing, result.value, result.n_tasks
        if missing:
            incomplete.append((model_id, missing))
        rows.append({suite.name: value, f"{suite.name}_n_tasks": n_tasks, f"{suite.name}_missing": ";".join(missing)})
    if incomplete and not partial:
        model_id, missing = incomplete[0]
        raise InputError(
            f"suite {suite.name!r} is incomplete for {len(incomplete)} of {len(table)} models (first: {model_id!r} "
            f"lacks {', '.join(missing)}); pass --partial for aggregates over the tasks present, labelled partial",
            path=path)
    return pd.DataFrame(rows, index=table.index)


def run(args: argparse.Namespace) -> int:
    """Compute the requested suites' aggregates and write them as CSV."""
    import pandas as pd

    suites = [load_suite(name) for name in args.suite]
    id_column, table = read_scores(args.scores)
    parts = [aggregate_table(table, s, path=args.scores, baselines=args.baselines, partial=args.partial)
             for s in suites]
    out = pd.concat(parts, axis=1)
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
