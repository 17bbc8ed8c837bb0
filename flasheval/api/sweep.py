"""``flasheval.sweep``: place many checkpoints under one budget (racing, resumable).

The one path behind ``flasheval sweep``, for replayed reference models (a backtest) and for live
checkpoints on every kind of built reference: live checkpoints are opened by the reference's
:class:`~flasheval.reference.scoring.live.ScoringSetup` through a
:class:`~flasheval.sweeps.models.CheckpointPool` (at most ``max_loaded`` in memory), and
every score goes through the run folder's results store, so rerunning after a crash resumes.
"""

from __future__ import annotations

import logging
import tempfile
from functools import partial
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flasheval.api.models import ReplayModel, resolve_models
from flasheval.api.progress import ProgressCallback, Reporter, check_progress
from flasheval.api.options import EngineOptions, engine_options
from flasheval.cluster.executor import RayExecutor, resolve_executor
from flasheval.api.resolve import (check_n_parameters, check_plan_arg, check_pool_options, check_reference_arg,
                                   live_options, refuse_live_options, resolve_plan, resolve_reference)
from flasheval.engine.coordination.distributed import check_distributed, is_main, processes
from flasheval.engine.hf.in_memory import LoadedModel, check_sharded_placement, scoring_mode
from flasheval.engine.store.shards import SHARDS_DIR
from flasheval.engine.specs import NamedModel
from flasheval.errors import InputError
from flasheval.checks import check_count, check_flag, check_output, check_seed, name_list
from flasheval.reference.scoring.live import LiveOptions, prepare_scoring
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.placement.results import Budget
from flasheval.sweeps.executor import Executor
from flasheval.sweeps.schedule import SweepResult, check_sweep_budget
from flasheval.sweeps.schedule import sweep as run_sweep
from flasheval.sweeps.models import CheckpointPool
from flasheval.sweeps.ray_executor import RemoteCheckpoints
from flasheval.sweeps.folder import RECORD_FILE, STORE_FORMAT, RunFolder, open_run_folder
from flasheval.sweeps.pool import check_token_budget, hold_out, restrict, spread_models
from flasheval.sweeps.record import build_payload, separate_placements, truth_ranks
from flasheval.records.run_record import check_replace, note_replacing, prepare_output, write_record
from flasheval.runs.folder import check_folder_kind

__all__ = ["SweepRun", "sweep", "spread_checkpoints"]

logger = logging.getLogger(__name__)


def spread_checkpoints(reference: Any, n: int, *, datasets: Sequence[str] | None = None,
                       missing: str = "complete-models") -> tuple[str, ...]:
    """``sweep --backtest N``: ``replay:`` specs of ``n`` reference models spread evenly over the full-data
    ranking (on ``datasets`` only, when given), for :func:`sweep` to place held out of the pool."""
    ref = restrict(resolve_reference(reference, missing=missing), None if datasets is None else list(datasets))
    return tuple(f"replay:{m}" for m in spread_models(ref, n))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SweepRun:
    """What :func:`sweep` returns."""

    result: SweepResult
    """Every checkpoint's placement, their order, the total spent (replay: with each one's full-data rank)."""
    separate_examples: int | None = None
    """Replay sweeps: examples that placing the checkpoints one by one with ``place`` would spend."""
    record: Mapping[str, Any]
    """The record's payload (``sweep.json``)."""
    record_path: Path | None = None
    """Where the record was written (``None`` without ``output``)."""
    n_stored: int = 0
    """Scores already in the run folder's store when the sweep started (a resume)."""


def _budget(budget: Any, n_parameters: float | None) -> Budget:
    if not isinstance(budget, Budget) or not budget.capped:
        raise InputError("a sweep needs a budget",
                         field="--budget-examples", allowed=["--budget-examples", "--budget-tokens", "--budget-flops"])
    if budget.max_flops is not None and n_parameters is None:
        raise InputError("a FLOPs budget needs --n-parameters", field="--budget-flops")
    if budget.max_seconds is not None:
        raise InputError("a time budget caps one placement (place, place_checkpoint, watch); a sweep's budget is "
                         "shared by its checkpoints: give examples, tokens or FLOPs", field="max_seconds")
    return budget


