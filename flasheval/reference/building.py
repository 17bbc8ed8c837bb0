"""The one reference-build loop, for both engines: open, score, close, fingerprint and free every model.

``flasheval reference build`` (:func:`flasheval.build_reference`) scores every model on the same
examples and writes a reference from them. How a model is opened and scored is the engine's
(a :class:`BuildSetup`: :class:`~flasheval.reference.build_setups.TaskFileBuild` for DCLM-format
task files, :class:`~flasheval.reference.build_setups.LmEvalTaskBuild` for lm-eval tasks); the
loop (:func:`build_models`) and what is written (:func:`write_build`) are the same for both:

* every model is opened behind one results store exactly as a placement opens it
  (``open`` returns the :class:`~flasheval.reference.scoring.live.OpenedScorer` of
  :class:`~flasheval.reference.scoring.live.ScoringSetup`), so a killed build resumes from the
  last finished batch, and a model every request of which is in the store never loads;
* on Ray (:func:`build_on_ray`) the same store is read by the driver first and written by it as each
  model's actor finishes, so a killed build on Ray resumes at the last finished model, and a build in
  process and one on Ray resume each other;
* under ``accelerate launch`` every process runs the loop (each model data-parallel through the
  engine's one runner) and gets the same result; only the main process writes;
* the reference (``scores.parquet`` with per-example ``score`` and ``n_tokens``, and
  ``manifest.json`` with the engine's ``build`` dict) is written once every model is scored, with
  the build log :data:`BUILD_LOG_FILE` in the work folder: per model its wall seconds, requests
  computed and every scored example.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from flasheval.cluster.executor import RayExecutor, weights_bytes
from flasheval.cluster.pool import Held, InTempStore, Job, ModelPool
from flasheval.engine.hf.deferred import DeferredBackend, NotStored
from flasheval.engine.specs import NamedModel
from flasheval.engine.store.results import ResultStore
from flasheval.reference.scoring.live import LiveOptions, ModelOpener, OpenedScorer
from flasheval.records.run_record import write_record
from flasheval.reference.writing import write_reference
from flasheval.types import Result

__all__ = ["BUILD_LOG_FILE", "OnModel", "ScoredModel", "ReferenceText", "BuildSetup", "BuildResult", "build_models",
           "build_on_ray", "write_build", "EXAMPLE_FIELDS"]

logger = logging.getLogger(__name__)

BUILD_LOG_FILE = "build.json"
"""The build's run record (settings, seconds, every scored example), written in the work folder."""

OnModel = Callable[[str, int, int, float, int], None]
"""Progress of a build: ``(model_id, models done, models in all, wall seconds, requests computed)`` per model."""

