"""lm-evaluation-harness ``--log_samples`` output read model by model, line by line, into score matrices.

The layout is lm-eval 0.4's (``lm_eval/loggers/evaluation_tracker.py``): one folder per model (the
sanitized model name), holding ``results_<timestamp>.json`` and, per task, ``samples_<task>_<timestamp>.jsonl``
with one JSON object per example (``doc_id``, ``prompt_hash``, ``filter``, one key per metric); or those
files directly in the folder (one model). A model's id is the ``model_name`` of its results file, else the
folder name; a task logged twice for a model counts its newest log (by timestamp).

:func:`scan_lm_eval_samples` reads each log once, one line at a time, keeping per task only its scores
(placed straight into preallocated matrices) and per-doc prompt hashes of the model being read: memory is
the matrices plus one model's logs, whatever the number of models. A pass over the folder names and the
first log of each task fixes the matrices' rows and columns first (:class:`~flasheval.reference.matrices.Layout`).
Every log is checked as it is read: valid JSON, ``doc_id`` present and unique, a finite metric value within
``[0, 1]`` for a 0/1 metric, as many examples as its results file says, the same doc ids as the other models'
logs of the task; each refusal is one line naming the file and line. The task settings a live placement needs
(:class:`~flasheval.lmeval.settings.LmEvalSettings`) are gathered in the same pass.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.lmeval.settings import (DEFAULT_METRICS, PROMPT_HASH_CHARS, LmEvalSettings, check_results,
                                       settings_from_results)
from flasheval.reference.json_lines import json_lines
from flasheval.reference.matrices import UNIT_METRICS, Batch, Layout, MatrixBuilder, ScoreMatrices

__all__ = ["LmEvalLogs", "scan_lm_eval_samples"]

_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d\-\.:]+)\.jsonl$")


def model_dirs(folder: str | Path) -> list[Path]:
    """The model folders of an output folder: itself when it holds samples, else its sub-folders."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError("not a folder", path=root)
    return [root] if any(root.glob("samples_*.jsonl")) else sorted(p for p in root.iterdir() if p.is_dir())


def latest_samples(mdir: Path) -> dict[str, tuple[str, Path]]:
    """``{task: (timestamp, newest samples file)}`` of one model folder."""
    latest: dict[str, tuple[str, Path]] = {}
    for f in sorted(mdir.glob("samples_*.jsonl")):
        m = _SAMPLES_RE.match(f.name)
        if m is None:
            raise InputError("cannot read task and timestamp from the name (want samples_<task>_<timestamp>.jsonl)",
                             path=f)
        task, stamp = m.group("task"), m.group("stamp")
        if task not in latest or stamp > latest[task][0]:
            latest[task] = (stamp, f)
    return latest


def read_results(path: Path) -> dict[str, Any]:
    """A ``results_*.json`` file's content (``{}`` when it is not a JSON object), its fields checked against
    :data:`~flasheval.lmeval.settings.RESULTS_SCHEMA`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError("not valid JSON", path=path) from None
    if isinstance(data, dict):
        check_results(data, where=str(path))
    return data if isinstance(data, dict) else {}


@dataclass(slots=True, eq=False)
class _Model:
    """One model folder: its results files (each read once) and newest log per task."""

    folder: Path
    latest: dict[str, tuple[str, Path]]
    results_files: list[Path]
    _read: dict[Path, dict[str, Any]] = field(default_factory=dict)
    name: str = ""

    def results(self, path: Path) -> dict[str, Any]:
        if path not in self._read:
            self._read[path] = read_results(path)
        return self._read[path]

    def forget(self) -> None:
        """Drop the results files read so far."""
        self._read.clear()

    def model_name(self) -> str:
        """``model_name`` (else ``config.model_args``) of the newest results file that has one, else the folder name."""
        for res in reversed(self.results_files):
            data = self.results(res)
            if not data:
                raise InputError("a results file must be a non-empty JSON object", path=res)
            name = data.get("model_name") or (data.get("config") or {}).get("model_args")
            if isinstance(name, str) and name:
                return name
        return self.folder.name

    def same_run(self, stamp: str) -> tuple[Path, dict[str, Any]] | None:
        """The results file of the run that wrote a samples file (lm-eval names both by one timestamp)."""
        path = self.folder / f"results_{stamp}.json"
        return (path, self.results(path)) if path.is_file() else None


@dataclass(slots=True, eq=False)
class _Log:
    """One samples file, read: per line (in file order) its doc id, score, metric and line number."""

    path: Path
    model: str
    task: str
    doc_ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)
    """Per doc id, the first characters of lm-eval's ``prompt_hash``."""


