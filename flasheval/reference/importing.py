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
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from flasheval.errors import InputError, UnknownNameError
from flasheval.lmeval.settings import DEFAULT_METRICS, LmEvalSettings, pick_metric, prompt_hashes, settings_from_results

__all__ = ["IMPORT_FORMATS", "read_long_parquet", "read_lm_eval_samples", "read_lm_eval_settings"]

IMPORT_FORMATS: tuple[str, ...] = ("long-parquet", "lm-eval-samples")
_DEFAULT_METRICS = DEFAULT_METRICS
_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d\-\.:]+)\.jsonl$")


def read_long_parquet(path: str | Path, *, suite: str | None = None) -> pd.DataFrame:
    """Rows of a long-format parquet file, optionally only those with ``suite == suite``."""
    p = Path(path)
    if not p.is_file():
        raise InputError("file not found", path=p)
    try:
        df = pd.read_parquet(p)
    except Exception as exc:  # pyarrow raises many types for a non-parquet file
        raise InputError(f"not a readable parquet file ({type(exc).__name__}: {exc})", path=p) from None
    if suite is not None:
        if "suite" not in df.columns:
            raise InputError("--suite given but the file has no 'suite' column", path=p, field="suite")
        suites = sorted(map(str, df["suite"].unique()))
        if suite not in suites:
            raise UnknownNameError("suite", suite, suites, path=p)
        df = df[df["suite"].astype(str) == suite]
    keep = [c for c in ("model", "dataset", "example_id", "score", "n_tokens") if c in df.columns]
    return df[keep].reset_index(drop=True)


def _model_name(folder: Path) -> str:
    results = sorted(folder.glob("results_*.json"))
    for res in reversed(results):
        try:
            data = json.loads(res.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InputError("not valid JSON", path=res) from None
        name = data.get("model_name") or (data.get("config") or {}).get("model_args")
        if isinstance(name, str) and name:
            return name
    return folder.name


def _pick_metric(record: Mapping[str, Any], metric: str | None, path: Path, line: int) -> float:
    names = (metric,) if metric else _DEFAULT_METRICS
    for name in names:
        if name in record:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"metric value {value!r} is not a number", path=path, line=line, field=name)
            return float(value)
    present = [k for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "doc_id"]
    raise InputError(f"no metric {' / '.join(names)} in the sample", path=path, line=line, field="metric",
                     allowed=present)


def _read_samples_file(path: Path, model: str, task: str, metric: str | None) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({exc.msg})", path=path, line=line_no) from None
            if "doc_id" not in record:
                raise InputError("missing key", path=path, line=line_no, field="doc_id")
            rows.append({"model": model, "dataset": task, "example_id": str(record["doc_id"]),
                         "score": _pick_metric(record, metric, path, line_no)})
    return rows


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
    rows: list[dict[str, Any]] = []
    for mdir in _model_dirs(root):
        model = _model_name(mdir)
        for task, (_, f) in sorted(_latest_samples(mdir).items()):
            rows.extend(_read_samples_file(f, model, task, metric))
    if not rows:
        raise InputError("no samples_<task>_<timestamp>.jsonl files found (run lm_eval with --log_samples)", path=root)
    return pd.DataFrame(rows)


def _samples(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
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
        path = results_files[-1]
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InputError("not valid JSON", path=path) from None
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
