"""flasheval's results as Every Eval Ever records: one aggregate log and its instance-level lines per model.

:class:`ModelScores` is what any source (a placement, an evaluation, a run's checkpoints, an lm-eval output
folder: :mod:`flasheval.interop.sources`) comes down to: one model's scored examples per dataset, with what the
source adds (a placement's rank interval, tier and compute; its settings). :func:`aggregate_log` and
:func:`instance_lines` turn it into the two records of schema 0.3.0 (pure functions); :func:`write_records` writes
them in the datastore's layout, ``data/{benchmark}/{developer}/{model}/{uuid}.json`` beside
``{uuid}_samples.jsonl`` (the log's ``detailed_evaluation_results.file_path``, with the file's sha256 and rows).

What goes where: each dataset is one ``evaluation_results[]`` entry (``evaluation_name`` the dataset, the mean
score over the examples scored, its standard error, ``score_details.details`` the examples scored of the
dataset's), each scored example one instance line (``sample_id``, ``evaluation.score``, ``is_correct`` = full
credit, ``token_usage`` where the tokens are known). The placement's outcome, which is about the model and not one
dataset, goes in ``eval_library.additional_details`` (flasheval's parameters and results of this evaluation;
strings, JSON-encoded: ``rank``, ``rank_interval``, ``tier``, ``n_examples``, ``saving``, ...). The uuid is derived
from the evaluation id, so exporting the same source again writes the same files.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flasheval.atomic import atomic_write_text
from flasheval.errors import InputError
from flasheval.hashing import file_sha256
from flasheval.reference.every_eval_ever import EEE_SCHEMA_VERSION
from flasheval.version import __version__

__all__ = ["DatasetScores", "ModelScores", "aggregate_log", "instance_lines", "write_records"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DatasetScores:
    """One model's scored examples of one dataset."""

    dataset: str
    example_ids: tuple[str, ...]
    scores: np.ndarray
    """float64, one per example id."""
    n_tokens: np.ndarray | None = None
    """int64 tokens processed per example (``None``: not known)."""
    correct: tuple[bool, ...] | None = None
    """Per example, whether it was answered right (``None``: full credit, a score of 1)."""
    predictions: tuple[str, ...] | None = None
    """Per example, the answer given (``None``: not kept)."""
    n_full: int | None = None
    """Examples in the dataset (a placement scores some of them)."""
    metric: str | None = None
    """What the scores measure, where it is the dataset's own (lm-eval's per-task metric); else the model's."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ModelScores:
    """One model's evaluation, ready to write as one Every Eval Ever log."""

    model_id: str
    benchmark: str
    """The datastore's first folder (the reference or the harness) and the evaluation id's first part."""
    datasets: tuple[DatasetScores, ...]
    metric: str
    """What a score measures (the reference's metric; ``acc``, ``accuracy``)."""
    higher_is_better: bool = True
    created: float = 0.0
    """When the source was written (Unix seconds): the evaluation's timestamp."""
    library: tuple[str, str] = ("flasheval", __version__)
    details: Mapping[str, Any] = field(default_factory=dict)
    """``eval_library.additional_details``: the placement's outcome and settings (JSON-encoded when not strings)."""
    availability: str = "unknown"
    """``model_info.additional_details.model_availability``."""


def _segment(text: str) -> str:
    """One datastore folder name from a name (no separators, never empty)."""
    cleaned = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in text).strip(".")
    return cleaned or "unknown"


def _parts(model_id: str) -> tuple[str, str]:
    """``(developer, model)`` of a model id (``org/model``; ``unknown`` without an org)."""
    org, _, rest = model_id.partition("/")
    return (_segment(org), _segment(rest.replace("/", "_"))) if rest else ("unknown", _segment(org))


def evaluation_id(scores: ModelScores) -> str:
    """``benchmark/developer_model/timestamp``, the format's recommended evaluation id."""
    developer, model = _parts(scores.model_id)
    return f"{_segment(scores.benchmark)}/{developer}_{model}/{int(scores.created)}"


def record_stem(scores: ModelScores) -> str:
    """``data/benchmark/developer/model/UUID``: where the log (``.json``) and its lines (``_samples.jsonl``) go."""
    digest = hashlib.sha256(f"{evaluation_id(scores)}\0{scores.model_id}".encode()).digest()
    developer, model = _parts(scores.model_id)
    return f"data/{_segment(scores.benchmark)}/{developer}/{model}/{uuid.UUID(bytes=digest[:16], version=4)}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _unit(d: DatasetScores) -> bool:
    return bool(len(d.scores)) and bool(((d.scores >= 0.0) & (d.scores <= 1.0)).all())


