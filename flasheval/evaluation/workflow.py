"""The ``evaluate`` workflow: checked inputs -> requests -> results store -> records, summary and compute.

:func:`flasheval.evaluate` checks every value and plans the tasks; :func:`run_evaluation` then
opens the model behind the results store (data-parallel over the caller's processes with
``distributed="all"``, :mod:`flasheval.engine.coordination.distributed`), scores every
request, scores the task examples again in another dtype when asked, and builds the per-example
records, each task's accuracy, each suite's aggregate, the validation loss and the compute spent
(:class:`EvaluationSummary`), writing them on the main process when ``output`` is given.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from flasheval.engine.hf.device_map import DeviceMap
from flasheval.engine.coordination.distributed import is_main, processes
from flasheval.engine.hf.in_memory import LoadedModel, scoring_mode
from flasheval.engine.loading import n_parameters, open_model
from flasheval.engine.specs import NamedModel
from flasheval.engine.throughput import throughput
from flasheval.evaluation.dtype_comparison import check_resolved_dtype, comparison_block, score_in_dtype
from flasheval.evaluation.evaluate import computed_work, evaluation_requests, evaluation_results, score_through_store
from flasheval.evaluation.example_records import ExampleRecord, write_example_records
from flasheval.evaluation.heldout import HeldoutFile
from flasheval.evaluation.selection import TaskPlan, TaskSelection, task_requests
from flasheval.evaluation.summary import evaluation_summary, suite_summaries
from flasheval.records.run_record import prepare_output, write_record

__all__ = ["EvaluationJob", "EvaluationRun", "EvaluationSummary", "TaskScore", "run_evaluation", "SUMMARY_FILE"]

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskScore:
    """One task's result in an :class:`EvaluationSummary`."""

    n_examples: int
    accuracy: float
    """Mean score (accuracy for multiple choice; a replayed reference's recorded metric)."""
    standard_error: float | None = None
    """Standard error of the mean (``None`` for replayed scores)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationSummary:
    """What an ``evaluate`` run found: the typed fields a caller reads, and the whole ``summary.json`` payload."""

    model: str
    """The model as given (a spec, or ``memory:IDENTITY``)."""
    model_id: str
    seed: int
    n_examples_per_task: int | None
    n_examples: int
    tasks: Mapping[str, TaskScore]
    replayed_from: str | None = None
    """Replay: the reference whose recorded scores were served; ``None`` when the model ran."""
    record: Mapping[str, Any]
    """The record's payload (``summary.json``): suites, validation loss, compute, rates, the dtype comparison."""

    @property
    def replayed(self) -> bool:
        return self.replayed_from is not None

    def to_json(self) -> dict[str, Any]:
        return dict(self.record)

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> EvaluationSummary:
        """The summary of a record payload (live or replayed)."""
        tasks = {name: TaskScore(n_examples=t["n_examples"], accuracy=t["accuracy"],
                                 standard_error=t.get("standard_error")) for name, t in payload["tasks"].items()}
        return cls(model=payload["model"], model_id=payload["model_id"], seed=payload["seed"],
                   n_examples_per_task=payload["n_examples_per_task"], n_examples=payload["n_examples"], tasks=tasks,
                   replayed_from=payload.get("reference"), record=payload)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EvaluationRun:
    """What :func:`flasheval.evaluate` returns."""

    summary: EvaluationSummary
    """Per task accuracy and standard error; ``summary.record``: suite aggregates, validation loss, compute."""
    records: tuple[ExampleRecord, ...]
    """Every example's record (few-shot ids, per-choice log-likelihoods, prediction, correct)."""
    examples_path: Path | None = None
    """The per-example records file (``None`` without ``output``)."""
    record_path: Path | None = None
    """The summary record (``None`` without ``output``)."""
    is_main_process: bool = True
    """``False`` on the other processes of a launch (they return the same records, write nothing)."""


