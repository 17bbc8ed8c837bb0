"""What ``flasheval export`` reads: flasheval's own outputs, each as :class:`~flasheval.interop.every_eval_ever.ModelScores`.

* a ``place`` record (``place.json``, or its folder): a live placement's record holds every example it scored
  (``live.examples``); a replayed one's are the reference's, at the placement's seeded nested order up to its last
  look's counts (:func:`flasheval.stats.sampling.example_order`, as the controller takes them), read back from the
  reference the record names (or the one given) and checked against the record's example count;
* an ``evaluate`` record (``summary.json``, or its folder) with its per-example file beside it (``examples_file``);
* a run folder (``run.json``): every checkpoint's ``place`` record, each one model (``step`` in its details);
* an lm-eval ``--log_samples`` output folder (one model's files, or one sub-folder per model), read as
  ``reference import --format lm-eval-samples`` reads it.

Every refusal is one line naming the file.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flasheval.errors import InputError, UnknownNameError
from flasheval.interop.every_eval_ever import DatasetScores, ModelScores
from flasheval.records.run_record import RunRecord, read_record
from flasheval.reference.leaderboard import ReferenceLeaderboard, load_reference
from flasheval.reference.lmeval_logs import scan_lm_eval_samples
from flasheval.runs.folder import RUN_FILE, is_run_folder, read_run
from flasheval.stats.sampling import example_order

__all__ = ["read_sources"]

_PLACE_DETAILS = ("reference", "plan", "seed", "status", "rank", "confidence_level", "tier", "resolution", "n_models",
                  "full_data_rank", "aggregate")
_COMPUTE_DETAILS = ("n_examples", "full_examples", "n_tokens", "full_tokens", "flops", "full_flops", "saving",
                    "example_saving", "token_saving")


def _created(record: RunRecord) -> float:
    try:
        return datetime.fromisoformat(record.created_utc).timestamp()
    except ValueError:
        return record.path.stat().st_mtime


def _reference(name: str, given: str | os.PathLike[str] | ReferenceLeaderboard | None, missing: str,
               path: Path) -> ReferenceLeaderboard | None:
    """The reference a placement was made on: ``given``, else the one its name finds (``None``: not found)."""
    if isinstance(given, ReferenceLeaderboard):
        return given
    try:
        return load_reference(given if given is not None else name, missing=missing)
    except UnknownNameError:
        if given is not None:
            raise
        return None


def _replayed(payload: dict[str, Any], ref: ReferenceLeaderboard, path: Path) -> tuple[DatasetScores, ...]:
    """A replayed placement's scored examples: each dataset's seeded order, up to the last look's count."""
    model = payload["model_id"]
    counts = payload["stages"][-1]["n_examples"] if payload["stages"] else [0] * len(ref.dataset_names)
    if model not in ref.model_ids or len(counts) != len(ref.dataset_names) or \
            sum(len(ids) for ids in ref.example_ids) != payload["compute"]["full_examples"]:
        raise InputError(f"the record's model {model!r} and counts {counts} do not fit reference {ref.name!r} "
                         f"({ref.n_models} models, {len(ref.dataset_names)} datasets): give the reference it was "
                         "placed on (--reference)", path=path, field="payload.stages")
    out = []
    for (scores, tokens), name, ids, n in zip(ref.model_rows(model), ref.dataset_names, ref.example_ids, counts):
        if not n:
            continue
        order = example_order(ids, seed=payload["seed"], task_name=name)[:n]
        index = {e: i for i, e in enumerate(ids)}
        cols = np.fromiter((index[e] for e in order), dtype=np.int64, count=len(order))
        out.append(DatasetScores(dataset=name, example_ids=order, scores=scores[cols].astype(np.float64),
                                 n_tokens=None if tokens is None else tokens[cols].astype(np.int64),
                                 n_full=len(ids)))
    return tuple(out)


def _live(payload: dict[str, Any], path: Path) -> tuple[DatasetScores, ...]:
    """A live placement's scored examples (``live.examples``), by task, in the order scored."""
    rows = payload["live"].get("examples")
    if not isinstance(rows, list) or not rows:
        raise InputError("a live placement's record without its scored examples (live.examples)", path=path,
                         field="payload.live.examples")
    return _grouped(pd.DataFrame(rows), path)


def _grouped(frame: pd.DataFrame, path: Path) -> tuple[DatasetScores, ...]:
    """Per-example rows (``task_name``, ``example_id``, ``score``; optionally ``n_tokens``, ``correct``,
    ``prediction``) as one :class:`DatasetScores` per task, in the rows' order."""
    absent = [c for c in ("task_name", "example_id", "score") if c not in frame.columns]
    if absent:
        raise InputError(f"per-example rows without {', '.join(absent)}", path=path, field=absent[0])
    out = []
    for task, rows in frame.groupby("task_name", sort=True):
        tokens = rows["n_tokens"] if "n_tokens" in rows and rows["n_tokens"].notna().all() else None
        out.append(DatasetScores(
            dataset=str(task), example_ids=tuple(map(str, rows["example_id"])),
            scores=rows["score"].to_numpy(dtype=np.float64),
            n_tokens=None if tokens is None else tokens.to_numpy(dtype=np.int64),
            correct=tuple(map(bool, rows["correct"])) if "correct" in rows else None,
            predictions=tuple(map(str, rows["prediction"])) if "prediction" in rows else None))
    return tuple(out)


