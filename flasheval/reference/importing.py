"""Import per-example results from other formats into a reference leaderboard folder.

Formats
-------
``long-parquet``
    A parquet file with columns ``model``, ``dataset``, ``example_id``, ``score`` (and
    optionally ``n_tokens``), e.g. ``shared/data/reference/*/instances.parquet``; rows can be
    restricted to one ``suite`` column value.
``lm-eval-samples``
    The output folder of lm-evaluation-harness run with ``--log_samples``: files
    ``samples_<task>_<timestamp>.jsonl`` (one JSON object per example with ``doc_id`` and one
    key per metric), either directly in the folder (one model) or in one sub-folder per model.
    The model id is the ``model_name`` of the ``results_*.json`` beside the samples when there is
    one, else the folder name. The dataset is ``<task>``; the example id is ``doc_id``; the
    score is the chosen metric (default: the first of ``acc``, ``exact_match``, ``acc_norm``
    present). When a task was logged twice for a model, the newest file (by timestamp in the
    name) wins. :func:`read_lm_eval_settings` reads, from the ``results_*.json`` files, what a
    live placement needs to score a new model the same way (task configs, few-shot count and
    seed, lm-eval version; :class:`flasheval.lmeval.settings.LmEvalSettings`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from flasheval.errors import InputError, UnknownNameError
from flasheval.lmeval.settings import DEFAULT_METRICS, LmEvalSettings, pick_metric, prompt_hashes, settings_from_results
from flasheval.reference.writing import UNIT_METRICS

__all__ = ["IMPORT_FORMATS", "read_long_parquet", "read_lm_eval_samples", "read_lm_eval_settings"]

IMPORT_FORMATS: tuple[str, ...] = ("long-parquet", "lm-eval-samples")
_DEFAULT_METRICS = DEFAULT_METRICS
_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d\-\.:]+)\.jsonl$")


_LONG_COLUMNS = ("model", "dataset", "example_id", "score")


def read_long_parquet(path: str | Path, *, suite: str | None = None) -> pd.DataFrame:
    """Rows of a long-format parquet file, optionally only those with ``suite == suite``.

    The rows keep the file's row numbers as their index (0-based), so a bad row found later is
    named by its place in the file; a ``metric`` column (per-row metric name) is kept too, for the
    score-range check of :func:`~flasheval.reference.write_reference`, and a ``suite`` column, so an
    error can name the suites a file mixes.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("file not found", path=p)
    try:
        df = pd.read_parquet(p)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=p) from None
    except Exception as exc:  # pyarrow raises many types for a non-parquet file
        raise InputError(f"not a readable parquet file ({type(exc).__name__}: {exc})", path=p) from None
    absent = [c for c in _LONG_COLUMNS if c not in df.columns]
    if absent:
        raise InputError(f"missing column{'s' if len(absent) > 1 else ''} {', '.join(map(repr, absent))} (columns "
                         f"found: {', '.join(map(str, df.columns)) or 'none'}); a long table needs "
                         f"{', '.join(_LONG_COLUMNS)}", path=p, field=absent[0])
    if suite is not None:
        if "suite" not in df.columns:
            raise InputError("--suite given but the file has no 'suite' column", path=p, field="suite")
        suites = sorted(map(str, df["suite"].unique()))
        if suite not in suites:
            raise UnknownNameError("suite", suite, suites, path=p)
        df = df[df["suite"].astype(str) == suite]
    keep = [c for c in (*_LONG_COLUMNS, "n_tokens", "metric", "suite") if c in df.columns]
    return df[keep]


def _model_name(folder: Path) -> str:
    results = sorted(folder.glob("results_*.json"))
    for res in reversed(results):
        _, data = _read_results(res)
        if not data:
            raise InputError("a results file must be a non-empty JSON object", path=res)
        name = data.get("model_name") or (data.get("config") or {}).get("model_args")
        if isinstance(name, str) and name:
            return name
    return folder.name


