"""Evaluate one model on tasks: the first N examples of each task's seeded order, scored
through any backend, turned into per-example records and per-task accuracies.

The selection is :func:`flasheval.sampling.example_order` + :func:`~flasheval.sampling.nested_prefix`,
the same order placement uses, so ``evaluate --n-examples 50`` scores exactly the examples a
placement stage of 50 would. I/O (the task files) happens only in :func:`select_examples`;
everything else is pure given a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flasheval.backends.base import Backend, OnResults
from flasheval.sampling import example_order, nested_prefix
from flasheval.scoring import ExampleScore, score_example, task_accuracy
from flasheval.tasks import Example, TaskSpec, build_task_requests, load_examples, task_spec
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
    "replay_records",
]


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


def replay_records(
    reference_and_model: str, task_names: Sequence[str], *, n_examples: int | None, seed: int
) -> tuple[list[ExampleRecord], dict[str, float], str]:
    """Records of a reference model's recorded scores (``replay:REFERENCE/MODEL``), same selection rule.

    ``REFERENCE`` is the shortest prefix of ``reference_and_model`` (cut at a ``/``) that names a
    reference; the rest is the model id (model ids contain ``/`` themselves, e.g. ``meta/llama-3-70b``).
    Returns the records, per-task mean scores and the reference name.
    """
    from flasheval.backends.replay import ReplayScorer
    from flasheval.errors import InputError, UnknownNameError
    from flasheval.reference import load_reference, resolve_reference

    parts = reference_and_model.split("/")
    for cut in range(1, len(parts)):
        try:
            resolve_reference("/".join(parts[:cut]))
        except UnknownNameError:
            continue
        reference, model_id = load_reference("/".join(parts[:cut])), "/".join(parts[cut:])
        break
    else:
        raise InputError(f"replay spec {reference_and_model!r} is not REFERENCE/MODEL with a known reference", field="--model")
    if model_id not in reference.model_ids:
        raise UnknownNameError("model of reference " + reference.name, model_id, reference.model_ids, field="--model")
    scorer = ReplayScorer(reference, model_id)
    ids_of = dict(zip(reference.dataset_names, reference.example_ids))
    records: list[ExampleRecord] = []
    means: dict[str, float] = {}
    for name in task_names:
        if name not in ids_of:
            raise UnknownNameError(f"task of reference {reference.name}", name, ids_of, field="--tasks")
        chosen = nested_prefix(example_order(ids_of[name], seed=seed, task_name=name), n_examples)
        scores = scorer.score(name, chosen).scores
        means[name] = float(scores.mean())
        records.extend(
            ExampleRecord(task_name=name, example_id=i, category=None, fewshot_ids=(), choice_logprob_sum=(),
                          choice_n_tokens=(), prediction="", correct=bool(v >= 0.5), score=float(v))
            for i, v in zip(chosen, scores)
        )
    return records, means, reference.name
