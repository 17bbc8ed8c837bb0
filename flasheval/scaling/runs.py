"""Read the table of training runs that ``flasheval scaling fit`` fits and predicts.

One run per row: a model id, its parameter count N and training tokens D, optionally its training
dataset, and any number of measured values (validation losses, per-task or average top-1 errors) and
boolean flags (e.g. which runs a paper fitted). Accepted files:

- CSV (``.csv``, ``.csv.gz``) and parquet (``.parquet``): one row per run;
- JSON: a flasheval run record (``flasheval.records.run_record``) whose payload is one run or holds ``runs``
  (a list of runs), or a plain list of runs / ``{"runs": [...]}``. Nested ``metrics``, ``aggregates``,
  ``losses`` and ``errors`` objects of a run are merged into it.
- ``flasheval evaluate`` records (``summary.json``) give one run: their ``model_id`` and the flat
  ``metrics`` the command writes (``loss`` / ``loss_<file>`` and ``bits_per_byte`` / ``bpb_<file>``
  from ``--heldout``, ``<suite>`` for a complete suite aggregate such as ``gadre-17``, and
  ``<suite>_partial`` for a partial one, which a default column never picks up). Their N and D come
  from another file (a CSV of the runs' scale), merged by model id.

Several files are merged by model id (a run's scale in one file, its loss or errors in others); a
value given twice must agree.

Column names accepted for the three required fields are listed in :data:`COLUMN_ALIASES`. Every
problem is one :class:`~flasheval.errors.InputError` naming the file, line (CSV) and field.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from flasheval.errors import InputError, UnknownNameError
from flasheval.records.run_record import SCHEMA, read_record

__all__ = ["COLUMN_ALIASES", "RunsTable", "read_runs", "read_runs_files"]

COLUMN_ALIASES: Mapping[str, tuple[str, ...]] = {
    "model_id": ("model_id", "model", "name"),
    "params": ("params", "params_N", "n_params", "parameters"),
    "tokens": ("tokens", "tokens_D", "n_tokens", "train_tokens"),
    "dataset": ("dataset", "train_dataset", "training_dataset"),
}
_NESTED_KEYS = ("metrics", "aggregates", "losses", "errors")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RunsTable:
    """Training runs with their scale, dataset and measured values (validated, read-only)."""

    model_ids: tuple[str, ...]
    """One id per run, unique."""
    params: npt.NDArray[np.float64]
    """Parameter count N per run (positive)."""
    tokens: npt.NDArray[np.float64]
    """Training tokens D per run (positive)."""
    datasets: tuple[str | None, ...]
    """Training dataset per run, ``None`` when the table has no dataset column."""
    values: Mapping[str, npt.NDArray[np.float64]]
    """Numeric columns by name (NaN where a run has no value)."""
    flags: Mapping[str, npt.NDArray[np.bool_]]
    """Boolean columns by name."""
    sources: tuple[tuple[str, int | None], ...]
    """(file, line) each run was read from; line is ``None`` outside CSV."""
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        n = len(self.model_ids)
        if any(len(x) != n for x in (self.params, self.tokens, self.datasets, self.sources)):
            raise ValueError("every RunsTable column must have one entry per run")
        for i, model_id in enumerate(self.model_ids):
            if model_id in self._index:
                path, line = self.sources[i]
                raise InputError(f"duplicate run {model_id!r}", path=path, line=line, field="model_id")
            self._index[model_id] = i

    @property
    def n_runs(self) -> int:
        """Number of runs."""
        return len(self.model_ids)

    @property
    def compute(self) -> npt.NDArray[np.float64]:
        """Training compute ``C = 6 N D`` in FLOPs."""
        return 6.0 * self.params * self.tokens

    @property
    def multiplier(self) -> npt.NDArray[np.float64]:
        """Token multiplier ``M = D / N``."""
        return self.tokens / self.params

    def index_of(self, model_id: str) -> int:
        """Row of ``model_id``; :class:`UnknownNameError` listing the known ids otherwise."""
        if model_id not in self._index:
            raise UnknownNameError("run", model_id, self.model_ids, field="--predict")
        return self._index[model_id]

    def column(self, name: str, *, option: str) -> npt.NDArray[np.float64]:
        """A numeric column, or an InputError naming the option and the columns there are."""
        if name not in self.values:
            raise InputError(f"no column {name!r} in the runs table", field=option, allowed=sorted(self.values))
        return self.values[name]

    def flag(self, name: str, *, option: str) -> npt.NDArray[np.bool_]:
        """A boolean column, or an InputError naming the option and the boolean columns there are."""
        if name not in self.flags:
            raise InputError(f"no boolean column {name!r} in the runs table", field=option, allowed=sorted(self.flags))
        return self.flags[name]


def _json_rows(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        record = read_record(path)
        data = _evaluate_run(record.payload, path) if record.kind == "evaluate" else record.payload
    if isinstance(data, dict) and "runs" in data:
        data = data["runs"]
    rows = data if isinstance(data, list) else [data]
    flat = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"run {i} is not a JSON object", path=path, field="runs")
        merged = {k: v for k, v in row.items() if k not in _NESTED_KEYS}
        for key in _NESTED_KEYS:
            if isinstance(row.get(key), dict):
                merged.update(row[key])
        flat.append(merged)
    return flat


def _evaluate_run(payload: dict[str, Any], path: Path) -> dict[str, Any]:
    """An ``evaluate`` record as one run: its model id, its flat metrics, and N, D or dataset if it has them.

    Nothing else of the record enters the run (its example counts and timings are not run columns).
    Its ``n_tokens`` and ``n_parameters`` are the evaluation's own counts (tokens scored, weights
    loaded), not the training run's D and N, so they never stand in for them.
    """
    if "model_id" not in payload:
        raise InputError("evaluate record without a model id (written by an older flasheval: rerun evaluate)",
                         path=path, field="model_id")
    own_counts = ("n_tokens", "n_parameters")
    scale = {k: v for key in ("params", "tokens", "dataset") for k in COLUMN_ALIASES[key]
             if k not in own_counts and (v := payload.get(k)) is not None}
    return {"model_id": payload["model_id"], **scale, "metrics": payload.get("metrics") or {}}


def _read_frame(path: Path) -> tuple[pd.DataFrame, int | None]:
    """The file as a DataFrame and the line number of its first data row (CSV only)."""
    if not path.is_file():
        raise InputError("runs file not found", path=path)
    name = path.name.lower()
    try:
        if name.endswith((".csv", ".csv.gz")):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
                return pd.read_csv(fh), 2
        if name.endswith(".parquet"):
            return pd.read_parquet(path), None
        if name.endswith(".json"):
            return pd.DataFrame(_json_rows(path)), None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"cannot read runs table ({exc})", path=path) from None
    raise InputError("unknown runs file type", path=path, allowed=(".csv", ".csv.gz", ".parquet", ".json"))


def _find_column(frame: pd.DataFrame, key: str) -> str | None:
    return next((alias for alias in COLUMN_ALIASES[key] if alias in frame.columns), None)


def _file_rows(path: Path) -> list[tuple[dict[str, Any], tuple[str, int | None]]]:
    """The file's runs as dicts with the canonical names, each with its (file, line)."""
    frame, first_line = _read_frame(path)
    if frame.empty:
        raise InputError("runs table has no rows", path=path)
    id_col = _find_column(frame, "model_id")
    if id_col is None:
        raise InputError(f"missing column (accepted names: {', '.join(COLUMN_ALIASES['model_id'])})", path=path,
                         field="model_id")
    rename = {col: key for key in COLUMN_ALIASES if (col := _find_column(frame, key)) is not None}
    rows = frame.rename(columns=rename).to_dict("records")
    return [(row, (str(path), None if first_line is None else first_line + i)) for i, row in enumerate(rows)]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and not np.isfinite(value)) or (
        not isinstance(value, (list, dict, tuple)) and bool(pd.isna(value)))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _same(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=0.0))
    return a == b


