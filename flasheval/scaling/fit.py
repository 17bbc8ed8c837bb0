"""Fit the scaling laws to the small runs of a runs table and predict the large ones.

The orchestration between :mod:`flasheval.scaling.runs` (the table) and :mod:`flasheval.stats.scaling`
(the pure fits; their bootstrap in :mod:`flasheval.stats.scaling_bootstrap`): choose the fitted runs per training dataset, fit Eq. (4) and Eq. (5), bootstrap
both, and return a JSON-ready payload (fits, curves with interval bands, predictions with intervals,
actual values and relative errors) that ``flasheval scaling fit`` prints and records, and that
:func:`flasheval.report.scaling_figure.scaling_figure` draws. No printing, no files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flasheval.checks import check_confidence_level, check_n_resamples, check_seed
from flasheval.errors import InputError, UnknownNameError
from flasheval.hashing import derive_seed
from flasheval.scaling.runs import RunsTable
from flasheval.stats.scaling import (
    LOSS_FIT_METHODS,
    ErrorLawFit,
    FitError,
    LossLawFit,
    error_law,
    fit_error_law,
    fit_loss_law,
    loss_law,
    relative_error,
)
from flasheval.stats.scaling_bootstrap import BootstrapFits, bootstrap_error_law, bootstrap_loss_law, percentile_interval

__all__ = ["ScalingFitOptions", "PredictTarget", "parse_predict_target", "scaling_fit_payload"]

logger = logging.getLogger(__name__)

_N_CURVE_POINTS = 60
_Target = tuple[str, float, float, int | None]  # model_id, compute, multiplier, table row


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingFitOptions:
    """Which runs to fit, on which columns, and how."""

    loss_column: str
    """Validation-loss column the loss law is fitted to (e.g. ``loss_c4_val``)."""
    error_columns: tuple[str, ...] = ()
    """Error column(s); several are averaged uniformly per run (average top-1 error). Empty: loss only."""
    fit_max_compute: float | None = None
    """Loss-law fit runs: compute at most this (FLOPs); ``None`` = no limit."""
    error_fit_max_compute: float | None = None
    """Error-law fit runs: compute at most this; ``None`` = same as ``fit_max_compute``."""
    fit_column: str | None = None
    """Boolean column that must be true for a loss-law fit run (e.g. ``paper_fit_eq4_loss``)."""
    error_fit_column: str | None = None
    """Boolean column that must be true for an error-law fit run (e.g. ``paper_fit_eq5_error``)."""
    dataset: str | None = None
    """Fit and predict only runs of this training dataset."""
    method: str = "gadre2024"
    """Loss-law fit method: ``gadre2024`` (the paper's) or ``huber`` (ours)."""
    n_resamples: int = 1000
    """Bootstrap resamples of the fitted runs."""
    confidence_level: float = 0.95
    """Coverage of the percentile intervals."""
    seed: int = 0
    """Seed of the bootstrap (one stream per dataset and law)."""

    def __post_init__(self) -> None:
        if self.method not in LOSS_FIT_METHODS:
            raise InputError(f"unknown method {self.method!r}", field="--method", allowed=LOSS_FIT_METHODS)
        for name in ("fit_max_compute", "error_fit_max_compute"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not (np.isfinite(value) and value > 0)):
                raise InputError(f"must be a positive number of FLOPs, got {value!r}",
                                 field="--" + name.replace("_", "-"))
        check_n_resamples(self.n_resamples, field="--n-resamples", minimum=1)
        check_confidence_level(self.confidence_level)
        check_seed(self.seed)


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictTarget:
    """A run to predict: a row of the table, or a hypothetical run ``NAME=PARAMS:TOKENS``."""

    model_id: str
    """Run id (table row) or the name given to a hypothetical run."""
    params: float | None = None
    """Parameter count of a hypothetical run; ``None`` for a table row."""
    tokens: float | None = None
    """Training tokens of a hypothetical run; ``None`` for a table row."""


def parse_predict_target(text: str) -> PredictTarget:
    """``ID`` (a run of the table) or ``NAME=PARAMS:TOKENS`` (e.g. ``my7b=6.9e9:1.38e11``)."""
    if "=" not in text:
        return PredictTarget(model_id=text)
    name, _, scale = text.partition("=")
    try:
        params, tokens = (float(x) for x in scale.split(":"))
    except ValueError:
        raise InputError(f"{text!r} is neither a run id nor NAME=PARAMS:TOKENS", field="--predict") from None
    if not (name and np.isfinite(params) and np.isfinite(tokens) and params > 0 and tokens > 0):
        raise InputError(f"{text!r}: needs a name and positive PARAMS and TOKENS", field="--predict")
    return PredictTarget(model_id=name, params=params, tokens=tokens)


def _error_values(table: RunsTable, columns: Sequence[str]) -> npt.NDArray[np.float64]:
    stacked = np.vstack([table.column(c, option="--error-column") for c in columns])
    return stacked.mean(axis=0)  # NaN for a run missing any of them


def _fit_rows(table: RunsTable, dataset: str | None, max_compute: float | None, flag: str | None,
              option: str) -> npt.NDArray[np.int64]:
    mask = np.array([d == dataset for d in table.datasets])
    if max_compute is not None:
        mask &= table.compute <= max_compute
    if flag is not None:
        mask &= table.flag(flag, option=option)
    return np.flatnonzero(mask)


def _require(table: RunsTable, rows: npt.NDArray[np.int64], values: npt.NDArray[np.float64], column: str,
             law: str) -> None:
    """A fitted run missing the value the fit needs is an error naming the run, never a silent drop."""
    for i in rows:
        if not np.isfinite(values[i]):
            path, line = table.sources[i]
            raise InputError(f"run {table.model_ids[i]!r} is in the {law} fit set but has no value", path=path,
                             line=line, field=column)


def _curve(xs: npt.NDArray[np.float64], point: npt.NDArray[np.float64], replicates: npt.NDArray[np.float64],
           confidence_level: float) -> dict[str, list[float]]:
    low, high = percentile_interval(replicates, confidence_level=confidence_level)
    return {"x": xs.tolist(), "predicted": point.tolist(), "low": low.tolist(), "high": high.tolist()}


def _boot_summary(boot: BootstrapFits, confidence_level: float) -> dict:
    """Resample counts and a percentile interval for every parameter."""
    low, high = percentile_interval(boot.parameters, confidence_level=confidence_level)
    return {"n_resamples": boot.n_resamples, "n_failed": boot.n_failed,
            "parameter_intervals": {name: [float(lo), float(hi)] for name, lo, hi in zip(boot.names, low, high)}}


def _fit_dataset(table: RunsTable, dataset: str | None, targets: list[_Target],
                 options: ScalingFitOptions, rng: np.random.Generator) -> tuple[dict, list[dict]]:
    """Fit one training dataset's laws; return its fit entry and its predictions."""
    label = "all runs" if dataset is None else f"dataset {dataset!r}"
    loss = table.column(options.loss_column, option="--loss-column")
    rows = _fit_rows(table, dataset, options.fit_max_compute, options.fit_column, "--fit-column")
    _require(table, rows, loss, options.loss_column, "loss-law")
    try:
        loss_fit = fit_loss_law(table.compute[rows], table.multiplier[rows], loss[rows], method=options.method)
        loss_boot = bootstrap_loss_law(table.compute[rows], table.multiplier[rows], loss[rows], fit=loss_fit,
                                       n_resamples=options.n_resamples, rng=rng.spawn(1)[0])
    except FitError as exc:
        raise FitError(f"{label}, loss law ({len(rows)} fit runs): {exc}") from None
    entry: dict = {
        "dataset": dataset,
        "loss_law": {"parameters": loss_fit.parameters(), "method": loss_fit.method,
                     "bootstrap": _boot_summary(loss_boot, options.confidence_level),
                     "fit_runs": [{"model_id": table.model_ids[i], "compute": table.compute[i],
                                   "multiplier": table.multiplier[i], "loss": loss[i], "residual": r}
                                  for i, r in zip(rows, loss_fit.residuals)]},
    }
    err_boot = err_fit = None
    if options.error_columns:
        err = _error_values(table, options.error_columns)
        max_c = options.fit_max_compute if options.error_fit_max_compute is None else options.error_fit_max_compute
        erows = _fit_rows(table, dataset, max_c, options.error_fit_column, "--error-fit-column")
        _require(table, erows, loss, options.loss_column, "error-law")
        _require(table, erows, err, "+".join(options.error_columns), "error-law")
        try:
            err_fit = fit_error_law(loss[erows], err[erows])
            err_boot = bootstrap_error_law(loss[erows], err[erows], fit=err_fit, n_resamples=options.n_resamples,
                                           rng=rng.spawn(1)[0])
        except FitError as exc:
            raise FitError(f"{label}, error law ({len(erows)} fit runs): {exc}") from None
        entry["error_law"] = {"parameters": err_fit.parameters(), "columns": list(options.error_columns),
                              "bootstrap": _boot_summary(err_boot, options.confidence_level),
                              "fit_runs": [{"model_id": table.model_ids[i], "loss": loss[i], "error": err[i],
                                            "residual": r} for i, r in zip(erows, err_fit.residuals)]}
    predictions = _predict(table, dataset, targets, loss_fit, loss_boot, err_fit, err_boot, entry, options)
    return entry, predictions


def _paired(loss_boot: BootstrapFits, err_boot: BootstrapFits) -> tuple[dict, dict]:
    """Replicate parameters of both laws, truncated to the same count so replicate i chains loss i -> error i."""
    n = min(loss_boot.parameters.shape[0], err_boot.parameters.shape[0])
    return ({k: v[:n] for k, v in loss_boot.columns().items()}, {k: v[:n] for k, v in err_boot.columns().items()})


def _quantity_rows(dataset: str | None, targets: list[_Target], quantity: str, point: npt.NDArray[np.float64],
                   low: npt.NDArray[np.float64], high: npt.NDArray[np.float64], actual: list[float | None],
                   in_fit: set[str]) -> list[dict]:
    rows = []
    if not np.all(np.isfinite(point)):
        bad = targets[int(np.flatnonzero(~np.isfinite(point))[0])][0]
        raise FitError(f"the fitted {quantity} law gives no finite prediction for run {bad!r}")
    for j, (model_id, compute, multiplier, _row) in enumerate(targets):
        known = actual[j] is not None and np.isfinite(actual[j])
        rows.append({
            "dataset": dataset, "model_id": model_id, "quantity": quantity, "compute": compute,
            "multiplier": multiplier, "predicted": float(point[j]), "low": float(low[j]), "high": float(high[j]),
            "actual": float(actual[j]) if known else None,
            "relative_error": float(relative_error(point[j], actual[j])) if known else None,
            "in_fit": model_id in in_fit,
        })
    return rows


def _predict(table: RunsTable, dataset: str | None, targets: list[_Target], loss_fit: LossLawFit,
             loss_boot: BootstrapFits, err_fit: ErrorLawFit | None, err_boot: BootstrapFits | None, entry: dict,
             options: ScalingFitOptions) -> list[dict]:
    """Predictions (with intervals, actual values, relative errors) and the curves, stored into ``entry``."""
    cl = options.confidence_level
    compute = np.array([t[1] for t in targets])
    multiplier = np.array([t[2] for t in targets])
    rows = [t[3] for t in targets]
    loss_col = table.values[options.loss_column]
    point = loss_fit.predict(compute, multiplier)
    loss_reps = loss_law(compute, multiplier, **loss_boot.columns())
    low, high = percentile_interval(loss_reps, confidence_level=cl)
    actual = [None if r is None else loss_col[r] for r in rows]
    fitted = {r["model_id"] for r in entry["loss_law"]["fit_runs"]}
    out = _quantity_rows(dataset, targets, "loss", point, low, high, actual, fitted)
    fit_c = np.array([r["compute"] for r in entry["loss_law"]["fit_runs"]])
    grid_c = np.geomspace(fit_c.min() / 2, max(fit_c.max(), compute.max()) * 2, _N_CURVE_POINTS)
    fit_m = np.array([r["multiplier"] for r in entry["loss_law"]["fit_runs"]])
    curve_ms = sorted(set(np.round(multiplier, 6).tolist()) | set(np.round(fit_m, 6).tolist()))
    entry["loss_curves"] = [
        {"multiplier": m, **_curve(grid_c, loss_fit.predict(grid_c, m), loss_law(grid_c, m, **loss_boot.columns()), cl)}
        for m in curve_ms
    ]
    if err_fit is None:
        return out
    err_values = _error_values(table, options.error_columns)
    loss_cols, err_cols = _paired(loss_boot, err_boot)
    chained = error_law(loss_law(compute, multiplier, **loss_cols), **{k: v[:, None] for k, v in err_cols.items()})
    low, high = percentile_interval(chained, confidence_level=cl)
    actual = [None if r is None else err_values[r] for r in rows]
    fitted = {r["model_id"] for r in entry["error_law"]["fit_runs"]}
    out += _quantity_rows(dataset, targets, "error", err_fit.predict(point), low, high, actual, fitted)
    fit_l = np.array([r["loss"] for r in entry["error_law"]["fit_runs"]])
    grid_l = np.linspace(min(fit_l.min(), point.min()) * 0.97, max(fit_l.max(), point.max()) * 1.03, _N_CURVE_POINTS)
    reps = error_law(grid_l, **{k: v[:, None] for k, v in err_boot.columns().items()})
    entry["error_curve"] = _curve(grid_l, err_fit.predict(grid_l), reps, cl)
    return out


def _resolve_targets(table: RunsTable, targets: Sequence[PredictTarget], options: ScalingFitOptions) -> list[tuple]:
    """(dataset, model_id, compute, multiplier, row) per target, checked against the table and --dataset."""
    known = sorted({d for d in table.datasets if d is not None})
    if options.dataset is not None and options.dataset not in known:
        raise UnknownNameError("dataset", options.dataset, known, field="--dataset")
    resolved = []
    for target in targets:
        if target.params is None:
            row = table.index_of(target.model_id)
            dataset = table.datasets[row]
            if options.dataset is not None and dataset != options.dataset:
                raise InputError(f"run {target.model_id!r} was trained on {dataset!r}, not on {options.dataset!r}",
                                 field="--predict")
            resolved.append((dataset, target.model_id, float(table.compute[row]), float(table.multiplier[row]), row))
            continue
        dataset = options.dataset
        if dataset is None and len(set(table.datasets)) > 1:
            raise InputError(f"hypothetical run {target.model_id!r}: the table has several datasets, pick one",
                             field="--dataset", allowed=known)
        dataset = dataset if dataset is not None else table.datasets[0]
        resolved.append((dataset, target.model_id, 6.0 * target.params * target.tokens,
                         target.tokens / target.params, None))
    return resolved


def scaling_fit_payload(table: RunsTable, targets: Sequence[PredictTarget], options: ScalingFitOptions) -> dict:
    """Fit per training dataset of the targets and predict every target; the ``scaling`` record payload."""
    if not targets:
        raise InputError("give at least one run to predict", field="--predict")
    resolved = _resolve_targets(table, targets, options)
    fits, predictions = [], []
    for dataset in dict.fromkeys(r[0] for r in resolved):
        mine = [r[1:] for r in resolved if r[0] == dataset]
        rng = np.random.default_rng(derive_seed(options.seed, "scaling", dataset or ""))
        entry, preds = _fit_dataset(table, dataset, mine, options, rng)
        fits.append(entry)
        predictions += preds
    return {
        "loss_column": options.loss_column,
        "error_columns": list(options.error_columns),
        "method": options.method,
        "n_resamples": options.n_resamples,
        "confidence_level": options.confidence_level,
        "seed": options.seed,
        "fit_max_compute": options.fit_max_compute,
        "error_fit_max_compute": options.error_fit_max_compute,
        "fit_column": options.fit_column,
        "error_fit_column": options.error_fit_column,
        "fits": fits,
        "predictions": predictions,
    }
