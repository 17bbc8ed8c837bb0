"""Which examples an ``evaluate`` run scores: the task plan and each task's selected examples.

:func:`plan_tasks` turns ``--suite`` / ``--tasks`` into the tasks to score (each once, suite
order) and the suite tasks that have no file here; :func:`select_examples` loads each task and
picks the first N examples of its seeded order; :func:`task_requests` builds their requests.

The selection is :func:`flasheval.stats.sampling.example_order` + :func:`~flasheval.stats.sampling.nested_prefix`,
the same order placement uses, so ``evaluate --n-examples 50`` scores exactly the examples a
placement stage of 50 would. Input I/O happens only in :func:`plan_tasks` (which task files
exist) and :func:`select_examples` (the task files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flasheval.errors import InputError
from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import (
    Example,
    Suite,
    TaskSpec,
    build_task_requests,
    load_examples,
    load_suite,
    resolve_task_file,
    task_spec,
)
from flasheval.types import Request

__all__ = [
    "TaskPlan",
    "plan_tasks",
    "TaskSelection",
    "select_examples",
    "task_requests",
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
