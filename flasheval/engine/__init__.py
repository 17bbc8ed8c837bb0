"""The engine: requests in, log-likelihoods and generations out, never losing finished work.

One job per module:

* :mod:`~flasheval.engine.base`        — the batch-first backend protocol;
* :mod:`~flasheval.engine.specs`       — ``--model`` strings (``hf:`` / ``gguf:`` / ``replay:``, ``[NAME=]SPEC``);
* :mod:`~flasheval.engine.loading`     — open a spec's model, alone or behind the results store;
* :mod:`~flasheval.engine.hf`          — the Hugging Face backend (torch imported only here, lazily);
* :mod:`~flasheval.engine.fingerprint` — what identifies a model's weights in the store;
* :mod:`~flasheval.engine.store`       — the crash-safe results store and the caching wrapper;
* :mod:`~flasheval.engine.journal`     — the durable append-only journal both stores write;
* :mod:`~flasheval.engine.distributed` — data parallelism under ``accelerate launch``;
* :mod:`~flasheval.engine.evaluate`    — task examples -> requests -> backend -> per-example scores.

Importing this package does NOT import torch, transformers or accelerate.
"""

from __future__ import annotations

from flasheval.engine.base import SCORING_VERSION, Backend, OnResults
from flasheval.engine.distributed import DistributedBackend, request_id
from flasheval.engine.loading import n_parameters, open_backend, open_cached_backend
from flasheval.engine.specs import (
    SPEC_PREFIXES,
    ModelSpec,
    NamedModel,
    check_model_files,
    parse_model_spec,
    parse_named_models,
)
from flasheval.engine.store import CachedBackend, ResultStore

__all__ = [
    "Backend",
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
