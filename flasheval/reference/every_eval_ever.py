"""Every Eval Ever records read, file by file, into score matrices: the reader behind
``import_reference(format="every-eval-ever")``.

Every Eval Ever (EvalEval coalition, schema 0.3.0; ``docs/interop.md``) keeps one *aggregate* JSON log per model
and evaluation run (``model_info.id``, ``evaluation_id``, ``evaluation_results[]`` each with an
``evaluation_name``, a ``metric_config`` and an optional ``evaluation_result_id``) and its *instance-level*
JSON lines (one per scored example: ``evaluation_id``, ``model_id``, ``evaluation_name``,
``evaluation_result_id``, ``sample_id``, ``evaluation.score``, optionally ``token_usage.total_tokens``). Here an
evaluation result is a dataset (its ``evaluation_name``), a sample a column (its ``sample_id``), a model a row.

An instance file belongs to the aggregate log whose ``evaluation_id`` its lines carry (the format's foreign key),
whatever its name: a folder is searched whole (``*.json`` logs, ``*.jsonl`` instance files), a single log file
beside its own folder's instance files and its ``detailed_evaluation_results.file_path``. The fields used are
checked here, each refusal one line naming the file (and line), the model and the dataset; the records are not
validated against the schema files (those are the coalition's, versioned with it; ``docs/interop.md``).

Read in two passes over the instance files, one file in memory at a time: the first fixes the rows and columns and
refuses a model whose samples of a dataset differ from the first model's, the second fills the matrices
(:class:`~flasheval.reference.matrices.MatrixBuilder`, which refuses a non-finite score or a sample twice).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.reference.json_lines import json_lines
from flasheval.reference.matrices import UNIT_METRICS, Batch, Layout, MatrixBuilder, ScoreMatrices

__all__ = ["EEE_SCHEMA_VERSION", "EveryEvalEver", "scan_every_eval_ever"]

EEE_SCHEMA_VERSION = "0.3.0"
"""The Every Eval Ever schema version read and written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Result:
    """One ``evaluation_results[]`` entry: a dataset of the reference."""

    dataset: str
    key: str
    """``evaluation_result_id`` (else ``evaluation_name``): what instance lines join on."""
    metric: str
    lower_is_better: bool
    unit: bool
    """Declared ``[0, 1]`` (``min_score`` 0, ``max_score`` 1) or a 0/1 metric: a score outside is refused."""


@dataclass(slots=True, eq=False)
class _Log:
    """One aggregate log: its model, results (by join key) and instance files."""

    path: Path
    model: str
    evaluation_id: str
    results: dict[str, _Result]
    provenance: tuple[str, str]
    """``(source organization and name, eval library and version)``, for the manifest's ``source``."""
    files: list[Path] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Rows:
    """One dataset's instance lines of one log, in file order."""

    path: Path
    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    tokens: list[int | None] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EveryEvalEver:
    """The scores of a folder (or file) of Every Eval Ever records, and what the manifest records of them."""

    matrices: ScoreMatrices
    metrics: Mapping[str, str]
    """Per dataset, the metric its records name (``metric_id``, else ``metric_name``)."""
    higher_is_better: bool
    provenance: str
    """Who made the records and with what (organizations, sources, eval libraries, number of logs)."""
    skipped: tuple[str, ...] = ()
    """``model / dataset`` results without instance-level data, left out under a named missing-data policy."""


_KINDS: Mapping[Any, str] = {str: "a string", int: "an integer", dict: "an object", list: "a list", bool: "true or false"}


