"""Suite aggregates for a table of models: a CSV of per-task accuracies in, one aggregate per model out.

A ``flasheval evaluate`` record (``summary.json``) is read as a one-row table: its ``model_id``
and the accuracy of every task it scored. Otherwise the table has a model id column (one of ``model``, ``model_id``, ``eval_file``, ``name``,
``model_name``) and one column of accuracies (fractions in [0, 1]) per task label or alias;
every malformed cell is refused in one line naming the file, line and column. Aggregation is
:func:`flasheval.tasks.suite_aggregate` per row (DCLM's centered accuracy, MMLU's mean, Gadre's
top-1 error).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from flasheval.errors import InputError
from flasheval.tasks._scoring import suite_aggregate
from flasheval.tasks._suites import Suite

if TYPE_CHECKING:  # pandas is imported when a table is read, so `flasheval --help` stays fast
    import pandas as pd

__all__ = ["read_scores", "aggregate_table"]

_ID_COLUMNS = ("model", "model_id", "eval_file", "name", "model_name")


def _record_scores(path: Path) -> tuple[str, pd.DataFrame]:
    import pandas as pd

    from flasheval.records.run_record import read_record

    record = read_record(path)
    tasks = record.payload.get("tasks")
    if record.kind != "evaluate" or not isinstance(tasks, dict) or "model_id" not in record.payload:
        raise InputError("not an evaluate record with model_id and tasks (give a CSV or an evaluate summary.json)",
                         path=path, field="kind")
    row = {"model_id": str(record.payload["model_id"])}
    for task, result in tasks.items():
        accuracy = result.get("accuracy") if isinstance(result, dict) else None
        row[task] = "" if accuracy is None else repr(float(accuracy))
    return "model_id", pd.DataFrame([row], dtype=str).set_index("model_id")


def read_scores(path: Path) -> tuple[str, pd.DataFrame]:
    """Read a score table (CSV, or an ``evaluate`` record as one row); returns the id column's name and the table indexed by it."""
    import pandas as pd

    if path.suffix == ".json":
        return _record_scores(path)
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
    """Per-model aggregate of ``suite``: columns ``<suite>``, ``<suite>_n_tasks``, ``<suite>_missing``, ``<suite>_partial``.

    ``<suite>_partial`` is true when the value covers only part of the suite (``<suite>_missing`` lists the rest).
    """
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
        rows.append({suite.name: value, f"{suite.name}_n_tasks": n_tasks, f"{suite.name}_missing": ";".join(missing),
                     f"{suite.name}_partial": bool(missing)})
    if incomplete and not partial:
        model_id, missing = incomplete[0]
        raise InputError(
            f"suite {suite.name!r} is incomplete for {len(incomplete)} of {len(table)} models (first: {model_id!r} "
            f"lacks {', '.join(missing)}); pass --partial for aggregates over the tasks present, labelled partial",
            path=path)
    return pd.DataFrame(rows, index=table.index)
