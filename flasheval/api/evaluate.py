"""``flasheval.evaluate``: score the first N examples of each task's seeded order, DCLM's and Gadre's way.

The one path behind ``flasheval evaluate``: plan the tasks and suites, select the examples, check
held-out files (all before the model loads), score every request through the results store (data-
parallel under ``accelerate launch``), then the per-example records, each task's accuracy, each
suite's aggregate, the validation loss and the compute spent.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.models import ReplayModel, resolve_model
from flasheval.api.resolve import refuse_live_options
from flasheval.api.progress import ProgressCallback, Reporter, watch_load
from flasheval.engine.device_map import device_map_from
from flasheval.engine.devices import check_device
from flasheval.engine.distributed import make_state, shutdown
from flasheval.evaluation.dtype_comparison import (check_compare_dtype, check_resolved_dtype, comparison_block,
                                               score_in_dtype)
from flasheval.evaluation.evaluate import computed_work, evaluation_requests, evaluation_results, score_through_store
from flasheval.evaluation.example_records import EXAMPLE_FORMATS, ExampleRecord, write_example_records
from flasheval.evaluation.heldout import load_heldout
from flasheval.engine.in_memory import LoadedModel, scoring_mode
from flasheval.engine.loading import n_parameters, open_model
from flasheval.engine.specs import NamedModel, check_model_files
from flasheval.evaluation.selection import TaskPlan, plan_tasks, select_examples, task_requests
from flasheval.evaluation.summary import evaluation_summary, suite_summaries
from flasheval.engine.throughput import throughput
from flasheval.errors import InputError
from flasheval.placement.live_scoring import check_count, check_seed
from flasheval.placement.replay import replay_records
from flasheval.records import prepare_output, write_record

__all__ = ["EvaluationRun", "evaluate", "SUMMARY_FILE"]

logger = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EvaluationRun:
    """What :func:`evaluate` returns."""

    summary: Mapping[str, Any]
    """The record's payload: per task accuracy and standard error, suite aggregates, validation loss, compute."""
    records: tuple[ExampleRecord, ...]
    """Every example's record (few-shot ids, per-choice log-likelihoods, prediction, correct)."""
    examples_path: Path | None = None
    """The per-example records file (``None`` without ``output``)."""
    record_path: Path | None = None
    """The summary record (``None`` without ``output``)."""
    is_main_process: bool = True
    """``False`` on the other processes of a launch (they return the same records, write nothing)."""


def _task_list(tasks: Any) -> list[str]:
    if tasks is None:
        return []
    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [t for t in names if t]
    if not names:
        raise InputError("no task names given", field="--tasks")
    if len(set(names)) != len(names):
        raise InputError(f"task listed twice in {tasks!r}", field="--tasks")
    return names