def _check_sweep(models: Any, reference: Any, *, budget: Any, plan: Any, seed: Any, aggregate: Any, missing: Any,
                 datasets: Any, low_rank: Any, n_parameters: Any, engine: Any, max_loaded: Any, output: Any,
                 progress: Any, force: Any, distributed: Any,
                 executor: Any) -> tuple[tuple[Any, ...], Budget, EngineOptions, list[str] | None]:
    """Every argument of :func:`sweep` checked, nothing read or written (scipy's ``_bootstrap_iv`` shape): returns
    the models resolved, the budget, the engine options and the datasets. What needs the reference (a model it
    lacks, the budget against the plan's first look, the aggregate on it) is checked once it is read, before the
    run folder is touched."""
    check_distributed(distributed)
    if isinstance(executor, (str, RayExecutor)):
        remote = resolve_executor(executor)
        if remote is not None and distributed != "main":
            raise InputError("the Ray executor spreads the checkpoints over its actors: call it from one process",
                             field="distributed", allowed=["main"])
    elif executor is not None and not isinstance(executor, Executor):
        raise InputError(f"must have a serve(round_, scorers) method, or be 'in-process', 'ray' or a RayExecutor, got "
                         f"{type(executor).__name__}", field="executor")
    engine_ = engine_options(engine)
    check_n_parameters(n_parameters)
    check_seed(seed)
    check_output(output)
    if output is not None:  # a sweep's folder is no run's or placement's (report would show one record of two)
        check_folder_kind(output, kind="sweep", field="--output")
    if max_loaded is not None:
        check_count(max_loaded, field="--max-loaded")
    budget_ = _budget(budget, n_parameters)
    resolved = resolve_models(models)
    for model in resolved:
        if isinstance(model, LoadedModel):
            check_sharded_placement(model.model, distributed)
    check_reference_arg(reference)
    check_plan_arg(plan)
    check_pool_options(aggregate, missing)
    datasets_ = None if datasets is None else list(name_list(datasets, field="--datasets", what="dataset"))
    if low_rank is not None:
        check_count(low_rank, field="--low-rank")
    check_progress(progress)
    check_flag(force, field="force")
    return resolved, budget_, engine_, datasets_


