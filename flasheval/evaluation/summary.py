"""What an ``evaluate`` run reports: per-task accuracies, suite aggregates, validation losses, compute.

:class:`Evaluation` holds a run's per-example records, per-task summaries (:class:`TaskSummary`:
accuracy with its standard error, tokens run) and validation losses; :func:`suite_summaries` and
:func:`evaluation_summary` turn it into the record's fields. Pure: nothing here reads or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flasheval.engine.throughput import forward_flops
from flasheval.evaluation.example_records import ExampleRecord
from flasheval.evaluation.heldout import HeldoutFile
from flasheval.evaluation.selection import TaskPlan
from flasheval.tasks import Suite, SuiteAggregate, ValidationLoss, suite_aggregate

__all__ = [
    "TaskSummary",
    "Evaluation",
    "suite_summaries",
    "evaluation_summary",
]


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
    """Tokens the model ran for these examples, counted as placement counts them
    (:func:`flasheval.evaluation.evaluate.example_tokens`)."""


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

    ``compute`` uses placement's units (:class:`flasheval.placement.results.Compute`): examples,
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
    flops = forward_flops(n_parameters, evaluation.n_tokens)
    return {
        "tasks": {t.task_name: {"n_examples": t.n_examples, "accuracy": t.accuracy, "standard_error": t.standard_error,
                                "n_categories": t.n_categories, "n_tokens": t.n_tokens} for t in evaluation.tasks},
        "suites": {s.name: _suite_json(s, a, plan.without_data) for s, a in zip(plan.suites, aggregates)},
        "without_data": list(plan.without_data),
        "validation": validation,
        "compute": {"n_examples": evaluation.n_examples, "n_tokens": evaluation.n_tokens, "flops": flops,
                    "n_parameters": n_parameters, "heldout_n_tokens": heldout_tokens,
                    "heldout_flops": forward_flops(n_parameters, heldout_tokens)},
        "metrics": metrics,
    }
