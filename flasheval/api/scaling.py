"""``flasheval.fit_scaling``: fit scaling laws on small runs and predict large ones.

The one path behind ``flasheval scaling fit``: the loss and error columns are picked here (named, or
the first default present), then :func:`flasheval.scaling.fit.scaling_fit_payload` fits and predicts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flasheval.checks import check_flag, check_output, name_list
from flasheval.errors import InputError
from flasheval.records.run_record import write_record
from flasheval.scaling.fit import ScalingFitOptions, parse_predict_target, scaling_fit_payload
from flasheval.scaling.runs import read_runs_files

__all__ = ["ScalingFit", "fit_scaling", "DEFAULT_LOSS_COLUMNS", "DEFAULT_ERROR_COLUMNS"]

logger = logging.getLogger(__name__)

DEFAULT_LOSS_COLUMNS = ("loss_c4_val", "loss")
DEFAULT_ERROR_COLUMNS = ("err_avg17", "gadre-17", "err_avg46", "gadre-46", "error", "err_avg")


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
    check_output(output)
    # the fit's options (method, caps, resample count, confidence level, seed) by its own checks, before any table
    # is read; the columns are picked from the table below
    options = ScalingFitOptions(
        loss_column=loss_column or DEFAULT_LOSS_COLUMNS[0], fit_max_compute=fit_max_compute,
        error_fit_max_compute=error_fit_max_compute, fit_column=fit_column, error_fit_column=error_fit_column,
        dataset=dataset, method=method, n_resamples=n_resamples, confidence_level=confidence_level, seed=seed)
    for option, path, what in (("--output", output, "record's file name (e.g. scaling.json)"),
                               ("--plot", None if isinstance(plot, bool) else plot, "PNG's file name")):
        if path is not None and Path(path).is_dir():
            raise InputError(f"is a folder; give the {what}", path=path, field=option)
    if not isinstance(plot, bool):
        check_output(plot, field="--plot")
        if Path(plot).suffix.lower() != ".png":
            raise InputError(f"{str(plot)!r} does not end in .png (the figure is a PNG)", field="--plot")
    for option, value in (("--loss-column", loss_column), ("--error-column", error_column),
                          ("--fit-column", fit_column), ("--error-fit-column", error_fit_column),
                          ("--dataset", dataset)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"expected a name, got {value!r}", field=option)
    check_flag(error, field="error")
    paths = [runs] if isinstance(runs, (str, Path)) else list(runs)
    targets = [parse_predict_target(t) for t in name_list(predict, field="--predict", what="run")]
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
    options = replace(options, loss_column=picked_loss, error_columns=error_columns)
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
