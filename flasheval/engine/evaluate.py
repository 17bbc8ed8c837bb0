"""Evaluate a model on task examples: requests through any backend, results back to per-example
scores. The one place where task -> request -> backend -> score meets.

Two callers, one mechanism (:func:`score_requests`, then :func:`flasheval.tasks.score_example`):

* ``flasheval evaluate``: the first N examples of each task's seeded order, turned into
  per-example records (:class:`ExampleRecord`) and per-task accuracies;
* live scoring for ``reference build``, ``place`` and ``sweep``: :func:`score_examples` builds,
  runs and scores chosen examples of a :class:`~flasheval.tasks.LiveTask` and counts the tokens
  the model ran for each (:class:`ExampleOutcome`).

The selection is :func:`flasheval.stats.sampling.example_order` + :func:`~flasheval.stats.sampling.nested_prefix`,
the same order placement uses, so ``evaluate --n-examples 50`` scores exactly the examples a
placement stage of 50 would. I/O (the task files) happens only in :func:`select_examples`;
everything else is pure given a backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.base import Backend, OnResults
from flasheval.records import atomic_write_text
from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import (
    Example,
    ExampleScore,
    LiveTask,
    TaskSpec,
    build_example_requests,
    build_task_requests,
    load_examples,
    prompt_digest,
    score_example,
    task_accuracy,
    task_spec,
)
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Request,
    Result,
    RollingLoglikelihoodRequest,
)

__all__ = [
    "TaskSelection",
    "ExampleRecord",
    "select_examples",
    "task_requests",
    "score_requests",
    "example_records",
    "accuracies",
    "ExampleOutcome",
    "example_tokens",
    "score_outcomes",
    "score_examples",
    "EXAMPLE_FORMATS",
    "score_through_store",
    "write_example_records",
]

EXAMPLE_FORMATS = ("parquet", "jsonl")
"""Formats of ``flasheval evaluate``'s per-example records file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSelection:
    """One task's examples (the few-shot pool) and the ids chosen for scoring, in seeded order."""

    spec: TaskSpec
    """The task."""
    examples: tuple[Example, ...]
    """Every example of the task file (few-shot shots are drawn from these)."""
    example_ids: tuple[str, ...]
    """The first ``n_examples`` ids of the seeded order."""


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


def select_examples(task_names: Sequence[str], task_dir: str | Path, *, n_examples: int | None, seed: int) -> list[TaskSelection]:
    """Load each task and pick the first ``n_examples`` of its seeded order (all when ``None``).

    Raises :class:`~flasheval.errors.UnknownNameError` for an unknown task and
    :class:`~flasheval.errors.InputError` when ``task_dir`` lacks a task's file.
    """
    selections = []
    for name in task_names:
        spec = task_spec(name)
        examples = load_examples(spec, task_dir)
        order = example_order([e.example_id for e in examples], seed=seed, task_name=spec.name)
        selections.append(TaskSelection(spec=spec, examples=examples, example_ids=nested_prefix(order, n_examples)))
    return selections


def task_requests(selection: TaskSelection, *, seed: int, prefix_space: bool = True) -> dict[str, tuple[Request, ...]]:
    """``{example_id: requests}`` for the selected examples, in selection order."""
    return build_task_requests(
        selection.spec, selection.examples, seed=seed, example_ids=selection.example_ids, prefix_space=prefix_space
    )


def score_requests(backend: Backend, requests: Sequence[Request], *, on_results: OnResults | None = None) -> list[Result]:
    """Answer mixed requests: each kind goes to its backend method in one batch-first call."""
    results: list[Result | None] = [None] * len(requests)
    for kind, method in (
        (LoglikelihoodRequest, backend.loglikelihood),
        (GenerationRequest, backend.generate),
        (RollingLoglikelihoodRequest, backend.loglikelihood_rolling),
    ):
        positions = [i for i, r in enumerate(requests) if isinstance(r, kind)]
        if not positions:
            continue

        def forward(pairs, positions=positions):  # type: ignore[no-untyped-def]
            if on_results is not None:
                on_results([(positions[j], result) for j, result in pairs])

        for j, result in enumerate(method([requests[i] for i in positions], on_results=forward)):  # type: ignore[arg-type]
            results[positions[j]] = result
    return results  # type: ignore[return-value]


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


def accuracies(selections: Sequence[TaskSelection], scores: dict[str, list[ExampleScore]]) -> dict[str, float]:
    """Per-task accuracy (macro-averaged over categories where the task has them)."""
    return {s.spec.name: task_accuracy(scores[s.spec.name], has_categories=s.spec.has_categories) for s in selections}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleOutcome:
    """What scoring one example produced (one row of a build's or a placement's example log)."""

    task_name: str
    example_id: str
    score: float
    """1.0 if answered correctly, else 0.0."""
    n_tokens: int
    """Tokens the model ran for this example: each distinct context once plus every continuation
    (generation: the generated tokens)."""
    fewshot_ids: tuple[str, ...]
    """Ids of the few-shot examples in the prompt."""
    prompt_digest: str
    """:func:`prompt_digest` of the example's requests."""

    def to_json(self) -> dict[str, object]:
        return {"task_name": self.task_name, "example_id": self.example_id, "score": self.score,
                "n_tokens": self.n_tokens, "fewshot_ids": list(self.fewshot_ids), "prompt_digest": self.prompt_digest}


