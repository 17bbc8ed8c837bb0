"""``flasheval.place``: where one model stands on a reference, for a fraction of a full run.

The one live path behind ``flasheval place``: load and check the reference, hold the model out of
the pool, open the model behind its results store the way the reference's models were scored
(:func:`flasheval.reference.scoring.live.prepare_scoring`: DCLM-format task files or lm-eval tasks),
run the placement loop (:func:`flasheval.placement.controller.place`) and write the record.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flasheval.api.models import ReplayModel
from flasheval.api.resolve import check_place
from flasheval.api.progress import ProgressCallback, Reporter, load_windows, watch_load
from flasheval.api.options import EngineOptions
from flasheval.api.resolve import check_budget, resolve_plan, resolve_reference
from flasheval.engine.base import TokenBackend
from flasheval.engine.coordination.distributed import is_main, processes
from flasheval.engine.hf.in_memory import LoadedModel, scoring_mode
from flasheval.analysis.backtest import full_data_ranks
from flasheval.placement.controller import place as run_placement
from flasheval.placement.controller import plan_looks
from flasheval.reference.scoring.live import prepare_scoring
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.reference.scoring.scorers import LiveScorer
from flasheval.placement.import_clock import current_clock, timing_imports
from flasheval.placement.results import Budget, Placed, PlacementResult, StageRecord, Timing
from flasheval.placement.tiers import TierPlan
from flasheval.placement.looks import first_look
from flasheval.records.run_record import prepare_output, write_record
from flasheval.runs.folder import check_folder_kind
from flasheval.stats.sampling import example_order
from flasheval.reference import ReferenceLeaderboard
from flasheval.reference.intervals import interval_neighbours

__all__ = ["PlaceRun", "LivePlacement", "place", "check_on_reference", "RECORD_FILE"]

RECORD_FILE = "place.json"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LivePlacement:
    """What was run to place a live model (the record's ``live`` entry)."""

    engine: str
    """``flasheval`` (DCLM-format task files) or ``lm-eval`` (lm-eval tasks), as the reference records."""
    spec: str
    """The model as given (``hf:...``, ``gguf:...``, ``memory:IDENTITY``)."""
    fingerprint: str
    """What keys the model's stored results."""
    dtype: str
    settings: Mapping[str, Any]
    """The engine's settings (task folder; or lm-eval include path and version)."""
    load_seconds: float
    model_loaded: bool
    """``False`` when the store answered every request (the weights never loaded)."""
    seconds: float
    """From opening the model to the last stage."""
    requests_computed: int
    asked: tuple[Mapping[str, Any], ...]
    """Every stage's request: task name and example ids, in order."""
    examples: tuple[Mapping[str, Any], ...]
    """Every example scored: task, id, score, tokens (and few-shot ids and prompt where the engine has them)."""

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "spec": self.spec, "fingerprint": self.fingerprint, "dtype": self.dtype,
                **self.settings, "load_seconds": self.load_seconds, "model_loaded": self.model_loaded,
                "seconds": self.seconds, "requests_computed": self.requests_computed, "asked": list(self.asked),
                "examples": list(self.examples)}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PlaceRun(Placed):
    """What :func:`place` returns: the placement, and what was run to get it."""

    placement: PlacementResult
    """Rank, interval, tier, every stage and the compute spent (:class:`~flasheval.placement.results.PlacementResult`)."""
    full_data_rank: int | None = None
    """Replayed models only: the rank with every example scored (the answer the placement estimates)."""
    live: LivePlacement | None = None
    """Live models only: spec, fingerprint, dtype, engine settings, seconds, requests computed, every
    example asked and scored (the record's ``live`` entry)."""
    timing: Timing | None = None
    """Live models only: wall, load, forward-pass and outside-the-model seconds, and a full run's time at
    the throughput measured (the record's ``timing`` entry)."""
    record_path: Path | None = None
    """Where the record was written (``None`` without ``output``)."""
    neighbours: tuple[str, ...] = ()
    """The reference models the placed model cannot be told from: those at positions ``lo .. hi - 1`` of the
    pool's full-data ranking, its order against each left open by its interval (none: its rank is exact)."""

    def to_json(self) -> dict[str, Any]:
        """The record's payload (``place.json``)."""
        payload = self.placement.to_json()
        if self.placement.rank is not None:
            payload["neighbours"] = list(self.neighbours)
        if self.full_data_rank is not None:
            payload["full_data_rank"] = self.full_data_rank
        if self.live is not None:
            payload["live"] = self.live.to_json()
        if self.timing is not None:
            payload["timing"] = self.timing.to_json()
        return payload


