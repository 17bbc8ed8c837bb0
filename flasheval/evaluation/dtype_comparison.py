"""``evaluate(..., compare_dtype=...)``: the same examples scored again with the weights in another dtype.

A team that runs its reference in bf16 (or fp16) wants to know what that costs against float32: how
many per-example predictions flip, and how far the per-choice log-likelihoods move. The parts:

* :func:`check_compare_dtype` / :func:`check_resolved_dtype`: refuse, in one line and before anything
  is scored, a comparison that does not apply (an unknown dtype; a replay or in-memory model; the
  run's own dtype);
* :func:`score_in_dtype` scores the run's task requests with the model loaded in the comparison
  dtype, through the same results store: the dtype is part of the model fingerprint
  (:func:`~flasheval.engine.hf.fingerprint.model_fingerprint`), so the comparison's results live under
  their own fingerprint and a rerun serves them from the store;
* :func:`compare_records` (pure) sets the two runs' per-example records side by side, per task, and
  :func:`comparison_block` makes the summary's ``dtype_comparison`` block of it.

Direction: ``n_correct_to_wrong`` counts examples answered correctly in the comparison dtype (the
reference numerics, e.g. float32) and wrongly in the run's dtype, ``n_wrong_to_correct`` the reverse.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import DTYPES, check_dtype
from flasheval.evaluation.example_records import ExampleRecord
from flasheval.errors import InputError

__all__ = ["COMPARE_DTYPES", "check_compare_dtype", "check_resolved_dtype", "DtypeRun", "score_in_dtype",
           "compare_records", "comparison_block"]

COMPARE_DTYPES = DTYPES  # the one list (flasheval.checks)
"""Dtypes a run can be compared against (``auto`` is not one: the comparison names its numerics)."""

_FIELD = "--compare-dtype"


def check_compare_dtype(compare_dtype: str | None, *, dtype: str, kind: str, has_tasks: bool = True) -> None:
    """Refuse a comparison that cannot apply, before anything loads.

    Parameters
    ----------
    compare_dtype
        The comparison dtype (``None``: no comparison, nothing checked).
    dtype
        The run's ``dtype`` as given (``auto`` is resolved later, see :func:`check_resolved_dtype`).
    kind
        ``"spec"`` (``hf:`` / ``gguf:``), ``"replay"`` or ``"in-memory"``.
    has_tasks
        Whether the run scores task examples (held-out text alone is not compared).

    Examples
    --------
    >>> check_compare_dtype("float32", dtype="bfloat16", kind="spec")
    >>> check_compare_dtype("float32", dtype="float32", kind="spec")
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--compare-dtype': the run is already in float32: compare with another dtype
    """
    if compare_dtype is None:
        return
    check_dtype(compare_dtype, field=_FIELD)
    if kind == "replay":
        raise InputError("replay: models serve recorded scores; there are no weights to load in another dtype",
                         field=_FIELD)
    if kind == "in-memory":
        raise InputError("an in-memory model runs as it is; compare dtypes with an hf: or gguf: spec", field=_FIELD)
    if not has_tasks:
        raise InputError("compares the predictions of task examples: give --tasks or --suite", field=_FIELD)
    check_resolved_dtype(compare_dtype, dtype)


def check_resolved_dtype(compare_dtype: str | None, dtype: str) -> None:
    """Refuse comparing a run with its own dtype (``dtype``: the run's, ``auto`` once resolved)."""
    if compare_dtype is not None and compare_dtype == dtype:
        raise InputError(f"the run is already in {dtype}: compare with another dtype", field=_FIELD)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DtypeRun:
    """What :func:`score_in_dtype` returns: the comparison run's records and what it cost."""

    dtype: str
    fingerprint: str
    """The comparison model's fingerprint (its results in the store are keyed by it)."""
    records: tuple[ExampleRecord, ...]
    accuracy: Mapping[str, float]
    """Per task: accuracy in the comparison dtype (as the run's summary computes it)."""
    n_requests_computed: int
    n_requests_from_store: int
    scoring_seconds: float
    load_seconds: float


def score_in_dtype(model: Any, compare_dtype: str, *, selections: Sequence[Any],
                   per_task: Mapping[str, Mapping[str, Sequence[Any]]], store_dir: Path, state: Any,
                   open_options: Mapping[str, Any], progress_bar: bool | None = None) -> DtypeRun:
    """Score the tasks' requests again with ``model`` (a spec's) loaded in ``compare_dtype``.

    ``open_options`` are the run's :func:`~flasheval.engine.loading.open_model` options other than the
    dtype (device, batch size, maximum length, device map), so only the dtype differs. The weights
    load only when a request is not already in the store under the comparison's fingerprint.
    """
    from flasheval.evaluation.evaluate import evaluation_requests, evaluation_results, score_through_store
    from flasheval.engine.loading import open_model

    backend = open_model(model, dtype=compare_dtype, **open_options)
    requests = evaluation_requests(per_task)
    results, counts = score_through_store(backend, requests, store_dir, state, progress_bar=progress_bar)
    outcome = evaluation_results(selections, per_task, (), results)
    run = DtypeRun(dtype=compare_dtype, fingerprint=backend.fingerprint, records=outcome.records,
                   accuracy={t.task_name: t.accuracy for t in outcome.tasks},
                   n_requests_computed=int(counts["n_requests_computed"]),
                   n_requests_from_store=int(counts["n_requests_from_store"]),
                   scoring_seconds=float(counts["scoring_seconds"]),
                   load_seconds=backend.info.load_seconds)
    backend.release()
    return run


def compare_records(records: Sequence[ExampleRecord], reference: Sequence[ExampleRecord]) -> dict[str, dict[str, Any]]:
    """Per task: prediction flips and per-choice log-likelihood differences between two runs of the same examples.

    Parameters
    ----------
    records
        The run's per-example records (its dtype).
    reference
        The same examples' records in the comparison dtype (any order).

    Returns
    -------
    dict
        ``{task: {n_examples, n_prediction_changed, n_correct_to_wrong, n_wrong_to_correct, n_choices,
        max_abs_delta_logprob, median_abs_delta_logprob}}``; the two
        log-likelihood figures are ``None`` for a task without choice log-likelihoods (generation).

    Raises
    ------
    ValueError
        The two runs do not hold the same examples.

    Examples
    --------
    >>> row = lambda i, lp, ok: ExampleRecord(task_name="t", example_id=i, category=None, fewshot_ids=(),
    ...     choice_logprob_sum=lp, choice_n_tokens=(1, 1), prediction=str(int(lp[1] > lp[0])), correct=ok,
    ...     score=float(ok))
    >>> out = compare_records([row("a", (-1.0, -2.0), True), row("b", (-3.0, -2.9), False)],
    ...                       [row("a", (-1.0, -2.1), True), row("b", (-3.0, -3.1), True)])["t"]
    >>> out["n_correct_to_wrong"], out["n_wrong_to_correct"], round(out["max_abs_delta_logprob"], 6)
    (1, 0, 0.2)
    """
    by_key = {(r.task_name, r.example_id): r for r in reference}
    if len(by_key) != len(reference) or set(by_key) != {(r.task_name, r.example_id) for r in records} \
            or len(records) != len(reference):
        raise ValueError("the two runs do not hold the same examples")
    tasks: dict[str, list[tuple[ExampleRecord, ExampleRecord]]] = {}
    for record in records:
        tasks.setdefault(record.task_name, []).append((record, by_key[(record.task_name, record.example_id)]))
    return {name: _task_comparison(pairs) for name, pairs in tasks.items()}


def _task_comparison(pairs: Sequence[tuple[ExampleRecord, ExampleRecord]]) -> dict[str, Any]:
    deltas = [abs(a - b) for ours, theirs in pairs
              for a, b in zip(ours.choice_logprob_sum, theirs.choice_logprob_sum, strict=True)]
    return {
        "n_examples": len(pairs),
        "n_prediction_changed": sum(ours.prediction != theirs.prediction for ours, theirs in pairs),
        "n_correct_to_wrong": sum(theirs.correct and not ours.correct for ours, theirs in pairs),
        "n_wrong_to_correct": sum(ours.correct and not theirs.correct for ours, theirs in pairs),
        "n_choices": len(deltas),
        "max_abs_delta_logprob": max(deltas) if deltas else None,
        "median_abs_delta_logprob": statistics.median(deltas) if deltas else None,
    }


def comparison_block(run_dtype: str, accuracy: Mapping[str, float], records: Sequence[ExampleRecord],
                     other: DtypeRun) -> dict[str, Any]:
    """The ``dtype_comparison`` block of an ``evaluate`` summary (``accuracy``: the run's, per task)."""
    tasks = compare_records(records, other.records)
    for name, figures in tasks.items():
        figures.update(accuracy=accuracy[name], compare_accuracy=other.accuracy[name])
    return {
        "dtype": run_dtype,
        "compare_dtype": other.dtype,
        "fingerprint": other.fingerprint,
        "direction": f"correct_to_wrong: correct in {other.dtype}, wrong in {run_dtype}",
        "n_requests_computed": other.n_requests_computed,
        "n_requests_from_store": other.n_requests_from_store,
        "scoring_seconds": other.scoring_seconds,
        "load_seconds": other.load_seconds,
        "tasks": tasks,
    }
