"""Build a reference leaderboard by scoring real models on a task suite (``flasheval reference build``).

Every model is scored on the same examples (the first ``n_examples`` of each task's seeded
order, :func:`flasheval.sampling.example_order`) with the same prompts (:mod:`flasheval.live`),
through the results store: a build killed part way resumes from the last finished batch when
run again with the same arguments, and the reference folder is written only once every model
is scored (so a killed build never leaves a reference that loads). The manifest's ``build``
dict (:class:`BuildSettings`) records everything a placement must reproduce; a live placement
refuses a reference whose settings it cannot match (:func:`check_task_files`).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from flasheval import __version__
from flasheval.backends import CachedBackend, ResultStore, open_backend, parse_model_spec
from flasheval.backends.base import SCORING_VERSION
from flasheval.backends.specs import ModelSpec
from flasheval.errors import InputError
from flasheval.live import ExampleOutcome, LiveTask, build_example_requests, score_examples, task_prompt_digest
from flasheval.sampling import example_order, nested_prefix

__all__ = ["NamedModel", "BuildSettings", "BuildResult", "parse_named_models", "check_model_files",
           "select_example_ids", "prompt_digests", "check_task_files", "open_cached_backend", "score_model",
           "build_reference", "BUILD_KIND"]

logger = logging.getLogger(__name__)

BUILD_KIND = "live"
"""``build["kind"]`` of a reference built from task suites by scoring models."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedModel:
    """A ``--models`` entry: ``[NAME=]SPEC``."""

    model_id: str
    """Name in the reference (default: the file stem or the last path / hub-id component)."""
    spec: ModelSpec
    text: str
    """The spec as typed, without the name."""


def parse_named_models(texts: Sequence[str], *, field: str = "--models") -> tuple[NamedModel, ...]:
    """Parse ``[NAME=]SPEC`` strings; duplicate names and ``replay:`` specs are refused.

    Examples
    --------
    >>> [m.model_id for m in parse_named_models(["gguf:/m/smollm2-135m.gguf", "big=hf:org/model"])]
    ['smollm2-135m', 'big']
    """
    models = []
    for text in texts:
        name, sep, rest = text.partition("=")
        if not sep or ":" in name:
            name, rest = "", text
        spec = parse_model_spec(rest)
        if spec.kind == "replay":
            raise InputError(f"{text!r}: replay models have no weights to score", field=field,
                             allowed=["gguf:FILE", "hf:PATH_OR_ID"])
        target = Path(spec.target)
        model_id = name or (target.stem if spec.kind == "gguf" else target.name or spec.target)
        models.append(NamedModel(model_id=model_id, spec=spec, text=rest))
    names = [m.model_id for m in models]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"model names {dup} appear twice (name them with NAME=SPEC)", field=field)
    return tuple(models)


def check_model_files(models: Sequence[NamedModel], *, field: str = "--models") -> None:
    """Refuse, before any model is loaded, specs whose local files are missing (all listed)."""
    missing = []
    for model in models:
        path = Path(model.spec.target).expanduser()
        local = model.spec.kind == "gguf" or model.spec.target.startswith(("/", ".", "~"))
        if local and not path.exists():
            missing.append(f"{model.model_id} ({path})")
        elif model.spec.kind == "gguf" and not path.is_file():
            missing.append(f"{model.model_id} ({path} is not a file)")
    if missing:
        raise InputError(f"model files not found: {', '.join(missing)}", field=field)


def select_example_ids(task: LiveTask, *, seed: int, n_examples: int | None) -> tuple[str, ...]:
    """The first ``n_examples`` ids of the task's seeded order (all when ``None``)."""
    return nested_prefix(example_order(task.example_ids, seed=seed, task_name=task.name), n_examples)