def _stage_reporter(report: Reporter) -> Any:
    """The controller's ``on_stage``: a ``stage`` event as each stage finishes (its scoring and its look)."""
    last = time.perf_counter()

    def on_stage(stage: StageRecord, n_stages: int) -> None:
        nonlocal last
        now = time.perf_counter()
        report("stage", stage.log_line(n_stages), done=stage.stage + 1, total=n_stages, seconds=now - last,
               detail=stage)
        last = now

    return on_stage


@timing_imports  # the process's one-time imports during the call: Timing.import_seconds, not wall_seconds
def place(
    model: Any,
    reference: str | Path | ReferenceLeaderboard = "helm_lite",
    *,
    tokenizer: Any = None,
    identity: str | None = None,
    plan: str | Path | TierPlan = "default",
    budget: Budget | None = None,
    seed: int | None = None,
    aggregate: str | None = None,
    missing: str = "complete-models",
    n_parameters: int | None = None,
    task_dir: str | Path | None = None,
    include_path: str | Path | None = None,
    num_fewshot: int | None = None,
    engine: EngineOptions | None = None,
    output: str | Path | None = None,
    store: str | Path | None = None,
    progress: ProgressCallback | None = None,
    force: bool = False,
    distributed: str = "main",
) -> PlaceRun:
    """Place ``model`` on ``reference`` by escalating nested subsamples; stop when its tier's resolution is met.

    Parameters
    ----------
    model
        ``"replay:MODEL_ID"`` (a reference model, held out of the pool), ``"[NAME=]hf:PATH_OR_ID"`` /
        ``"[NAME=]gguf:FILE"``, a :class:`~flasheval.engine.specs.NamedModel` or
        :class:`~flasheval.engine.hf.in_memory.LoadedModel`, or a loaded ``transformers`` model with
        ``tokenizer=`` (scored in place, in eval mode under ``torch.inference_mode()``, and handed back in
        the mode it came in; a DDP or ``torch.compile`` wrapper is looked through, an FSDP model runs through
        its wrapper).
    reference
        A reference name, folder, or :class:`~flasheval.reference.ReferenceLeaderboard`. Live models need a
        reference built by scoring models (``build_reference`` or an lm-eval import); a model that is in
        the reference is held out of the pool.
    tokenizer, identity
        In-memory models only: the tokenizer, and what keys the model's stored results (e.g. a run name
        and step), together with a digest of the weights: other weights under the same identity are scored
        afresh (one warning), never served the earlier ones' results. Without an identity the results are
        kept for this call only.
    plan
        Tier plan name, file or :class:`~flasheval.placement.tiers.TierPlan` (:func:`flasheval.load_plan`).
    budget
        Caps on examples, tokens or FLOPs (:class:`~flasheval.placement.results.Budget`).
    seed
        Replay: the example-order and bootstrap seed (default 0). Live: the reference's build seed on
        DCLM-format references (another is refused), any seed on lm-eval references (default 0).
    aggregate, missing
        Aggregate over datasets (default: the reference's) and the missing-data policy.
    n_parameters
        Parameters, for the FLOPs estimate (default: counted from the loaded model; replay: none).
    task_dir
        DCLM-format references: the task files (default: the folder the reference was built from).
    include_path, num_fewshot
        lm-eval references: custom task YAMLs (default: the reference's), and the few-shot count (must be
        the reference's).
    engine
        Live models: how they run (:class:`~flasheval.api.options.EngineOptions`): ``dtype`` (default and only
        value accepted: the reference's), ``device`` (``auto``; not for in-memory models), ``batch_size``
        (default 32), and ``device_map`` / ``max_memory`` / ``offload_folder`` for specs larger than one GPU
        (each replica of a launch on its own slice of the node's GPUs; the fingerprint and the scores do not
        change). Refused for replayed models.
    output
        Folder for the results store (``store/``) and the record (``place.json``). ``None``: a temporary
        store for this call and no record. In-memory models without an identity always use a temporary store.
    store
        Live models: the results store's folder (default ``OUTPUT/store``; without ``output``, a temporary
        one). Several placements may share one store (a run folder's checkpoints do,
        :func:`flasheval.place_checkpoint`): results are keyed by each model's fingerprint.
    progress
        Called with a :class:`~flasheval.api.progress.Progress` when the model is ready, when its weights load
        (live: only when a request is not in the store), and as every stage finishes.
    force
        Replace a record in ``output`` that another model or command wrote, or this model with other settings
        (reference, plan, seed, aggregate, missing-data policy, budget, parameters, dtype, few-shot count; refused
        without it; a record of this same model and settings is replaced with a note).
    distributed
        ``"main"`` (default) or ``"all"``: who scores (section "Distributed" below; docs/engine.md, "Several processes").

    Returns
    -------
    PlaceRun

    Distributed
    -----------
    ``distributed="main"``: only the calling process scores, with no collective and ``torch.distributed`` untouched
    (rank 0 of a training job may call alone while the others carry on). ``"all"``: collective; every process of the
    caller's default group makes this same call, the work is split across them and every process gets the same
    result (refused in one line when no group is initialised). Only the main process writes ``output``; every process returns the same placement. A ``replay:`` model runs nothing and no collective in either mode.
    """
    wall_start = time.perf_counter()
    args = check_place(model, reference=reference, tokenizer=tokenizer, identity=identity, plan=plan, budget=budget,
                       seed=seed, aggregate=aggregate, missing=missing, n_parameters=n_parameters, task_dir=task_dir,
                       include_path=include_path, num_fewshot=num_fewshot, engine=engine, output=output, store=store,
                       progress=progress, force=force, distributed=distributed)  # every argument, before any I/O
    report = Reporter(progress)
    budget, resolved = args.budget, args.model
    if isinstance(resolved, ReplayModel):
        return _place_replay(resolved, reference, plan=plan, budget=budget, seed=seed, aggregate=aggregate,
                             missing=missing, n_parameters=n_parameters, output=output, report=report, force=force)
    options = args.live
    plan_ = resolve_plan(plan)
    setup = prepare_scoring(resolve_reference(reference, missing=missing), options)
    state = processes(distributed)
    report.is_main = is_main(state)
    if resolved.model_id in setup.reference.model_ids:
        report("start", f"{resolved.model_id} is in reference {setup.reference.name}: held out of the pool")
    pool = check_on_reference(resolved, setup.reference, plan_, budget=budget, aggregate=aggregate, seed=setup.seed,
                              n_parameters=n_parameters)
    settings = place_settings(pool.name, plan_.name, setup.seed, aggregate, missing, budget, n_parameters,
                              dtype=setup.dtype, num_fewshot=num_fewshot)
    _prepare(output, resolved.model_id, settings, force=force, note=report.is_main)  # before the model loads
    start = time.perf_counter()
    with ExitStack() as stack:
        store_dir = _store_dir(stack, resolved, output=output, store=store)
        open_start = time.perf_counter()
        opened = setup.open(resolved, store_dir, options=options, state=state, n_params=n_parameters)
        loads = [(open_start, time.perf_counter())]
        stack.callback(opened.close)
        watch_load(report, opened.backend, resolved.model_id)  # the weights load on the first request not stored
        loads += load_windows(opened.backend)  # filled as the weights load (after watch_load: its report is kept)
        if isinstance(resolved, LoadedModel):
            stack.enter_context(scoring_mode(resolved.model))
        how = " ".join(filter(None, ("live", setup.describe())))
        report("start", f"placing {resolved.model_id} ({how}, {setup.dtype}) on {pool.name} with plan {plan_.name}:")
        looks_start = time.perf_counter()
        looks = plan_looks(pool, plan_, budget=budget, aggregate=aggregate)
        looks_seconds = time.perf_counter() - looks_start
        result = run_placement(pool, opened.scorer, plan_, model_id=resolved.model_id, seed=setup.seed, budget=budget,
                               aggregate=aggregate, looks=looks, on_stage=_stage_reporter(report), started=wall_start)
        live, timing = _measured(opened, setup, resolved, result, clock=(wall_start, start, looks_seconds),
                                 loads=loads, examples=dict(zip(pool.dataset_names, pool.example_ids)))
    run = PlaceRun(placement=result, live=live, timing=timing, neighbours=_neighbours(pool, result, aggregate))
    if output is not None and report.is_main:
        path = write_record(Path(output) / RECORD_FILE, kind="place", payload=run.to_json(), settings=settings)
        run = replace(run, record_path=path)
    return run


