"""What a reference's models were scored with, as one protocol: score a new model the same way.

A reference that live models can be placed on records, in its manifest's ``build`` dict, how
its models were scored; ``build["kind"]`` picks the engine, and place, sweep and any other
caller take the same path for both:

* ``live`` (``flasheval reference build``): DCLM / llm-foundry task files scored by flasheval's
  prompts and rules -> :class:`TaskFileScoring` (checked by :func:`flasheval.reference.live.prepare_live`);
* ``lm-eval`` (``reference build --engine lm-eval`` or imported lm-eval logs): lm-eval tasks scored
  through lm-eval's task code -> :class:`LmEvalScoring` (checked by
  :func:`flasheval.reference.lmeval_live.prepare_lmeval_live`).

:func:`prepare_scoring` runs every check that needs no weights (options that apply to the
engine, seed, dtype, task files or configs) and returns a :class:`ScoringSetup`; its
``open(model, store_dir, ...)`` loads the model behind its results store and returns an
:class:`OpenedScorer`, the controller's scorer plus what a run record says of it. A reference build opens
its models the same way (:func:`open_task_files`, :func:`open_lmeval`; the loop is
:mod:`flasheval.reference.building`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from flasheval.checks import check_count, check_dtype, check_seed
from flasheval.engine.hf.device_map import DeviceMap, device_map_from
from flasheval.engine.devices import check_device
from flasheval.engine.hf.in_memory import LoadedModel
from flasheval.engine.loading import BackendModel, n_parameters, open_cached_backend
from flasheval.engine.specs import NamedModel
from flasheval.errors import InputError
from flasheval.reference.scoring.scorers import LiveScorer
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.reference.live import LiveSetup, prepare_live
from flasheval.reference.lmeval_live import LmEvalLiveSetup, is_lmeval_reference, prepare_lmeval_live
from flasheval.tasks import LiveTask

__all__ = ["LiveOptions", "OpenedScorer", "ModelOpener", "ScoringSetup", "TaskFileScoring", "LmEvalScoring",
           "prepare_scoring", "open_task_files", "open_lmeval"]


LiveModel = NamedModel | LoadedModel | BackendModel
"""A model to score now: a spec's weights, a model the caller holds in memory, or a backend the caller opened."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveOptions:
    """How a live model is scored against a reference; each option is refused where it does not apply.

    ``None`` means "the reference's" (seed, dtype, task directory, include path, few-shot count).
    """

    seed: int | None = None
    dtype: str | None = None
    task_dir: str | None = None
    """DCLM-format references only: where the task files are (default: the folder recorded at build)."""
    include_path: str | None = None
    """lm-eval references only: custom task YAMLs (default: the reference's)."""
    num_fewshot: int | None = None
    """lm-eval references only: must equal the reference's few-shot counts."""
    device: str | None = None
    """``auto`` (default), ``cpu``, ``cuda``, ``cuda:N``; not for in-memory models (they stay where they are)."""
    batch_size: int | None = None
    """Continuations per forward pass (``None``: chosen for the device, :func:`~flasheval.engine.batching.auto_limits`)."""
    device_map: DeviceMap | None = None
    """Spread a spec's model over this replica's GPUs, CPU memory and disk (:mod:`flasheval.engine.hf.device_map`);
    not for in-memory models."""

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            check_count(self.batch_size, field="--batch-size")
        check_seed(self.seed)
        for option, path in (("--task-dir", self.task_dir), ("--include-path", self.include_path)):
            if path is not None and not str(path).strip():
                raise InputError("empty path; name a folder", field=option)
        if self.dtype is not None:
            check_dtype(self.dtype)
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or self.num_fewshot < 0):
            raise InputError(f"must be an integer >= 0, got {self.num_fewshot!r}", field="--num-fewshot")
        check_device(self.device)
        if self.device_map is not None:
            if not isinstance(self.device_map, DeviceMap):
                raise InputError("expected a DeviceMap (see device_map_from)", field="--device-map")
            device_map_from(self.device_map, device=self.device)  # no explicit device beside it

    def check_model(self, model: LiveModel) -> None:
        """Refuse options that do not apply to ``model`` (before anything loads)."""
        if isinstance(model, LoadedModel) and self.device is not None:
            raise InputError("an in-memory model is scored on the device it is on; move it there instead",
                             field="--device")
        if isinstance(model, LoadedModel) and self.device_map is not None:
            raise InputError("an in-memory model runs where it is: load it with device_map= yourself",
                             field="--device-map")
        if isinstance(model, BackendModel):
            given = [f for f, v in (("--device", self.device), ("--device-map", self.device_map),
                                    ("--batch-size", self.batch_size)) if v is not None]
            if given:
                raise InputError("a backend runs as it was opened (its device, batch size and length)",
                                 field=given[0])


