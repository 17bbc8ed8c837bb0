"""Evaluate a model on task examples: requests through any backend, results back to per-example
scores. The one place where task -> request -> backend -> score meets.

Two callers, one mechanism (:func:`score_requests`, then :func:`flasheval.tasks.score_example`):

* ``flasheval evaluate``: the first N examples of each task's seeded order (the tasks of whole
  suites with :func:`plan_tasks`) and any held-out text files (:func:`load_heldout`), answered
  in one request list (:func:`evaluation_requests`) and turned back into per-example records,
  per-task accuracies with standard errors, suite aggregates, validation losses and the compute
  spent (:func:`evaluation_results`, :class:`Evaluation`);
* live scoring for ``reference build``, ``place`` and ``sweep``: :func:`score_examples` builds,
  runs and scores chosen examples of a :class:`~flasheval.tasks.LiveTask` and counts the tokens
  the model ran for each (:class:`ExampleOutcome`).

The selection is :func:`flasheval.stats.sampling.example_order` + :func:`~flasheval.stats.sampling.nested_prefix`,
the same order placement uses, so ``evaluate --n-examples 50`` scores exactly the examples a
placement stage of 50 would. Input I/O happens only in :func:`plan_tasks` (which task files
exist), :func:`select_examples` (the task files) and :func:`load_heldout` (held-out text), output
only in :func:`write_example_records`; everything else is pure given a backend.
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
from flasheval.errors import InputError
from flasheval.records import atomic_write_text
from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import (
    Example,
    ExampleScore,
    LiveTask,
    Suite,
    SuiteAggregate,
    TaskSpec,
    ValidationLoss,
    build_example_requests,
    build_task_requests,
    heldout_requests,
    load_examples,
    load_suite,
    prompt_digest,
    resolve_task_file,
    score_example,
    suite_aggregate,
    task_accuracy,
    task_spec,
    task_standard_error,
    validation_loss,
)
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Request,
    Result,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = [
    "TaskPlan",
    "plan_tasks",
    "HeldoutFile",
    "load_heldout",
    "TaskSummary",
    "Evaluation",
    "evaluation_requests",
    "evaluation_results",
    "suite_summaries",
    "evaluation_summary",
    "TaskSelection",
    "ExampleRecord",
    "select_examples",
    "task_requests",
    "score_requests",
    "example_records",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPlan:
    """Which tasks an ``evaluate`` run scores, for which suites, and which suite tasks it cannot score."""

    suites: tuple[Suite, ...]
    """The suites whose aggregates the run reports (empty for a plain ``--tasks`` run)."""
    task_names: tuple[str, ...]
    """Tasks to score, in suite order (each once)."""
    without_data: tuple[str, ...] = ()
    """Selected suite tasks whose file is not in the task directory (their suites become partial)."""


def plan_tasks(suite_names: Sequence[str], task_names: Sequence[str] | None, task_dir: str | Path) -> TaskPlan:
    """The tasks of ``suite_names`` (every task once, suite order), narrowed to ``task_names`` if given.

    Without suites, ``task_names`` is the plan as it is (a missing task file is then an error when
    the examples are loaded). With suites, a task outside them is refused, and selected tasks whose
    file ``task_dir`` lacks (e.g. coqa, bbq, bigbench_elementary_math_qa, for which no copy is
    available) are left out and listed in :attr:`TaskPlan.without_data`, so the aggregates that need
    them are computed over the rest and labelled partial.
    """
    suites = tuple(load_suite(name) for name in dict.fromkeys(suite_names))
    if not suites:
        if not task_names:
            raise InputError("nothing to evaluate: give --tasks, --suite or --heldout", field="--tasks")
        return TaskPlan(suites=(), task_names=tuple(task_spec(t).name for t in task_names))
    members = tuple(dict.fromkeys(t for suite in suites for t in suite.task_names))
    chosen = members
    if task_names:
        aliases = {alias: name for suite in suites for name, alias in suite.column_aliases}
        wanted = [aliases.get(t, t) for t in task_names]
        outside = [t for t in wanted if t not in members]
        if outside:
            raise InputError(f"{', '.join(outside)} not in suite(s) {', '.join(s.name for s in suites)}",
                             field="--tasks", allowed=members)
        chosen = tuple(t for t in members if t in wanted)
    without = tuple(t for t in chosen if resolve_task_file(task_spec(t), task_dir) is None)
    run = tuple(t for t in chosen if t not in without)
    for suite in suites:
        if not set(suite.task_names) & set(run):
            raise InputError(f"suite {suite.name!r}: none of its tasks is selected and has a file here",
                             path=task_dir, field="--suite")
    return TaskPlan(suites=suites, task_names=run, without_data=without)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldoutFile:
    """A held-out text file and its rolling log-likelihood requests (validation loss)."""

    name: str
    """The file's stem (``c4_val`` for ``c4_val.jsonl``): its key in the record and the task name of its requests."""
    path: Path
    requests: tuple[RollingLoglikelihoodRequest, ...]
    """One per document (:func:`flasheval.tasks.heldout_requests`)."""