EXAMPLE_FIELDS = ("task_name", "example_id", "score", "n_tokens")
"""What every engine logs of every scored example (each engine may add its prompt's provenance)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredModel:
    """One model's scores on every selected example, as :meth:`BuildSetup.score_model` returns them."""

    examples: tuple[Mapping[str, Any], ...]
    """Per example, at least :data:`EXAMPLE_FIELDS` (the build log's ``examples`` rows)."""
    run_settings: Any = None
    """What the engine learnt of its settings from this run (lm-eval: the task configs, versions and prompt
    hashes it logged; ``None`` where the settings are known before any model runs)."""

    def __post_init__(self) -> None:
        for row in self.examples:
            missing = [f for f in EXAMPLE_FIELDS if f not in row]
            if missing:
                raise ValueError(f"a scored example lacks {missing}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReferenceText:
    """How the written manifest describes a built reference (engine-specific words, one set of fields)."""

    source: str
    metric: str
    aggregate: str
    notes: str
    random_baselines: Mapping[str, float] | None = None
    licence: str = "scores of the listed models; see each model's licence"


class BuildSetup(ModelOpener, Protocol):
    """How one engine scores a model for a reference build (every option checked before any weights load).

    ``open`` (:class:`~flasheval.reference.scoring.live.ModelOpener`) opens a model as a placement on the built
    reference will (the same :class:`~flasheval.reference.scoring.live.OpenedScorer`; weights load on the first
    request the store cannot answer); ``score_model`` scores it on every selected example; ``dtype`` is pinned in
    the reference.
    """

    def score_model(self, opened: OpenedScorer, *, where: str) -> ScoredModel:
        """Score the opened model on every selected example (``where`` names the model in errors)."""
        ...

    def settings(self, last: ScoredModel, models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The manifest's ``build`` dict, given the last model's run and per model its spec, fingerprint and size."""
        ...

    def reference_text(self, settings: Mapping[str, Any]) -> ReferenceText:
        """How the manifest describes the reference, given its ``build`` dict."""
        ...

    def describe_tasks(self) -> str:
        """What the models are scored on, for the start line (``2 tasks``, ``2 lm-eval tasks``)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildResult:
    """What :func:`build_models` produced."""

    settings: Mapping[str, Any]
    """The manifest's ``build`` dict."""
    frame: pd.DataFrame
    """Long table: ``model``, ``dataset``, ``example_id``, ``score``, ``n_tokens``."""
    examples: Mapping[str, tuple[Mapping[str, Any], ...]]
    """Per model, every scored example (:attr:`ScoredModel.examples`)."""
    seconds: Mapping[str, float]
    """Per model, wall seconds (load included)."""
    computed: Mapping[str, int]
    """Per model, requests computed now (the rest came from the store)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Outcome:
    """One model's scoring, in this process or on an actor."""

    scored: ScoredModel | None
    """``None``: a request was not in the store, and the weights were to stay unloaded."""
    fingerprint: str
    n_parameters: int | None
    computed: int
    seconds: float


def _score_one(setup: BuildSetup, model: NamedModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
               store_only: bool = False) -> _Outcome:
    """``model`` opened behind the results store in ``store_dir``, scored and closed. ``store_only``: its weights
    never load; ``scored`` is ``None`` when the store lacks a request (:meth:`DeferredBackend.stay_unloaded
    <flasheval.engine.hf.deferred.DeferredBackend.stay_unloaded>`)."""
    start = time.perf_counter()
    logger.info("%s %s (%s, %s)", "reading" if store_only else "loading", model.model_id, model.text, setup.dtype)
    opened = setup.open(model, store_dir, options=options, state=state)
    scored: ScoredModel | None = None
    try:
        if store_only:
            if isinstance(opened.backend, DeferredBackend):  # every spec's; anything else is left to an actor
                opened.backend.stay_unloaded()
                scored = setup.score_model(opened, where=model.model_id)
        else:
            scored = setup.score_model(opened, where=model.model_id)
    except NotStored:
        pass
    finally:
        opened.close()
    return _Outcome(scored=scored, fingerprint=opened.fingerprint, n_parameters=opened.n_parameters,
                    computed=opened.requests_computed if scored is not None else 0,
                    seconds=time.perf_counter() - start)


def build_models(setup: BuildSetup, models: Sequence[NamedModel], *, store_dir: Path, options: LiveOptions,
                 state: Any = None, on_model: OnModel | None = None, executor: RayExecutor | None = None) -> BuildResult:
    """Score every model in turn through the results store in ``store_dir``; free each before the next.

    ``state``: the :class:`~flasheval.engine.coordination.distributed.Processes` scoring together, ``None``
    for one process: every process runs this loop and returns the same result. ``on_model`` is called as
    each model is scored (progress). ``executor``: the models the store does not answer scored at once on Ray
    actors, one model each, their results written into the same store (:func:`build_on_ray`).
    """
    if not models:
        raise ValueError("no model to score")
    if executor is not None:
        return build_on_ray(setup, models, store_dir=store_dir, options=options, executor=executor, on_model=on_model)
    outcomes: dict[str, _Outcome] = {}
    for model in models:
        outcomes[model.model_id] = _score_one(setup, model, store_dir, options=options, state=state)
        gc.collect()  # the model's weights, before the next model loads
        _report(outcomes, models, model.model_id, on_model)
    return _assembled(setup, models, outcomes)


def _report(outcomes: Mapping[str, _Outcome], models: Sequence[NamedModel], model_id: str,
            on_model: OnModel | None) -> None:
    outcome = outcomes[model_id]
    assert outcome.scored is not None
    logger.info("%s: %d examples in %.1f s", model_id, len(outcome.scored.examples), outcome.seconds)
    if on_model is not None:
        on_model(model_id, len(outcomes), len(models), outcome.seconds, outcome.computed)


def _assembled(setup: BuildSetup, models: Sequence[NamedModel], outcomes: Mapping[str, _Outcome]) -> BuildResult:
    """The build's result from every model's outcome, in the models' order (wherever each was scored)."""
    rows: list[dict[str, Any]] = []
    examples, seconds, computed, fingerprints = {}, {}, {}, {}
    for model in models:
        outcome = outcomes[model.model_id]
        assert outcome.scored is not None
        fingerprints[model.model_id] = {"spec": model.text, "fingerprint": outcome.fingerprint,
                                        "n_parameters": outcome.n_parameters}
        examples[model.model_id] = outcome.scored.examples
        seconds[model.model_id], computed[model.model_id] = outcome.seconds, outcome.computed
        rows += [{"model": model.model_id, "dataset": e["task_name"], "example_id": e["example_id"],
                  "score": e["score"], "n_tokens": e["n_tokens"]} for e in outcome.scored.examples]
    last = outcomes[models[-1].model_id].scored
    assert last is not None
    return BuildResult(settings=setup.settings(last, fingerprints), frame=pd.DataFrame(rows), examples=examples,
                       seconds=seconds, computed=computed)


def _score_in_actor(held: Held, setup: BuildSetup, where: str) -> tuple[_Outcome, dict[str, Result]]:
    """In the actor: the opened model scored (:meth:`BuildSetup.score_model`) and what it computed into its store
    (the results the driver's store held left out)."""
    start = time.perf_counter()
    opened = held.opened
    scored = setup.score_model(opened, where=where)
    outcome = _Outcome(scored=scored, fingerprint=opened.fingerprint, n_parameters=opened.n_parameters,
                       computed=opened.requests_computed, seconds=time.perf_counter() - start)
    return outcome, held.computed(opened.fingerprint)


def build_on_ray(setup: BuildSetup, models: Sequence[NamedModel], *, store_dir: Path, options: LiveOptions,
                 executor: RayExecutor, on_model: OnModel | None = None) -> BuildResult:
    """:func:`build_models` on Ray, with the results store in ``store_dir`` (the one a build in this process uses):
    each model is first served from it here, its weights never loaded; the models it does not answer entirely are
    scored at once, one per actor (as many as ``executor`` allows), each sent what the store holds of it so that
    only the rest is computed, and each model's computed results are written into the store here as its actor
    finishes. A build killed and run again scores only the models that had not finished; one whose store holds
    everything starts no actor. The result is the one a build in this process gives (its seconds aside)."""
    outcomes: dict[str, _Outcome] = {}
    seeds: dict[str, tuple[str, dict[str, Result]]] = {}
    for model in models:
        outcome = _score_one(setup, model, store_dir, options=options, store_only=True)
        if outcome.scored is not None:
            outcomes[model.model_id] = outcome
            _report(outcomes, models, model.model_id, on_model)
        else:
            with ResultStore(store_dir, fingerprint=outcome.fingerprint, writer=False) as stored:
                seeds[model.model_id] = (outcome.fingerprint, stored.results())
    todo = [m for m in models if m.model_id not in outcomes]
    if todo:
        def finished(i: int, value: tuple[_Outcome, dict[str, Result]]) -> None:
            outcome, results = value
            with ResultStore(store_dir, fingerprint=outcome.fingerprint) as store:  # the one writer
                store.put_many(list(results.items()))
            outcomes[todo[i].model_id] = outcome
            _report(outcomes, models, todo[i].model_id, on_model)

        jobs = [Job(key=m.model_id, opener=InTempStore(partial(setup.open, m, options=options), seed=seeds[m.model_id]),
                    fn=_score_in_actor, args=(setup, m.model_id)) for m in todo]
        with ModelPool(executor, n_models=len(todo), what="build on Ray",
                       memory_bytes=max(weights_bytes(m.spec.target) for m in todo)) as pool:
            pool.run(jobs, on_result=finished)
    return _assembled(setup, models, outcomes)


def write_build(out: Path, result: BuildResult, setup: BuildSetup, *, name: str, work_dir: Path,
                built_with: str) -> Path:
    """Write the built reference into ``out`` and the build log into ``work_dir``; returns the log's path.

    ``built_with`` (the command, or the call) is recorded in the manifest as how the reference was built.
    """
    text = setup.reference_text(result.settings)
    write_reference(out, result.frame, name=name, source=text.source, licence=text.licence, metric=text.metric,
                    aggregate=text.aggregate, random_baselines=text.random_baselines, built_with=built_with,
                    build=result.settings, notes=text.notes)
    return write_record(work_dir / BUILD_LOG_FILE, kind="reference-build", payload={
        "reference": str(out), "settings": dict(result.settings), "seconds": dict(result.seconds),
        "computed_requests": dict(result.computed),
        "examples": {m: [dict(e) for e in rows] for m, rows in result.examples.items()}})