def sweep(
    models: Sequence[Any],
    reference: Any = "helm_lite",
    *,
    budget: Budget,
    plan: Any = "default",
    seed: int | None = None,
    aggregate: str | None = None,
    missing: str = "complete-models",
    datasets: Sequence[str] | None = None,
    low_rank: int | None = None,
    n_parameters: int | None = None,
    task_dir: str | Path | None = None,
    include_path: str | Path | None = None,
    num_fewshot: int | None = None,
    engine: EngineOptions | None = None,
    max_loaded: int | None = None,
    output: str | Path | None = None,
    progress: ProgressCallback | None = None,
    force: bool = False,
    distributed: str = "main",
    executor: Executor | RayExecutor | str | None = None,
) -> SweepRun:
    """Place every checkpoint of ``models`` on ``reference`` within one total ``budget``.

    Parameters
    ----------
    models
        ``"replay:MODEL_ID"`` specs (reference models, each held out of the pool: a backtest), or live
        models: ``"[NAME=]hf:..."`` / ``"[NAME=]gguf:..."`` specs, :class:`~flasheval.engine.specs.NamedModel` or
        :class:`~flasheval.engine.hf.in_memory.LoadedModel` objects, or opened backends
        (:class:`~flasheval.engine.base.Backend`, scored as they were opened) (not replayed and live in one sweep).
    reference
        Name, folder or :class:`~flasheval.reference.ReferenceLeaderboard` (live: a built reference).
    budget
        Caps on the TOTAL over all checkpoints (at least one cap).
    plan, seed, aggregate, missing
        As for :func:`flasheval.place`.
    datasets
        Datasets the sweep needs (default: all).
    low_rank
        Racing: stop checkpoints whose interval lies at or below this rank (default: the first rank of the
        plan's last tier).
    n_parameters
        Parameters per checkpoint, for FLOPs (needed by a FLOPs budget).
    task_dir, include_path, num_fewshot, engine
        Live checkpoints, as for :func:`flasheval.place` (``engine``: :class:`~flasheval.api.options.EngineOptions`).
    max_loaded
        Live: most checkpoints held in memory at once (default 1); the least recently used is unloaded and
        none of its finished examples is ever recomputed.
    output
        Run folder (settings, results store, record); rerunning with the same arguments resumes. ``None``: a
        temporary folder for this call and no record.
    progress
        Called with a :class:`~flasheval.api.progress.Progress` when the sweep starts and after every round.
    force
        Replace a ``sweep.json`` in ``output`` that is not a sweep record (refused without it).
    distributed
        ``"main"`` (default) or ``"all"``: who scores (section "Distributed" below; docs/engine.md, "Several processes").
    executor
        Serves each planned round of looks (:class:`~flasheval.sweeps.executor.Executor`: ``serve(round_, scorers)``);
        default: in this process, in priority order. ``"ray"`` or a
        :class:`~flasheval.cluster.executor.RayExecutor` (its address and each checkpoint's resources): live
        checkpoints (specs) held by Ray actors, every round's looks scored on them at once, the run folder written
        here (docs/cluster.md). Every executor gives the same result (docs/sweep.md).

    Distributed
    -----------
    ``distributed="main"``: only the calling process scores, with no collective and ``torch.distributed`` untouched
    (rank 0 of a training job may call alone while the others carry on). ``"all"``: collective; every process of the
    caller's default group makes this same call, the work is split across them and every process gets the same
    result (refused in one line when no group is initialised). Live checkpoints only: only the main process writes the run folder; every process returns the same result. A replay sweep runs nothing and no collective in either mode.
    """
    resolved, budget, engine, datasets = _check_sweep(
        models, reference, budget=budget, plan=plan, seed=seed, aggregate=aggregate, missing=missing,
        datasets=datasets, low_rank=low_rank, n_parameters=n_parameters, engine=engine, max_loaded=max_loaded,
        output=output, progress=progress, force=force, distributed=distributed, executor=executor)  # before any I/O
    plan_ = resolve_plan(plan)
    n_params = None if n_parameters is None else int(n_parameters)
    seed = check_seed(seed)  # its Python value (a numpy integer passes the check): the run folder's config is JSON
    report = Reporter(progress)
    if output is not None:
        check_replace(Path(output) / RECORD_FILE, kind="sweep", force=force)
    with ExitStack() as stack:
        folder = Path(output) if output is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="flasheval-sweep-")))
        if isinstance(resolved[0], ReplayModel):
            refuse_live_options("specs only", task_dir=task_dir, include_path=include_path, num_fewshot=num_fewshot)
            engine.refuse("live specs only", "dtype", "device", "batch_size")
            refuse_live_options("specs only", max_loaded=max_loaded)
            if isinstance(executor, (str, RayExecutor)) and resolve_executor(executor) is not None:
                raise InputError("replayed checkpoints compute nothing to spread: the Ray executor serves live "
                                 "checkpoints", field="executor")
            executor = None if isinstance(executor, str) else executor
            engine.refuse("live specs only", "max_length", "device_map", "max_memory", "offload_folder")
            run = _replay(resolved, reference, budget=budget, plan=plan_, seed=seed or 0, aggregate=aggregate,
                          missing=missing, datasets=datasets, low_rank=low_rank, n_params=n_params,
                          n_parameters=n_parameters, folder=folder, report=report, executor=executor)
        else:
            options = live_options(seed=seed, task_dir=task_dir, include_path=include_path, num_fewshot=num_fewshot,
                                   engine=engine)
            for model in resolved:
                options.check_model(model)  # type: ignore[arg-type]
            executor = _remote_checks(executor, resolved, max_loaded)
            run = _live(resolved, reference, budget=budget, plan=plan_, options=options, aggregate=aggregate,
                        missing=missing, datasets=datasets, low_rank=low_rank, n_params=n_params,
                        n_parameters=n_parameters, max_loaded=1 if max_loaded is None else max_loaded, folder=folder,
                        report=report, distributed=distributed, executor=executor)
        if output is None:
            return replace(run, record_path=None)
        return run