def _get(data: Any, dotted: str, kind: type | tuple[type, ...], path: Path, *, line: int | None = None,
         optional: bool = False) -> Any:
    """``data``'s field ``dotted`` (``a.b``), refused in one line unless it is a ``kind`` (absent: ``None`` if optional)."""
    value = data
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            if optional:
                return None
            raise InputError("missing field", path=path, line=line, field=dotted)
        value = value[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        if optional and value is None:
            return None
        raise InputError(f"{str(repr(value))[:60]} is not {_KINDS.get(kind, 'a number')}", path=path, line=line,
                         field=dotted)
    return value


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None


def _result(entry: Any, path: Path, i: int, model: str) -> _Result:
    where = f"evaluation_results[{i}]"
    name = _get(entry, "evaluation_name", str, path)
    config = _get(entry, "metric_config", dict, path)
    lower = config.get("lower_is_better")
    if not isinstance(lower, bool):
        raise InputError(f"model {model!r}, dataset {name!r}: metric_config.lower_is_better must be true or false",
                         path=path, field=f"{where}.metric_config.lower_is_better")
    metric = config.get("metric_id") or config.get("metric_name") or "score"
    unit = (config.get("min_score") == 0 and config.get("max_score") == 1) or metric in UNIT_METRICS
    key = entry.get("evaluation_result_id") if isinstance(entry.get("evaluation_result_id"), str) else name
    return _Result(dataset=name, key=key, metric=str(metric), lower_is_better=lower, unit=unit)


def _read_log(path: Path, metric: str | None) -> _Log:
    """An aggregate log's model, results and provenance; the results of ``metric`` only when one is named."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise InputError("an Every Eval Ever log must be a JSON object", path=path)
    model = _get(data, "model_info.id", str, path)
    entries = _get(data, "evaluation_results", list, path)
    results: dict[str, _Result] = {}
    for i, entry in enumerate(entries):
        res = _result(entry, path, i, model)
        if metric is not None and res.metric != metric and entry["metric_config"].get("metric_name") != metric:
            continue
        twin = next((r for r in results.values() if r.dataset == res.dataset), None)
        if twin is not None:
            raise InputError(f"model {model!r}, dataset {res.dataset!r}: two results (metrics {twin.metric!r} and "
                             f"{res.metric!r}); choose one with --metric", path=path, field=f"evaluation_results[{i}]")
        results[res.key] = res
    if not results:
        raise InputError(f"model {model!r}: no evaluation result{f' with metric {metric!r}' if metric else ''}",
                         path=path, field="evaluation_results")
    source = data.get("source_metadata") if isinstance(data.get("source_metadata"), dict) else {}
    library = data.get("eval_library") if isinstance(data.get("eval_library"), dict) else {}
    who = f"{source.get('source_organization_name', 'unknown')} ({source.get('source_name', 'unnamed source')})"
    return _Log(path=path, model=model, evaluation_id=_get(data, "evaluation_id", str, path), results=results,
                provenance=(who, f"{library.get('name', 'unknown')} {library.get('version', 'unknown')}"))


def _first_evaluation_id(path: Path) -> str | None:
    """The ``evaluation_id`` of an instance file's first record (``None`` for an empty file)."""
    for n, record in json_lines(path):
        return _get(record, "evaluation_id", str, path, line=n)
    return None


def _is_schema(path: Path) -> bool:
    """Whether a ``*.json`` file is a JSON Schema document (the format's schema files kept beside its records)."""
    data = _load_json(path)
    return isinstance(data, dict) and "$schema" in data


def _logs(source: Path, metric: str | None) -> list[_Log]:
    """Every aggregate log under ``source`` (a folder, or one log file), each with its instance files."""
    if source.is_dir():
        logs = [_read_log(p, metric) for p in sorted(source.rglob("*.json")) if not _is_schema(p)]
        candidates = sorted(source.rglob("*.jsonl"))
    elif source.is_file():
        logs = [_read_log(source, metric)]
        pointer = _get(_load_json(source), "detailed_evaluation_results.file_path", str, source, optional=True)
        near = [p / pointer for p in source.parents if pointer and (p / pointer).is_file()][:1]
        candidates = sorted({*source.parent.glob("*.jsonl"), *near})
    else:
        raise InputError("no such file or folder", path=source)
    if not logs:
        raise InputError("no Every Eval Ever logs (*.json) found", path=source)
    by_id: dict[str, _Log] = {}
    for log in logs:
        if log.evaluation_id in by_id:
            raise InputError(f"evaluation_id {log.evaluation_id!r} again (first in {by_id[log.evaluation_id].path})",
                             path=log.path, field="evaluation_id")
        by_id[log.evaluation_id] = log
    for path in candidates:
        eid = _first_evaluation_id(path)
        if eid is not None and eid in by_id:
            by_id[eid].files.append(path)
        elif eid is not None and source.is_dir():
            raise InputError(f"instance records of evaluation_id {eid!r}, which no log (*.json) here has", path=path)
    return sorted(logs, key=lambda log: (log.model, str(log.path)))


def _instance(record: Any, log: _Log, path: Path, n: int) -> tuple[_Result | None, str, float, int | None]:
    """One instance line's result (``None``: a result not imported), sample id, score and tokens."""
    if not isinstance(record, dict):
        raise InputError("an instance record must be a JSON object", path=path, line=n)
    for key, want in (("evaluation_id", log.evaluation_id), ("model_id", log.model)):
        got = _get(record, key, str, path, line=n)
        if got != want:
            raise InputError(f"{got!r}, but the log {log.path.name} says {want!r}", path=path, line=n, field=key)
    key = record.get("evaluation_result_id")
    res = log.results.get(key) if isinstance(key, str) else None
    name = _get(record, "evaluation_name", str, path, line=n)
    res = res or next((r for r in log.results.values() if r.dataset == name), None)
    sample = _get(record, "sample_id", str, path, line=n)
    score = _get(record, "evaluation.score", (int, float), path, line=n)
    if not math.isfinite(score):
        raise InputError(f"model {log.model!r}, dataset {name!r}, sample {sample!r}: score {score!r} is not finite",
                         path=path, line=n, field="evaluation.score")
    tokens = _get(record, "token_usage.total_tokens", int, path, line=n, optional=True)
    return res, sample, float(score), tokens


def _read_rows(log: _Log) -> dict[str, _Rows]:
    """Per dataset, the instance lines of one log's files (one file's lines in memory at a time over the call)."""
    out: dict[str, _Rows] = {}
    for path in log.files:
        for n, record in json_lines(path):
            res, sample, score, tokens = _instance(record, log, path, n)
            if res is None:
                continue
            rows = out.setdefault(res.dataset, _Rows(path=path))
            rows.ids.append(sample)
            rows.scores.append(score)
            rows.tokens.append(tokens)
            rows.lines.append(n)
    return out


def _refuse_other_samples(rows: _Rows, first: tuple[tuple[str, ...], str, Path], model: str, dataset: str) -> None:
    ids, first_model, first_path = first
    lacking = sorted(set(ids) - set(rows.ids))
    extra = sorted(set(rows.ids) - set(ids))
    def shown(ids: list[str]) -> str:
        return ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else "")

    what = " and ".join(([f"lacks sample {shown(lacking)}"] if lacking else []) +
                        ([f"has sample {shown(extra)} that it lacks"] if extra else [])) or "has a sample twice"
    raise InputError(f"model {model!r}, dataset {dataset!r}: {len(set(rows.ids))} samples, but {first_path} has "
                     f"{len(ids)} for model {first_model!r}: this one {what}; every model must be scored on the same "
                     "samples", path=rows.path)


