"""Read the table of training runs that ``flasheval scaling fit`` fits and predicts.

One run per row: a model id, its parameter count N and training tokens D, optionally its training
dataset, and any number of measured values (validation losses, per-task or average top-1 errors) and
boolean flags (e.g. which runs a paper fitted). Accepted files:

- CSV (``.csv``, ``.csv.gz``) and parquet (``.parquet``): one row per run;
- JSON: a flasheval run record (``flasheval.records``) whose payload is one run or holds ``runs``
  (a list of runs), or a plain list of runs / ``{"runs": [...]}``. Nested ``metrics``, ``aggregates``,
  ``losses`` and ``errors`` objects of a run are merged into it, so ``evaluate`` records that carry
  ``model_id``, ``params`` and ``tokens`` can be given as they are.

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
from flasheval.records import SCHEMA, read_record

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
        data = read_record(path).payload
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


def _find_column(frame: pd.DataFrame, key: str, path: Path, *, required: bool) -> str | None:
    for alias in COLUMN_ALIASES[key]:
        if alias in frame.columns:
            return alias
    if required:
        raise InputError(f"missing column (accepted names: {', '.join(COLUMN_ALIASES[key])})", path=path, field=key)
    return None


def _positive(frame: pd.DataFrame, column: str, path: Path, first_line: int | None) -> npt.NDArray[np.float64]:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values) | (values <= 0))
    if len(bad):
        i = int(bad[0])
        line = None if first_line is None else first_line + i
        where = "" if first_line is not None else f" (run {frame.iloc[i].get('model_id', i)!s})"
        raise InputError(f"must be a positive number, got {frame[column].iloc[i]!r}{where}", path=path, line=line,
                         field=column)
    return values


def read_runs(path: str | PathLike[str]) -> RunsTable:
    """Read one runs file (CSV, parquet, JSON or a flasheval run record) into a :class:`RunsTable`."""
    return read_runs_files([path])


def read_runs_files(paths: Sequence[str | PathLike[str]]) -> RunsTable:
    """Read and concatenate several runs files; the numeric and boolean columns are the union."""
    if not paths:
        raise InputError("no runs file given", field="--runs")
    ids: list[str] = []
    params, tokens, datasets, sources = [], [], [], []
    frames: list[pd.DataFrame] = []
    for raw_path in paths:
        path = Path(raw_path)
        frame, first_line = _read_frame(path)
        if frame.empty:
            raise InputError("runs table has no rows", path=path)
        id_col = _find_column(frame, "model_id", path, required=True)
        ds_col = _find_column(frame, "dataset", path, required=False)
        params.append(_positive(frame, _find_column(frame, "params", path, required=True), path, first_line))
        tokens.append(_positive(frame, _find_column(frame, "tokens", path, required=True), path, first_line))
        ids += [str(x) for x in frame[id_col]]
        datasets += [None if ds_col is None or pd.isna(x) else str(x) for x in
                     (frame[ds_col] if ds_col else [None] * len(frame))]
        sources += [(str(path), None if first_line is None else first_line + i) for i in range(len(frame))]
        frames.append(frame)
    merged = pd.concat(frames, ignore_index=True, sort=False)
    values, flags = {}, {}
    for name in merged.columns:
        column = merged[name]
        if column.dropna().map(lambda v: isinstance(v, (bool, np.bool_))).all() and column.notna().all():
            flags[str(name)] = column.to_numpy(dtype=bool)
        elif pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            values[str(name)] = column.to_numpy(dtype=float)
    return RunsTable(
        model_ids=tuple(ids),
        params=np.concatenate(params),
        tokens=np.concatenate(tokens),
        datasets=tuple(datasets),
        values=values,
        flags=flags,
        sources=tuple(sources),
    )

