"""A spec's model opened without its weights: they load on the first request the results store cannot answer.

Which stored results are a model's is decided by its fingerprint, and the fingerprint needs only the
model's files and config (:func:`~flasheval.engine.hf.loading.plan_hf_load`), so a rerun whose every
request is in the store never loads the weights: :class:`DeferredBackend` answers ``fingerprint``,
``tokenizer`` and its :class:`~flasheval.engine.base.BackendInfo` (prefix space, parameters, dtype, device)
from the plan and tokenizer, and loads the weights (:func:`~flasheval.engine.hf.loading.load_planned`)
the first time a request has to be computed (or, told to :meth:`~DeferredBackend.stay_unloaded`, raises
:class:`NotStored`: a driver that has what its store lacks computed elsewhere). Only the contract's methods are offered: nothing of the
loaded backend is forwarded by name (its private parts stay its own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from flasheval.engine.base import BackendInfo, Collective, OnLoad, OnResults
from flasheval.engine.batching import auto_limits
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.planning import prefix_space
from flasheval.errors import BackendError
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["DeferredBackend", "NotStored"]

logger = logging.getLogger(__name__)


class NotStored(Exception):
    """A request had to be computed by a :class:`DeferredBackend` told to :meth:`~DeferredBackend.stay_unloaded`."""


class DeferredBackend:
    """The :class:`~flasheval.engine.hf.backend.HFBackend` of a planned load, loaded on first use.

    Parameters
    ----------
    plan
        :func:`~flasheval.engine.hf.loading.plan_hf_load`'s plan (fingerprint, config, device, dtype).
    batch_size, share_context
        Passed to the backend when it loads.
    source
        The spec the plan was made from (:attr:`~flasheval.engine.base.BackendInfo.source`).

    Callbacks given to :meth:`notify_load` are called with the load's wall seconds when the weights have loaded.
    """

    def __init__(self, plan: Any, *, batch_size: int | None = None, share_context: bool = True,
                 source: str | None = None) -> None:
        from flasheval.engine.hf.loading import load_tokenizer

        self._plan = plan
        self._batch_size = batch_size
        self._share_context = share_context
        self._source = source
        self._tokenizer = load_tokenizer(plan)
        self._backend: HFBackend | None = None
        self._prefix_space: bool | None = None  # asked of the tokenizer on first use
        self._load_seconds = 0.0
        self._on_load: list[OnLoad] = []
        self._stay_unloaded = False

    def stay_unloaded(self) -> None:
        """From now on a request the store cannot answer raises :class:`NotStored` instead of loading the weights
        (what the store holds is still served): how a driver learns, without loading, whether its store answers
        a model entirely (:func:`~flasheval.reference.building.build_on_ray`)."""
        self._stay_unloaded = True

    @property
    def fingerprint(self) -> str:
        """The model fingerprint (known before the weights load)."""
        return self._plan.fingerprint

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_length(self) -> int:
        return self._plan.max_length

    @property
    def info(self) -> BackendInfo:
        """What the backend reports (:class:`~flasheval.engine.base.BackendInfo`), known before the weights load:
        the batch size (the loaded backend's, smaller after an out-of-memory back-off), the dtype the weights
        load in (``auto`` resolved), the parameters (counted on an empty copy when the plan was made)."""
        if self._prefix_space is None:
            self._prefix_space = prefix_space(self._tokenizer)
        loaded = None if self._backend is None else self._backend.info
        return BackendInfo(
            prefix_space=self._prefix_space,
            batch_size=(self._batch_size or auto_limits(self._plan.device.type)[0]) if loaded is None else loaded.batch_size,
            is_loaded=loaded is not None,
            load_seconds=self._load_seconds,
            n_parameters=self._plan.n_parameters if loaded is None else loaded.n_parameters,
            dtype=self._plan.dtype_name,
            device=str(self._plan.device),
            forward_seconds=0.0 if loaded is None else loaded.forward_seconds,
            forward_tokens=0 if loaded is None else loaded.forward_tokens,
            previous_fingerprint=self._plan.previous_fingerprint,
            max_length=self._plan.max_length,
            source=self._source,
        )

    @property
    def backend(self) -> HFBackend:
        """The loaded backend (the weights load now, the first time)."""
        if self._backend is None:
            if self._stay_unloaded:
                raise NotStored(f"{self._plan.source}: a request is not in the results store")
            from flasheval.engine.hf.loading import load_planned

            start = time.perf_counter()
            logger.info("loading the weights of %s (a request is not in the store)", self._plan.source)
            backend = load_planned(self._plan, tokenizer=self._tokenizer, batch_size=self._batch_size,
                                   share_context=self._share_context, source=self._source)
            if backend.fingerprint != self._plan.fingerprint:  # load_planned keys by the plan: a guard, never expected
                raise BackendError(f"model {self._plan.source!r} loaded with another fingerprint than planned")
            self._backend = backend
            self._load_seconds = time.perf_counter() - start
            for callback in self._on_load:
                callback(self._load_seconds)
        return self._backend

    def notify_load(self, callback: OnLoad) -> None:
        """Call ``callback(seconds)`` when the weights have loaded (each load: after a :meth:`release`, again)."""
        self._on_load.append(callback)

    def lockstep(self, collective: Collective) -> AbstractContextManager[None]:
        """A null context: a spec's model is loaded whole on each process, its passes its own (no weights load)."""
        return nullcontext()

    def release(self) -> None:
        """Drop the loaded weights (a later request loads them again), e.g. before loading another copy."""
        if self._backend is None:
            return
        on_cuda = str(self._backend.info.device).startswith("cuda")
        self._backend = None
        if on_cuda:
            import torch

            torch.cuda.empty_cache()

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """See :meth:`HFBackend.plan_batches <flasheval.engine.hf.backend.HFBackend.plan_batches>` (loads the weights)."""
        return self.backend.plan_batches(requests)

    def plan_token_batches(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, ...]]:
        return self.backend.plan_token_batches(pairs)

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest], *,
                      on_results: OnResults | None = None) -> list[LoglikelihoodResult]:
        return self.backend.loglikelihood(requests, on_results=on_results)

    def loglikelihood_tokens(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                             on_results: OnResults | None = None) -> list[tuple[float, bool]]:
        return self.backend.loglikelihood_tokens(pairs, on_results=on_results)

    def loglikelihood_rolling(self, requests: Sequence[RollingLoglikelihoodRequest], *,
                              on_results: OnResults | None = None) -> list[RollingLoglikelihoodResult]:
        return self.backend.loglikelihood_rolling(requests, on_results=on_results)

    def generate(self, requests: Sequence[GenerationRequest], *,
                 on_results: OnResults | None = None) -> list[GenerationResult]:
        return self.backend.generate(requests, on_results=on_results)