def _measured(opened: Any, setup: Any, model: Any, result: PlacementResult, *, clock: tuple[float, float, float],
              loads: list[tuple[float, float]], examples: dict[str, Any]) -> tuple[LivePlacement, Timing]:
    """A live placement's record entries, its seconds without the process's first-time imports (``clock``: the
    call's start, the model's opening, the looks' seconds; ``loads``: when weights were loading), and a full run of
    ``examples`` (ids per dataset) in the tokens it would run (the contexts its examples share counted once), counted
    after the clock stops, where a rate was measured and the scorer can tell."""
    wall_start, start, looks_seconds = clock
    end, imports = time.perf_counter(), current_clock()  # first-time imports: the process's, not the placement's
    load_seconds = max(0.0, opened.load_seconds - sum(imports.seconds_between(a, b) for a, b in loads))
    live = LivePlacement(engine=setup.engine, spec=model.text, fingerprint=opened.fingerprint, dtype=setup.dtype,
                         settings=setup.record_settings(), load_seconds=load_seconds,
                         model_loaded=opened.is_loaded, seconds=end - start - imports.seconds_between(start, end),
                         requests_computed=opened.requests_computed, asked=tuple(opened.scorer.asked_json()),
                         examples=tuple(opened.scorer.examples_json()))
    import_seconds = imports.seconds_between(wall_start, end)
    counted = (isinstance(opened.scorer, LiveScorer) and isinstance(opened.backend, TokenBackend)  # not lm-eval's
               and opened.forward_tokens and result.compute.full_tokens)
    shared = opened.scorer.shared_context_tokens(examples, opened.backend.tokenizer) if counted else None
    timing = Timing(wall_seconds=end - wall_start - import_seconds, load_seconds=load_seconds,
                    scoring_seconds=opened.forward_seconds, scored_tokens=opened.forward_tokens,
                    looks_seconds=looks_seconds, full_tokens=result.compute.full_tokens, shared_tokens=shared,
                    import_seconds=import_seconds)
    return live, timing


