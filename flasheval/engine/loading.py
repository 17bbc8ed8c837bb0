"""Open a model (a spec's, or one held in memory): the backend, and the backend behind the results store.

Importing this module does NOT import torch, transformers or accelerate: the Hugging Face
backend (:mod:`flasheval.engine.hf.backend`) is imported only when a model is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.base import Backend
from flasheval.engine.hf.device_map import DeviceMap
from flasheval.engine.coordination.distributed import cached_runner, collective, is_main, layout_of, open_shared_store
from flasheval.engine.hf.in_memory import LoadedModel, in_memory_fingerprint
from flasheval.engine.registry import BACKENDS
from flasheval.engine.specs import ModelSpec, NamedModel, parse_named_models
from flasheval.engine.store.results import CachedBackend, ResultStore
from flasheval.engine.hf.weights_digest import digest_under, note_identity, weights_digest
from flasheval.errors import BackendError, InputError
from flasheval.hashing import stable_hash

__all__ = ["BackendModel", "open_backend", "open_model", "behind_store", "open_cached_backend", "n_parameters", "placed_weights_digest",
           "compared_digests"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class BackendModel:
    """A backend the caller already opened (any object of the :class:`~flasheval.engine.base.Backend` protocol),
    scored as it is: its own dtype, device, batch size and maximum length; its results keyed by its fingerprint.

    Examples
    --------
    ``flasheval.place(open_backend(parse_model_spec("hf:PATH"), dtype="float32"), ...)`` (a bare backend is
    made into one) gives the record the spec ``"hf:PATH"`` gives.
    """

    backend: Backend
    """The backend."""
    name: str | None = None
    """Model id in results (default: the one its spec would have, :attr:`~flasheval.engine.base.BackendInfo.source`;
    ``"backend"`` when it names none)."""

    def __post_init__(self) -> None:
        if not isinstance(self.backend, Backend):
            raise InputError(f"{type(self.backend).__name__} is not a backend (see flasheval.engine.base.Backend)",
                             field="model")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise InputError(f"must be a non-empty string, got {self.name!r}", field="name")

    @property
    def model_id(self) -> str:
        """The model's name in results and records."""
        source = self.backend.info.source
        return self.name or (parse_named_models([source])[0].model_id if source else "backend")

    @property
    def text(self) -> str:
        """How records name where the model came from: its spec, else ``backend:FINGERPRINT``."""
        return self.backend.info.source or f"backend:{self.backend.fingerprint}"


def open_backend(spec: ModelSpec, *, deferred: bool = False, **options: Any) -> Backend:
    """Open the model ``spec`` names with its prefix's loader (:data:`~flasheval.engine.registry.BACKENDS`).

    ``deferred``: a backend that loads its weights on the first request the results store cannot answer.
    ``options``: ``dtype``, ``device``, ``batch_size``, ``max_length``, ``device_map``, ``layout`` (for ``hf:`` /
    ``gguf:``, see :func:`~flasheval.engine.hf.loading.load_hf_backend`). A prefix without a loader (``replay:``
    serves recorded scores, opened by the placement code) is refused in one line.
    """
    loader = BACKENDS[spec.kind].open
    if loader is None:
        raise InputError(f"{spec.kind}: models serve recorded scores; use them with placement commands",
                         field="--model")
    return loader(spec.target, revision=spec.revision, deferred=deferred, **options)