def load_heldout(paths: Sequence[str | Path]) -> tuple[HeldoutFile, ...]:
    """Read each held-out file (JSON lines with ``text``, or plain text); two files may not share a stem."""
    files: list[HeldoutFile] = []
    for path in paths:
        name = Path(path).name.split(".")[0] or Path(path).name
        if any(f.name == name for f in files):
            raise InputError(f"two held-out files named {name!r}; rename one", path=path, field="--heldout")
        files.append(HeldoutFile(name=name, path=Path(path),
                                 requests=heldout_requests(path, task_name=f"heldout/{name}")))
    return tuple(files)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSummary:
    """One task's result in an ``evaluate`` run."""

    task_name: str
    n_examples: int
    accuracy: float
    """Mean score (macro-averaged over categories where the task has them)."""
    standard_error: float | None
    """:func:`flasheval.tasks.task_standard_error` of ``accuracy`` (``None`` below two examples per mean)."""
    n_categories: int | None
    """Categories seen (tasks with categories), else ``None``."""
    n_tokens: int
    """Tokens the model ran for these examples, counted as placement counts them (:func:`example_tokens`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation:
    """Everything an ``evaluate`` run computed, before it is written."""

    records: tuple[ExampleRecord, ...]
    tasks: tuple[TaskSummary, ...]
    losses: tuple[tuple[HeldoutFile, ValidationLoss], ...]
    """Validation loss per held-out file."""

    @property
    def n_examples(self) -> int:
        return sum(t.n_examples for t in self.tasks)

    @property
    def n_tokens(self) -> int:
        """Tokens run for the task examples (placement's unit; held-out text not included)."""
        return sum(t.n_tokens for t in self.tasks)


def evaluation_requests(per_task: Mapping[str, Mapping[str, Sequence[Request]]],
                        heldout: Sequence[HeldoutFile] = ()) -> list[Request]:
    """Every request of a run in one list: tasks in order, examples in order, then the held-out documents."""
    flat: list[Request] = [r for by_id in per_task.values() for requests in by_id.values() for r in requests]
    return flat + [r for f in heldout for r in f.requests]


def evaluation_results(selections: Sequence[TaskSelection], per_task: Mapping[str, Mapping[str, Sequence[Request]]],
                       heldout: Sequence[HeldoutFile], results: Sequence[Result]) -> Evaluation:
    """Group ``results`` (answering :func:`evaluation_requests`, same order) back by task and example and score them."""
    position = 0

    def take(n: int) -> tuple[Result, ...]:
        nonlocal position
        position += n
        return tuple(results[position - n:position])

    records: list[ExampleRecord] = []
    tasks = []
    for selection in selections:
        by_id = per_task[selection.spec.name]
        answers = {example_id: take(len(requests)) for example_id, requests in by_id.items()}
        task_records, scores = example_records(selection, dict(by_id), answers)  # type: ignore[arg-type]
        records.extend(task_records)
        spec = selection.spec
        tasks.append(TaskSummary(
            task_name=spec.name, n_examples=len(scores),
            accuracy=task_accuracy(scores, has_categories=spec.has_categories),
            standard_error=task_standard_error(scores, has_categories=spec.has_categories),
            n_categories=len({s.category for s in scores}) if spec.has_categories else None,
            n_tokens=sum(example_tokens(by_id[i], answers[i]) for i in by_id)))
    losses = []
    for f in heldout:
        answers = take(len(f.requests))
        losses.append((f, validation_loss([r for r in answers if isinstance(r, RollingLoglikelihoodResult)])))
    if position != len(results):
        raise ValueError(f"{len(results)} results for {position} requests")
    return Evaluation(records=tuple(records), tasks=tuple(tasks), losses=tuple(losses))


def suite_summaries(suites: Sequence[Suite], tasks: Sequence[TaskSummary], *, baselines: str) -> list[SuiteAggregate]:
    """Each suite's aggregate over the tasks scored (:func:`flasheval.tasks.suite_aggregate`).

    A suite some of whose tasks were not scored gets its aggregate over the rest, with
    ``missing`` naming the others (``partial`` is true): never presented as the full aggregate.
    """
    accuracies = {t.task_name: t.accuracy for t in tasks}
    errors = {t.task_name: t.standard_error for t in tasks}
    return [suite_aggregate(suite, accuracies, baselines=baselines, partial=True, standard_errors=errors)
            for suite in suites]


def _suite_json(suite: Suite, aggregate: SuiteAggregate, without_data: Sequence[str]) -> dict[str, Any]:
    return {"aggregate": suite.aggregate, "description": suite.description, "value": aggregate.value,
            "standard_error": aggregate.standard_error, "baselines": aggregate.baselines,
            "n_tasks": aggregate.n_tasks, "n_suite_tasks": len(suite.task_names), "partial": aggregate.partial,
            "missing": list(aggregate.missing), "without_data": [t for t in aggregate.missing if t in without_data]}


def evaluation_summary(evaluation: Evaluation, plan: TaskPlan, aggregates: Sequence[SuiteAggregate], *,
                       n_parameters: int | None) -> dict[str, Any]:
    """The record fields of an ``evaluate`` run: ``tasks``, ``suites``, ``validation``, ``compute``, ``metrics``.

    ``compute`` uses placement's units (:class:`flasheval.placement.controller.Compute`): examples,
    tokens run (each distinct context once plus every continuation), FLOPs ``2 x n_parameters x
    tokens``. ``metrics`` is the flat view ``flasheval scaling fit --runs`` reads: ``<suite>`` for a
    complete suite, ``<suite>_partial`` for a partial one (never under the full name), and per
    held-out file ``loss_<name>`` (nats per token) and ``bpb_<name>`` (bits per byte), plus ``loss``
    and ``bits_per_byte`` when there is one file.
    """
    metrics: dict[str, float] = {}
    for suite, aggregate in zip(plan.suites, aggregates):
        metrics[f"{suite.name}_partial" if aggregate.partial else suite.name] = aggregate.value
    validation = {}
    for f, loss in evaluation.losses:
        validation[f.name] = {"path": str(f.path), "n_documents": len(f.requests), "n_tokens": loss.n_tokens,
                              "n_bytes": loss.n_bytes, "mean_nll": loss.mean_nll, "bits_per_byte": loss.bits_per_byte}
        metrics[f"loss_{f.name}"], metrics[f"bpb_{f.name}"] = loss.mean_nll, loss.bits_per_byte
    if len(evaluation.losses) == 1:
        metrics["loss"], metrics["bits_per_byte"] = evaluation.losses[0][1].mean_nll, evaluation.losses[0][1].bits_per_byte
    heldout_tokens = sum(loss.n_tokens for _, loss in evaluation.losses)
    flops = None if n_parameters is None else 2.0 * n_parameters * evaluation.n_tokens
    return {
        "tasks": {t.task_name: {"n_examples": t.n_examples, "accuracy": t.accuracy, "standard_error": t.standard_error,
                                "n_categories": t.n_categories, "n_tokens": t.n_tokens} for t in evaluation.tasks},
        "suites": {s.name: _suite_json(s, a, plan.without_data) for s, a in zip(plan.suites, aggregates)},
        "without_data": list(plan.without_data),
        "validation": validation,
        "compute": {"n_examples": evaluation.n_examples, "n_tokens": evaluation.n_tokens, "flops": flops,
                    "n_parameters": n_parameters, "heldout_n_tokens": heldout_tokens,
                    "heldout_flops": None if n_parameters is None else 2.0 * n_parameters * heldout_tokens},
        "metrics": metrics,
    }


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
