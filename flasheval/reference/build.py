"""Build a reference leaderboard by scoring real models on a task suite (``flasheval reference build``).

Every model is scored on the same examples (the first ``n_examples`` of each task's seeded
order, :func:`flasheval.stats.sampling.example_order`) with the same prompts (:mod:`flasheval.tasks`),
through the results store: a build killed part way resumes from the last finished batch when
run again with the same arguments, and the reference folder is written only once every model
is scored (so a killed build never leaves a reference that loads). Under ``accelerate launch``
each model is scored data-parallel by the engine's one runner
(:func:`flasheval.engine.distributed.cached_runner`; pass the launch's ``state``), and every
process returns the same result. The manifest's ``build``
dict (:class:`~flasheval.reference.live.BuildSettings`) records everything a placement must
reproduce; a live placement refuses a reference whose settings it cannot match
(:func:`flasheval.reference.live.prepare_live`).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from flasheval.engine.device_map import DeviceMap
from flasheval.evaluation.evaluate import ExampleOutcome, score_examples
from flasheval.engine.loading import n_parameters, open_cached_backend
from flasheval.engine.specs import NamedModel, check_model_files
from flasheval.engine.store import CachedBackend
from flasheval.records import write_record
from flasheval.reference.writing import write_reference
from flasheval.reference.live import BuildSettings, prompt_digests
from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import LiveTask, Suite

__all__ = ["BuildResult", "select_example_ids", "score_model", "build_reference", "write_built_reference",
           "BUILD_LOG_FILE", "OnModel"]

logger = logging.getLogger(__name__)

BUILD_LOG_FILE = "build.json"
"""The build's run record (settings, seconds, every scored example), written in the work folder."""

OnModel = Callable[[str, int, int, float, int], None]
"""Progress of a build: ``(model_id, models done, models in all, wall seconds, requests computed)`` per model."""


def select_example_ids(task: LiveTask, *, seed: int, n_examples: int | None) -> tuple[str, ...]:
    """The first ``n_examples`` ids of the task's seeded order (all when ``None``)."""
    return nested_prefix(example_order(task.example_ids, seed=seed, task_name=task.name), n_examples)


def score_model(cached: CachedBackend, tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *,
                seed: int, prefix_space: bool) -> list[ExampleOutcome]:
    """Score one model on every task's selected examples."""
    outcomes: list[ExampleOutcome] = []
    for task in tasks:
        before = cached.n_computed
        start = time.perf_counter()
        outcomes += score_examples(cached, task, example_ids[task.name], seed=seed, prefix_space=prefix_space)
        logger.info("%s: %d examples in %.1f s (%d requests computed, the rest from the store)", task.name,
                    len(example_ids[task.name]), time.perf_counter() - start, cached.n_computed - before)
    return outcomes


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildResult:
    """What :func:`build_reference` produced."""

    settings: BuildSettings
    frame: pd.DataFrame
    """Long table: ``model``, ``dataset``, ``example_id``, ``score``, ``n_tokens``."""
    outcomes: Mapping[str, tuple[ExampleOutcome, ...]]
    """Per model, every scored example."""
    seconds: Mapping[str, float]
    """Per model, wall seconds (load included)."""
    computed: Mapping[str, int]
    """Per model, requests computed now (the rest came from the store)."""


def build_reference(models: Sequence[NamedModel], tasks: Sequence[LiveTask], *, suite: str, seed: int,
                    n_examples: int | None, dtype: str, store_dir: Path, prefix_space: bool = True,
                    device: str = "auto", batch_size: int = 32, task_dir: str = "", state: Any = None,
                    on_model: OnModel | None = None, device_map: DeviceMap | None = None) -> BuildResult:
    """Score every model on every task's selected examples (through the store) and collect the results.

    ``state`` is the launch's process state (:func:`flasheval.engine.distributed.launch_state`),
    ``None`` for one process. ``on_model`` is called as each model is scored (progress); a model's
    weights load only when one of its requests is not in the store; ``device_map`` spreads each over
    this replica's devices (:mod:`flasheval.engine.device_map`).
    """
    check_model_files(models)
    example_ids = {t.name: select_example_ids(t, seed=seed, n_examples=n_examples) for t in tasks}
    rows, outcomes, seconds, computed, fingerprints = [], {}, {}, {}, {}
    for model in models:
        start = time.perf_counter()
        logger.info("loading %s (%s, %s)", model.model_id, model.text, dtype)
        cached, store, backend = open_cached_backend(model, store_dir, dtype=dtype, device=device, batch_size=batch_size,
                                                   state=state, device_map=device_map)
        try:
            scored = score_model(cached, tasks, example_ids, seed=seed, prefix_space=prefix_space)
        finally:
            store.close()
        fingerprints[model.model_id] = {"spec": model.text, "fingerprint": cached.fingerprint,
                                        "n_parameters": n_parameters(backend)}
        computed[model.model_id] = cached.n_computed
        del cached, backend
        gc.collect()
        outcomes[model.model_id] = tuple(scored)
        seconds[model.model_id] = time.perf_counter() - start
        rows += [{"model": model.model_id, "dataset": o.task_name, "example_id": o.example_id, "score": o.score,
                  "n_tokens": o.n_tokens} for o in scored]
        logger.info("%s: %d examples in %.1f s", model.model_id, len(scored), seconds[model.model_id])
        if on_model is not None:
            on_model(model.model_id, len(outcomes), len(models), seconds[model.model_id], computed[model.model_id])
    settings = BuildSettings(
        suite=suite, tasks=tuple(t.name for t in tasks), seed=seed, n_examples=n_examples, prefix_space=prefix_space,
        dtype=dtype, task_sha256={t.name: t.sha256 for t in tasks},
        prompt_digests=prompt_digests(tasks, example_ids, seed=seed, prefix_space=prefix_space),
        models=fingerprints, task_dir=task_dir)
    return BuildResult(settings=settings, frame=pd.DataFrame(rows), outcomes=outcomes, seconds=seconds,
                       computed=computed)


def write_built_reference(out: Path, result: BuildResult, *, name: str, suite: Suite, tasks: Sequence[LiveTask],
                          work_dir: Path, built_with: str) -> Path:
    """Write the built reference into ``out`` and the build log into ``work_dir``; returns the log's path.

    A suite aggregated by centered accuracy gets DCLM's v2 random baselines and the ``centered``
    aggregate; any other suite the plain mean. ``built_with`` (the command, or the call) is recorded
    in the manifest as how the reference was built.
    """
    centered = suite.aggregate == "centered_mean"
    baselines = {t.name: t.spec.baseline_dclm_v2_pct / 100.0 for t in tasks} if centered else None
    write_reference(out, result.frame, name=name, source="flasheval reference build (live scores)",
                    licence="scores of the listed models; see each model's licence",
                    metric="per-example accuracy under llm-foundry's rule (1 correct, 0 not)",
                    aggregate="centered" if centered else "mean", random_baselines=baselines,
                    built_with=built_with,
                    build=result.settings.to_json(),
                    notes="Built by scoring models live; place live models with the same task files, seed and dtype.")
    return write_record(work_dir / BUILD_LOG_FILE, kind="reference-build", payload={
        "reference": str(out), "settings": result.settings.to_json(), "seconds": dict(result.seconds),
        "computed_requests": dict(result.computed),
        "examples": {m: [o.to_json() for o in outs] for m, outs in result.outcomes.items()}})