def open_model(model: NamedModel | LoadedModel | BackendModel, *, dtype: str, device: str = "auto", batch_size: int | None = None,
               max_length: int | None = None, device_map: DeviceMap | None = None,
               record_in: Path | None = None, state: Any = None) -> Backend:
    """The backend of a spec's model, of a model the caller holds (used as it is), or the caller's own backend.

    A spec's model is opened without its weights (:class:`~flasheval.engine.hf.deferred.DeferredBackend`:
    its config, tokenizer and fingerprint now; the weights when the first request has to be computed),
    so a rerun the results store answers entirely never loads them. An in-memory model keeps its
    device and dtype: ``dtype`` is checked against the model's own (``auto`` accepts any); its
    results are keyed by its identity and a digest of its weights (:mod:`flasheval.engine.hf.in_memory`,
    :mod:`flasheval.engine.hf.weights_digest`); ``record_in``: the store folder where the identity's record is
    kept, to warn when it held other weights (give it on the process that writes the store only).
    ``device_map`` spreads a spec's model over this replica's devices (:mod:`flasheval.engine.hf.device_map`);
    an in-memory model stays where it is (one already dispatched with a device map is scored as it is).
    ``state``: the processes scoring together (:func:`~flasheval.engine.coordination.distributed.processes`; ``None``: this one):
    a spec's device follows this process's place among them (:func:`~flasheval.engine.coordination.distributed.layout_of`); an
    in-memory model's digest is agreed on by all of them (each digests the shard it holds: see :func:`_agreed`).
    """
    if isinstance(model, BackendModel):
        return _as_given(model, dtype=dtype, device_map=device_map)
    if isinstance(model, NamedModel):
        return open_backend(model.spec, deferred=True, dtype=dtype, device=device, batch_size=batch_size,
                            max_length=max_length, device_map=device_map, layout=layout_of(state))
    if device_map is not None:
        raise InputError("an in-memory model runs where it is: load it with device_map= yourself",
                         field="--device-map")
    if dtype != "auto" and dtype != model.dtype:
        raise InputError(f"the model is in {model.dtype}, not {dtype}: cast it first (e.g. model.to(torch.{dtype}))",
                         field="--dtype")
    from flasheval.engine.base import SCORING_VERSION
    from flasheval.engine.hf.backend import HFBackend
    from flasheval.engine.hf.forward import compute_dtype, default_pad_multiple
    from flasheval.engine.hf.loading import model_settings

    length = int(max_length or getattr(model.module.config, "max_position_embeddings", None) or 2048)
    settings = model_settings(model.module, pad_multiple=default_pad_multiple(compute_dtype(model.model)))
    key = {"max_length": length, "scoring_version": SCORING_VERSION}
    digest = None
    if model.identity is not None:  # without one the results serve this call only: nothing to tell apart
        digest = _agreed(weights_digest(model.model), state)  # the runner's: what the forward passes go through
    fingerprint = in_memory_fingerprint(model, **key, settings=settings, digest=digest)
    if digest is not None and record_in is not None:
        note_identity(record_in, model.identity, digest, key=fingerprint)
    # No previous key: results stored before the weights' digest was part of the key (or under a digest of
    # another formula) cannot say which weights computed them, so none are adopted: they are scored afresh.
    return HFBackend(model.model, model.tokenizer, batch_size=batch_size, max_length=length,
                     pad_multiple=settings.pad_multiple, previous_fingerprint=None, fingerprint=fingerprint)


def _as_given(model: BackendModel, *, dtype: str, device_map: DeviceMap | None) -> Backend:
    """The caller's backend, when the dtype asked is its own (``auto``: any); it runs where it is."""
    if device_map is not None:
        raise InputError("a backend runs where it was opened: open it with its device map", field="--device-map")
    have = model.backend.info.dtype
    if dtype != "auto" and have is not None and dtype != have:
        raise InputError(f"the backend computes in {have}, not {dtype}: open it in {dtype}", field="--dtype")
    return model.backend


def behind_store(backend: Backend, store_dir: Path, state: Any = None, *,
                 progress: bool | None = False) -> tuple[CachedBackend, ResultStore]:
    """``backend`` behind the results store of ``store_dir``; data-parallel when ``state`` holds several processes.

    ``progress``: the data-parallel runner's per-batch bar (off by default: the callers report
    their own steps). Results an earlier release stored under the model's previous key are adopted
    once (:mod:`flasheval.engine.store.adoption`). Close the returned store when done.
    """
    if state is None:
        store = open_shared_store(store_dir, backend.fingerprint, None, previous=backend.info.previous_fingerprint)
        return CachedBackend(backend, store), store
    return cached_runner(backend, store_dir, state, progress=progress)


