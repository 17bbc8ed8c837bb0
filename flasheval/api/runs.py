"""``flasheval.place_checkpoint`` and ``flasheval.read_run``: every placement of a training run in one run folder.

The generic hook for training code: call :func:`place_checkpoint` with the model (in memory or saved),
the run folder and the step, and get the :class:`~flasheval.api.place.PlaceRun`; the Trainer callback and
the checkpoint watcher (:func:`flasheval.watch`) are built on it. The folder's layout, its lock and its
settings check are :mod:`flasheval.runs.folder`; :func:`read_run` reads it back.
"""

from __future__ import annotations

import logging
import os
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from flasheval.api.models import ReplayModel, resolve_model
from flasheval.api.options import engine_options
from flasheval.api.place import PlaceRun, check_on_reference, place
from flasheval.api.resolve import PLACE_KEYWORDS, check_place, check_place_options
from flasheval.api.resolve import live_options, refuse_time_budget, resolve_budget, resolve_plan, resolve_reference
from flasheval.engine.hf.in_memory import LoadedModel, is_transformers_model
from flasheval.errors import InputError
from flasheval.reference.scoring.live import prepare_scoring
from flasheval.checks import check_keywords
from flasheval.placement.results import Budget
from flasheval.runs.coverage import check_n_checkpoints, simultaneous_level, split_level
from flasheval.runs.folder import (
    RUN_FILE,
    STORE_DIR,
    RunCheckpoint,
    RunHistory,
    check_folder_kind,
    check_settings,
    check_step,
    fix_settings,
    hold_run,
    read_run,
    read_settings,
    record_fingerprint,
    record_path,
    reference_digest,
    run_folder_path,
)
from flasheval.placement.tiers import TierPlan, plan_from_json, plan_to_json
from flasheval.records.run_record import check_creatable, prepare_output, read_record, write_record
from flasheval.reference import ReferenceLeaderboard

__all__ = ["place_checkpoint", "read_run", "RunHistory", "RunCheckpoint", "check_hook"]

logger = logging.getLogger(__name__)

_RUN_DECIDES = ("output", "store")


def _is_writer(distributed: object) -> bool:
    """Whether this process writes the run folder: always, unless every process of a group places together
    (``distributed="all"``), where only rank 0 of the caller's group does (the group is read, never made)."""
    if distributed != "all":
        return True
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _source(reference: Any, ref: ReferenceLeaderboard) -> str:
    """How a later placement finds the run's reference: the folder given, else the name given, else the loaded one's."""
    if isinstance(reference, (str, Path)):
        return str(Path(reference).resolve()) if Path(reference).exists() else str(reference)
    return str(ref.path) if ref.path is not None else ref.name