def prompt_digests(tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *, seed: int,
                   prefix_space: bool) -> dict[str, str]:
    """Per task, :func:`flasheval.live.task_prompt_digest` of the given examples' requests."""
    return {t.name: task_prompt_digest(build_example_requests(t, example_ids[t.name], seed=seed,
                                                              prefix_space=prefix_space)) for t in tasks}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSettings:
    """The manifest's ``build`` dict of a built reference: what a placement must reproduce."""

    suite: str
    tasks: tuple[str, ...]
    seed: int
    """Fixes each task's example order and every example's few-shot set."""
    n_examples: int | None
    """Examples per task (first N of the seeded order); ``None`` = all."""
    prefix_space: bool
    dtype: str
    task_sha256: Mapping[str, str]
    """SHA-256 of each task file."""
    prompt_digests: Mapping[str, str]
    """Per task, the digest of every reference example's requests."""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per model: ``spec``, ``fingerprint``, ``n_parameters``."""
    task_dir: str = ""
    """Where the task files were read (a default for placements; the checksums decide)."""
    flasheval_version: str = __version__
    scoring_version: str = SCORING_VERSION

    def __post_init__(self) -> None:
        if self.n_examples is not None and self.n_examples < 1:
            raise InputError(f"must be >= 1, got {self.n_examples}", field="--n-examples")
        if set(self.task_sha256) != set(self.tasks) or set(self.prompt_digests) != set(self.tasks):
            raise ValueError("task_sha256 and prompt_digests must cover exactly the tasks")

    def to_json(self) -> dict[str, Any]:
        return {"kind": BUILD_KIND, "suite": self.suite, "tasks": list(self.tasks), "seed": self.seed,
                "n_examples": self.n_examples, "prefix_space": self.prefix_space, "dtype": self.dtype,
                "task_sha256": dict(self.task_sha256), "prompt_digests": dict(self.prompt_digests),
                "models": {k: dict(v) for k, v in self.models.items()}, "task_dir": self.task_dir,
                "flasheval_version": self.flasheval_version, "scoring_version": self.scoring_version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, *, where: str) -> BuildSettings:
        """Settings from a manifest's ``build`` dict; refuses references not built by scoring models."""
        if not data or data.get("kind") != BUILD_KIND:
            raise InputError(f"reference {where!r} was not built by 'flasheval reference build', so live models "
                             "cannot be placed on it (replay:MODEL places one of its own models)", field="--reference")
        try:
            return cls(suite=data["suite"], tasks=tuple(data["tasks"]), seed=int(data["seed"]),
                       n_examples=data["n_examples"], prefix_space=bool(data["prefix_space"]), dtype=data["dtype"],
                       task_sha256=data["task_sha256"], prompt_digests=data["prompt_digests"],
                       models=data.get("models", {}), task_dir=data.get("task_dir", ""),
                       flasheval_version=data.get("flasheval_version", ""),
                       scoring_version=str(data.get("scoring_version", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed build settings ({type(exc).__name__}: {exc})", path=where,
                             field="build") from None


def check_task_files(settings: BuildSettings, tasks: Sequence[LiveTask], *, where: str) -> None:
    """Refuse task files whose SHA-256 differs from the reference's (all differing tasks listed)."""
    changed = [t.name for t in tasks if settings.task_sha256.get(t.name) != t.sha256]
    if changed:
        raise InputError(f"task files differ from those reference {where!r} was built with: {', '.join(changed)} "
                         "(use the same task directory, or rebuild the reference)", field="--task-dir")


def open_cached_backend(model: NamedModel, store_dir: Path, *, dtype: str, device: str = "auto",
                        batch_size: int = 32, max_length: int | None = None) -> tuple[CachedBackend, ResultStore, Any]:
    """Load a model and wrap it in the results store (data-parallel under ``accelerate launch``).

    Returns the cached backend, its store (close it when done) and the loaded backend.
    """
    backend = open_backend(model.spec, dtype=dtype, device=device, batch_size=batch_size, max_length=max_length)
    runner: Any = backend
    is_main = True
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from flasheval.backends import DistributedBackend

        runner = DistributedBackend(backend, progress=True)
        is_main = runner.state.is_main_process
    store = ResultStore(store_dir, fingerprint=backend.fingerprint, writer=is_main)
    return CachedBackend(runner, store), store, backend


def n_parameters(backend: Any) -> int | None:
    """Parameters of a loaded Hugging Face backend's model (``None`` when unknown)."""
    model = getattr(backend, "_model", None)
    return None if model is None else int(sum(p.numel() for p in model.parameters()))


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
                    device: str = "auto", batch_size: int = 32, task_dir: str = "") -> BuildResult:
    """Score every model on every task's selected examples (through the store) and collect the results."""
    check_model_files(models)
    example_ids = {t.name: select_example_ids(t, seed=seed, n_examples=n_examples) for t in tasks}
    rows, outcomes, seconds, computed, fingerprints = [], {}, {}, {}, {}
    for model in models:
        start = time.perf_counter()
        logger.info("loading %s (%s, %s)", model.model_id, model.text, dtype)
        cached, store, backend = open_cached_backend(model, store_dir, dtype=dtype, device=device, batch_size=batch_size)
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
    settings = BuildSettings(
        suite=suite, tasks=tuple(t.name for t in tasks), seed=seed, n_examples=n_examples, prefix_space=prefix_space,
        dtype=dtype, task_sha256={t.name: t.sha256 for t in tasks},
        prompt_digests=prompt_digests(tasks, example_ids, seed=seed, prefix_space=prefix_space),
        models=fingerprints, task_dir=task_dir)
    return BuildResult(settings=settings, frame=pd.DataFrame(rows), outcomes=outcomes, seconds=seconds,
                       computed=computed)


def check_prompts(settings: BuildSettings, tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *,
                  where: str) -> None:
    """Refuse when the prompts rebuilt here for the reference's examples differ from the reference's.

    Same task files but different prompts means the prompt code changed (another flasheval
    version): the comparison would no longer be paired.
    """
    names = [t.name for t in tasks]
    if sorted(names) != sorted(settings.tasks):
        raise InputError(f"reference {where!r} covers tasks {sorted(settings.tasks)}, not {sorted(names)}",
                         field="--reference")
    digests = prompt_digests(tasks, example_ids, seed=settings.seed, prefix_space=settings.prefix_space)
    changed = [n for n in names if digests[n] != settings.prompt_digests.get(n)]
    if changed:
        raise InputError(f"prompts rebuilt for {', '.join(changed)} differ from those reference {where!r} was built "
                         f"with (built by flasheval {settings.flasheval_version or '?'}, this is {__version__}); "
                         "rebuild the reference", field="--reference")
