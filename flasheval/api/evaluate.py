"""``flasheval.evaluate``: score the first N examples of each task's seeded order, DCLM's and Gadre's way.

The entry behind ``flasheval evaluate``: every value is checked here, and the tasks, suites,
selections and held-out files are planned (all before the model loads); the workflow
(:func:`flasheval.evaluation.workflow.run_evaluation`) then scores every request through the results
store and builds the records and the summary. ``replay:`` models serve a reference's recorded scores.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flasheval.api.models import ReplayModel, resolve_model
from flasheval.api.options import EngineOptions, engine_options
from flasheval.api.progress import ProgressCallback, Reporter, split_progress, watch_load
from flasheval.api.resolve import REPLAY, refuse_live_options
from flasheval.checks import check_flag, check_model_id, check_n_examples, check_output, check_seed, name_list
from flasheval.engine.coordination.distributed import check_distributed
from flasheval.engine.hf.in_memory import LoadedModel, check_sharded_placement
from flasheval.engine.loading import BackendModel
from flasheval.engine.specs import NamedModel, check_model_files
from flasheval.errors import InputError
from flasheval.evaluation.dtype_comparison import check_compare_dtype
from flasheval.evaluation.example_records import EXAMPLE_FORMATS, write_example_records
from flasheval.evaluation.heldout import load_heldout
from flasheval.evaluation.selection import TaskPlan, plan_tasks, select_examples
from flasheval.evaluation.workflow import (SUMMARY_FILE, EvaluationJob, EvaluationRun, EvaluationSummary, TaskScore,
                                           run_evaluation)
from flasheval.reference.scoring.replay import replay_records
from flasheval.records.run_record import check_replace, prepare_output, write_record

__all__ = ["EvaluationRun", "EvaluationSummary", "TaskScore", "evaluate", "SUMMARY_FILE"]

logger = logging.getLogger(__name__)

BASELINES = ("v1", "v2")


def evaluate(
    model: Any,
    *,
    tokenizer: Any = None,
    identity: str | None = None,
    tasks: str | Sequence[str] | None = None,
    suites: str | Sequence[str] = (),
    task_dir: str | Path | None = None,
    heldout: Sequence[str | Path] = (),
    n_examples: int | None = None,
    seed: int = 1234,
    baselines: str = "v2",
    model_id: str | None = None,
    output: str | Path | None = None,
    format: str = "parquet",
    store: str | Path | None = None,
    engine: EngineOptions | None = None,
    progress: ProgressCallback | bool | None = None,
    compare_dtype: str | None = None,
    force: bool = False,
    distributed: str = "main",
) -> EvaluationRun:
    """Score ``tasks`` and whole ``suites`` (and held-out text) with ``model``.

    Parameters
    ----------
    model
        ``"hf:PATH_OR_ID[@REV]"``, ``"gguf:FILE"``, ``"replay:REFERENCE/MODEL"`` (recorded scores), a
        :class:`~flasheval.engine.hf.in_memory.LoadedModel`, or a loaded ``transformers`` model with ``tokenizer=``.
    tokenizer, identity
        In-memory models: the tokenizer, and what keys the stored results with a digest of the weights (other
        weights under the same identity are scored afresh; none: kept for this call).
    tasks, suites
        Task names and suite names (``dclm-core``, ...), each a list or one string (``"t1,t2"``); with both,
        ``tasks`` narrows the suites.
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
    engine
        How the model runs (:class:`~flasheval.api.options.EngineOptions`): ``dtype``/``device`` (``auto``: float32
        on CPU, bfloat16 on GPU), ``batch_size`` (continuations per forward pass; default: chosen for the device with a token budget), ``max_length``;
        for a model larger than one GPU, ``device_map`` ``auto``, ``balanced``, ``sequential`` or a mapping of
        module -> device spreads each replica over its GPUs (under ``accelerate launch``, its slice of the
        node's), then CPU memory, then ``offload_folder`` on disk; ``max_memory`` caps devices
        (``"0=70GiB,cpu=200GiB"``); scores and fingerprint are those of a load on one device
        (:mod:`flasheval.engine.hf.device_map`). Not for in-memory models (``batch_size`` aside), which run as they
        are, nor (with ``task_dir`` and ``store``) for ``replay:`` models, which run nothing: given there, refused.
    progress
        A callable, called with a :class:`~flasheval.api.progress.Progress` when the requests are planned (how many
        the store already answers), when the weights load (only when a request is not in the store) and when done;
        or ``True`` / ``False``. The bar on stderr that advances per forward batch (main process only) shows when
        stderr is a terminal or in a notebook (``None``, the default, and a callable), always (``True``) or never
        (``False``, which sends no events either; :func:`~flasheval.api.progress.split_progress`).
    compare_dtype
        After scoring, score the task examples again with the weights in this dtype (``float32``, ``bfloat16``,
        ``float16``; under its own fingerprint in the same store, so a rerun is cached) and add a
        ``dtype_comparison`` block: per task, predictions that flip and the largest / median per-choice
        |delta log-likelihood| (:mod:`flasheval.evaluation.dtype_comparison`). ``hf:`` / ``gguf:`` models only, in
        another dtype than the run's.
    distributed
        ``"main"`` (default) or ``"all"``: who scores (section "Distributed" below; docs/engine.md, "Several processes").

    force
        Replace a ``summary.json`` in ``output`` that another model or command wrote (refused without it).

    A spec's weights load only when a request is missing from the store: a rerun the store answers
    entirely loads nothing (``load_seconds`` 0, no rates). Rates (``examples_per_second``,
    ``tokens_per_second``, ``flops_per_second``) count only what was computed and the time it took.

    Distributed
    -----------
    ``distributed="main"``: only the calling process scores, with no collective and ``torch.distributed`` untouched
    (rank 0 of a training job may call alone while the others carry on). ``"all"``: collective; every process of the
    caller's default group makes this same call, the work is split across them and every process gets the same
    result (refused in one line when no group is initialised). Only the main process writes ``output``; the others return the same records with ``is_main_process`` false. A ``replay:`` model runs nothing and no collective in either mode.
    """
    check_distributed(distributed)
    callback, progress_bar = split_progress(progress)
    report = Reporter(callback)
    engine = engine_options(engine)
    resolved = resolve_model(model, tokenizer=tokenizer, identity=identity, check_files=False)
    check_n_examples(n_examples)
    check_seed(seed)
    heldout = _check_run(resolved, output=output, store=store, force=force, distributed=distributed, heldout=heldout)
    if model_id is not None and (not isinstance(model_id, str) or not model_id.strip()):
        raise InputError(f"expected a non-empty name, got {model_id!r}", field="--model-id")
    model_id = None if model_id is None else check_model_id(model_id)
    if output is not None:
        target = resolved.model_id
        owner = model_id or (target.partition("/")[2] or target if isinstance(resolved, ReplayModel) else target)
        check_replace(Path(output) / SUMMARY_FILE, kind="evaluate", model_id=owner, force=force)
    task_names = name_list(tasks, field="--tasks", what="task", allow_empty=tasks is None)
    suite_list = name_list(suites, field="--suite", what="suite", allow_empty=True)
    dtype = engine.dtype or "auto"
    check_compare_dtype(compare_dtype, dtype=dtype, kind="replay" if isinstance(resolved, ReplayModel) else
                        "in-memory" if isinstance(resolved, (LoadedModel, BackendModel)) else "spec",
                        has_tasks=bool(task_names or suite_list))
    if format not in EXAMPLE_FORMATS:
        raise InputError(f"unknown format {format!r}", field="--format", allowed=EXAMPLE_FORMATS)
    if baselines not in BASELINES:
        raise InputError(f"unknown baselines {baselines!r}", field="--baselines", allowed=BASELINES)
    if isinstance(resolved, ReplayModel):
        refuse_live_options("models only (replay: serves recorded scores)", task_dir=task_dir, store=store)
        engine.refuse(REPLAY, *(name for name in engine.given() if not (name == "dtype" and dtype == "auto")))
        return _replay(resolved, task_names, suites=suite_list, heldout=heldout, n_examples=n_examples, seed=seed,
                       model_id=model_id, output=output, format=format)
    if isinstance(resolved, (LoadedModel, BackendModel)):
        fixed = [name for name in engine.given() if not (name == "dtype" and dtype == "auto")
                 and (name != "batch_size" or isinstance(resolved, BackendModel))]
        if fixed:
            raise InputError(f"an {'opened backend' if isinstance(resolved, BackendModel) else 'in-memory model'} "
                             "runs as it is (its dtype, device and length)", field="--" + fixed[0].replace("_", "-"))
    if (task_dir is None or not str(task_dir).strip()) and (task_names or suite_list):  # "": never the working folder
        raise InputError("required for hf: and gguf: models" if task_dir is None else "empty path; name the folder of "
                         "the task files", field="--task-dir")
    # Validate the tasks and held-out files (cheap) before loading the model (slow).
    plan = TaskPlan(suites=(), task_names=())
    if task_names or suite_list or not heldout:
        plan = plan_tasks(list(suite_list), list(task_names), task_dir or ".")
    for task in plan.without_data:
        logger.warning("%s: no file in %s; suites that include it are reported as partial", task, task_dir)
    selections = select_examples(plan.task_names, task_dir or ".", n_examples=n_examples, seed=seed)
    held = load_heldout(list(heldout))
    if isinstance(resolved, NamedModel):
        check_model_files([resolved], field="--model")
    job = EvaluationJob(model=resolved, model_text=model if isinstance(model, str) else resolved.text, plan=plan,
                        selections=tuple(selections), heldout=tuple(held), seed=seed, n_examples=n_examples,
                        baselines=baselines, model_id=model_id, output=None if output is None else Path(output),
                        format=format, store=None if store is None else Path(store), dtype=dtype,
                        device=engine.device or "auto", batch_size=engine.batch_size,
                        max_length=engine.max_length, device_map=engine.placement, compare_dtype=compare_dtype,
                        progress_bar=progress_bar, distributed=distributed)
    return run_evaluation(job, report=report, on_backend=lambda backend: watch_load(report, backend, resolved.model_id))


def _check_run(model: Any, *, output: Any, store: Any, force: Any, distributed: str,
               heldout: Any) -> tuple[str | os.PathLike[str], ...]:
    """:func:`evaluate`'s folders, ``force``, the held-out paths (one path, or a list of them: returned as a tuple)
    and a sharded in-memory model under ``distributed="main"`` (its forward is collective: the main process alone
    would wait forever), checked before anything is read or written."""
    check_output(output)
    check_output(store, field="--store")
    check_flag(force, field="force")
    if isinstance(model, LoadedModel):
        check_sharded_placement(model.model, distributed)
    paths = (heldout,) if isinstance(heldout, (str, os.PathLike)) else heldout
    if not isinstance(paths, (list, tuple)) or not all(isinstance(h, (str, os.PathLike)) and str(h).strip()
                                                       for h in paths):
        raise InputError(f"expected a held-out file's path or a list of them, got {heldout!r}", field="--heldout")
    return tuple(paths)


def _replay(model: ReplayModel, tasks: tuple[str, ...], *, suites: Sequence[str], heldout: Sequence[Any],
            n_examples: int | None, seed: int, model_id: str | None, output: str | Path | None,
            format: str) -> EvaluationRun:
    """``replay:REFERENCE/MODEL``: records of recorded scores, no model run."""
    if suites or heldout:
        raise InputError("replay: models serve recorded scores of a reference's datasets; --suite and --heldout "
                         "need a model to run", field="--model")
    if not tasks:
        raise InputError("required for replay: models", field="--tasks")
    target = model.model_id
    records, means, reference = replay_records(target, list(tasks), n_examples=n_examples, seed=seed)
    if output is not None:  # once the tasks are found in the reference: a refused call makes no folder
        prepare_output(output, record=SUMMARY_FILE)
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
        return EvaluationRun(summary=EvaluationSummary.of(payload), records=tuple(records))
    examples_path = write_example_records(records, Path(output), format)
    payload["examples_file"] = examples_path.name
    path = write_record(Path(output) / SUMMARY_FILE, kind="evaluate", payload=payload)
    return EvaluationRun(summary=EvaluationSummary.of(payload), records=tuple(records), examples_path=examples_path,
                         record_path=path)