def _merge(paths: Sequence[Path]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, tuple[str, int | None]]]]:
    """Runs by model id, merged across files (a later file may add columns, never contradict one)."""
    runs: dict[str, dict[str, Any]] = {}
    where: dict[str, dict[str, tuple[str, int | None]]] = {}
    for path in paths:
        seen: set[str] = set()
        for row, source in _file_rows(path):
            model_id = str(row.pop("model_id"))
            if model_id in seen:
                raise InputError(f"duplicate run {model_id!r}", path=source[0], line=source[1], field="model_id")
            seen.add(model_id)
            run, run_where = runs.setdefault(model_id, {}), where.setdefault(model_id, {"": source})
            for key, value in row.items():
                if _missing(value) or isinstance(value, (list, dict, tuple)):
                    continue
                if key in run and not _same(run[key], value):
                    raise InputError(f"run {model_id!r}: {value!r} contradicts {run[key]!r} read before",
                                     path=source[0], line=source[1], field=str(key))
                run[key], run_where[key] = value, source
    return runs, where


def _positive_value(run: dict[str, Any], key: str, model_id: str, source: tuple[str, int | None]) -> float:
    value = run.get(key)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = float("nan")
    if value is None or not np.isfinite(number) or number <= 0:
        got = "no value" if value is None else f"got {value!r}"
        raise InputError(f"run {model_id!r}: must be a positive number, {got} "
                         f"(accepted names: {', '.join(COLUMN_ALIASES[key])})", path=source[0], line=source[1],
                         field=key)
    return number


