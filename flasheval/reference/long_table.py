"""Long score tables (parquet files, data frames) to :class:`~flasheval.reference.matrices.ScoreMatrices` and back.

:func:`scan_long_table` reads a parquet file with ``model``, ``dataset``, ``example_id``, ``score`` (and
optionally ``n_tokens``, ``metric``, ``suite``) in two streamed passes of record batches
(:meth:`pyarrow.parquet.ParquetFile.iter_batches`): the key columns to fix the matrices' rows and
columns, then every column to fill them. Peak memory is the matrices plus one batch (and, as pyarrow
reads, one row group's compressed pages), however long the file. :func:`write_long_table` writes the
matrices back as a reference's ``scores.parquet`` the same way, one row group per block of rows;
:func:`frame_matrices` does the same checks for a frame already in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flasheval.errors import InputError, UnknownNameError
from flasheval.reference.matrices import UNIT_METRICS, Batch, Layout, MatrixBuilder, Names, ScoreMatrices

__all__ = ["LONG_COLUMNS", "BATCH_ROWS", "scan_long_table", "frame_matrices", "write_long_table"]

LONG_COLUMNS: tuple[str, ...] = ("model", "dataset", "example_id", "score")
BATCH_ROWS = 1 << 18
"""Rows per record batch read (and per row group written): about 10 MB of keys in flight."""
_KEYS = LONG_COLUMNS[:3]
_UNIT = pa.array(sorted(UNIT_METRICS), pa.string())


def _open(path: Path) -> pq.ParquetFile:
    if not path.is_file():
        raise InputError("file not found", path=path)
    try:
        return pq.ParquetFile(path)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except Exception as exc:  # pyarrow raises many types for a non-parquet file
        raise InputError(f"not a readable parquet file ({type(exc).__name__}: {exc})", path=path) from None


def _columns(pf: pq.ParquetFile) -> list[str]:
    """The file's data columns (an index pandas stored as a column is not one)."""
    meta = pf.schema_arrow.pandas_metadata or {}
    index = {c for c in meta.get("index_columns", ()) if isinstance(c, str)}
    return [c for c in pf.schema_arrow.names if c not in index]


def _batches(pf: pq.ParquetFile, path: Path, columns: list[str],
             batch_rows: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first row number, batch)`` of ``columns``, the read errors of a damaged file as one line."""
    offset = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            yield offset, batch
            offset += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot read row {offset + 1} on ({type(exc).__name__}: {exc})", path=path) from None


def _kept(batch: pa.RecordBatch, suite: str | None) -> tuple[pa.RecordBatch, np.ndarray]:
    """The rows of ``suite`` (all without one) and their places in the batch."""
    if suite is None:
        return batch, np.arange(batch.num_rows)
    mask = pc.fill_null(pc.equal(batch.column("suite").cast(pa.string()), suite), False)
    return batch.filter(mask), np.flatnonzero(mask.to_numpy(zero_copy_only=False))


def _refuse_nulls(columns: Mapping[str, pa.Array], where: Callable[[int], str], path: Path | None) -> None:
    """Refuse a row without a model, dataset, example id (or token count), naming the first one."""
    for name, column in columns.items():
        if column.null_count:
            first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(f"{where(first)}no value", path=path, field=name)


def _numbers(column: pa.Array) -> np.ndarray:
    """A score column as float64, NaN for a missing or non-numeric value (text is parsed, as ``pd.to_numeric``)."""
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        return column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return pd.to_numeric(pd.Series(column.to_pylist(), dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def _encode(layout: Layout, batch: pa.RecordBatch, where: Callable[[int], str], path: Path | None) -> Batch:
    """A read batch as a :class:`Batch` of the layout's codes (``n_tokens`` and ``metric`` when present)."""
    m, d, e = layout.encode(*(batch.column(k) for k in _KEYS))
    score = batch.column("score")
    names = batch.schema.names
    tokens = None
    if "n_tokens" in names:
        _refuse_nulls({"n_tokens": batch.column("n_tokens")}, where, path)
        tokens = batch.column("n_tokens").cast(pa.int64()).to_numpy(zero_copy_only=False)
    unit, metric = None, None
    if "metric" in names:
        metric = batch.column("metric")
        unit = pc.fill_null(pc.is_in(metric.cast(pa.string()), value_set=_UNIT), False).to_numpy(zero_copy_only=False)
    numbers = _numbers(score)
    text = not (pa.types.is_integer(score.type) or pa.types.is_floating(score.type))
    # a number is shown as read (a null one, as pandas writes NaN, as nan); text as written
    return Batch(models=m, datasets=d, examples=e, scores=numbers,
                 raw_score=(lambda i: score[i].as_py()) if text else (lambda i: float(numbers[i])),
                 where=where, n_tokens=tokens, unit_metric=unit,
                 metric_name=None if metric is None else (lambda i: str(metric[i].as_py())))