class OpenedScorer:
    """A live model opened behind its results store, as the controller's scorer.

    A spec's weights load on the first request the store cannot answer
    (:class:`~flasheval.engine.hf.deferred.DeferredBackend`): a placement served entirely by the store
    loads nothing.

    Attributes
    ----------
    scorer
        The :class:`~flasheval.reference.scoring.scorers.ExampleScorer` (``asked_json()``, ``examples_json()``).
    fingerprint
        What keys the model's stored results.
    backend
        The model's backend (a :class:`~flasheval.engine.hf.deferred.DeferredBackend` for a spec, an
        :class:`~flasheval.engine.hf.backend.HFBackend` for a model held in memory).
    """

    __slots__ = ("scorer", "fingerprint", "_open_seconds", "backend", "_cached", "_close")

    def __init__(self, scorer: Any, *, fingerprint: str, load_seconds: float, backend: Any, cached: Any,
                 close: Any) -> None:
        self.scorer = scorer
        self.fingerprint = fingerprint
        self._open_seconds = load_seconds
        self.backend = backend
        self._cached = cached
        self._close = close

    @property
    def load_seconds(self) -> float:
        """Wall seconds opening took, plus the weights' load when they have loaded."""
        return self._open_seconds + self.backend.info.load_seconds

    @property
    def is_loaded(self) -> bool:
        """Whether the model's weights are in memory (a model held in memory always is)."""
        return self.backend.info.is_loaded

    @property
    def forward_seconds(self) -> float:
        """Seconds the model spent in its forward passes since it was opened (0.0 when nothing was computed)."""
        return self.backend.info.forward_seconds

    @property
    def forward_tokens(self) -> int:
        """Tokens those forward passes ran."""
        return self.backend.info.forward_tokens

    @property
    def n_parameters(self) -> int | None:
        return self.scorer.n_parameters

    @property
    def requests_computed(self) -> int:
        """Requests computed (not read from the store) since the model was opened."""
        return int(self._cached.n_computed)

    def close(self) -> None:
        """Close the results store (release its writer lock)."""
        self._close()


def open_task_files(model: LiveModel, store_dir: Path, *, tasks: Sequence[LiveTask], seed: int, prefix_space: bool,
                    dtype: str, options: LiveOptions, state: Any = None, n_params: int | None = None) -> OpenedScorer:
    """Open ``model`` behind its results store as a :class:`~flasheval.reference.scoring.scorers.LiveScorer` of DCLM-format
    ``tasks`` (placement and reference build alike)."""
    start = time.perf_counter()
    cached, store, backend = open_cached_backend(model, store_dir, dtype=dtype, device=options.device or "auto",
                                                 batch_size=options.batch_size, state=state,
                                                 device_map=options.device_map)
    scorer = LiveScorer(cached, tasks, seed=seed, prefix_space=prefix_space,
                        n_parameters=n_params if n_params is not None else n_parameters(backend))
    return OpenedScorer(scorer, fingerprint=cached.fingerprint, load_seconds=time.perf_counter() - start,
                        backend=backend, cached=cached, close=store.close)


def open_lmeval(model: LiveModel, store_dir: Path, *, dtype: str, options: LiveOptions, state: Any,
                scorer: Callable[[Any, int | None], Any]) -> OpenedScorer:
    """Open ``model`` behind its results store as an lm-eval model; ``scorer(lm, n_parameters)`` makes the scorer
    over it (placement and reference build alike). lm-eval must be installed."""
    from flasheval.lmeval.loading import open_lmeval_model

    start = time.perf_counter()
    opened = open_lmeval_model(model, store_dir, dtype=dtype, device=options.device or "auto",
                               batch_size=options.batch_size, state=state, progress_bar=False,  # stage lines
                               device_map=options.device_map)
    return OpenedScorer(scorer(opened.lm, opened.n_parameters), fingerprint=opened.cached.fingerprint,
                        load_seconds=time.perf_counter() - start, backend=opened.backend, cached=opened.cached,
                        close=opened.close)


class ModelOpener(Protocol):
    """What every engine does first, for a placement and a reference build alike: open a live model behind its
    results store as an :class:`OpenedScorer` (:class:`ScoringSetup`,
    :class:`~flasheval.reference.building.BuildSetup`)."""

    engine: str
    """``flasheval`` (DCLM-format task files) or ``lm-eval``."""
    dtype: str
    """The dtype models are scored in (the reference's where it pins one)."""

    def open(self, model: LiveModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
             n_params: int | None = None) -> OpenedScorer:
        """Load ``model`` behind the results store in ``store_dir``."""
        ...


class ScoringSetup(ModelOpener, Protocol):
    """A checked reference, ready to score live models the way its own models were scored."""

    reference: ReferenceLeaderboard
    seed: int
    """The placement seed (example order; on DCLM-format references also the few-shot sets)."""

    def describe(self) -> str:
        """How the engine scores, for a progress line (``""`` for task files, ``through lm-eval 0.4.13 tasks``)."""
        ...

    def record_settings(self) -> dict[str, Any]:
        """What a run record says of the engine and its settings."""
        ...

    def with_reference(self, reference: ReferenceLeaderboard) -> ScoringSetup:
        """The same setup on a subset of the reference (held-out models, fewer datasets)."""
        ...


