"""The API of the commands that read tables: :func:`aggregate`, :func:`check_tasks`, :func:`fit_scaling`.

Each is the one path behind its command (``flasheval aggregate``, ``flasheval tasks check``,
``flasheval scaling fit``): the command parses, calls and prints; the checks and the work are here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import name_list
from flasheval.errors import FlashevalError, InputError
from flasheval.records import atomic_write_text, write_record
from flasheval.scaling.fit import ScalingFitOptions, parse_predict_target, scaling_fit_payload
from flasheval.scaling.runs import read_runs_files
from flasheval.tasks import aggregate_table, load_suite, load_task_file, read_scores, resolve_task_file, task_names, \
    task_spec

__all__ = ["AggregateRun", "aggregate", "TaskFileCheck", "check_tasks", "ScalingFit", "fit_scaling"]

logger = logging.getLogger(__name__)

DEFAULT_LOSS_COLUMNS = ("loss_c4_val", "loss")
DEFAULT_ERROR_COLUMNS = ("err_avg17", "gadre-17", "err_avg46", "gadre-46", "error", "err_avg")


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
    loaded = [load_suite(name) for name in name_list(suites, field="--suite", what="suite", unique=False)]
    paths = [Path(scores)] if isinstance(scores, (str, Path)) else [Path(p) for p in scores]
    if not paths:
        raise InputError("give at least one scores file", field="--scores")
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


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFileCheck:
    """One task of :func:`check_tasks`: its file found, read and counted, or why not."""

    task_name: str
    source: Any
    """The file found (a :class:`~flasheval.tasks.TaskFile`: a path, or a member of an archive; ``None``: missing)."""
    n_examples: int | None = None
    n_categories: int = 0
    expected: int | None = None
    """Examples in the known copy (``None``: not recorded)."""
    error: str | None = None
    """Why the file could not be read (one line)."""
    dataset_uri: str = ""

    @property
    def status(self) -> str:
        return "missing" if self.source is None else "error" if self.error is not None else "ok"


def check_tasks(task_dir: str | Path, *, suite: str | None = None) -> tuple[TaskFileCheck, ...]:
    """Find, read and count every known task's file in ``task_dir`` (only ``suite``'s tasks when given).

    A file that cannot be read is reported (``status`` ``error``), not raised: every task is checked.
    """
    names = task_names() if suite is None else load_suite(suite).task_names
    folder = Path(task_dir)
    if not folder.is_dir():
        raise InputError("not a directory", path=folder)
    rows = []
    for name in names:
        spec = task_spec(name)
        source = resolve_task_file(spec, folder)
        if source is None:
            rows.append(TaskFileCheck(task_name=name, source=None, dataset_uri=spec.dataset_uri))
            continue
        try:
            examples = load_task_file(spec, source)
        except FlashevalError as exc:
            rows.append(TaskFileCheck(task_name=name, source=source, error=str(exc)))
            continue
        rows.append(TaskFileCheck(task_name=name, source=source, n_examples=len(examples),
                                  n_categories=len({e.category for e in examples}) if spec.has_categories else 0,
                                  expected=spec.n_examples_expected))
    return tuple(rows)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ScalingFit:
    """What :func:`fit_scaling` returns."""

    payload: Mapping[str, Any]
    """The record's payload: every dataset's fits and every prediction with its interval."""
    record_path: Path | None = None
    plot_path: Path | None = None


def _pick(available: Mapping[str, Any], explicit: str | None, defaults: tuple[str, ...]) -> str | None:
    if explicit is not None:
        return explicit  # checked by the table, which names the columns it has
    return next((c for c in defaults if c in available), None)


def fit_scaling(
    runs: str | Path | Sequence[str | Path],
    *,
    predict: str | Sequence[str],
    fit_max_compute: float | None = None,
    error_fit_max_compute: float | None = None,
    fit_column: str | None = None,
    error_fit_column: str | None = None,
    loss_column: str | None = None,
    error_column: str | None = None,
    error: bool = True,
    dataset: str | None = None,
    method: str = "gadre2024",
    n_resamples: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
    output: str | Path | None = None,
    plot: bool | str | Path = False,
) -> ScalingFit:
    """Fit Gadre et al.'s loss law L(C, M) and error law Err(L) on small runs and predict ``predict``.

    ``runs``: run tables (CSV, parquet, JSON or flasheval records). ``predict``: run ids of the table or
    ``NAME=PARAMS:TOKENS`` (a list or ``"a,b"``). ``loss_column`` default: ``loss_c4_val`` or ``loss``;
    ``error_column`` (``"a,b"`` averages several) default: the first of :data:`DEFAULT_ERROR_COLUMNS`
    present; ``error=False`` fits the loss only. ``output``: the record to write; ``plot``: also a PNG
    (``True``: beside ``output``; a path: there).
    """
    paths = [runs] if isinstance(runs, (str, Path)) else list(runs)
    targets = [parse_predict_target(t) for t in name_list(predict, field="--predict", what="run", unique=False)]
    if plot and output is None and plot is True:
        raise InputError("a plot beside the record needs output=", field="--plot")
    table = read_runs_files(paths)
    picked_loss = _pick(table.values, loss_column, DEFAULT_LOSS_COLUMNS)
    if picked_loss is None:
        table.column(DEFAULT_LOSS_COLUMNS[0], option="--loss-column")  # raises, listing the columns there are
    error_columns: tuple[str, ...] = ()
    if error:
        picked = _pick(table.values, error_column, DEFAULT_ERROR_COLUMNS)
        error_columns = () if picked is None else tuple(c.strip() for c in picked.split(",") if c.strip())
        partial = sorted(c for c in table.values if c.endswith("_partial"))
        if picked is None and partial:
            logger.warning("no complete error column; partial suite aggregates %s are not fitted unless named "
                           "with --error-column", ", ".join(partial))
    options = ScalingFitOptions(
        loss_column=picked_loss, error_columns=error_columns, fit_max_compute=fit_max_compute,
        error_fit_max_compute=error_fit_max_compute, fit_column=fit_column, error_fit_column=error_fit_column,
        dataset=dataset, method=method, n_resamples=n_resamples, confidence_level=confidence_level, seed=seed,
    )
    payload = scaling_fit_payload(table, targets, options)
    payload["runs_files"] = [str(p) for p in paths]
    if output is None:
        return ScalingFit(payload=payload)
    path = write_record(output, kind="scaling", payload=payload)
    png = None
    if plot:
        from flasheval.report.scaling_figure import save_scaling_figure  # matplotlib only when asked

        png = save_scaling_figure(payload, path.with_suffix(".png") if plot is True else Path(plot))
    return ScalingFit(payload=payload, record_path=path, plot_path=png)
