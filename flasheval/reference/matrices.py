"""Per-dataset score matrices filled from long rows batch by batch, with the reference's row checks.

A long table (one row per model, dataset and example: a ``score``, optionally ``n_tokens``) becomes one
dense ``(n_models, n_examples)`` matrix per dataset without the table ever being held: :class:`Names`
collects the names from a first pass over the batches (models, datasets, each dataset's example ids,
which datasets each model has), :class:`Layout` fixes the rows and columns once, and
:class:`MatrixBuilder` fills matrices allocated up front from a second pass. Each batch is encoded
by its distinct values (a Python step per distinct name, vectorised numpy per row), so memory is the
matrices plus one batch, and no Python object is made per row.

The builder refuses what :func:`~flasheval.reference.load_reference` refuses, each in one line naming
the row: a non-finite score, a (model, dataset, example) twice, a model with some but not all examples
of a dataset (missing cells). It also gathers what the writer's score-range check needs
(:class:`ScoreRange`). A model that lacks *whole* datasets is kept, its rows NaN there: the reader's
missing-data policy decides, and :meth:`ScoreMatrices.dropped_models` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from flasheval.errors import InputError

__all__ = ["UNIT_METRICS", "BadRow", "Batch", "DroppedModel", "Layout", "MatrixBuilder", "Names", "ScoreMatrices",
           "ScoreRange", "string_codes", "to_frame"]

UNIT_METRICS = frozenset({
    "acc", "acc_norm", "accuracy", "correct", "exact_match", "quasi_exact_match", "prefix_exact_match",
    "quasi_prefix_exact_match", "final_number_exact_match", "math_equiv", "math_equiv_chain_of_thought",
})
"""Per-example metrics whose scores lie in ``[0, 1]`` (0/1 correctness, accuracy); a score outside is refused."""


def shown(value: Any) -> str:
    """A score as the user wrote it (``7.0``, ``nan``, ``'abc'``), not numpy's repr."""
    numeric = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
    return repr(float(value)) if numeric else repr(value)


def such_rows(n: int) -> str:
    """``"1 such row"``, ``"3 such rows"``."""
    return f"{n} such row{'s' if n > 1 else ''}"