def _result(scores: ModelScores, d: DatasetScores) -> dict[str, Any]:
    """One dataset's ``evaluation_results[]`` entry."""
    binary = bool(len(d.scores)) and bool(np.isin(d.scores, (0.0, 1.0)).all())
    metric = d.metric or scores.metric
    config: dict[str, Any] = {"metric_id": metric, "metric_name": metric,
                              "lower_is_better": not scores.higher_is_better,
                              "score_type": "binary" if binary else "continuous"}
    if not binary:  # bounds only where every score is a proportion; unknown otherwise
        config.update(min_score=0.0 if _unit(d) else None, max_score=1.0 if _unit(d) else None)
    n = len(d.scores)
    details = {"n_examples": str(n), **({"n_examples_in_dataset": str(d.n_full)} if d.n_full is not None else {})}
    score: dict[str, Any] = {"score": float(d.scores.mean()) if n else 0.0, "details": details,
                             "uncertainty": {"num_samples": n}}
    if n > 1:
        se = float(d.scores.std(ddof=1) / math.sqrt(n))
        score["uncertainty"]["standard_error"] = {"value": se, "method": "analytic"}
    return {"evaluation_result_id": f"{_segment(scores.benchmark)}.{d.dataset}", "evaluation_name": d.dataset,
            "source_data": {"dataset_name": d.dataset, "source_type": "other"}, "metric_config": config,
            "score_details": score}


def aggregate_log(scores: ModelScores, *, organization: str, retrieved: float | None = None,
                  samples: tuple[str, int] | None = None) -> dict[str, Any]:
    """The aggregate log of ``scores`` (``samples``: the instance file's sha256 and rows, once written)."""
    developer, _ = _parts(scores.model_id)
    log: dict[str, Any] = {
        "schema_version": EEE_SCHEMA_VERSION, "evaluation_id": evaluation_id(scores),
        "evaluation_timestamp": str(int(scores.created)),
        "retrieved_timestamp": str(int(time.time() if retrieved is None else retrieved)),
        "source_metadata": {"source_name": "flasheval", "source_type": "evaluation_run",
                            "source_organization_name": organization, "evaluator_relationship": "other",
                            "additional_details": {"exported_by": f"flasheval {__version__}"}},
        "eval_library": {"name": scores.library[0], "version": scores.library[1],
                         "additional_details": {k: _text(v) for k, v in scores.details.items()}},
        "model_info": {"name": scores.model_id.rsplit("/", 1)[-1], "id": scores.model_id, "developer": developer,
                       "additional_details": {"deployment_type": "self_deployed",
                                              "model_availability": scores.availability}},
        "evaluation_results": [_result(scores, d) for d in scores.datasets],
        "detailed_evaluation_results": {"format": "jsonl", "file_path": f"{record_stem(scores)}_samples.jsonl",
                                        "hash_algorithm": "sha256"},
    }
    if samples is not None:
        log["detailed_evaluation_results"].update(checksum=samples[0], total_rows=samples[1])
    return log


def instance_lines(scores: ModelScores) -> Iterator[dict[str, Any]]:
    """Every scored example of ``scores`` as an instance-level record, dataset by dataset, in example order."""
    eid = evaluation_id(scores)
    for d in scores.datasets:
        result_id = f"{_segment(scores.benchmark)}.{d.dataset}"
        for i, example in enumerate(d.example_ids):
            score = float(d.scores[i])
            correct = d.correct[i] if d.correct is not None else score >= 1.0
            line: dict[str, Any] = {
                "schema_version": EEE_SCHEMA_VERSION, "evaluation_id": eid, "model_id": scores.model_id,
                "evaluation_name": d.dataset, "evaluation_result_id": result_id, "sample_id": example,
                "sample_hash": None, "interaction_type": "single_turn", "input": {"raw": "", "reference": []},
                "output": {"raw": [] if d.predictions is None else [d.predictions[i]]}, "answer_attribution": [],
                "evaluation": {"score": score, "is_correct": bool(correct)}}
            if d.n_tokens is not None:
                n = int(d.n_tokens[i])
                line["token_usage"] = {"input_tokens": n, "output_tokens": 0, "total_tokens": n}
            yield line


def write_records(evaluations: Sequence[ModelScores], output: str | Path, *, organization: str) -> tuple[Path, ...]:
    """Write each evaluation's instance lines, then its log (naming the lines' sha256), under ``output``.

    Returns the logs written. Each file is written whole (:func:`flasheval.atomic.atomic_write_text`); the same
    source exported again replaces its own files and no other.
    """
    root = Path(output)
    blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InputError("is a file, not a folder", path=blocker, field="--output")
    stems = [record_stem(scores) for scores in evaluations]
    twice = next((s for s in stems if stems.count(s) > 1), None)
    if twice is not None:  # one file would overwrite the other: nothing is written
        raise InputError(f"two evaluations would be written as {twice}.json (the same model and evaluation time); "
                         "export them apart", field="SOURCE")
    written = []
    retrieved = time.time()
    for scores, stem_name in zip(evaluations, stems):
        stem = root / stem_name
        try:
            stem.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot write here ({exc.strerror or exc})", path=stem.parent, field="--output") from None
        rows = [json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n" for line in instance_lines(scores)]
        samples = atomic_write_text(stem.parent / f"{stem.name}_samples.jsonl", "".join(rows))
        log = aggregate_log(scores, organization=organization, retrieved=retrieved,
                            samples=(file_sha256(samples), len(rows)))
        written.append(atomic_write_text(stem.with_suffix(".json"),
                                         json.dumps(log, indent=2, ensure_ascii=False, allow_nan=False) + "\n"))
    return tuple(written)