def _run_payload(name: str, ref: ReferenceLeaderboard, source: str, plan: TierPlan, given: TierPlan, model: Any,
                 simultaneous: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``run.json``'s payload for this placement: the settings every checkpoint of the run must share (``plan``:
    at the run's split level; ``given``: the plan as given, kept whole so that later placements may leave it out)."""
    level = given.confidence_level
    if isinstance(model, ReplayModel):
        seed, dtype, engine = kwargs.get("seed") or 0, None, "replay"
    else:
        options = live_options(seed=kwargs.get("seed"), task_dir=kwargs.get("task_dir"),
                               include_path=kwargs.get("include_path"), num_fewshot=kwargs.get("num_fewshot"),
                               engine=engine_options(kwargs.get("engine")))
        setup = prepare_scoring(ref, options)
        seed, dtype, engine = setup.seed, setup.dtype, setup.engine
    n_pool = ref.n_models - (model.model_id in ref.model_ids)
    tiers = plan.for_pool(n_pool + 1).tiers
    settings = {"reference": ref.name, "plan": plan.name, "confidence_level": plan.confidence_level, "seed": seed,
                "dtype": dtype, "engine": engine, "aggregate": kwargs.get("aggregate"),
                "missing": kwargs.get("missing", "complete-models"), "simultaneous": simultaneous}
    return {"name": name, "reference_source": source, "reference_digest": reference_digest(ref),
            "settings": settings, "plan_level": level, "plan_spec": plan_to_json(given),
            "tiers": [{"first": t.first, "last": t.last, "resolution": t.resolution} for t in tiers]}


def _run_reference(reference: Any, saved: dict[str, Any] | None, run: Path, missing: str) -> ReferenceLeaderboard:
    """The reference given, else the run's (``run.json``'s ``reference_source``: an error names that file and field,
    not an option the caller did not give)."""
    if saved is None or reference is not saved["reference_source"]:
        return resolve_reference(reference, missing=missing)
    try:
        return resolve_reference(reference, missing=missing)
    except InputError as exc:
        raise InputError(f"the run's reference {reference!r} cannot be loaded ({exc}); give reference= (--reference)",
                         path=run / RUN_FILE, field="payload.reference_source") from None


def _model(model: Any, tokenizer: Any, identity: str | None, default: str) -> Any:
    """The model resolved; an in-memory one keyed by ``identity`` (given, else the run's ``NAME/step-N``)."""
    if is_transformers_model(model):
        return resolve_model(model, tokenizer=tokenizer, identity=identity or default)
    resolved = resolve_model(model, tokenizer=tokenizer, identity=identity)
    if isinstance(resolved, LoadedModel) and resolved.identity is None:
        return replace(resolved, identity=default)
    return resolved


def _run_plan(plan: Any, saved: dict[str, Any] | None, run: Path) -> TierPlan:
    """The plan given; else the run's (its first placement's, kept whole in ``run.json``); else ``default``."""
    if plan is not None or saved is None:
        return resolve_plan("default" if plan is None else plan)
    if "plan_spec" not in saved:  # a run folder written before run.json kept its plan: by the plan's name
        return resolve_plan(saved["settings"]["plan"])
    return plan_from_json(saved["plan_spec"], path=run / RUN_FILE)


def _keep_record(run: Path, step: int, placed: PlaceRun) -> PlaceRun:
    """Write step ``step``'s record; the same model placed again keeps the record it has.

    The record's ``live`` entry carries the weights digest of what computed where it is known (an in-memory
    model's; a spec's when compared with an in-memory record): a step placed again under another key (say the
    saved copy, ``hf:PATH``, of weights placed in memory) is told apart from other weights by it.
    """
    from flasheval.engine.loading import compared_digests, placed_weights_digest

    path = record_path(run, step)
    payload = placed.to_json()
    live, store = payload.get("live"), run / STORE_DIR
    if isinstance(live, dict) and (digest := placed_weights_digest(live, store)) is not None:
        live["weights_digest"] = digest
    if path.is_file():
        try:
            earlier = read_record(path).payload
            before = record_fingerprint(earlier)
        except InputError as exc:
            before = None
            logger.warning("note: %s; the step's record is replaced", exc)
        now = record_fingerprint(payload)
        if before == now:
            logger.info("step %d of run %s: the same model as its record (%s); record kept", step, run, now)
            return replace(placed, record_path=path)
        if before is not None:
            was, digest = compared_digests(earlier.get("live"), live, store)
            if digest is not None and isinstance(live, dict):
                live["weights_digest"] = digest
            if was is not None and was == digest:
                logger.warning("note: step %d of run %s was placed before with the same weights (weights digest %s, "
                               "as %s) under another key (fingerprint %s, now %s: source or settings differ), so they "
                               "were scored afresh: its record is replaced", step, run, digest[:12],
                               earlier["live"].get("spec"), before[:12], now[:12])
            else:
                known = f"weights digest {was[:12]}, now {digest[:12]}; " if was and digest else ""
                logger.warning("note: step %d of run %s was placed before with other weights%s (%sfingerprint %s, "
                               "now %s): its record is replaced", step, run, "" if known else " or settings", known,
                               before[:12], now[:12])
    return replace(placed, record_path=write_record(path, kind="place", payload=payload))


def check_checkpoint_args(model: Any, *, run: Any, step: Any, reference: Any, tokenizer: Any, simultaneous: Any,
                          max_seconds: Any, place_kwargs: dict[str, Any]) -> tuple[Path, int, Budget]:
    """Every argument of :func:`place_checkpoint` checked, nothing read or written: the run folder's name, the step,
    ``simultaneous``, the time budget, the keywords forwarded (an unknown one refused by name) and, through
    :func:`~flasheval.api.resolve.check_place` (``model=None``: :func:`flasheval.watch`'s checkpoints, found
    later), every keyword of :func:`flasheval.place`. Returns the folder, the step and the budget (with
    ``max_seconds``)."""
    folder = run_folder_path(run)
    step = check_step(step)
    if simultaneous is not None:
        check_n_checkpoints(simultaneous)
    for name in _RUN_DECIDES:
        if name in place_kwargs:
            raise InputError("set by the run folder (its step's record and its shared store); give run= only",
                             field=name)
    check_keywords(place_kwargs, set(PLACE_KEYWORDS) - {"reference", "tokenizer", *_RUN_DECIDES},
                   where="flasheval.place_checkpoint")
    budget = resolve_budget(place_kwargs.get("budget"))
    if max_seconds is not None:
        if budget.max_seconds is not None:
            raise InputError("given twice: as max_seconds and as budget.max_seconds; give it once", field="max_seconds")
        budget = replace(budget, max_seconds=max_seconds)
    given = {k: v for k, v in {**place_kwargs, "reference": reference, "budget": budget}.items()
             if v is not None or k not in ("reference", "plan")}  # None: the run's (checked when read)
    if model is None:
        check_place_options(None, **given)
    else:
        check_place(model, tokenizer=tokenizer, **given)
    return folder, step, budget


def _read_run_inputs(model: Any, folder: Path, step: int, reference: Any, tokenizer: Any, simultaneous: int | None,
                     budget: Budget, place_kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What a placement into run folder ``folder`` reads before it writes anything, each checked: the run's saved
    settings (``None``: a new run), the reference (given, else the run's), the model resolved, the plan at the run's
    split level and ``run.json``'s payload; the reference, budget and aggregate checked against each other
    (``identity`` and ``plan`` are taken out of ``place_kwargs``)."""
    saved = read_settings(folder)
    name = saved["name"] if saved is not None else folder.resolve().name
    if reference is None:
        if saved is None:
            raise InputError("the first placement of a run needs its reference", field="reference")
        reference = saved["reference_source"]
    if simultaneous is None and saved is not None:
        simultaneous = saved["settings"].get("simultaneous")
    ref = _run_reference(reference, saved, folder, place_kwargs.get("missing", "complete-models"))
    resolved = _model(model, tokenizer, place_kwargs.pop("identity", None), f"{name}/step-{step}")
    if isinstance(resolved, ReplayModel):  # before the run folder is touched
        refuse_time_budget(budget)
    plan = _run_plan(place_kwargs.pop("plan", None), saved, folder)
    split = plan if simultaneous is None else split_level(plan, simultaneous)
    payload = _run_payload(name, ref, _source(reference, ref), split, plan, resolved, simultaneous, place_kwargs)
    check_on_reference(resolved, ref, split, budget=budget, aggregate=place_kwargs.get("aggregate"),
                       seed=payload["settings"]["seed"], n_parameters=place_kwargs.get("n_parameters"))
    return saved, ref, resolved, split, payload


def check_hook(model: Any, *, run: Any, reference: Any, tokenizer: Any, place_kwargs: dict[str, Any],
               step: int = 0) -> None:
    """Check, when a training framework's callback is made (before training starts, not at its first placement),
    everything :func:`place_checkpoint` checks before it writes: every argument (:func:`check_checkpoint_args`),
    the reference and the plan read, the budget against the plan, and, where the run folder holds a run already,
    its settings against the run's. Nothing is written; ``model`` is the model the callback will place (the
    framework's, as it holds it now), ``place_kwargs`` every other keyword of :func:`place_checkpoint`.

    Raises
    ------
    InputError
        The first bad value, in one line naming it, as :func:`place_checkpoint` would refuse it.
    """
    kwargs = dict(place_kwargs)
    simultaneous, max_seconds = kwargs.pop("simultaneous", None), kwargs.pop("max_seconds", None)
    folder, step, budget = check_checkpoint_args(model, run=run, step=step, reference=reference, tokenizer=tokenizer,
                                                 simultaneous=simultaneous, max_seconds=max_seconds,
                                                 place_kwargs=kwargs)
    if max_seconds is not None:
        kwargs["budget"] = budget
    check_creatable(folder, field="run")  # where the first placement writes: a file on the way, no permission
    check_folder_kind(folder, kind="run", field="run")
    saved, *_, payload = _read_run_inputs(model, folder, step, reference, tokenizer, simultaneous, budget, kwargs)
    if saved is not None:
        check_settings(folder, saved, payload)


def place_checkpoint(model: Any, *, run: str | Path, step: int, reference: Any = None, tokenizer: Any = None,
                     simultaneous: int | None = None, max_seconds: float | None = None,
                     **place_kwargs: Any) -> PlaceRun:
    """Place one checkpoint of a training run into the run's folder: the hook for hand-written training loops.

    Every placement of a run lands in one folder (:mod:`flasheval.runs.folder`): ``run.json`` (the
    run's settings, fixed by its first placement), ``checkpoints/step-<N>/place.json`` (each checkpoint's
    record) and one results store, ``store/``. The process that writes holds the folder's lock while it places.

    Parameters
    ----------
    model
        As for :func:`flasheval.place`: a loaded ``transformers`` model (with ``tokenizer=``), a
        :class:`~flasheval.engine.hf.in_memory.LoadedModel`, or a spec (``hf:PATH``, ``gguf:FILE``, ``replay:ID``).
    run
        The run folder (created on the first placement). Its name names the run.
    step
        The training step (an integer >= 0).
    reference
        Reference name, folder or object; default: the run's (given to its first placement).
    tokenizer
        In-memory models: the tokenizer.
    simultaneous
        The planned number of checkpoints K of the run: each is placed at level ``1 - (1 - L) / K``
        (:func:`~flasheval.runs.coverage.split_level`), so the run's K intervals cover together
        with probability at least ``L``. ``None``: the run's K (given to its first placement), else each
        checkpoint's interval at the plan's level ``L``.
    max_seconds
        A time budget for this placement (``Budget.max_seconds``, added to ``budget``): a stage projected to end
        past it is not started, and the placement ends ``unresolved at budget`` with its interval so far. Under
        ``distributed="main"`` in a job of several processes the others wait in their next collective for the
        whole placement, and the process group's timeout ends the job: keep it below that timeout (a warning says
        when it is not, or when an earlier placement of the run took over half of it).
    **place_kwargs
        Every other keyword of :func:`flasheval.place` (``plan``, ``budget``, ``seed``, ``engine``,
        ``progress``, ``task_dir``, ``identity``, ...), forwarded unchanged; not ``output`` or ``store``
        (the run folder holds both). In-memory models get ``identity=f"{run name}/step-{step}"`` unless given.

    Returns
    -------
    PlaceRun
        ``record_path`` is the step's record (``None`` on the processes of a ``distributed="all"`` group
        other than rank 0, which write nothing).

    Raises
    ------
    InputError
        A setting differs from the run's (reference, plan, confidence level, seed, dtype, engine, aggregate,
        missing, simultaneous): one line naming it and both values; bad values as :func:`flasheval.place`.

    Notes
    -----
    A step already in the run is placed again through the run's store: the same model (same fingerprint)
    is answered by the store without scoring and its record is kept; other weights (a restarted run
    reproducing a step) are scored and replace the step's record, which a warning says. After a crash the
    finished checkpoints' records are kept and the store keeps every finished result: placing the
    interrupted step again computes only what is missing. Under ``distributed="all"`` every process of the
    group calls it; a run folder on storage they share lets each check the run's settings.

    Examples
    --------
    A training loop placing its model every 1000 steps::

        for step, batch in enumerate(loader, start=1):
            loss = model(**batch).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            if step % 1000 == 0:
                placed = flasheval.place_checkpoint(model, run="runs/my-run", step=step, tokenizer=tokenizer,
                                                    reference="my-reference", plan="default")
                print(step, placed.rank, placed.interval)

    ``flasheval report runs/my-run`` then draws rank against step.
    """
    placer = place_kwargs.pop("_placer", place)  # the watcher on Ray: the placement computed by an actor
    folder, step, budget = check_checkpoint_args(model, run=run, step=step, reference=reference, tokenizer=tokenizer,
                                                 simultaneous=simultaneous, max_seconds=max_seconds,
                                                 place_kwargs=place_kwargs)  # every argument, before any I/O
    if max_seconds is not None:
        place_kwargs["budget"] = budget
    saved, ref, resolved, split, payload = _read_run_inputs(model, folder, step, reference, tokenizer, simultaneous,
                                                            budget, place_kwargs)
    simultaneous = payload["settings"]["simultaneous"]
    writer = _is_writer(place_kwargs.get("distributed"))
    if place_kwargs.get("distributed", "main") == "main":
        _warn_group_timeout(folder, budget.max_seconds)
    with ExitStack() as stack:
        if writer:
            check_folder_kind(folder, kind="run", field="run")
            prepare_output(folder, field="run")
            stack.callback(os.close, hold_run(folder))
            fix_settings(folder, payload)
        elif saved is not None:
            check_settings(folder, saved, payload)
        store = None if isinstance(resolved, ReplayModel) else folder / STORE_DIR
        placed = placer(resolved, ref, plan=split, store=store, **place_kwargs)
        if not writer:
            return placed
        kept = _keep_record(folder, step, placed)
    if simultaneous is not None:
        _beyond_plan(folder, simultaneous, split.confidence_level)
    return kept


def _warn_group_timeout(run: Path, max_seconds: float | None) -> None:
    """Warn, before a ``distributed="main"`` placement inside a job of several processes starts, when the time
    budget is not below the process group's timeout, or, without one, when an earlier placement of the run took
    over half of that timeout: the other processes wait for the whole placement in their next collective."""
    from flasheval.engine.coordination.process_group import caller_group

    group = caller_group()
    if group is None or group[0] < 2 or group[1] is None:
        return
    processes, timeout = group
    waiting = (f"under distributed='main' the other {processes - 1} processes wait in their next collective for the "
               f"whole placement, and the process group's timeout ({timeout:.0f} s) ends the job if it outlasts it")
    if max_seconds is not None:
        if max_seconds >= timeout:
            logger.warning("note: max_seconds=%g is not below the process group's timeout: %s; give a smaller "
                           "max_seconds", max_seconds, waiting)
        return
    try:
        seconds = [c.seconds for c in read_run(run).checkpoints if c.seconds is not None] if read_settings(run) else []
    except InputError:  # a malformed record: the placement refuses it where it matters, not this note
        seconds = []
    if seconds and max(seconds) > timeout / 2:
        logger.warning("note: a placement of run %s took %.0f s, over half the process group's timeout: %s; give "
                       "max_seconds (below %.0f), place with distributed='all' (every process shares the work), or "
                       "watch the saved checkpoints on spare GPUs (flasheval watch)", run, max(seconds), waiting,
                       timeout)


def _beyond_plan(run: Path, planned: int, level: float) -> None:
    """Say once per checkpoint past the run's planned ``K`` what the union bound still promises for all of them."""
    placed = sum(1 for _ in run.glob("checkpoints/step-*/place.json"))
    if placed > planned:
        logger.warning("note: run %s has %d checkpoints placed, more than the %d planned (simultaneous=%d): all %d "
                       "intervals cover together with probability >= %.1f%% (union bound), not the plan's level",
                       run, placed, planned, planned, placed, 100 * simultaneous_level(level, placed))