def _check_columns(present: list[str], path: Path, suite: str | None) -> None:
    absent = [c for c in LONG_COLUMNS if c not in present]
    if absent:
        raise InputError(f"missing column{'s' if len(absent) > 1 else ''} {', '.join(map(repr, absent))} (columns "
                         f"found: {', '.join(present) or 'none'}); a long table needs {', '.join(LONG_COLUMNS)}",
                         path=path, field=absent[0])
    if suite is not None and "suite" not in present:
        raise InputError("--suite given but the file has no 'suite' column", path=path, field="suite")


def scan_long_table(path: str | Path, *, suite: str | None = None, dtype: type = np.float64,
                    batch_rows: int | None = None) -> ScoreMatrices:
    """The score matrices of a long parquet file, read in two streamed passes (see the module docstring).

    Parameters
    ----------
    path
        The parquet file; errors name its rows by their 1-based number in the file.
    suite
        Keep only the rows whose ``suite`` column has this value.
    dtype
        Of the score matrices (float32: what a reference stores; float64: what placement computes with).
    batch_rows
        Rows per record batch (default :data:`BATCH_ROWS`).

    Raises
    ------
    InputError
        A missing file or column, an unreadable file, an empty key, a non-finite score, a row twice, a model
        with some but not all examples of a dataset; :class:`UnknownNameError` for an unknown ``suite``.
    """
    p = Path(path)
    batch_rows = batch_rows or BATCH_ROWS
    pf = _open(p)
    present = _columns(pf)
    _check_columns(present, p, suite)
    has_suite = "suite" in present
    names, suites = Names(), set()
    keys = [*_KEYS, *(["suite"] if has_suite else [])]
    for offset, batch in _batches(pf, p, keys, batch_rows):
        if has_suite:
            suites.update(v for v in pc.unique(batch.column("suite").cast(pa.string())).to_pylist() if v is not None)
        kept, at = _kept(batch, suite)
        _refuse_nulls({k: kept.column(k) for k in _KEYS}, _file_rows(offset, at), p)
        names.add(*(kept.column(k) for k in _KEYS))
    if suite is not None and suite not in suites:
        raise UnknownNameError("suite", suite, sorted(suites), path=p)
    layout = names.layout()
    builder = MatrixBuilder(layout, dtype=dtype, tokens="n_tokens" in present, source=p)
    wanted = [c for c in (*LONG_COLUMNS, "n_tokens", "metric", "suite") if c in present]
    for offset, batch in _batches(pf, p, wanted, batch_rows):
        kept, at = _kept(batch, suite)
        if kept.num_rows:
            builder.fill(_encode(layout, kept, _file_rows(offset, at), p))
    return builder.result(suites=suites)