class _Names:
    """Pass 1: which model has which dataset, each dataset's samples (the first model's), metrics and direction."""

    def __init__(self, missing: str | None) -> None:
        self.missing = missing
        self.has: dict[str, set[str]] = {}
        self.firsts: dict[str, tuple[tuple[str, ...], str, Path]] = {}
        self.metrics: dict[str, tuple[str, Path]] = {}
        self.lower: tuple[bool, Path, str] | None = None
        self.tokens = True
        self.skipped: list[str] = []

    def add(self, log: _Log, rows: Mapping[str, _Rows]) -> None:
        for res in log.results.values():
            self._check_metric(log, res)
            if res.dataset not in rows:
                why = ("no instance-level data (no detailed_evaluation_results file of its evaluation_id found)"
                       if not log.files else "no instance records in " + ", ".join(p.name for p in log.files))
                if self.missing is None:
                    raise InputError(f"model {log.model!r}, dataset {res.dataset!r}: {why}; a reference needs every "
                                     "example's score (or name a missing-data policy, --missing, to leave it out)",
                                     path=log.path)
                self.skipped.append(f"{log.model} / {res.dataset}")
        datasets = self.has.setdefault(log.model, set())
        for dataset, got in rows.items():
            if dataset in datasets:
                raise InputError(f"model {log.model!r}, dataset {dataset!r}: scored again (another log of the model "
                                 "has it too)", path=log.path)
            datasets.add(dataset)
            self.tokens = self.tokens and all(t is not None for t in got.tokens)
            first = self.firsts.setdefault(dataset, (tuple(got.ids), log.model, got.path))
            if len(got.ids) != len(first[0]) or set(got.ids) != set(first[0]):
                _refuse_other_samples(got, first, log.model, dataset)

    def _check_metric(self, log: _Log, res: _Result) -> None:
        metric, where = self.metrics.setdefault(res.dataset, (res.metric, log.path))
        if metric != res.metric:
            raise InputError(f"model {log.model!r}, dataset {res.dataset!r}: metric {res.metric!r}, but {where} has "
                             f"{metric!r}; choose one with --metric", path=log.path)
        self.lower = self.lower or (res.lower_is_better, log.path, res.dataset)
        if self.lower[0] != res.lower_is_better:
            raise InputError(f"model {log.model!r}, dataset {res.dataset!r}: lower_is_better {res.lower_is_better}, but"
                             f" {self.lower[1]} says {self.lower[0]} for {self.lower[2]!r}; a reference has one "
                             "direction (import the datasets apart)", path=log.path)