def _remote_checks(executor: Any, models: Sequence[Any], max_loaded: int | None) -> Any:
    """The executor of a live sweep: a :class:`RayExecutor` (``"ray"``), checked against the models, or as given."""
    remote = resolve_executor(executor) if isinstance(executor, (str, RayExecutor)) else executor
    if isinstance(remote, RayExecutor):
        if any(not isinstance(m, NamedModel) for m in models):
            raise InputError("the Ray executor opens checkpoints from their specs ([NAME=]hf:... / gguf:...); a model "
                             "held in memory or an opened backend stays in this process", field="executor")
        if max_loaded is not None:
            raise InputError("on Ray, the checkpoints loaded at once are the actors: give RayExecutor(max_models=N)",
                             field="--max-loaded")
    return remote


def _resolving(report: Reporter, message: str, run: RunFolder, folder: Path) -> None:
    report("start", message + f"; results store {folder / SHARDS_DIR}" + (
        f" ({run.n_stored} scores already stored: resuming)" if run.n_stored else ""))


def _replay(models: Sequence[Any], reference: Any, *, budget: Budget, plan: Any, seed: int, aggregate: str | None,
            missing: str, datasets: list[str] | None, low_rank: int | None, n_params: int | None,
            n_parameters: float | None, folder: Path, report: Reporter, executor: Executor | None) -> SweepRun:
    full = restrict(resolve_reference(reference, missing=missing), datasets)
    model_ids = [m.model_id for m in models]
    for model_id in model_ids:
        full.index(model_id)  # unknown model: one line listing the known ones
    pool = full.without(*model_ids) if model_ids else full
    if pool.n_models < 2:
        raise InputError(f"holding out {len(model_ids)} checkpoints leaves fewer than 2 reference models",
                         field="--models")
    check_token_budget(full, budget)
    check_sweep_budget(budget, plan, pool, len(model_ids), aggregate=aggregate)
    config = {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names),
              "models": model_ids, "plan": plan.name, "seed": seed, "aggregate": aggregate, "missing": missing,
              "low_rank": low_rank, "budget": [budget.max_examples, budget.max_tokens, budget.max_flops],
              "n_parameters": n_parameters}
    prepare_output(folder, record=RECORD_FILE, note=False)
    with open_run_folder(folder, config, model_ids) as run:  # held to the end: a second sweep here is refused
        note_replacing(folder / RECORD_FILE)  # once the folder's settings are the sweep's: a refused one says nothing
        scorers = {m: run.scorer(m, ReplayScorer(full, m, n_parameters=n_params)) for m in model_ids}
        _resolving(report, f"sweeping {len(model_ids)} checkpoints on {full.name} ({pool.n_models} reference models, "
                           f"plan {plan.name}, budget {budget.max_examples or budget.max_tokens or budget.max_flops})",
                   run, folder)
        run.defer_sync()  # replayed scores cost nothing to recompute: one fsync per round, not per batch
        reporter = _round_reporter(report)

        def on_round(round_: int, n_active: int, n_examples: int) -> None:
            run.sync()
            reporter(round_, n_active, n_examples)

        result = run_sweep(pool, scorers, plan, budget=budget, seed=seed, aggregate=aggregate,
                           low_rank=_racing(low_rank, pool),
                           n_parameters=n_params, on_round=on_round, executor=executor)
        result = replace(result, truth=truth_ranks(full, pool, model_ids, aggregate))
        separate = separate_placements(full, pool, model_ids, plan, seed=seed, aggregate=aggregate)
        payload = build_payload(result, full, pool, aggregate, separate)
        path = write_record(folder / RECORD_FILE, kind="sweep", payload=payload)
    return SweepRun(result=result, separate_examples=separate, record=payload, record_path=path,
                    n_stored=run.n_stored)


def _racing(low_rank: int | None, pool: Any) -> int | None:
    """``low_rank`` as the sweep uses it: a checkpoint ranks from 1 to ``pool.n_models + 1``, so a rank past those
    turns racing off (docs/sweep.md), said in a note, and is passed as the first rank past the pool."""
    past = pool.n_models + 2
    if low_rank is None or low_rank <= past:
        return low_rank
    logger.warning("note: --low-rank %d is past the %d ranks a checkpoint can take against the %d models of %s: "
                   "racing is off", low_rank, past - 1, pool.n_models, pool.name)
    return past