def _check_dtype(model: LiveModel, dtype: str, where: str) -> None:
    have = model.backend.info.dtype if isinstance(model, BackendModel) else None
    if have is not None and have != dtype:
        raise InputError(f"the backend computes in {have}; reference {where!r} is scored in {dtype} (open it in "
                         f"{dtype})", field="--dtype")
    if isinstance(model, LoadedModel) and model.dtype != dtype:
        raise InputError(f"the model is in {model.dtype}; reference {where!r} is scored in {dtype} (cast it, e.g. "
                         f"model.to(torch.{dtype}), or score it against a reference built in {model.dtype})",
                         field="--dtype")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFileScoring:
    """A reference built from DCLM-format task files (``build.kind == "live"``)."""

    live: LiveSetup
    reference: ReferenceLeaderboard
    engine: str = "flasheval"

    @property
    def seed(self) -> int:
        return self.live.seed

    @property
    def dtype(self) -> str:
        return self.live.dtype

    def open(self, model: LiveModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
             n_params: int | None = None) -> OpenedScorer:
        _check_dtype(model, self.dtype, self.reference.name)
        return open_task_files(model, store_dir, tasks=self.live.tasks, seed=self.seed,
                               prefix_space=self.live.settings.prefix_space, dtype=self.dtype, options=options,
                               state=state, n_params=n_params)

    def describe(self) -> str:
        return ""

    def record_settings(self) -> dict[str, Any]:
        return {"task_dir": self.live.task_dir}

    def with_reference(self, reference: ReferenceLeaderboard) -> TaskFileScoring:
        return TaskFileScoring(live=self.live, reference=reference)


@dataclass(frozen=True, slots=True, kw_only=True)
class LmEvalScoring:
    """A reference scored through lm-eval's task code (``build.kind == "lm-eval"``)."""

    lmeval: LmEvalLiveSetup
    reference: ReferenceLeaderboard
    seed: int
    dtype: str
    engine: str = "lm-eval"

    def open(self, model: LiveModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
             n_params: int | None = None) -> OpenedScorer:
        from flasheval.lmeval import require_lm_eval

        require_lm_eval()
        from flasheval.reference.scoring.lmeval import LmEvalScorer

        _check_dtype(model, self.dtype, self.reference.name)

        def scorer(lm: Any, size: int | None) -> LmEvalScorer:
            return LmEvalScorer(lm, self.lmeval.settings, include_path=self.lmeval.include_path,
                                n_parameters=n_params if n_params is not None else size)

        return open_lmeval(model, store_dir, dtype=self.dtype, options=options, state=state, scorer=scorer)

    def describe(self) -> str:
        return f"through lm-eval {self.lmeval.settings.lm_eval_version} tasks"

    def record_settings(self) -> dict[str, Any]:
        return {"include_path": self.lmeval.include_path, "lm_eval_version": self.lmeval.settings.lm_eval_version}

    def with_reference(self, reference: ReferenceLeaderboard) -> LmEvalScoring:
        return LmEvalScoring(lmeval=self.lmeval, reference=reference, seed=self.seed, dtype=self.dtype)


def _refuse(options: LiveOptions, names: tuple[str, ...], kind: str) -> None:
    for name in names:
        if getattr(options, name) is not None:
            raise InputError(f"applies to {kind} references only", field="--" + name.replace("_", "-"))


def prepare_scoring(reference: ReferenceLeaderboard, options: LiveOptions) -> ScoringSetup:
    """Check that live models can be scored on ``reference`` as its models were; refuse in one line.

    The reference's ``build.kind`` picks the engine; an option of the other engine is refused.
    Nothing is loaded: every check here runs before any weights do.
    """
    if is_lmeval_reference(reference):
        _refuse(options, ("task_dir",), "DCLM-format (flasheval reference build)")
        lmeval = prepare_lmeval_live(reference, include_path=options.include_path, num_fewshot=options.num_fewshot)
        pinned = lmeval.settings.dtype
        if pinned is not None and options.dtype is not None and options.dtype != pinned:
            raise InputError(f"reference {reference.name!r} was built in {pinned}; placing in {options.dtype} would "
                             "not be comparable (omit --dtype)", field="--dtype")
        dtype = pinned or options.dtype or "float32"
        return LmEvalScoring(lmeval=lmeval, reference=reference, seed=options.seed or 0, dtype=dtype)
    _refuse(options, ("include_path", "num_fewshot"), "lm-eval")
    live = prepare_live(reference, seed=options.seed, dtype=options.dtype, task_dir=options.task_dir)
    return TaskFileScoring(live=live, reference=live.reference)