def _batches(layout: Layout, log: _Log, rows: Mapping[str, _Rows], tokens: bool) -> Iterator[Batch]:
    by_dataset = {r.dataset: r for r in log.results.values()}
    for dataset, got in rows.items():
        d = layout.dataset_index[dataset]
        index = layout.example_index[d]
        n = len(got.ids)
        unit = by_dataset[dataset].unit
        yield Batch(models=np.full(n, layout.model_index[log.model], dtype=np.int64), datasets=np.full(n, d, np.int64),
                    examples=np.fromiter((index[i] for i in got.ids), dtype=np.int64, count=n),
                    scores=np.asarray(got.scores, dtype=np.float64), raw_score=lambda i, g=got: g.scores[i],
                    where=lambda i, g=got: f"{g.path}:{g.lines[i]}: ",
                    n_tokens=np.asarray(got.tokens, dtype=np.int64) if tokens else None,
                    unit_metric=np.full(n, unit, dtype=bool), metric_name=lambda i, m=by_dataset[dataset].metric: m)


def scan_every_eval_ever(source: str | Path, *, metric: str | None = None, missing: str | None = None,
                         dtype: type = np.float32) -> EveryEvalEver:
    """Read Every Eval Ever records (a folder, or one aggregate log) into score matrices (module docstring).

    Parameters
    ----------
    source
        A folder of aggregate logs (``*.json``) and instance files (``*.jsonl``), searched whole, or one log.
    metric
        Import only the results of this ``metric_id`` (or ``metric_name``): needed where a log scores one
        ``evaluation_name`` with two metrics.
    missing
        ``None``: a result without instance-level data is refused; a missing-data policy
        (``complete-models`` / ``common-datasets``): it is left out, the model lacking that dataset.
    dtype
        Of the score matrices.
    """
    root = Path(source)
    logs = _logs(root, metric)
    names = _Names(missing)
    for log in logs:
        names.add(log, _read_rows(log))
    models = sorted(m for m, ds in names.has.items() if ds)
    if len(models) < 2:
        shown = f"model {models[0]!r}" if models else "no model"
        raise InputError(f"{shown} on dataset {', '.join(map(repr, sorted(names.firsts))) or 'none'}: a reference "
                         "pool needs at least 2 models scored on the same samples", path=root)
    layout = Layout.of({m: names.has[m] for m in models}, {d: first[0] for d, first in names.firsts.items()})
    builder = MatrixBuilder(layout, dtype=dtype, tokens=names.tokens, source=root)
    for log in logs:
        for batch in _batches(layout, log, _read_rows(log), names.tokens):
            builder.fill(batch)
    made = sorted({log.provenance[0] for log in logs})
    libraries = sorted({log.provenance[1] for log in logs})
    provenance = (f"Every Eval Ever records ({len(logs)} evaluation logs) from {', '.join(made)}; eval libraries: "
                  f"{', '.join(libraries)}")
    return EveryEvalEver(matrices=builder.result(), metrics={d: names.metrics[d][0] for d in layout.dataset_names},
                         higher_is_better=not (names.lower and names.lower[0]), provenance=provenance,
                         skipped=tuple(names.skipped))