def string_codes(column: pa.Array) -> tuple[list[str], np.ndarray]:
    """``(distinct values as strings, per-row index into them)`` of a key column (strings, numbers or a dictionary).

    Numbers become their decimal text (``12``), as ``astype(str)`` writes them. Only values that some row uses
    are guaranteed to be listed meaningfully: a dictionary column may list unused ones too.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_dictionary(column.type):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = column.cast(pa.string())
        column = pc.dictionary_encode(column)
    values = column.dictionary
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = values.cast(pa.string())
    return values.to_pylist(), column.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _used(indices: np.ndarray, n: int) -> list[int]:
    """The distinct values of ``indices`` (each in ``[0, n)``), by counting: linear, unlike a sort."""
    return np.flatnonzero(np.bincount(indices, minlength=n)).tolist() if len(indices) else []


def _lookup(values: list[str], indices: np.ndarray, table: Mapping[str, int] | dict[str, int], *,
            grow: bool) -> np.ndarray:
    """Per-row ids of ``values[indices]`` in ``table`` (new names added when ``grow``; ``-1`` for unknown ones)."""
    lut = np.full(len(values), -1, dtype=np.int64)
    for u in _used(indices, len(values)):
        name = values[u]
        if grow:
            lut[u] = table.setdefault(name, len(table))  # type: ignore[union-attr]
        else:
            lut[u] = table.get(name, -1)
    return lut[indices]


class Names:
    """The names in long rows, gathered batch by batch (pass 1): models, datasets, examples, and who has what."""

    def __init__(self) -> None:
        self._models: dict[str, int] = {}
        self._datasets: dict[str, int] = {}
        self._examples: list[dict[str, int]] = []
        self._pairs: set[tuple[int, int]] = set()

    def add(self, models: pa.Array, datasets: pa.Array, example_ids: pa.Array) -> None:
        """Record the names of one batch's rows (key columns of equal length, no nulls)."""
        m = _lookup(*string_codes(models), self._models, grow=True)
        d = _lookup(*string_codes(datasets), self._datasets, grow=True)
        while len(self._examples) < len(self._datasets):
            self._examples.append({})
        values, indices = string_codes(example_ids)
        for dataset in _used(d, len(self._datasets)):
            table = self._examples[dataset]
            for u in _used(indices[d == dataset], len(values)):
                table.setdefault(values[u], len(table))
        width = max(len(self._datasets), 1)
        self._pairs.update((k // width, k % width) for k in _used(m * width + d, len(self._models) * width))

    def layout(self) -> Layout:
        """The rows and columns of the matrices these names make."""
        datasets = list(self._datasets)
        has: dict[str, set[str]] = {name: set() for name in self._models}
        models = list(self._models)
        for m, d in self._pairs:
            has[models[m]].add(datasets[d])
        return Layout.of(has, {name: list(self._examples[i]) for i, name in enumerate(datasets)})


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    """Rows and columns of the score matrices, fixed before they are filled.

    Rows are the models that have every dataset first (sorted), then the others (sorted): the default
    missing-data policy's pool is then a leading block of rows, a view and not a copy. Columns of a
    dataset are its example ids, sorted.
    """

    model_ids: tuple[str, ...]
    dataset_names: tuple[str, ...]
    example_ids: tuple[tuple[str, ...], ...]
    present: np.ndarray
    """Bool ``(n_models, n_datasets)``: the model has (some) scores on the dataset."""
    model_index: Mapping[str, int]
    dataset_index: Mapping[str, int]
    example_index: tuple[Mapping[str, int], ...]

    @classmethod
    def of(cls, has: Mapping[str, Iterable[str]], example_ids: Mapping[str, Iterable[str]]) -> Layout:
        """The layout of models ``has`` (model -> the datasets it has) on datasets ``example_ids`` (-> their ids)."""
        datasets = tuple(sorted(example_ids))
        wanted = set(datasets)
        covered = {m: set(ds) & wanted for m, ds in has.items()}
        models = tuple(sorted(covered, key=lambda m: (len(covered[m]) < len(datasets), m)))
        present = np.array([[d in covered[m] for d in datasets] for m in models], dtype=bool).reshape(
            len(models), len(datasets))
        ids = tuple(tuple(sorted(set(example_ids[d]))) for d in datasets)
        return cls(model_ids=models, dataset_names=datasets, example_ids=ids, present=present,
                   model_index={m: i for i, m in enumerate(models)},
                   dataset_index={d: i for i, d in enumerate(datasets)},
                   example_index=tuple({e: j for j, e in enumerate(col)} for col in ids))

    def encode(self, models: pa.Array, datasets: pa.Array, example_ids: pa.Array
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row, dataset and column of each row of a batch (``-1`` for a name this layout lacks)."""
        m = _lookup(*string_codes(models), self.model_index, grow=False)
        d = _lookup(*string_codes(datasets), self.dataset_index, grow=False)
        values, indices = string_codes(example_ids)
        e = np.full(len(indices), -1, dtype=np.int64)
        for dataset in _used(d[d >= 0], len(self.dataset_names)):
            rows = d == dataset
            e[rows] = _lookup(values, indices[rows], self.example_index[dataset], grow=False)
        return m, d, e


@dataclass(frozen=True, slots=True, kw_only=True)
class BadRow:
    """The first row a check found, named as the input names it (``row 7: ``, ``FILE:LINE: ``)."""

    where: str
    model: str
    dataset: str
    example_id: str
    score: Any
    metric: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreRange:
    """What the writer's score-range check needs, gathered over every row (finite scores only)."""

    n_rows: int = 0
    has_metric: bool = False
    """The input names a per-row metric (a ``metric`` column, lm-eval's metric keys)."""
    n_outside: int = 0
    first_outside: BadRow | None = None
    n_unit_outside: int = 0
    """Scores outside ``[0, 1]`` on rows whose metric is one of :data:`UNIT_METRICS`."""
    first_unit_outside: BadRow | None = None
    others_binary: bool = True
    """Every score inside ``[0, 1]`` is exactly 0 or 1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DroppedModel:
    """A model that lacks scores other models have: the default missing-data policy leaves it out."""

    model_id: str
    n_missing: int
    """Cells it lacks: the examples of the datasets it has no scores on."""
    first_missing: str
    """The first of them, ``dataset/example_id``."""

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model_id, "missing": self.n_missing, "first_missing": self.first_missing}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ScoreMatrices:
    """Every model's scores on every dataset, before any missing-data policy.

    ``scores[d]`` is ``(n_models, n_examples_d)``, rows in ``model_ids`` order (the models that have every
    dataset first, see :class:`Layout`), NaN where the model has no scores on the dataset.
    """

    model_ids: tuple[str, ...]
    dataset_names: tuple[str, ...]
    example_ids: tuple[tuple[str, ...], ...]
    scores: tuple[np.ndarray, ...]
    n_tokens: tuple[np.ndarray | None, ...]
    """Per dataset, int64 tokens processed (0 where absent), or ``None`` without token counts."""
    present: np.ndarray
    """Bool ``(n_models, n_datasets)``."""
    n_rows: int
    score_range: ScoreRange
    source: Path | None = None
    """The input the rows came from (named by errors found later)."""
    suites: tuple[str, ...] = ()
    """Distinct values of the input's ``suite`` column, if it has one (for messages)."""

    @property
    def n_complete(self) -> int:
        """Models with every dataset: the leading rows."""
        return int(self.present.all(axis=1).sum()) if self.dataset_names else len(self.model_ids)

    def dropped_models(self) -> tuple[DroppedModel, ...]:
        """The models lacking some dataset others have, by name, with what they lack."""
        out = []
        for i in range(self.n_complete, len(self.model_ids)):
            lacking = [d for d in range(len(self.dataset_names)) if not self.present[i, d]]
            first = lacking[0]
            out.append(DroppedModel(model_id=self.model_ids[i],
                                    n_missing=sum(len(self.example_ids[d]) for d in lacking),
                                    first_missing=f"{self.dataset_names[first]}/{self.example_ids[first][0]}"))
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Batch:
    """One batch of long rows, encoded against a :class:`Layout`; the callables name a row for messages."""

    models: np.ndarray
    datasets: np.ndarray
    examples: np.ndarray
    scores: np.ndarray
    """float64; NaN for a missing or non-numeric score."""
    raw_score: Callable[[int], Any]
    where: Callable[[int], str]
    """``"row 7: "`` or ``"FILE:LINE: "`` of a row (by its place in the batch)."""
    n_tokens: np.ndarray | None = None
    unit_metric: np.ndarray | None = None
    """Bool per row: its metric is one of :data:`UNIT_METRICS`; ``None`` when the input names no metric."""
    metric_name: Callable[[int], str] | None = None


class MatrixBuilder:
    """Fill the matrices of a :class:`Layout` from batches (pass 2), then check and hand them over.

    Parameters
    ----------
    layout
        Rows and columns, from :meth:`Names.layout` or :meth:`Layout.of`.
    dtype
        Of the score matrices: float32 is what a reference stores, float64 what placement computes in.
    tokens
        Whether the rows carry ``n_tokens``.
    source
        The input, named by the errors.
    """

    def __init__(self, layout: Layout, *, dtype: type = np.float64, tokens: bool = False,
                 source: Path | None = None) -> None:
        self.layout = layout
        self.source = source
        n = len(layout.model_ids)
        self._scores = [np.full((n, len(ids)), np.nan, dtype=dtype) for ids in layout.example_ids]
        self._tokens = [np.zeros((n, len(ids)), dtype=np.int64) for ids in layout.example_ids] if tokens else None
        self._n_rows = 0
        self._bad: dict[str, tuple[int, BadRow | None]] = {"score": (0, None), "duplicate": (0, None)}
        self._range: dict[str, Any] = {"has_metric": False, "n_outside": 0, "first_outside": None,
                                       "n_unit_outside": 0, "first_unit_outside": None, "others_binary": True}

    def _row(self, batch: Batch, i: int, metric: bool = False) -> BadRow:
        lay = self.layout
        d = int(batch.datasets[i])
        return BadRow(where=batch.where(i), model=lay.model_ids[batch.models[i]], dataset=lay.dataset_names[d],
                      example_id=lay.example_ids[d][batch.examples[i]], score=batch.raw_score(i),
                      metric=batch.metric_name(i) if metric and batch.metric_name else "")

    def _count(self, key: str, batch: Batch, mask: np.ndarray) -> None:
        """Add the rows of ``mask`` to the bad rows of kind ``key``, keeping the first one seen."""
        if mask.any():
            n, row = self._bad[key]
            self._bad[key] = (n + int(mask.sum()), row or self._row(batch, int(np.flatnonzero(mask)[0])))

    def fill(self, batch: Batch) -> None:
        """Put one batch's scores in place, noting bad rows (refused by :meth:`result`)."""
        if (batch.models < 0).any() or (batch.datasets < 0).any() or (batch.examples < 0).any():
            raise InputError("the input changed while it was read (a name of the second pass is not in the first); "
                             "read it again", path=self.source)
        self._n_rows += len(batch.scores)
        finite = np.isfinite(batch.scores)
        self._count("score", batch, ~finite)
        self._note_range(batch, finite)
        first_dup: int | None = None
        n_dup = 0
        for d in _used(batch.datasets, len(self.layout.dataset_names)):
            rows = np.flatnonzero((batch.datasets == d) & finite)
            flat = batch.models[rows] * len(self.layout.example_ids[d]) + batch.examples[rows]
            cells = self._scores[d].reshape(-1)
            dup = ~np.isnan(cells[flat])
            order = np.argsort(flat, kind="stable")
            repeat = np.zeros(len(flat), dtype=bool)
            repeat[order[1:][flat[order][1:] == flat[order][:-1]]] = True
            dup |= repeat
            if dup.any():
                n_dup += int(dup.sum())
                first_dup = min(int(rows[dup][0]), first_dup if first_dup is not None else len(finite))
            cells[flat] = batch.scores[rows]
            if self._tokens is not None and batch.n_tokens is not None:
                self._tokens[d].reshape(-1)[flat] = batch.n_tokens[rows]
        if first_dup is not None:
            n, row = self._bad["duplicate"]
            self._bad["duplicate"] = (n + n_dup, row or self._row(batch, first_dup))

    def _note_range(self, batch: Batch, finite: np.ndarray) -> None:
        s = batch.scores
        outside = finite & ((s < 0.0) | (s > 1.0))
        r = self._range
        inside = s[finite & ~outside]
        r["others_binary"] = r["others_binary"] and bool(((inside == 0.0) | (inside == 1.0)).all())
        if batch.unit_metric is not None:
            r["has_metric"] = True
        if not outside.any():
            return
        r["n_outside"] += int(outside.sum())
        if r["first_outside"] is None:
            r["first_outside"] = self._row(batch, int(np.flatnonzero(outside)[0]))
        if batch.unit_metric is not None:
            unit = outside & batch.unit_metric
            if unit.any():
                r["n_unit_outside"] += int(unit.sum())
                if r["first_unit_outside"] is None:
                    r["first_unit_outside"] = self._row(batch, int(np.flatnonzero(unit)[0]), metric=True)

    def result(self, *, suites: Iterable[str] = ()) -> ScoreMatrices:
        """The filled matrices; refuses a non-finite score, a duplicate row or a partly covered dataset."""
        n, row = self._bad["score"]
        if row is not None:
            raise InputError(f"{row.where}non-numeric or non-finite score for {row.model} / {row.dataset} / "
                             f"{row.example_id}: {shown(row.score)} ({such_rows(n)})", path=self.source, field="score")
        n, row = self._bad["duplicate"]
        if row is not None:
            raise InputError(f"{row.where}duplicate row for model {row.model!r}, dataset {row.dataset!r}, example "
                             f"{row.example_id!r} ({n} duplicates)", path=self.source)
        lay = self.layout
        for d, (name, mat) in enumerate(zip(lay.dataset_names, self._scores)):
            filled = (~np.isnan(mat)).sum(axis=1)
            partial = np.flatnonzero((filled > 0) & (filled != mat.shape[1]))
            if len(partial):
                i = min(partial.tolist(), key=lambda k: lay.model_ids[k])
                raise InputError(f"model {lay.model_ids[i]!r} has {int(filled[i])} of the {mat.shape[1]} examples of "
                                 f"dataset {name!r} (missing cells; {len(partial)} such models)", path=self.source)
        scores, tokens = tuple(self._scores), tuple(self._tokens) if self._tokens is not None else (None,) * len(
            self._scores)
        self._scores, self._tokens = [], None
        return ScoreMatrices(model_ids=lay.model_ids, dataset_names=lay.dataset_names, example_ids=lay.example_ids,
                             scores=scores, n_tokens=tokens, present=lay.present, n_rows=self._n_rows,
                             score_range=ScoreRange(n_rows=self._n_rows, **self._range), source=self.source,
                             suites=tuple(sorted(set(suites))))


def to_frame(matrices: ScoreMatrices) -> pd.DataFrame:
    """The present cells as long rows (``model``, ``dataset``, ``example_id``, ``score``, and ``n_tokens`` when
    there are token counts), sorted by dataset, model and example id: for data small enough to hold as a frame."""
    parts = []
    by_name = np.argsort(np.array(matrices.model_ids, dtype=object), kind="stable")
    for d, (dataset, ids) in enumerate(zip(matrices.dataset_names, matrices.example_ids)):
        rows = by_name[matrices.present[by_name, d]]
        part = {"model": np.repeat(np.array(matrices.model_ids, dtype=object)[rows], len(ids)),
                "dataset": dataset, "example_id": np.tile(np.array(ids, dtype=object), len(rows)),
                "score": matrices.scores[d][rows].astype(np.float64).reshape(-1)}
        if matrices.n_tokens[d] is not None:
            part["n_tokens"] = matrices.n_tokens[d][rows].reshape(-1)  # type: ignore[index]
        parts.append(pd.DataFrame(part))
    columns = ["model", "dataset", "example_id", "score"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