def place_settings(reference: str, plan: str, seed: int | None, aggregate: str | None, missing: str, budget: Budget,
                   n_parameters: float | None, **live: Any) -> dict[str, Any]:
    """What decides a placement's result, kept in its record: a record in a folder is replaced only by a
    placement with the same settings, or with ``force`` (:func:`flasheval.records.run_record.check_replace`)."""
    return {"reference": reference, "plan": plan, "seed": seed or 0, "aggregate": aggregate, "missing": missing,
            "budget": [budget.max_examples, budget.max_tokens, budget.max_flops,
                       *([] if budget.max_seconds is None else [budget.max_seconds])],  # records before it: 3 caps
            "n_parameters": n_parameters, **live}


def _prepare(output: str | Path | None, model_id: str, settings: dict[str, Any], *, force: bool,
             note: bool = True) -> None:
    """Check ``output`` before the run spends anything (an unwritable folder, another model's or settings' record)."""
    if output is not None:
        check_folder_kind(output, kind="place", field="--output")
        prepare_output(output, record=RECORD_FILE, note=note, kind="place", model_id=model_id, force=force,
                       settings=settings)


def _store_dir(stack: ExitStack, model: Any, *, output: str | Path | None, store: str | Path | None) -> Path:
    """The results store a live placement uses: ``store``, else ``OUTPUT/store``; a temporary one (removed when
    ``stack`` closes) without either, or for an in-memory model without an identity (its results serve this call)."""
    if (output is None and store is None) or (isinstance(model, LoadedModel) and model.identity is None):
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flasheval-store-")))
    return Path(output) / "store" if store is None else Path(store)