def evaluate(
    model: Any,
    *,
    tokenizer: Any = None,
    identity: str | None = None,
    tasks: str | Sequence[str] | None = None,
    suites: Sequence[str] = (),
    task_dir: str | Path | None = None,
    heldout: Sequence[str | Path] = (),
    n_examples: int | None = None,
    seed: int = 1234,
    baselines: str = "v2",
    model_id: str | None = None,
    output: str | Path | None = None,
    format: str = "parquet",
    store: str | Path | None = None,
    dtype: str = "auto",
    device: str | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    device_map: Any = None,
    max_memory: Any = None,
    offload_folder: str | Path | None = None,
    progress: ProgressCallback | None = None,
    progress_bar: bool | None = None,
    compare_dtype: str | None = None,
) -> EvaluationRun:
    """Score ``tasks`` and whole ``suites`` (and held-out text) with ``model``.

    Parameters
    ----------
    model
        ``"hf:PATH_OR_ID[@REV]"``, ``"gguf:FILE"``, ``"replay:REFERENCE/MODEL"`` (recorded scores), a
        :class:`~flasheval.engine.in_memory.LoadedModel`, or a loaded ``transformers`` model with ``tokenizer=``.
    tokenizer, identity
        In-memory models: the tokenizer, and what keys the stored results (none: kept for this call).
    tasks, suites
        Task names (a list or ``"t1,t2"``), whole suites (``dclm-core``, ...); with both, ``tasks`` narrows the suites.
    task_dir
        The task files (llm-foundry ``local_data`` layout); not for replay.
    heldout
        Held-out text files (JSON lines with ``text``, or plain text) for validation loss.
    n_examples, seed
        The first N examples of each task's order seeded by ``seed`` (default: all; seed 1234).
    baselines
        DCLM random-baseline version for CORE / EXTENDED centering (``v1``, ``v2``).
    model_id
        The model's id in the record (default: the file or folder name).
    output, format, store
        Where records (``format``: parquet or jsonl) and ``summary.json`` go (``None``: nothing written),
        and the results store (default ``output/store``; without ``output``, a temporary one).
    dtype, device, batch_size, max_length
        How the model runs (``dtype``/``device`` ``auto``: float32 on CPU, bfloat16 on GPU; ``batch_size``
        ``None``: 32 continuations per forward pass); not for in-memory models, which run as they are, nor
        (with ``task_dir`` and ``store``) for ``replay:`` models, which run nothing: given there, refused.
    device_map, max_memory, offload_folder
        A model larger than one GPU: ``device_map`` ``auto``, ``balanced``, ``sequential`` or a mapping of module
        -> device spreads each replica over its GPUs (under ``accelerate launch``, its slice of the node's),
        then CPU memory, then ``offload_folder`` on disk; ``max_memory`` caps devices (``"0=70GiB,cpu=200GiB"``).
        Scores and fingerprint are those of a load on one device (:mod:`flasheval.engine.device_map`).
    progress
        Called with a :class:`~flasheval.api.progress.Progress` when the requests are planned (how many the
        store already answers), when the weights load (only when a request is not in the store) and when done.
    progress_bar
        A bar on stderr that advances per forward batch, on the main process only: ``None`` (default) shows
        it when stderr is a terminal or in a notebook, ``True`` always, ``False`` never.
    compare_dtype
        After scoring, score the task examples again with the weights in this dtype (``float32``, ``bfloat16``,
        ``float16``; under its own fingerprint in the same store, so a rerun is cached) and add a
        ``dtype_comparison`` block: per task, predictions that flip and the largest / median per-choice
        |delta log-likelihood| (:mod:`flasheval.evaluation.dtype_comparison`). ``hf:`` / ``gguf:`` models only, in
        another dtype than the run's.

    A spec's weights load only when a request is missing from the store: a rerun the store answers
    entirely loads nothing (``load_seconds`` 0, no rates). Rates (``examples_per_second``,
    ``tokens_per_second``, ``flops_per_second``) count only what was computed and the time it took.
    """
    report = Reporter(progress)
    resolved = resolve_model(model, tokenizer=tokenizer, identity=identity, check_files=False)
    if n_examples is not None and (isinstance(n_examples, bool) or not isinstance(n_examples, int) or n_examples < 1):
        raise InputError(f"must be >= 1, got {n_examples}", field="--n-examples")
    if batch_size is not None:
        check_count(batch_size, field="--batch-size")
    check_device(device)
    placement = device_map_from(device_map, max_memory=max_memory, offload_folder=offload_folder, device=device)
    check_seed(seed)
    check_compare_dtype(compare_dtype, dtype=dtype, kind="replay" if isinstance(resolved, ReplayModel) else
                        "in-memory" if isinstance(resolved, LoadedModel) else "spec", has_tasks=bool(tasks or suites))
    if format not in EXAMPLE_FORMATS:
        raise InputError(f"unknown format {format!r}", field="--format", allowed=EXAMPLE_FORMATS)
    if baselines not in ("v1", "v2"):
        raise InputError(f"unknown baselines {baselines!r}", field="--baselines", allowed=("v1", "v2"))
    if isinstance(resolved, ReplayModel):
        refuse_live_options("models only (replay: serves recorded scores)", task_dir=task_dir, store=store,
                            dtype=None if dtype == "auto" else dtype, device=device, batch_size=batch_size,
                            max_length=max_length, device_map=placement)
        return _replay(resolved, tasks, suites=suites, heldout=heldout, n_examples=n_examples, seed=seed,
                       model_id=model_id, output=output, format=format)
    if isinstance(resolved, LoadedModel):
        for name, value, default in (("dtype", dtype, "auto"), ("device", device, None),
                                     ("max_length", max_length, None), ("device_map", placement, None)):
            if value != default:
                raise InputError("an in-memory model runs as it is (its dtype, device and length)",
                                 field="--" + name.replace("_", "-"))
    started = time.perf_counter()
    if task_dir is None and (tasks or suites):
        raise InputError("required for hf: and gguf: models", field="--task-dir")
    # Validate the tasks and held-out files (cheap) before loading the model (slow).
    plan = TaskPlan(suites=(), task_names=())
    if tasks or suites or not heldout:
        plan = plan_tasks(list(suites), _task_list(tasks), task_dir or ".")
    for task in plan.without_data:
        logger.warning("%s: no file in %s; suites that include it are reported as partial", task, task_dir)
    selections = select_examples(plan.task_names, task_dir or ".", n_examples=n_examples, seed=seed)
    held = load_heldout(list(heldout))
    if isinstance(resolved, NamedModel):
        check_model_files([resolved], field="--model")
    state = make_state()
    report.is_main = state.is_main_process
    if output is not None:  # before the model loads: an unwritable folder is refused now, not after scoring
        prepare_output(output, record=SUMMARY_FILE, note=state.is_main_process)
    if store is not None:
        prepare_output(store, field="--store")
    with ExitStack() as stack:
        transient = output is None and store is None or (isinstance(resolved, LoadedModel) and resolved.identity is None)
        store_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flasheval-store-"))) if transient \
            else Path(store) if store is not None else Path(output) / "store"  # type: ignore[arg-type]
        load_started = time.perf_counter()
        backend = open_model(resolved, dtype=dtype, device=device or "auto", batch_size=batch_size or 32,
                             max_length=max_length, device_map=placement)  # weights load on the first request not stored
        open_seconds = time.perf_counter() - load_started
        watch_load(report, backend, resolved.model_id)
        check_resolved_dtype(compare_dtype, backend.info.dtype)  # auto made concrete, nothing loaded
        if isinstance(resolved, LoadedModel):
            stack.enter_context(scoring_mode(resolved.model))
        prefix_space = backend.info.prefix_space
        per_task = {s.spec.name: task_requests(s, seed=seed, prefix_space=prefix_space) for s in selections}
        flat = evaluation_requests(per_task, held)

        def planned(n_stored: int) -> None:
            report("start", f"scoring {len(selections)} tasks with {resolved.model_id}: {len(flat)} requests, "
                            f"{n_stored} of them in the store", done=n_stored, total=len(flat))

        # Not shut down after a failure: the others may be stuck in another collective; the launcher ends them.
        results, counts = score_through_store(backend, flat, store_dir, state, progress_bar=progress_bar,
                                              on_planned=planned)
        model_loaded = backend.info.is_loaded  # False: the store answered every request
        other = None
        if compare_dtype is not None:
            backend.release()  # one copy of the weights in memory at a time
            report("start", f"scoring the task examples again with the weights in {compare_dtype}")
            other = score_in_dtype(resolved, compare_dtype, selections=selections, per_task=per_task,
                                   store_dir=store_dir, state=state, progress_bar=progress_bar,
                                   open_options={"device": device or "auto", "batch_size": batch_size or 32,
                                                 "max_length": max_length, "device_map": placement})
    load_seconds = open_seconds + backend.info.load_seconds
    counts = {**counts, "load_seconds": load_seconds, "wall_seconds": time.perf_counter() - started}
    try:
        outcome = evaluation_results(selections, per_task, held, results)
        aggregates = suite_summaries(plan.suites, outcome.tasks, baselines=baselines)
        summary = evaluation_summary(outcome, plan, aggregates, n_parameters=n_parameters(backend))
        summary["compute"].update(load_seconds=counts["load_seconds"], scoring_seconds=counts["scoring_seconds"],
                                  wall_seconds=counts["wall_seconds"])
        compute = summary["compute"]
        speed = _rates(flat, results, counts.pop("computed"), seconds=counts["scoring_seconds"],
                       n_parameters=compute["n_parameters"])
        payload = {
            "model": model if isinstance(model, str) else resolved.text,
            "model_id": model_id or resolved.model_id,
            "fingerprint": backend.fingerprint,
            "seed": seed,
            "n_examples_per_task": n_examples,
            "baselines": baselines,
            **summary,
            "n_examples": outcome.n_examples,
            "n_requests": len(flat),
            **{k: v for k, v in counts.items() if k not in ("load_seconds", "wall_seconds")},
            "n_parameters": compute["n_parameters"],
            "model_loaded": model_loaded,
            "n_tokens": compute["n_tokens"] + (compute["heldout_n_tokens"] or 0),
            **speed,
            "world_size": state.num_processes,
        }
        if other is not None:
            payload["dtype_comparison"] = comparison_block(
                str(backend.info.dtype), {t.task_name: t.accuracy for t in outcome.tasks},
                outcome.records, other)
        if not state.is_main_process or output is None:
            return EvaluationRun(summary=payload, records=tuple(outcome.records),
                                 is_main_process=state.is_main_process)
        examples_path = write_example_records(outcome.records, Path(output), format)
        payload["examples_file"] = examples_path.name
        if other is not None:
            payload["dtype_comparison"]["examples_file"] = write_example_records(
                other.records, Path(output), format, stem=f"examples-{other.dtype}").name
        path = write_record(Path(output) / SUMMARY_FILE, kind="evaluate", payload=payload)
        report("done", f"{outcome.n_examples} examples: {counts['n_requests_computed']} requests computed, "
                       f"{counts['n_requests_from_store']} served from the store")
        return EvaluationRun(summary=payload, records=tuple(outcome.records), examples_path=examples_path,
                             record_path=path)
    finally:
        shutdown(state)


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