def _metric(record: Mapping[str, Any], metric: str | None, path: Path, line: int) -> tuple[str, float]:
    names = (metric,) if metric else DEFAULT_METRICS
    for name in names:
        if name in record:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"metric value {value!r} is not a finite number", path=path, line=line, field=name)
            if name in UNIT_METRICS and not 0.0 <= value <= 1.0:
                raise InputError(f"metric value {value!r} is outside [0, 1], the range of the per-example metric "
                                 f"{name!r}", path=path, line=line, field=name)
            return name, float(value)
    present = [k for k, v in record.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "doc_id"]
    raise InputError(f"no metric {' / '.join(names)} in the sample", path=path, line=line, field="metric",
                     allowed=present)


def _read_log(path: Path, model: str, task: str, metric: str | None) -> _Log:
    """Read one samples file line by line, refusing a bad line in one line naming the file and line."""
    log = _Log(path=path, model=model, task=task)
    seen: dict[str, tuple[int, Any]] = {}
    for line_no, record in json_lines(path):
        if not isinstance(record, dict):
            raise InputError("a sample must be a JSON object", path=path, line=line_no)
        if "doc_id" not in record:
            raise InputError("missing key", path=path, line=line_no, field="doc_id")
        doc = str(record["doc_id"])
        if doc in seen:
            first, first_filter = seen[doc]
            why = (f"; lm-eval logged it once per filter ({first_filter!r}, {record['filter']!r}): keep one "
                   "filter's lines" if record.get("filter", first_filter) != first_filter else "")
            raise InputError(f"doc_id {doc} again (first on line {first}){why}", path=path, line=line_no,
                             field="doc_id")
        seen[doc] = (line_no, record.get("filter"))
        name, score = _metric(record, metric, path, line_no)
        log.doc_ids.append(doc)
        log.scores.append(score)
        log.metrics.append(name)
        log.lines.append(line_no)
        if "prompt_hash" in record:
            log.hashes[doc] = str(record["prompt_hash"])[:PROMPT_HASH_CHARS]
    return log


def _check_count(log: _Log, results: tuple[Path, dict[str, Any]] | None) -> None:
    """Refuse a log with fewer (or more) lines than its results file's ``n-samples`` says."""
    counts = (results[1].get("n-samples") or {}).get(log.task) if results else None
    expected = counts.get("effective") if isinstance(counts, dict) else None
    if isinstance(expected, int) and expected != len(log.doc_ids) and results is not None:
        last = f" (last line {log.lines[-1]})" if log.lines else ""
        raise InputError(f"{len(log.doc_ids)} samples of task {log.task!r}{last}, but {results[0].name} says "
                         f"{expected} ('n-samples'); the log is incomplete: rerun lm_eval for model {log.model!r}",
                         path=log.path)


def _refuse_other_docs(log: _Log, first: _Log) -> None:
    """Refuse two logs of a task with other doc ids, naming the shorter one (a log cut at a line boundary)."""
    full, short = (first, log) if len(first.doc_ids) >= len(log.doc_ids) else (log, first)
    full_ids, ids = set(full.doc_ids), set(short.doc_ids)
    lacking = sorted(full_ids - ids, key=lambda x: (len(x), x))
    extra = sorted(ids - full_ids, key=lambda x: (len(x), x))
    last = f"; last line {short.lines[-1]}, doc_id {short.doc_ids[-1]}" if short.lines else ""
    what = (f"lacks doc_id {', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}" if lacking
            else f"has doc_id {', '.join(extra[:3])} that the other log lacks")
    raise InputError(f"{len(short.doc_ids)} samples of task {log.task!r} for model {short.model!r}, but {full.path} "
                     f"has {len(full.doc_ids)} for {full.model!r}: this log {what}{last}; every model must be scored "
                     "on the same examples (rerun lm_eval for the shorter log)", path=short.path)