def example_tokens(requests: Sequence[Request], results: Sequence[Result]) -> int:
    """Tokens a shared-context backend ran for one example (``results`` answer ``requests``).

    Each distinct context is counted once (the choices of a multiple-choice example share it)
    plus every continuation; a generation counts its context and its generated tokens.

    Examples
    --------
    >>> req = lambda i: LoglikelihoodRequest(task_name="t", example_id="1", choice_index=i, context="Q",
    ...                                      continuation=f" {i}")
    >>> res = lambda i, n: LoglikelihoodResult(task_name="t", example_id="1", choice_index=i, logprob_sum=-1.0,
    ...                                        n_tokens=n, is_greedy=False, n_context_tokens=10)
    >>> example_tokens([req(0), req(1)], [res(0, 2), res(1, 3)])
    15
    """
    total, contexts = 0, set()
    for request, result in zip(requests, results, strict=True):
        if isinstance(result, LoglikelihoodResult):
            if request.context not in contexts:  # type: ignore[union-attr]
                contexts.add(request.context)  # type: ignore[union-attr]
                total += result.n_context_tokens
            total += result.n_tokens
        elif isinstance(result, GenerationResult):
            total += result.n_context_tokens + result.n_generated_tokens
        else:
            total += result.n_tokens
    return total


def score_outcomes(task: LiveTask, requests_by_id: Mapping[str, Sequence[Request]],
                   results: Sequence[Result]) -> list[ExampleOutcome]:
    """Score each example of ``requests_by_id`` (in its order) from ``results`` (flattened, same order)."""
    by_id = {e.example_id: e for e in task.examples}
    outcomes, start = [], 0
    for example_id, requests in requests_by_id.items():
        answers = results[start:start + len(requests)]
        start += len(requests)
        score = score_example(task.spec, by_id[example_id], answers)
        outcomes.append(ExampleOutcome(
            task_name=task.name, example_id=example_id, score=1.0 if score.correct else 0.0,
            n_tokens=example_tokens(requests, answers), fewshot_ids=tuple(getattr(requests[0], "fewshot_ids", ())),
            prompt_digest=prompt_digest(requests)))
    return outcomes


def score_examples(backend: Backend, task: LiveTask, example_ids: Sequence[str], *, seed: int,
                   prefix_space: bool) -> list[ExampleOutcome]:
    """Build, run and score ``example_ids`` of ``task`` (one batch-first backend call per request kind)."""
    requests_by_id = build_example_requests(task, example_ids, seed=seed, prefix_space=prefix_space)
    flat = [r for requests in requests_by_id.values() for r in requests]
    return score_outcomes(task, requests_by_id, score_requests(backend, flat))


def score_through_store(backend: Backend, requests: Sequence[Request], store_dir: Path,
                        state: Any) -> tuple[list[Result], dict[str, Any]]:
    """Answer ``requests`` through the results store in ``store_dir`` and the data-parallel runner.

    The main process opens (and repairs) the store and writes to it; every process reads it.
    ``state`` is accelerate's process state (:func:`flasheval.engine.distributed.make_state`).
    Returns the results and the counts the run record reports (requests from the store, computed
    now, scoring seconds).
    """
    from flasheval.engine.distributed import cached_runner

    engine, store = cached_runner(backend, store_dir, state)
    n_stored = sum(store.get(r.key) is not None for r in requests)  # the main process's count is the one reported
    started = time.perf_counter()
    try:
        results = score_requests(engine, requests)
    finally:
        store.close()
    counts = {
        "n_requests_from_store": n_stored,
        "n_requests_computed": engine.n_computed,
        "scoring_seconds": time.perf_counter() - started,
    }
    return results, counts


def write_example_records(records: Sequence[ExampleRecord], output: Path, fmt: str) -> Path:
    """Write the per-example records atomically as ``examples.parquet`` or ``examples.jsonl`` in ``output``."""
    output.mkdir(parents=True, exist_ok=True)
    rows = [dataclasses.asdict(r) for r in records]
    target = output / f"examples.{fmt}"
    if fmt == "jsonl":
        atomic_write_text(target, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return target
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(records[0])] if records else None)
    for column in ("fewshot_ids", "choice_logprob_sum", "choice_n_tokens"):
        if column in frame:
            frame[column] = frame[column].map(list)
    temporary = output / f".examples.{fmt}.tmp"
    frame.to_parquet(temporary, index=False)
    os.replace(temporary, target)
    return target