def _round_reporter(report: Reporter) -> Any:
    def on_round(round_: int, n_active: int, n_examples: int) -> None:
        report("round", f"round {round_}: {n_active} checkpoint{'' if n_active == 1 else 's'} still racing, "
                        f"{n_examples} examples scored",
               done=round_)

    return on_round


def _live(models: Sequence[Any], reference: Any, *, budget: Budget, plan: Any, options: LiveOptions,
          aggregate: str | None, missing: str, datasets: list[str] | None, low_rank: int | None, n_params: int | None,
          n_parameters: float | None, max_loaded: int, folder: Path, report: Reporter,
          distributed: str, executor: Executor | None) -> SweepRun:
    setup = prepare_scoring(resolve_reference(reference, missing=missing), options)
    full = restrict(setup.reference, datasets)
    pool, held = hold_out(full, [m.model_id for m in models])
    check_token_budget(full, budget)
    check_sweep_budget(budget, plan, pool, len(models), aggregate=aggregate)
    config = {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names),
              "models": [f"{m.model_id}={m.text}" for m in models], "plan": plan.name, "seed": setup.seed,
              "dtype": setup.dtype, "aggregate": aggregate, "missing": missing, "low_rank": low_rank,
              "budget": [budget.max_examples, budget.max_tokens, budget.max_flops], "n_parameters": n_parameters}
    if setup.engine != "flasheval":  # run folders of DCLM-format sweeps predate the key: they still resume
        config["engine"] = setup.engine
    remote = executor if isinstance(executor, RayExecutor) else None
    remote_models = None if remote is None else RemoteCheckpoints(  # the cluster checked before the folder is touched
        models, lambda m: partial(setup.open, m, options=options, n_params=n_params), remote)
    state = processes(distributed)
    try:
        prepare_output(folder, record=RECORD_FILE, note=False)
        run = open_run_folder(folder, config, [m.model_id for m in models], state)
    except BaseException:
        if remote_models is not None:
            remote_models.close()
        raise
    if is_main(state):
        note_replacing(folder / RECORD_FILE)  # once the folder's settings are the sweep's: a refused one says nothing
    report.is_main = is_main(state)
    how = ", ".join(filter(None, (setup.describe(), setup.dtype)))
    where = f"at most {max_loaded} in memory" if remote is None else remote.describe()
    _resolving(report, f"sweeping {len(models)} live checkpoints ({how}, {where}"
                       f"{', held out of the pool: ' + ', '.join(held) if held else ''}) on {full.name} ({pool.n_models} "
                       f"reference models, plan {plan.name}, budget "
                       f"{budget.max_examples or budget.max_tokens or budget.max_flops})", run, folder)

    def opener(model: Any, store_dir: Path) -> Any:
        return setup.open(model, store_dir, options=options, state=state, n_params=n_params)

    with run:  # the folder's lock, held until the record is written: a second sweep on this folder is refused
        with ExitStack() as stack:
            for model in models:
                if isinstance(model, LoadedModel):
                    stack.enter_context(scoring_mode(model.model))
            checkpoints: Any = stack.enter_context(
                CheckpointPool(models, folder, opener, max_loaded=max_loaded) if remote_models is None else remote_models)
            scorers = {m: run.scorer(m, s) for m, s in checkpoints.scorers.items()}
            result = run_sweep(pool, scorers, plan, budget=budget, seed=setup.seed, aggregate=aggregate,
                               low_rank=_racing(low_rank, pool), n_parameters=n_params,
                               on_round=_round_reporter(report), executor=executor if remote is None else checkpoints)
            max_loaded = checkpoints.max_loaded
        payload = build_payload(result, full, pool, aggregate)
        payload["live"] = {"engine": setup.engine, "dtype": setup.dtype, **setup.record_settings(),
                           "max_loaded": max_loaded, "world_size": 1 if state is None else state.num_processes,
                           "checkpoints": {m.model_id: checkpoints.checkpoint_json(m.model_id) for m in models}}
        path = None
        if report.is_main:
            path = write_record(folder / RECORD_FILE, kind="sweep", payload=payload)
    return SweepRun(result=result, record=payload, record_path=path, n_stored=run.n_stored)