class _Settings:
    """The lm-eval task settings of every model, compared as each model is read (see :func:`read_lm_eval_settings`)."""

    def __init__(self, include_path: str) -> None:
        self.include_path = include_path
        self.found: LmEvalSettings | None = None
        self.first = ""
        self.reason = ""

    def add(self, model: _Model, logs: Mapping[str, _Log]) -> None:
        if self.reason:
            return
        if not model.results_files:
            self.found = None
            self.reason = f"{model.folder} has no results_*.json (lm-eval writes it beside the samples)"
            return
        path = model.results_files[-1]
        results = model.results(path)
        unconfigured = sorted(t for t in logs if t not in (results.get("configs") or {}))
        if unconfigured or not results.get("lm_eval_version"):
            self.found = None
            self.reason = f"{path} records no task config or lm-eval version for {', '.join(unconfigured) or 'the run'}"
            return
        settings = settings_from_results(results, {t: log.metrics[0] for t, log in logs.items()}, where=str(path),
                                         include_path=self.include_path,
                                         hashes={t: log.hashes for t, log in logs.items()})
        if self.found is None:
            self.found, self.first = settings, str(path)
            return
        # a task one model lacks (it is dropped from the pool, or the task is) is pinned by the first model that has it
        for task, other in settings.tasks.items():
            pinned = self.found.tasks.get(task)
            if pinned is None:
                continue
            same = (other.config_digest, other.num_fewshot, other.fewshot_seed) == (
                pinned.config_digest, pinned.num_fewshot, pinned.fewshot_seed)
            if not same or settings.lm_eval_version != self.found.lm_eval_version:
                raise InputError(f"task {task} was run with other settings (config, few-shot or lm-eval version) than "
                                 f"in {self.first}; the models' scores would not be paired", path=path, field="configs")
            if any(pinned.prompt_hashes.get(d, h) != h for d, h in other.prompt_hashes.items()):
                raise InputError(f"task {task}: some prompts differ from those in {self.first} (other few-shot "
                                 "examples, e.g. a different number of processes); the scores would not be paired",
                                 path=path, field="prompt_hash")
        new = {t: s for t, s in settings.tasks.items() if t not in self.found.tasks}
        if new:
            self.found = replace(self.found, tasks={**self.found.tasks, **new})


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LmEvalLogs:
    """The scores of an lm-eval output folder and what a live placement needs to score a new model alike."""

    matrices: ScoreMatrices
    metrics: Mapping[str, str]
    """Per task, the metric taken as the score (of its first line)."""
    settings: LmEvalSettings | None
    no_settings: str = ""
    """Why ``settings`` is ``None`` (a model folder without results file, task configs or lm-eval version)."""


def _models(root: Path) -> list[_Model]:
    """The model folders that hold samples, each with its model id."""
    models = []
    for mdir in model_dirs(root):
        latest = latest_samples(mdir)
        if latest:
            model = _Model(folder=mdir, latest=latest, results_files=sorted(mdir.glob("results_*.json")))
            model.name = model.model_name()
            model.forget()  # results files can be large: hold one model's at a time
            models.append(model)
    return models


def _batch(layout: Layout, log: _Log, first: _Log) -> Batch:
    """A log's rows as a matrix batch; refuses a log whose doc ids are not the task's (``first``'s)."""
    d = layout.dataset_index[log.task]
    index = layout.example_index[d]
    columns = np.fromiter((index.get(doc, -1) for doc in log.doc_ids), dtype=np.int64, count=len(log.doc_ids))
    if len(columns) != len(index) or (columns < 0).any():
        _refuse_other_docs(log, first)
    n = len(columns)
    lines = log.lines
    return Batch(models=np.full(n, layout.model_index[log.model], dtype=np.int64), datasets=np.full(n, d, np.int64),
                 examples=columns, scores=np.asarray(log.scores, dtype=np.float64),
                 raw_score=lambda i: log.scores[i], where=lambda i: f"{log.path}:{lines[i]}: ",
                 unit_metric=np.fromiter((m in UNIT_METRICS for m in log.metrics), dtype=bool, count=n),
                 metric_name=lambda i: log.metrics[i])


def scan_lm_eval_samples(folder: str | Path, *, metric: str | None = None, include_path: str = "",
                         dtype: type = np.float32) -> LmEvalLogs:
    """Read an lm-eval ``--log_samples`` output folder (see the module docstring) into score matrices.

    Parameters
    ----------
    folder
        The output folder (one sub-folder per model, or one model's files).
    metric
        The per-sample metric key (default: the first of ``acc``, ``exact_match``, ``acc_norm`` present).
    include_path
        Recorded in the settings as the folder of the custom task YAMLs.
    dtype
        Of the score matrices.
    """
    root = Path(folder)
    models = _models(root)
    firsts: dict[str, _Log] = {}
    for model in models:
        for task, (_, f) in sorted(model.latest.items()):
            if task not in firsts:
                firsts[task] = _read_log(f, model.name, task, metric)
    tasks = {t: log for t, log in firsts.items() if log.doc_ids}
    if not tasks:
        raise InputError("no samples_<task>_<timestamp>.jsonl files found (run lm_eval with --log_samples)", path=root)
    has: dict[str, set[str]] = {}
    for model in models:
        has.setdefault(model.name, set()).update(t for t in model.latest if t in tasks)
    layout = Layout.of(has, {t: log.doc_ids for t, log in tasks.items()})
    builder = MatrixBuilder(layout, dtype=dtype, source=root)
    settings = _Settings(include_path)
    for model in models:
        logs = {}
        for task, (stamp, f) in sorted(model.latest.items()):
            first = firsts[task]
            log = first if first.path == f else _read_log(f, model.name, task, metric)
            _check_count(log, model.same_run(stamp))
            if task not in tasks:
                if log.doc_ids:
                    _refuse_other_docs(log, first)
                continue
            builder.fill(_batch(layout, log, first))
            logs[task] = log
        settings.add(model, logs)
        model.forget()
    return LmEvalLogs(matrices=builder.result(), metrics={t: log.metrics[0] for t, log in tasks.items()},
                      settings=settings.found, no_settings=settings.reason)
