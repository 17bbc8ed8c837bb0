"""The engine: requests in, log-likelihoods and generations out, never losing finished work.

One job per module:

* :mod:`~flasheval.engine.base`        — the batch-first backend protocol and what a backend reports (``BackendInfo``);
* :mod:`~flasheval.engine.specs`       — ``--model`` strings (``hf:`` / ``gguf:`` / ``replay:``, ``[NAME=]SPEC``);
* :mod:`~flasheval.engine.loading`     — open a model (a spec's, or one held in memory), alone or behind the results store;
* :mod:`~flasheval.engine.in_memory`   — a loaded ``transformers`` model scored in place: identity, eval mode;
* :mod:`~flasheval.engine.hf`          — the Hugging Face backend, over the modules below (torch imported lazily);
* :mod:`~flasheval.engine.planning`    — the HF backend's requests -> items -> context groups -> batches (no torch);
* :mod:`~flasheval.engine.backoff`     — the out-of-memory back-off scoring and generation share;
* :mod:`~flasheval.engine.hf_forward`  — the scoring forward pass (shared context, or unpadded per request);
* :mod:`~flasheval.engine.hf_packed`   — the packed scoring pass (a group's choices side by side in one row);
* :mod:`~flasheval.engine.hf_generation` — greedy generation batches;
* :mod:`~flasheval.engine.hf_loading`  — load a local folder, GGUF file or hub id into the HF backend;
* :mod:`~flasheval.engine.deferred`    — a spec's model opened without its weights (loaded on the first miss);
* :mod:`~flasheval.engine.device_map`  — models larger than one GPU: device maps, memory caps, offload, replica slices;
* :mod:`~flasheval.engine.fingerprint` — what keys a model's results: its files, dtype and run settings;
* :mod:`~flasheval.engine.store`       — the crash-safe results store and the caching wrapper;
* :mod:`~flasheval.engine.store_shards` — the store's files: one shard per model, the old single file's migration;
* :mod:`~flasheval.engine.store_adoption` — results stored under the earlier key (no run settings), adopted once;
* :mod:`~flasheval.engine.journal`     — the durable append-only journal both stores write;
* :mod:`~flasheval.engine.distributed` — ``distributed="main"|"all"``: data parallelism over the caller's process group;
* :mod:`~flasheval.engine.lockstep`    — sharded models (FSDP, ZeRO-3): every process in every forward pass;
* :mod:`~flasheval.engine.progress_bar` — the per-batch bar (stderr, main process, terminals only);

Importing this package does NOT import torch, transformers or accelerate.
"""

from __future__ import annotations

from flasheval.engine.base import SCORING_VERSION, Backend, BackendInfo, OnResults
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
    "BackendInfo",
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