def _pick_metric(record: Mapping[str, Any], metric: str | None, path: Path, line: int) -> float:
    names = (metric,) if metric else _DEFAULT_METRICS
    for name in names:
        if name in record:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"metric value {value!r} is not a finite number", path=path, line=line, field=name)
            if name in UNIT_METRICS and not 0.0 <= value <= 1.0:
                raise InputError(f"metric value {value!r} is outside [0, 1], the range of the per-example metric "
                                 f"{name!r}", path=path, line=line, field=name)
            return float(value)
    present = [k for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "doc_id"]
    raise InputError(f"no metric {' / '.join(names)} in the sample", path=path, line=line, field="metric",
                     allowed=present)


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """``(line number, parsed JSON)`` of every non-blank line; one line naming the file and line otherwise."""
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    out.append((line_no, json.loads(line)))
                except json.JSONDecodeError as exc:
                    cut = "; the file looks cut short" if not line.endswith("\n") else ""
                    raise InputError(f"not valid JSON ({exc.msg}){cut}", path=path, line=line_no) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start + 1})", path=path) from None
    return out


def _read_samples_file(path: Path, model: str, task: str, metric: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    seen: dict[str, tuple[int, Any]] = {}
    for line_no, record in _json_lines(path):
        if not isinstance(record, dict):
            raise InputError("a sample must be a JSON object", path=path, line=line_no)
        if "doc_id" not in record:
            raise InputError("missing key", path=path, line=line_no, field="doc_id")
        doc = str(record["doc_id"])
        if doc in seen:
            first, first_filter = seen[doc]
            why = (f"; lm-eval logged it once per filter ({first_filter!r}, {record['filter']!r}): keep one filter's "
                   "lines" if record.get("filter", first_filter) != first_filter else "")
            raise InputError(f"doc_id {doc} again (first on line {first}){why}", path=path, line=line_no,
                             field="doc_id")
        seen[doc] = (line_no, record.get("filter"))
        score = _pick_metric(record, metric, path, line_no)
        rows.append({"model": model, "dataset": task, "example_id": doc, "score": score,
                     "metric": metric or next(n for n in _DEFAULT_METRICS if n in record), "_line": line_no})
    return rows


def _read_results(path: Path) -> tuple[Path, dict[str, Any]]:
    """A ``results_*.json`` file and its content (``{}`` when it is not a JSON object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError("not valid JSON", path=path) from None
    return path, data if isinstance(data, dict) else {}


def _newest_results(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest ``results_*.json`` of a model folder and its content (``None`` without one)."""
    results = sorted(folder.glob("results_*.json"))
    return _read_results(results[-1]) if results else None


def _check_counts(logs: list[tuple[str, str, Path, list[dict[str, Any]], tuple[Path, dict[str, Any]] | None]]) -> None:
    """Refuse a samples log that lacks examples: fewer lines than its results file says, or than another model's log.

    A log cut at a line boundary parses cleanly, so the shortfall is caught here and named by the
    log and its last line, never later as missing cells of the reference being written.
    """
    for model, task, path, rows, results in logs:
        counts = (results[1].get("n-samples") or {}).get(task) if results else None
        expected = counts.get("effective") if isinstance(counts, dict) else None
        if isinstance(expected, int) and expected != len(rows):
            last = f" (last line {rows[-1]['_line']})" if rows else ""
            source = results[0].name  # type: ignore[index]
            raise InputError(f"{len(rows)} samples of task {task!r}{last}, but {source} says {expected} "
                             f"('n-samples'); the log is incomplete: rerun lm_eval for model {model!r}", path=path)
    by_task: dict[str, list[tuple[str, Path, list[dict[str, Any]]]]] = {}
    for model, task, path, rows, _ in logs:
        by_task.setdefault(task, []).append((model, path, rows))
    for task, entries in by_task.items():
        full_model, full_path, full_rows = max(entries, key=lambda e: len(e[2]))
        full_ids = {r["example_id"] for r in full_rows}
        for model, path, rows in entries:
            ids = {r["example_id"] for r in rows}
            if ids == full_ids:
                continue
            lacking = sorted(full_ids - ids, key=lambda x: (len(x), x))
            last = f"; last line {rows[-1]['_line']}, doc_id {rows[-1]['example_id']}" if rows else ""
            extra = sorted(ids - full_ids, key=lambda x: (len(x), x))
            what = (f"lacks doc_id {', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}" if lacking
                    else f"has doc_id {', '.join(extra[:3])} that the other log lacks")
            raise InputError(f"{len(rows)} samples of task {task!r} for model {model!r}, but {full_path} has "
                             f"{len(full_rows)} for {full_model!r}: this log {what}{last}; every model must be scored "
                             "on the same examples (rerun lm_eval for the shorter log)", path=path)


def _model_dirs(folder: str | Path) -> list[Path]:
    root = Path(folder)
    if not root.is_dir():
        raise InputError("not a folder", path=root)
    return [root] if any(root.glob("samples_*.jsonl")) else sorted(p for p in root.iterdir() if p.is_dir())


def _latest_samples(mdir: Path) -> dict[str, tuple[str, Path]]:
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


def read_lm_eval_samples(folder: str | Path, *, metric: str | None = None) -> pd.DataFrame:
    """Long rows from an lm-evaluation-harness ``--log_samples`` output folder (see module docstring)."""
    root = Path(folder)
    logs = []
    for mdir in _model_dirs(root):
        model = _model_name(mdir)
        for task, (stamp, f) in sorted(_latest_samples(mdir).items()):
            # lm-eval names a run's results and samples files by the same timestamp
            same_run = mdir / f"results_{stamp}.json"
            results = _read_results(same_run) if same_run.is_file() else None
            logs.append((model, task, f, _read_samples_file(f, model, task, metric), results))
    rows = [r for *_, file_rows, _ in logs for r in file_rows]
    if not rows:
        raise InputError("no samples_<task>_<timestamp>.jsonl files found (run lm_eval with --log_samples)", path=root)
    _check_counts(logs)
    # indexed by FILE:LINE, so a row refused when the reference is written is named where it came from
    index = [f"{path}:{r['_line']}" for _, _, path, file_rows, _ in logs for r in file_rows]
    return pd.DataFrame(rows, index=index).drop(columns="_line")


def _samples(path: Path) -> list[dict[str, Any]]:
    rows = [record for _, record in _json_lines(path)]
    if not rows:
        raise InputError("no samples", path=path)
    return rows


def read_lm_eval_settings(folder: str | Path, *, metric: str | None = None,
                          include_path: str = "") -> tuple[LmEvalSettings | None, str]:
    """What a live placement must reproduce, from the ``results_*.json`` beside the samples.

    Returns ``(settings, "")``, or ``(None, reason)`` when a model folder has no results file, or
    one without task configs or lm-eval version (the reference then serves replay only). Models whose task configs, few-shot settings or
    lm-eval versions differ are refused: their scores would not be paired.
    """
    found: LmEvalSettings | None = None
    first = ""
    for mdir in _model_dirs(folder):
        latest = _latest_samples(mdir)
        results_files = sorted(mdir.glob("results_*.json"))
        if not results_files:
            return None, f"{mdir} has no results_*.json (lm-eval writes it beside the samples)"
        path, results = _newest_results(mdir)  # type: ignore[misc]
        unconfigured = sorted(t for t in latest if t not in (results.get("configs") or {}))
        if unconfigured or not results.get("lm_eval_version"):
            return None, f"{path} records no task config or lm-eval version for {', '.join(unconfigured) or 'the run'}"
        samples = {task: _samples(f) for task, (_, f) in latest.items()}
        metrics = {task: pick_metric(rows[0], metric) or "" for task, rows in samples.items()}
        settings = settings_from_results(results, metrics, where=str(path), include_path=include_path,
                                         hashes={task: prompt_hashes(rows) for task, rows in samples.items()})
        if found is None:
            found, first = settings, str(path)
            continue
        for task, pinned in found.tasks.items():
            other = settings.tasks.get(task)
            same = other is not None and (other.config_digest, other.num_fewshot, other.fewshot_seed) == (
                pinned.config_digest, pinned.num_fewshot, pinned.fewshot_seed)
            if not same or settings.lm_eval_version != found.lm_eval_version:
                raise InputError(f"task {task} was run with other settings (config, few-shot or lm-eval version) than "
                                 f"in {first}; the models' scores would not be paired", path=path, field="configs")
            if any(pinned.prompt_hashes.get(d, h) != h for d, h in other.prompt_hashes.items()):
                raise InputError(f"task {task}: some prompts differ from those in {first} (other few-shot examples, "
                                 "e.g. a different number of processes); the scores would not be paired", path=path,
                                 field="prompt_hash")
    return found, ""
