"""Score task examples through a backend: requests in, per-example scores out. The one place where
task -> request -> backend -> score meets.

Two callers, one mechanism (:func:`score_requests`, then :func:`flasheval.tasks.score_example`):

* ``flasheval evaluate``: the selected examples of each task (:mod:`flasheval.evaluation.selection`)
  and any held-out text files (:mod:`flasheval.evaluation.heldout`), answered in one request list
  (:func:`evaluation_requests`, through the results store with :func:`score_through_store`) and
  turned back into per-example records (:mod:`flasheval.evaluation.example_records`), per-task
  accuracies with standard errors and validation losses (:func:`evaluation_results`, an
  :class:`~flasheval.evaluation.summary.Evaluation`);
* live scoring for ``reference build``, ``place`` and ``sweep``: :func:`score_examples` builds,
  runs and scores chosen examples of a :class:`~flasheval.tasks.LiveTask` and counts the tokens
  the model ran for each (:class:`ExampleOutcome`).

Everything here is pure given a backend.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.base import Backend, OnResults
from flasheval.evaluation.example_records import ExampleRecord, example_records
from flasheval.evaluation.heldout import HeldoutFile
from flasheval.evaluation.selection import TaskSelection
from flasheval.evaluation.summary import Evaluation, TaskSummary
from flasheval.tasks import (
    LiveTask,
    build_example_requests,
    prompt_digest,
    score_example,
    task_accuracy,
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
    "score_requests",
    "evaluation_requests",
    "evaluation_results",
    "ExampleOutcome",
    "example_tokens",
    "shared_context_tokens",
    "score_outcomes",
    "score_examples",
    "score_through_store",
    "computed_work",
]


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


def shared_context_tokens(tasks: Mapping[str, LiveTask], examples: Mapping[str, Sequence[str]], tokenizer: Any, *,
                          seed: int, prefix_space: bool) -> int:
    """Tokens that a full run of ``examples`` (example ids per task of ``tasks``) counts per example but does not run.

    :func:`example_tokens` counts each example's contexts once; the engine runs each distinct context of a call once,
    so a context that ``k`` examples share (Winograd's and Winogrande's twin sentences) is counted ``k`` times and run
    once. No forward pass: the requests are built (milliseconds) and only the shared contexts are tokenized, by the
    model's ``tokenizer`` as the engine encodes a context (one token at least; the model's length limit is not
    applied).
    """
    counts: Counter[str] = Counter()
    for name, ids in examples.items():
        by_id = build_example_requests(tasks[name], ids, seed=seed, prefix_space=prefix_space)
        for requests in by_id.values():
            counts.update({r.context for r in requests})  # type: ignore[union-attr]
    shared = {context: k - 1 for context, k in counts.items() if k > 1}
    if not shared:
        return 0
    encoded = tokenizer(list(shared)).input_ids
    return sum(max(1, len(ids)) * extra for ids, extra in zip(encoded, shared.values()))


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


def score_through_store(backend: Backend, requests: Sequence[Request], store_dir: Path, state: Any, *,
                        progress_bar: bool | None = None,
                        on_planned: Callable[[int], None] | None = None) -> tuple[list[Result], dict[str, Any]]:
    """Answer ``requests`` through the results store in ``store_dir`` and the data-parallel runner.

    The main process opens (and repairs) the store and writes to it; every process reads it.
    ``state``: the :class:`~flasheval.engine.coordination.distributed.Processes` scoring together (``None``: this process alone).
    ``progress_bar``: the runner's per-batch bar (``None``: when stderr is a terminal). ``on_planned``
    is called with the number of requests the store already answers, before anything is scored.
    Returns the results and the counts the run record reports: requests from the store and computed
    now, ``computed`` (per request, whether this run computed it: each distinct request once), and
    ``scoring_seconds`` (the model's load, when it happened during scoring, not included).
    """
    from flasheval.engine.coordination.distributed import cached_runner

    engine, store = cached_runner(backend, store_dir, state, progress=progress_bar)
    # The main process's store is the one reported (every process plans from it).
    computed, seen = [], set()
    for r in requests:
        computed.append(store.get(r.key) is None and r.key not in seen)
        seen.add(r.key)
    n_stored = sum(store.get(r.key) is not None for r in requests)
    if on_planned is not None:
        on_planned(n_stored)
    started = time.perf_counter()
    loaded_before = backend.info.load_seconds
    try:
        results = score_requests(engine, requests)
    finally:
        store.close()
    load_seconds = backend.info.load_seconds - loaded_before
    counts = {
        "n_requests_from_store": n_stored,
        "n_requests_computed": engine.n_computed,
        "computed": computed,
        "scoring_seconds": time.perf_counter() - started - load_seconds,
    }
    return results, counts


def computed_work(requests: Sequence[Request], results: Sequence[Result], computed: Sequence[bool]) -> tuple[int, int]:
    """``(examples, tokens)`` of the requests a run computed (``computed[i]``), for its rates.

    Tokens are counted per example as :func:`example_tokens` counts them, over its computed requests
    only (each distinct context once); an example counts when any of its requests was computed.
    Held-out documents add their tokens, not examples.

    Examples
    --------
    >>> req = lambda e, i: LoglikelihoodRequest(task_name="t", example_id=e, choice_index=i, context="Q",
    ...                                         continuation=f" {i}")
    >>> res = lambda e, i: LoglikelihoodResult(task_name="t", example_id=e, choice_index=i, logprob_sum=-1.0,
    ...                                        n_tokens=1, is_greedy=False, n_context_tokens=10)
    >>> requests = [req("1", 0), req("1", 1), req("2", 0), req("2", 1)]
    >>> computed_work(requests, [res(r.example_id, r.choice_index) for r in requests], [False, False, False, True])
    (1, 11)
    """
    by_example: dict[tuple[str, str], tuple[list[Request], list[Result]]] = {}
    tokens = 0
    for request, result, done in zip(requests, results, computed, strict=True):
        if not done:
            continue
        if isinstance(request, RollingLoglikelihoodRequest):
            tokens += result.n_tokens  # type: ignore[union-attr]
            continue
        pair = by_example.setdefault((request.task_name, request.example_id), ([], []))
        pair[0].append(request)
        pair[1].append(result)
    tokens += sum(example_tokens(reqs, ress) for reqs, ress in by_example.values())
    return len(by_example), tokens