def _replay(model: ReplayModel, tasks: Any, *, suites: Sequence[str], heldout: Sequence[Any], n_examples: int | None,
            seed: int, model_id: str | None, output: str | Path | None, format: str) -> EvaluationRun:
    """``replay:REFERENCE/MODEL``: records of recorded scores, no model run."""
    if suites or heldout:
        raise InputError("replay: models serve recorded scores of a reference's datasets; --suite and --heldout "
                         "need a model to run", field="--model")
    if not tasks:
        raise InputError("required for replay: models", field="--tasks")
    if output is not None:
        prepare_output(output, record=SUMMARY_FILE)
    target = model.model_id
    records, means, reference = replay_records(target, _task_list(tasks), n_examples=n_examples, seed=seed)
    counts = {name: sum(r.task_name == name for r in records) for name in means}
    payload: dict[str, Any] = {
        "model": model.text,
        "model_id": model_id or target.partition("/")[2] or target,
        "reference": reference,
        "seed": seed,
        "n_examples_per_task": n_examples,
        "tasks": {name: {"n_examples": counts[name], "accuracy": means[name]} for name in means},
        "n_examples": len(records),
    }
    if output is None:
        return EvaluationRun(summary=payload, records=tuple(records))
    examples_path = write_example_records(records, Path(output), format)
    payload["examples_file"] = examples_path.name
    path = write_record(Path(output) / SUMMARY_FILE, kind="evaluate", payload=payload)
    return EvaluationRun(summary=payload, records=tuple(records), examples_path=examples_path, record_path=path)
