"""The engine: requests in, log-likelihoods and generations out, never losing finished work.

One job per module, in three sub-packages and a few modules of its own:

* :mod:`~flasheval.engine.base`        — the batch-first backend protocol and what a backend reports (``BackendInfo``);
* :mod:`~flasheval.engine.specs`       — ``--model`` strings (``hf:`` / ``gguf:`` / ``replay:``, ``[NAME=]SPEC``);
* :mod:`~flasheval.engine.registry`    — the one table of spec prefixes and the loader of each (adding a backend);
* :mod:`~flasheval.engine.loading`     — open a model (a spec's, or one held in memory), alone or behind the results store;
* :mod:`~flasheval.engine.planning`, :mod:`~flasheval.engine.batching` — requests -> items -> context groups -> batches (no torch);
* :mod:`~flasheval.engine.devices`, :mod:`~flasheval.engine.throughput`, :mod:`~flasheval.engine.progress_bar` —
  device names, throughput figures, the per-batch bar;
* :mod:`flasheval.engine.hf` — the Hugging Face backend (``backend``), its loading (``loading``, ``deferred``,
  ``gguf_cache``), forward passes (``forward``, ``packed``, ``generation``, ``backoff``), device maps, numerics
  (``mixed_precision``), a model held in memory (``in_memory``) and model identity (``fingerprint``, ``weights_digest``);
* :mod:`flasheval.engine.store` — the crash-safe results store and caching wrapper (``results``), its shards
  (``shards``), its journal (``journal``), results under an earlier key adopted (``adoption``);
* :mod:`flasheval.engine.coordination` — process coordination: ``distributed="main"|"all"`` over the caller's group
  (``distributed``), sharded models in lockstep (``lockstep``), the group's settings (``process_group``).

Importing this package does NOT import torch, transformers or accelerate.
"""

from __future__ import annotations

from flasheval.engine.base import SCORING_VERSION, Backend, BackendInfo, OnResults, TokenBackend
from flasheval.engine.coordination.distributed import DistributedBackend, request_id
from flasheval.engine.loading import BackendModel, n_parameters, open_backend, open_cached_backend
from flasheval.engine.specs import (
    SPEC_PREFIXES,
    ModelSpec,
    NamedModel,
    check_model_files,
    parse_model_spec,
    parse_named_models,
)
from flasheval.engine.store.results import CachedBackend, ResultStore

__all__ = [
    "Backend",
    "BackendInfo",
    "BackendModel",
    "TokenBackend",
    "OnResults",
    "SCORING_VERSION",
    "CachedBackend",
    "ResultStore",
    "DistributedBackend",
    "request_id",
    "ModelSpec",
    "NamedModel",
    "parse_model_spec",
    "parse_named_models",
    "check_model_files",
    "SPEC_PREFIXES",
    "open_backend",
    "open_cached_backend",
    "n_parameters",
]