def _agreed(digest: str, state: Any) -> str:
    """One digest for every process scoring together: this one's when all agree (replicas of the same weights,
    as under DDP, key as one process would), else a hash of every process's in rank order (shards: a change
    to any of them is another key). Collective when ``state`` has several processes."""
    if state is None or state.num_processes == 1:
        return digest
    import torch.distributed as dist

    everyone: list[Any] = [None] * state.num_processes
    with collective(state, "agreeing on the digest of the weights"):
        dist.all_gather_object(everyone, digest)
    return digest if len(set(everyone)) == 1 else stable_hash(everyone, n_chars=len(digest))


def open_cached_backend(model: NamedModel | LoadedModel | BackendModel, store_dir: Path, *, dtype: str, device: str = "auto",
                        batch_size: int | None = None, max_length: int | None = None, state: Any = None,
                        device_map: DeviceMap | None = None) -> tuple[CachedBackend, ResultStore, Any]:
    """Open a model (:func:`open_model`) behind the results store (data-parallel over ``state``'s processes).

    ``state``: the :class:`~flasheval.engine.coordination.distributed.Processes` scoring together
    (:func:`~flasheval.engine.coordination.distributed.processes`); ``None``, this process alone. Returns the cached
    backend, its store (close it when done) and the loaded backend.
    """
    backend = open_model(model, dtype=dtype, device=device, batch_size=batch_size, max_length=max_length,
                         device_map=device_map, record_in=store_dir if is_main(state) else None,
                         state=state)
    cached, store = behind_store(backend, store_dir, state)
    return cached, store, backend


def n_parameters(backend: Backend) -> int | None:
    """Parameters of a backend's model (``None`` when it cannot tell): its :class:`~flasheval.engine.base.BackendInfo`'s
    (a deferred backend counted them on an empty copy, without loading its weights)."""
    return backend.info.n_parameters


def placed_weights_digest(live: Any, store_dir: Path, *, load: bool = False) -> str | None:
    """The weights digest (:func:`~flasheval.engine.hf.weights_digest.weights_digest`) of what computed a place
    record's results, from its ``live`` entry; ``None`` when it cannot be told.

    The entry's own ``weights_digest`` when it has one. An in-memory model's: the digest its identity's record in
    the store ``store_dir`` keeps for its fingerprint (:func:`~flasheval.engine.hf.weights_digest.digest_under`). With
    ``load``, an ``hf:`` spec's: its weights loaded on the CPU and digested (one load, one read of the weights), but
    only when the model the spec names now, in the entry's dtype, has the entry's fingerprint (the same files and
    run settings: the weights that computed). Anything else (``gguf:``, another fingerprint now): ``None``.
    """
    if not isinstance(live, dict):
        return None
    spec, fingerprint, digest = live.get("spec"), live.get("fingerprint"), live.get("weights_digest")
    if isinstance(digest, str) or not isinstance(spec, str) or not isinstance(fingerprint, str):
        return digest if isinstance(digest, str) else None
    if spec.startswith("memory:"):
        return digest_under(store_dir, spec.removeprefix("memory:"), fingerprint)
    if not (load and spec.startswith("hf:")):
        return None
    from flasheval.engine.hf.loading import _from_pretrained, plan_hf_load
    from flasheval.engine.specs import parse_model_spec

    try:
        parsed = parse_model_spec(spec)
        plan = plan_hf_load(parsed.target, revision=parsed.revision, dtype=str(live.get("dtype", "auto")))
        if plan.fingerprint != fingerprint:
            return None
        model = _from_pretrained("AutoModelForCausalLM", plan.source, None, plan.revision, config=plan.config,
                                 dtype=plan.torch_dtype)
    except (InputError, BackendError):
        return None
    return weights_digest(model)


def compared_digests(before: Any, now: Any, store_dir: Path) -> tuple[str | None, str | None]:
    """The weights digests of two place records' ``live`` entries (:func:`placed_weights_digest`), to tell whether
    the same weights computed both: a spec's weights are loaded for it only when the other side's digest is known."""
    was, digest = placed_weights_digest(before, store_dir), placed_weights_digest(now, store_dir)
    if was is not None and digest is None:
        digest = placed_weights_digest(now, store_dir, load=True)
    elif digest is not None and was is None:
        was = placed_weights_digest(before, store_dir, load=True)
    return was, digest