class Report(Protocol):
    """Where progress goes (:class:`flasheval.api.progress.Reporter`): events, on the main process only."""

    is_main: bool

    def __call__(self, step: str, message: str, *, done: int | None = None, total: int | None = None) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationJob:
    """A checked ``evaluate`` call of a model that runs (every value already validated by the API)."""

    model: NamedModel | LoadedModel
    model_text: str
    """The model as the record names it."""
    plan: TaskPlan
    selections: tuple[TaskSelection, ...]
    heldout: tuple[HeldoutFile, ...]
    seed: int
    n_examples: int | None
    baselines: str
    model_id: str | None
    output: Path | None
    format: str
    store: Path | None
    dtype: str
    device: str
    batch_size: int | None
    max_length: int | None
    device_map: DeviceMap | None
    compare_dtype: str | None
    progress_bar: bool | None
    distributed: str = "main"
    """``main`` (this process alone, no collective) or ``all`` (every process of the default group calls)."""


def run_evaluation(job: EvaluationJob, *, report: Report, on_backend: Callable[[Any], None]) -> EvaluationRun:
    """Score ``job`` through its results store and build its records and summary (written with ``output``).

    ``on_backend`` is called with the backend once it is open (before any weights load).
    """
    started = time.perf_counter()
    state = processes(job.distributed)
    main = report.is_main = is_main(state)
    if job.output is not None:  # before the model loads: an unwritable folder is refused now, not after scoring
        prepare_output(job.output, record=SUMMARY_FILE, note=main)
    if job.store is not None:
        prepare_output(job.store, field="--store")
    scored = _score(job, state, report, on_backend)
    payload, records = _summarize(job, scored, state, wall_seconds=time.perf_counter() - started)
    if not main or job.output is None:
        return EvaluationRun(summary=EvaluationSummary.of(payload), records=records, is_main_process=main)
    examples_path = write_example_records(records, job.output, job.format)
    payload["examples_file"] = examples_path.name
    if scored.other is not None:
        payload["dtype_comparison"]["examples_file"] = write_example_records(
            scored.other.records, job.output, job.format, stem=f"examples-{scored.other.dtype}").name
    path = write_record(job.output / SUMMARY_FILE, kind="evaluate", payload=payload)
    report("done", f"{len(records)} examples: {payload['n_requests_computed']} requests computed, "
                   f"{payload['n_requests_from_store']} served from the store")
    return EvaluationRun(summary=EvaluationSummary.of(payload), records=records, examples_path=examples_path,
                         record_path=path)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Scored:
    backend: Any
    per_task: Mapping[str, Any]
    flat: Sequence[Any]
    results: Sequence[Any]
    counts: Mapping[str, Any]
    model_loaded: bool
    load_seconds: float
    other: Any