def check_on_reference(model: Any, ref: ReferenceLeaderboard, plan: TierPlan, *, budget: Budget,
                       aggregate: str | None, seed: int | None, n_parameters: float | None) -> ReferenceLeaderboard:
    """What :func:`~flasheval.api.resolve.check_place` cannot check without the reference, checked once it is
    read and before anything is written (:func:`flasheval.place_checkpoint` calls it before the run folder is
    touched): a replayed model the reference lacks, the aggregate on this reference, the budget against the plan's
    first look. Returns the pool the model is placed on (the model held out)."""
    pool = ref.without(model.model_id) if model.model_id in ref.model_ids else ref
    pool.aggregate_options(aggregate)
    if not isinstance(model, ReplayModel):
        check_budget(budget, pool, plan, aggregate=aggregate)
        return pool
    scorer = ReplayScorer(ref, model.model_id, n_parameters=n_parameters)
    tokens = None
    if budget.max_tokens is not None or budget.max_flops is not None:
        tokens = _first_tokens(pool, scorer, plan, aggregate, seed or 0)
    check_budget(budget, pool, plan, aggregate=aggregate, replay=True, n_parameters=n_parameters, first_tokens=tokens)
    return pool


def _place_replay(model: ReplayModel, reference: Any, *, plan: Any, budget: Budget, seed: int | None,
                  aggregate: str | None, missing: str, n_parameters: int | None, output: str | Path | None,
                  report: Reporter, force: bool = False) -> PlaceRun:
    ref = resolve_reference(reference, missing=missing)
    plan_ = resolve_plan(plan)
    pool = check_on_reference(model, ref, plan_, budget=budget, aggregate=aggregate, seed=seed,
                              n_parameters=n_parameters)
    scorer = ReplayScorer(ref, model.model_id, n_parameters=n_parameters)
    settings = place_settings(ref.name, plan_.name, seed, aggregate, missing, budget, n_parameters)
    _prepare(output, model.model_id, settings, force=force)
    report("start", f"placing {model.model_id} (replay, held out) on {ref.name} with plan {plan_.name}:")
    result = run_placement(pool, scorer, plan_, model_id=model.model_id, seed=seed or 0,
                           budget=budget, aggregate=aggregate, on_stage=_stage_reporter(report))
    # A replayed model is held out of a pool whose full data we have: the answer placement estimated.
    run = PlaceRun(placement=result, full_data_rank=full_data_ranks(ref, aggregate)[model.model_id],
                   neighbours=_neighbours(pool, result, aggregate))
    if output is not None:
        path = write_record(Path(output) / RECORD_FILE, kind="place", payload=run.to_json(), settings=settings)
        run = replace(run, record_path=path)
    return run


def _neighbours(pool: ReferenceLeaderboard, result: PlacementResult, aggregate: str | None) -> tuple[str, ...]:
    """The pool models ``result``'s interval cannot order the model against (none when it was not placed)."""
    return () if result.rank is None else interval_neighbours(pool, result.interval, aggregate=aggregate)


def _first_tokens(pool: ReferenceLeaderboard, scorer: ReplayScorer, plan: TierPlan, aggregate: str | None,
                  seed: int) -> int | None:
    """Tokens a replayed model spends on the plan's first look (its recorded counts; ``None`` without them)."""
    if any(t is None for t in pool.n_tokens):
        return None
    _, targets = first_look(pool, plan, aggregate)
    total = 0
    for name, ids, target in zip(pool.dataset_names, pool.example_ids, targets):
        got = scorer.score(name, example_order(ids, seed=seed, task_name=name)[:target]).n_tokens
        if got is None:
            return None
        total += int(got.sum())
    return total