def _placement(record: RunRecord, reference: Any, *, step: int | None = None) -> ModelScores:
    """A ``place`` record as one model's evaluation: its scored examples and its outcome in the details."""
    p = record.payload
    missing = (record.settings or {}).get("missing") or "complete-models"
    ref = _reference(p["reference"], reference, missing, record.path)
    if "live" in p and p["live"] is not None:
        datasets = _live(p, record.path)
    elif ref is None:
        raise InputError(f"a replayed placement's examples are reference {p['reference']!r}'s, which is not found "
                         "here: give its folder (--reference)", path=record.path, field="payload.reference")
    else:
        datasets = _replayed(p, ref, record.path)
    details = {k: p[k] for k in _PLACE_DETAILS if p.get(k) is not None}
    details.update(source="place", rank_interval=p["interval"],
                   **{k: p["compute"][k] for k in _COMPUTE_DETAILS if p["compute"].get(k) is not None})
    if step is not None:
        details["step"] = step
    return ModelScores(model_id=p["model_id"], benchmark=p["reference"], datasets=datasets,
                       metric=ref.manifest.metric if ref is not None else "score",
                       higher_is_better=ref.manifest.higher_is_better if ref is not None else True,
                       created=_created(record), details=details)


def _evaluation(record: RunRecord) -> ModelScores:
    """An ``evaluate`` record and its per-example file as one model's evaluation."""
    p = record.payload
    name = p.get("examples_file")
    if not isinstance(name, str):
        raise InputError("an evaluate record without per-example records (examples_file): run evaluate with "
                         "--output", path=record.path, field="payload.examples_file")
    file = record.path.parent / name
    try:
        frame = pd.read_json(file, lines=True) if file.suffix == ".jsonl" else pd.read_parquet(file)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the per-example records ({exc})", path=file) from None
    if "example_id" in frame:
        frame["example_id"] = frame["example_id"].astype(str)
    details = {"source": "evaluate", **{k: p[k] for k in ("reference", "seed", "n_examples_per_task") if k in p}}
    return ModelScores(model_id=p["model_id"], benchmark=str(p.get("reference") or "flasheval"),
                       datasets=_grouped(frame, file), metric="score" if "reference" in p else "accuracy",
                       created=_created(record), details=details)


def _lm_eval(folder: Path) -> tuple[ModelScores, ...]:
    """An lm-eval ``--log_samples`` output folder: one evaluation per model, its metric per task."""
    logs = scan_lm_eval_samples(folder, dtype=np.float64)
    m = logs.matrices
    version = logs.settings.lm_eval_version if logs.settings is not None else "unknown"
    created = max(p.stat().st_mtime for p in folder.rglob("samples_*.jsonl"))
    out = []
    for i, model in enumerate(m.model_ids):
        datasets = tuple(DatasetScores(dataset=d, example_ids=ids, scores=m.scores[j][i].astype(np.float64),
                                       n_tokens=None if m.n_tokens[j] is None else m.n_tokens[j][i],
                                       metric=logs.metrics[d])
                         for j, (d, ids) in enumerate(zip(m.dataset_names, m.example_ids)) if m.present[i, j])
        out.append(ModelScores(model_id=model, benchmark="lm-eval", datasets=datasets, metric="score",
                               created=created, library=("lm_eval", version), details={"source": "lm-eval-samples"}))
    return tuple(out)


def read_sources(path: str | os.PathLike[str], *, reference: Any = None) -> tuple[ModelScores, ...]:
    """The evaluations in ``path``: a place or evaluate record (or its folder), a run folder, an lm-eval output folder.

    ``reference``: the reference a replayed placement was made on, where its name alone does not find it.
    """
    source = Path(path)
    if not source.exists():
        raise InputError("no such file or folder", path=source)
    if source.is_dir():
        if is_run_folder(source):
            history = read_run(source)
            return tuple(_placement(read_record(c.record_path, kind="place"), reference, step=c.step)
                         for c in history.checkpoints)
        if any(source.glob("samples_*.jsonl")) or any(source.glob("*/samples_*.jsonl")):
            return _lm_eval(source)
        found = [source / n for n in ("place.json", "summary.json") if (source / n).is_file()]
        if len(found) != 1:
            raise InputError(f"not a place or evaluate record's folder, a run folder ({RUN_FILE}) or an lm-eval "
                             "output folder (samples_*.jsonl)", path=source)
        source = found[0]
    record = read_record(source)
    if record.kind == "place":
        return (_placement(record, reference),)
    if record.kind == "evaluate":
        return (_evaluation(record),)
    raise InputError(f"a {record.kind!r} record: export reads place and evaluate records, run folders and lm-eval "
                     "output folders", path=source, field="kind")