def _file_rows(offset: int, at: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"row {offset + int(at[i]) + 1}: "


def _frame_label(index: pd.Index) -> Callable[[int], str]:
    """A frame row named by its index: ``row N: `` (1-based) for an integer label, else the label (``FILE:LINE``)."""
    def where(i: int) -> str:
        label = index[i]
        if isinstance(label, (int, np.integer)):
            return f"row {int(label) + 1}: "
        return f"{label}: " if label else ""
    return where


def frame_matrices(frame: pd.DataFrame, *, path: Path | None = None, dtype: type = np.float32) -> ScoreMatrices:
    """The score matrices of a long frame in memory, with :func:`scan_long_table`'s checks.

    Rows are named by the frame's index (a file's row numbers, or ``FILE:LINE`` labels); ``path`` is the
    file the frame came from, named by the errors.
    """
    absent = [c for c in LONG_COLUMNS if c not in frame.columns]
    if absent:
        raise InputError(f"missing column (columns found: {', '.join(map(str, frame.columns)) or 'none'})", path=path,
                         field=absent[0], allowed=LONG_COLUMNS)
    keys = {k: pa.array(frame[k].astype(str).to_numpy(dtype=object), pa.string(), from_pandas=True) for k in _KEYS}
    where = _frame_label(frame.index)
    _refuse_nulls(keys, where, path)
    names = Names()
    names.add(*keys.values())
    layout = names.layout()
    has_tokens = "n_tokens" in frame.columns
    builder = MatrixBuilder(layout, dtype=dtype, tokens=has_tokens, source=path)
    m, d, e = layout.encode(*keys.values())
    raw = frame["score"]
    unit, metric = None, None
    if "metric" in frame.columns:
        metric = frame["metric"].astype(str).to_numpy(dtype=object)
        unit = np.isin(metric, sorted(UNIT_METRICS))
    tokens = frame["n_tokens"].to_numpy(dtype=np.int64) if has_tokens else None
    builder.fill(Batch(models=m, datasets=d, examples=e,
                       scores=pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64),
                       raw_score=lambda i: raw.iloc[i], where=where, n_tokens=tokens, unit_metric=unit,
                       metric_name=None if metric is None else (lambda i: str(metric[i]))))
    return builder.result(suites=frame["suite"].astype(str).unique() if "suite" in frame.columns else ())


def write_long_table(path: Path, matrices: ScoreMatrices, *, rows_per_group: int | None = None) -> None:
    """Write the present cells as a reference's ``scores.parquet`` (zstd), sorted by dataset, model, example.

    ``model`` and ``dataset`` are dictionary-encoded (read back as categories), ``example_id`` text,
    ``score`` float32, ``n_tokens`` int64 when there are token counts; one row group per block of about
    ``rows_per_group`` rows (default :data:`BATCH_ROWS`), so the file is read back a batch at a time.
    """
    m = matrices
    rows_per_group = rows_per_group or BATCH_ROWS
    key = pa.dictionary(pa.int32(), pa.string())
    fields = [("model", key), ("dataset", key), ("example_id", pa.large_string()), ("score", pa.float32())]
    has_tokens = any(t is not None for t in m.n_tokens)
    schema = pa.schema(fields + ([("n_tokens", pa.int64())] if has_tokens else []))
    model_names, dataset_names = pa.array(m.model_ids, pa.string()), pa.array(m.dataset_names, pa.string())
    by_name = np.argsort(np.array(m.model_ids, dtype=object), kind="stable")
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for d, ids in enumerate(m.example_ids):
            rows = by_name[m.present[by_name, d]]
            examples = pa.array(ids, pa.large_string())
            step = max(1, rows_per_group // max(len(ids), 1))
            for start in range(0, len(rows), step):
                block = rows[start:start + step]
                n = len(block) * len(ids)
                columns: list[Any] = [
                    pa.DictionaryArray.from_arrays(pa.array(np.repeat(block, len(ids)).astype(np.int32)), model_names),
                    pa.DictionaryArray.from_arrays(pa.array(np.full(n, d, dtype=np.int32)), dataset_names),
                    examples.take(pa.array(np.tile(np.arange(len(ids)), len(block)))),
                    pa.array(m.scores[d][block].astype(np.float32, copy=False).reshape(-1)),
                ]
                if has_tokens:
                    tokens = m.n_tokens[d]
                    columns.append(pa.array(np.zeros(n, np.int64) if tokens is None else tokens[block].reshape(-1)))
                writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=n)