def _columns(runs: list[dict[str, Any]]) -> tuple[dict[str, npt.NDArray[np.float64]], dict[str, npt.NDArray[np.bool_]]]:
    """Numeric columns (NaN where missing) and boolean columns (present in every run)."""
    keys = dict.fromkeys(k for run in runs for k in run if k not in COLUMN_ALIASES)
    values, flags = {}, {}
    for key in keys:
        present = [run[key] for run in runs if key in run]
        if len(present) == len(runs) and all(isinstance(v, (bool, np.bool_)) for v in present):
            flags[str(key)] = np.array(present, dtype=bool)
        elif all(_is_number(v) for v in present):
            values[str(key)] = np.array([float(run.get(key, np.nan)) for run in runs])
    return values, flags


def read_runs(path: str | PathLike[str]) -> RunsTable:
    """Read one runs file (CSV, parquet, JSON or a flasheval run record) into a :class:`RunsTable`."""
    return read_runs_files([path])


def read_runs_files(paths: Sequence[str | PathLike[str]]) -> RunsTable:
    """Read several runs files and merge them by model id.

    A run may be spread over files (e.g. parameters and tokens in one, an ``evaluate`` record's loss
    in another, ``flasheval aggregate`` output in a third); a value given twice must agree. After the
    merge every run needs positive ``params`` and ``tokens``.
    """
    if not paths:
        raise InputError("no runs file given", field="--runs")
    runs, where = _merge([Path(p) for p in paths])
    ids = list(runs)
    params = [_positive_value(runs[i], "params", i, where[i].get("params", where[i][""])) for i in ids]
    tokens = [_positive_value(runs[i], "tokens", i, where[i].get("tokens", where[i][""])) for i in ids]
    values, flags = _columns([runs[i] for i in ids])
    return RunsTable(
        model_ids=tuple(ids),
        params=np.array(params),
        tokens=np.array(tokens),
        datasets=tuple(None if "dataset" not in runs[i] else str(runs[i]["dataset"]) for i in ids),
        values=values,
        flags=flags,
        sources=tuple(where[i][""] for i in ids),
    )
