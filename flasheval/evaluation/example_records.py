"""The per-example records of ``flasheval evaluate``: one row per scored example, and the file they go to.

:func:`example_records` scores one task's examples from their requests and results
(:func:`flasheval.tasks.score_example`) into :class:`ExampleRecord` rows; output I/O happens
only in :func:`write_example_records`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flasheval.atomic import atomic_file, atomic_write_text
from flasheval.evaluation.selection import TaskSelection
from flasheval.tasks import ExampleScore, score_example
from flasheval.types import GenerationResult, LoglikelihoodResult, Request, Result

__all__ = [
    "ExampleRecord",
    "example_records",
    "EXAMPLE_FORMATS",
    "write_example_records",
]

EXAMPLE_FORMATS = ("parquet", "jsonl")
"""Formats of ``flasheval evaluate``'s per-example records file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleRecord:
    """The per-example output row of ``flasheval evaluate``."""

    task_name: str
    example_id: str
    category: str | None
    """Category (tasks with categories), else ``None``."""
    fewshot_ids: tuple[str, ...]
    """Ids of the few-shot examples in the prompt."""
    choice_logprob_sum: tuple[float, ...]
    """Per choice (or the single continuation): sum of token log-probabilities (nats)."""
    choice_n_tokens: tuple[int, ...]
    """Per choice: number of continuation tokens."""
    prediction: str
    """Chosen choice index, ``-1`` (language modelling) or the generated answer, as text."""
    correct: bool
    """Whether the example was answered correctly (llm-foundry's rule for the task type)."""
    score: float
    """The example's score: ``1.0``/``0.0`` for a scored model; the recorded score for a replay."""



def example_records(
    selection: TaskSelection, requests: dict[str, tuple[Request, ...]], results: dict[str, tuple[Result, ...]]
) -> tuple[list[ExampleRecord], list[ExampleScore]]:
    """Per-example records and scores of one task from its requests and their results."""
    by_id = {e.example_id: e for e in selection.examples}
    records, scores = [], []
    for example_id in selection.example_ids:
        example, answers = by_id[example_id], results[example_id]
        score = score_example(selection.spec, example, answers)
        logprob = tuple(r.logprob_sum for r in answers if isinstance(r, LoglikelihoodResult))
        n_tokens = tuple(r.n_tokens for r in answers if isinstance(r, LoglikelihoodResult))
        if answers and isinstance(answers[0], GenerationResult):
            n_tokens = (answers[0].n_generated_tokens,)
        records.append(
            ExampleRecord(
                task_name=selection.spec.name,
                example_id=example_id,
                category=example.category,
                fewshot_ids=tuple(getattr(requests[example_id][0], "fewshot_ids", ())),
                choice_logprob_sum=logprob,
                choice_n_tokens=n_tokens,
                prediction=str(score.prediction),
                correct=bool(score.correct),
                score=float(score.correct),
            )
        )
        scores.append(score)
    return records, scores


def write_example_records(records: Sequence[ExampleRecord], output: Path, fmt: str, *, stem: str = "examples") -> Path:
    """Write the per-example records atomically as ``<stem>.parquet`` or ``<stem>.jsonl`` in ``output``."""
    output.mkdir(parents=True, exist_ok=True)
    rows = [dataclasses.asdict(r) for r in records]
    target = output / f"{stem}.{fmt}"
    if fmt == "jsonl":
        atomic_write_text(target, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return target
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(records[0])] if records else None)
    for column in ("fewshot_ids", "choice_logprob_sum", "choice_n_tokens"):
        if column in frame:
            frame[column] = frame[column].map(list)
    with atomic_file(target, binary=True) as fh:
        frame.to_parquet(fh, index=False)
    return target