def _score(job: EvaluationJob, state: Any, report: Report, on_backend: Callable[[Any], None]) -> _Scored:
    """Open the model behind the store, score every request (and again in ``compare_dtype``), close the store."""
    model = job.model
    with ExitStack() as stack:
        transient = job.output is None and job.store is None or (isinstance(model, LoadedModel)
                                                                 and model.identity is None)
        store_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flasheval-store-"))) if transient \
            else job.store if job.store is not None else job.output / "store"  # type: ignore[operator]
        load_started = time.perf_counter()
        # (a spec's weights load on the first request not stored)
        backend = open_model(model, dtype=job.dtype, device=job.device, batch_size=job.batch_size,
                             max_length=job.max_length, device_map=job.device_map,
                             record_in=store_dir if is_main(state) else None, state=state)
        open_seconds = time.perf_counter() - load_started
        on_backend(backend)
        check_resolved_dtype(job.compare_dtype, backend.info.dtype)  # auto made concrete
        if isinstance(model, LoadedModel):
            stack.enter_context(scoring_mode(model.model))
        prefix_space = backend.info.prefix_space
        per_task = {s.spec.name: task_requests(s, seed=job.seed, prefix_space=prefix_space) for s in job.selections}
        flat = evaluation_requests(per_task, list(job.heldout))

        def planned(n_stored: int) -> None:
            report("start", f"scoring {len(job.selections)} tasks with {model.model_id}: {len(flat)} requests, "
                            f"{n_stored} of them in the store", done=n_stored, total=len(flat))

        results, counts = score_through_store(backend, flat, store_dir, state, progress_bar=job.progress_bar,
                                              on_planned=planned)
        model_loaded = backend.info.is_loaded  # False: the store answered every request
        other = None
        if job.compare_dtype is not None:
            backend.release()  # one copy of the weights in memory at a time
            report("start", f"scoring the task examples again with the weights in {job.compare_dtype}")
            other = score_in_dtype(model, job.compare_dtype, selections=job.selections, per_task=per_task,
                                   store_dir=store_dir, state=state, progress_bar=job.progress_bar,
                                   open_options={"device": job.device, "batch_size": job.batch_size,
                                                 "max_length": job.max_length, "device_map": job.device_map,
                                                 "state": state})
    return _Scored(backend=backend, per_task=per_task, flat=flat, results=results, counts=counts,
                   model_loaded=model_loaded, other=other,
                   load_seconds=open_seconds + backend.info.load_seconds)


def _summarize(job: EvaluationJob, scored: _Scored, state: Any, *,
               wall_seconds: float) -> tuple[dict[str, Any], tuple[ExampleRecord, ...]]:
    """The record's payload and every example's record."""
    backend, counts = scored.backend, dict(scored.counts)
    outcome = evaluation_results(job.selections, scored.per_task, list(job.heldout), scored.results)
    aggregates = suite_summaries(job.plan.suites, outcome.tasks, baselines=job.baselines)
    summary = evaluation_summary(outcome, job.plan, aggregates, n_parameters=n_parameters(backend))
    summary["compute"].update(load_seconds=scored.load_seconds, scoring_seconds=counts["scoring_seconds"],
                              wall_seconds=wall_seconds)
    compute = summary["compute"]
    speed = _rates(scored.flat, scored.results, counts.pop("computed"), seconds=counts["scoring_seconds"],
                   n_parameters=compute["n_parameters"])
    payload = {
        "model": job.model_text,
        "model_id": job.model_id or job.model.model_id,
        "fingerprint": backend.fingerprint,
        "seed": job.seed,
        "n_examples_per_task": job.n_examples,
        "baselines": job.baselines,
        **summary,
        "n_examples": outcome.n_examples,
        "n_requests": len(scored.flat),
        **counts,
        "n_parameters": compute["n_parameters"],
        "model_loaded": scored.model_loaded,
        "n_tokens": compute["n_tokens"] + (compute["heldout_n_tokens"] or 0),
        **speed,
        "world_size": 1 if state is None else state.num_processes,
    }
    if scored.other is not None:
        payload["dtype_comparison"] = comparison_block(
            str(backend.info.dtype), {t.task_name: t.accuracy for t in outcome.tasks},
            outcome.records, scored.other)
    return payload, tuple(outcome.records)


def _rates(requests: Sequence[Any], results: Sequence[Any], computed: Sequence[bool], *, seconds: float,
           n_parameters: int | None) -> dict[str, Any]:
    """The hardware's rates over what this run computed (held-out text included) in ``seconds``.

    Requests served by the store cost nothing and count nowhere: with nothing computed every rate is ``None``.
    """
    n_examples, n_tokens = computed_work(requests, results, computed)
    speed = throughput(n_examples=n_examples, n_tokens=n_tokens, seconds=seconds if any(computed) else 0.0,
                       n_parameters=n_parameters)
    del speed["n_tokens"]
    return {"n_examples_computed": n_examples, "n_tokens_computed": n_tokens, **speed}
