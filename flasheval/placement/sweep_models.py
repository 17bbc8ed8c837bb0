"""The live checkpoints of a sweep, at most ``max_loaded`` of them in memory at once.

A sweep's rounds switch between checkpoints all the time, but a checkpoint only needs its
weights while a round scores it. :class:`CheckpointPool` loads a checkpoint when a round first
asks it for examples, keeps the ``max_loaded`` most recently used ones and evicts the least
recently used (its request store closed, its weights freed) before loading another. Nothing is
computed twice: the sweep's example store serves every finished example without asking the
model (a fully resumed sweep loads nothing), and each checkpoint's request store
(``<run folder>/models/<name>/``) serves every finished request after a reload.

Under ``accelerate launch`` every process runs the same rounds from the same scores, so every
process loads and evicts the same checkpoints in the same order; each load goes through the
engine's one data-parallel runner (:func:`flasheval.engine.distributed.cached_runner`).
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flasheval.engine.loading import n_parameters, open_cached_backend
from flasheval.engine.specs import NamedModel
from flasheval.errors import InputError
from flasheval.placement.scorers import LiveScorer
from flasheval.placement.sweep_run import MODELS_DIR
from flasheval.records import slug
from flasheval.reference.live import LiveSetup

__all__ = ["CheckpointPool"]

logger = logging.getLogger(__name__)


class _Loaded:
    """One checkpoint in memory: its model behind its request store."""

    __slots__ = ("cached", "store")

    def __init__(self, cached: Any, store: Any) -> None:
        self.cached = cached
        self.store = store


class _PooledBackend:
    """The :class:`~flasheval.engine.base.Backend` a checkpoint's scorer sees: loads on first use."""

    def __init__(self, pool: CheckpointPool, model_id: str) -> None:
        self._pool = pool
        self._model_id = model_id

    @property
    def fingerprint(self) -> str:
        return self._pool.backend(self._model_id).fingerprint

    def loglikelihood(self, requests: Sequence[Any], **kwargs: Any) -> list[Any]:
        return self._pool.backend(self._model_id).loglikelihood(requests, **kwargs)

    def generate(self, requests: Sequence[Any], **kwargs: Any) -> list[Any]:
        return self._pool.backend(self._model_id).generate(requests, **kwargs)

    def loglikelihood_rolling(self, requests: Sequence[Any], **kwargs: Any) -> list[Any]:
        return self._pool.backend(self._model_id).loglikelihood_rolling(requests, **kwargs)


class CheckpointPool:
    """Live checkpoints of a sweep, loaded on demand, at most ``max_loaded`` at once (LRU).

    Parameters
    ----------
    models
        The checkpoints.
    out
        The sweep's run folder (request stores go to ``out/models/<name>/``).
    setup
        The built reference's live setup (tasks, seed, dtype, prompt spacing).
    device, batch_size
        As for ``place``.
    max_loaded
        Most checkpoints held in memory together.
    state
        The launch's process state (``None`` for one process).
    opener
        Loads one checkpoint behind its request store; :func:`~flasheval.engine.loading.open_cached_backend`'s
        signature and result.

    Attributes
    ----------
    scorers
        ``{model_id: LiveScorer}`` for the sweep (each loads its checkpoint when first asked).
    peak_loaded
        Most checkpoints that were in memory at the same time.
    """

    def __init__(self, models: Sequence[NamedModel], out: Path, setup: LiveSetup, *, device: str, batch_size: int,
                 max_loaded: int, state: Any = None, opener: Callable[..., tuple[Any, Any, Any]] = open_cached_backend,
                 ) -> None:
        if max_loaded < 1:
            raise InputError(f"must be >= 1, got {max_loaded}", field="--max-loaded")
        self._models = {m.model_id: m for m in models}
        self._out, self._setup, self._state, self._opener = out, setup, state, opener
        self._options = {"dtype": setup.dtype, "device": device, "batch_size": batch_size}
        self.max_loaded = max_loaded
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()
        self.peak_loaded = 0
        self.loads = dict.fromkeys(self._models, 0)
        self.load_seconds = dict.fromkeys(self._models, 0.0)
        self.fingerprints: dict[str, str | None] = dict.fromkeys(self._models)
        self._computed = dict.fromkeys(self._models, 0)
        self.scorers = {m: LiveScorer(_PooledBackend(self, m), setup.tasks, seed=setup.seed,
                                      prefix_space=setup.settings.prefix_space) for m in self._models}

    def backend(self, model_id: str) -> Any:
        """The checkpoint's cached backend, loaded now (evicting the least recently used) if needed."""
        if model_id in self._loaded:
            self._loaded.move_to_end(model_id)
            return self._loaded[model_id].cached
        while len(self._loaded) >= self.max_loaded:
            self._evict(next(iter(self._loaded)))
        model = self._models[model_id]
        start = time.perf_counter()
        cached, store, backend = self._opener(model, self._out / MODELS_DIR / slug(model_id), state=self._state,
                                              **self._options)
        self._loaded[model_id] = _Loaded(cached, store)
        self.peak_loaded = max(self.peak_loaded, len(self._loaded))
        self.loads[model_id] += 1
        self.load_seconds[model_id] += time.perf_counter() - start
        self.fingerprints[model_id] = cached.fingerprint
        self.scorers[model_id].n_parameters = n_parameters(backend)
        logger.info("loaded %s (load %d, %.1f s)", model_id, self.loads[model_id], time.perf_counter() - start)
        return cached

    def _evict(self, model_id: str) -> None:
        """Close the checkpoint's request store and free its weights."""
        loaded = self._loaded.pop(model_id)
        self._computed[model_id] += loaded.cached.n_computed
        loaded.store.close()
        del loaded
        gc.collect()
        torch = sys.modules.get("torch")  # loaded with the first model; never imported here
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        logger.info("unloaded %s", model_id)

    def requests_computed(self, model_id: str) -> int:
        """Requests the checkpoint computed in this run, over all its loads."""
        loaded = self._loaded.get(model_id)
        return self._computed[model_id] + (0 if loaded is None else loaded.cached.n_computed)

    def close(self) -> None:
        """Unload every checkpoint (closes their request stores)."""
        for model_id in list(self._loaded):
            self._evict(model_id)

    def __enter__(self) -> CheckpointPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def checkpoint_json(self, model_id: str) -> dict[str, Any]:
        """The checkpoint's entry under ``live.checkpoints`` of the sweep record."""
        return {"spec": self._models[model_id].text, "fingerprint": self.fingerprints[model_id],
                "loads": self.loads[model_id], "load_seconds": self.load_seconds[model_id],
                "requests_computed": self.requests_computed(model_id), "asked": self.scorers[model_id].asked_json()}
