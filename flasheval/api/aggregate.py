"""``flasheval.aggregate``: suite aggregates (CORE, EXTENDED, MMLU, Gadre top-1 error) from score tables.

The one path behind ``flasheval aggregate``: the tables are read and stacked (a model in two files
is refused) and each suite's aggregate computed (:func:`flasheval.tasks.aggregate_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import check_flag, check_output, name_list
from flasheval.errors import InputError
from flasheval.atomic import atomic_write_text
from flasheval.tasks import aggregate_table, load_suite, read_scores

__all__ = ["AggregateRun", "aggregate"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AggregateRun:
    """What :func:`aggregate` returns."""

    table: Any
    """A pandas DataFrame, one row per model: ``baselines``, then per suite its aggregate and what it lacks."""
    id_column: str
    """The model id column's name (the first file's)."""
    n_partial: int
    """Aggregates over fewer than the suite's tasks (``partial=True`` only)."""
    output: Path | None = None

    def to_csv(self) -> str:
        """The table as the command writes it."""
        return self.table.reset_index().rename(columns={"index": self.id_column}).to_csv(index=False,
                                                                                        float_format="%.17g")


def aggregate(scores: str | Path | Sequence[str | Path], *, suites: str | Sequence[str], baselines: str = "v2",
              partial: bool = False, output: str | Path | None = None) -> AggregateRun:
    """Suite aggregates (CORE / EXTENDED centered accuracy, MMLU accuracy, Gadre's top-1 error) per model.

    ``scores``: CSV files (``.gz`` allowed) of per-task accuracies, or ``evaluate`` records, stacked (a
    model in two files is refused). ``suites``: a list or ``"a,b"``. ``partial``: aggregate a model that
    lacks some tasks over those it has, labelled partial. ``output``: write the CSV there.
    """
    import pandas as pd

    if baselines not in ("v1", "v2"):
        raise InputError(f"unknown baselines {baselines!r}", field="--baselines", allowed=("v1", "v2"))
    check_flag(partial, field="--partial")
    loaded = [load_suite(name) for name in name_list(suites, field="--suite", what="suite")]  # twice: columns clash
    check_output(output)
    if output is not None and Path(output).is_dir():
        raise InputError("is a folder; give the CSV's file name", path=output, field="--output")
    given = [scores] if isinstance(scores, (str, Path)) else list(scores)
    if not given:
        raise InputError("give at least one scores file", field="--scores")
    for path in given:
        check_output(path, field="--scores")
    paths = [Path(p) for p in given]
    id_column, blocks, sources = "", [], {}
    for path in paths:
        file_id_column, table = read_scores(path)
        id_column = id_column or file_id_column
        for model_id in table.index:
            if model_id in sources:
                raise InputError(f"model {model_id!r} also in {sources[model_id]}", path=path, field=file_id_column)
            sources[model_id] = path
        parts = [aggregate_table(table, s, path=path, baselines=baselines, partial=partial) for s in loaded]
        blocks.append(pd.concat(parts, axis=1))
    out = pd.concat(blocks, axis=0)
    out.insert(0, "baselines", baselines)
    n_partial = sum(int((out[f"{s.name}_missing"] != "").sum()) for s in loaded)
    run = AggregateRun(table=out, id_column=id_column, n_partial=n_partial)
    if output is None:
        return run
    atomic_write_text(output, run.to_csv())
    return AggregateRun(table=out, id_column=id_column, n_partial=n_partial, output=Path(output))
