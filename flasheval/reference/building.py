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
from flasheval.engine.specs import NamedModel
from flasheval.reference.scoring.live import LiveOptions, ModelOpener, OpenedScorer
from flasheval.records.run_record import write_record
from flasheval.reference.writing import write_reference

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


def build_models(setup: BuildSetup, models: Sequence[NamedModel], *, store_dir: Path, options: LiveOptions,
                 state: Any = None, on_model: OnModel | None = None, executor: RayExecutor | None = None) -> BuildResult:
    """Score every model in turn through the results store in ``store_dir``; free each before the next.

    ``state``: the :class:`~flasheval.engine.coordination.distributed.Processes` scoring together, ``None``
    for one process: every process runs this loop and returns the same result. ``on_model`` is called as
    each model is scored (progress). ``executor``: every model scored at once on Ray actors, one model each,
    each behind a store of its actor's machine (:func:`build_on_ray`).
    """
    if not models:
        raise ValueError("no model to score")
    if executor is not None:
        return build_on_ray(setup, models, options=options, executor=executor, on_model=on_model)
    rows: list[dict[str, Any]] = []
    examples, seconds, computed, fingerprints = {}, {}, {}, {}
    scored: ScoredModel | None = None
    for model in models:
        start = time.perf_counter()
        logger.info("loading %s (%s, %s)", model.model_id, model.text, setup.dtype)
        opened = setup.open(model, store_dir, options=options, state=state)
        try:
            scored = setup.score_model(opened, where=model.model_id)
        finally:
            opened.close()
        fingerprints[model.model_id] = {"spec": model.text, "fingerprint": opened.fingerprint,
                                        "n_parameters": opened.n_parameters}
        computed[model.model_id] = opened.requests_computed
        del opened  # the model's weights, before the next model loads
        gc.collect()
        examples[model.model_id] = scored.examples
        seconds[model.model_id] = time.perf_counter() - start
        rows += [{"model": model.model_id, "dataset": e["task_name"], "example_id": e["example_id"],
                  "score": e["score"], "n_tokens": e["n_tokens"]} for e in scored.examples]
        logger.info("%s: %d examples in %.1f s", model.model_id, len(scored.examples), seconds[model.model_id])
        if on_model is not None:
            on_model(model.model_id, len(examples), len(models), seconds[model.model_id], computed[model.model_id])
    assert scored is not None  # models is not empty
    return BuildResult(settings=setup.settings(scored, fingerprints), frame=pd.DataFrame(rows), examples=examples,
                       seconds=seconds, computed=computed)


def _score_in_actor(held: Held, setup: BuildSetup, where: str) -> tuple[ScoredModel, dict[str, Any], int, float]:
    """In the actor: the opened model scored (:meth:`BuildSetup.score_model`); its fingerprint and size, the
    requests it computed, the seconds it took."""
    start = time.perf_counter()
    opened = held.opened
    scored = setup.score_model(opened, where=where)
    return (scored, {"fingerprint": opened.fingerprint, "n_parameters": opened.n_parameters},
            opened.requests_computed, time.perf_counter() - start)


def build_on_ray(setup: BuildSetup, models: Sequence[NamedModel], *, options: LiveOptions, executor: RayExecutor,
                 on_model: OnModel | None = None) -> BuildResult:
    """:func:`build_models` on Ray: every model scored at once, one per actor (as many as ``executor`` allows),
    the results gathered here in the models' order: the same result as a build in this process (its seconds
    aside). Each actor's results store is a temporary folder of its machine: a killed build scores again."""
    jobs = [Job(key=m.model_id, opener=InTempStore(partial(setup.open, m, options=options)), fn=_score_in_actor,
                args=(setup, m.model_id)) for m in models]
    with ModelPool(executor, n_models=len(models), what="build on Ray",
                   memory_bytes=max(weights_bytes(m.spec.target) for m in models)) as pool:
        values = pool.run(jobs)
    rows: list[dict[str, Any]] = []
    examples, seconds, computed, fingerprints = {}, {}, {}, {}
    for done, (model, (scored, seen, computed_now, took)) in enumerate(zip(models, values), start=1):
        fingerprints[model.model_id] = {"spec": model.text, **seen}
        examples[model.model_id], seconds[model.model_id], computed[model.model_id] = scored.examples, took, computed_now
        rows += [{"model": model.model_id, "dataset": e["task_name"], "example_id": e["example_id"],
                  "score": e["score"], "n_tokens": e["n_tokens"]} for e in scored.examples]
        if on_model is not None:
            on_model(model.model_id, done, len(models), took, computed_now)
    return BuildResult(settings=setup.settings(values[-1][0], fingerprints), frame=pd.DataFrame(rows),
                       examples=examples, seconds=seconds, computed=computed)


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
