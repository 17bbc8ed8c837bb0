"""Model backends: the batch-first protocol, the Hugging Face backend, the results store and
data parallelism.

Importing this package does NOT import torch, transformers or accelerate: the Hugging Face
backend lives in :mod:`flasheval.backends.hf` and is imported only when a model is opened
(:func:`open_backend`).
"""

from __future__ import annotations

from typing import Any

from flasheval.backends.base import SCORING_VERSION, Backend, OnResults
from flasheval.backends.distributed import DistributedBackend, request_id
from flasheval.backends.specs import SPEC_PREFIXES, ModelSpec, parse_model_spec
from flasheval.backends.store import CachedBackend, ResultStore

__all__ = [
    "Backend",
    "OnResults",
    "SCORING_VERSION",
    "CachedBackend",
    "ResultStore",
    "DistributedBackend",
    "request_id",
    "ModelSpec",
    "parse_model_spec",
    "SPEC_PREFIXES",
    "open_backend",
]


def open_backend(spec: ModelSpec, **options: Any) -> Backend:
    """Load the model a ``hf:`` / ``gguf:`` spec names (options: see :func:`~flasheval.backends.hf.load_hf_backend`).

    ``replay:`` specs serve scores, not log-likelihoods; they are opened by the placement code.
    """
    from flasheval.errors import InputError

    if spec.kind == "replay":
        raise InputError("replay: models serve recorded scores; use them with placement commands", field="--model")
    from flasheval.backends.hf import load_hf_backend

    if spec.kind == "gguf":
        from pathlib import Path

        path = Path(spec.target).expanduser()
        return load_hf_backend(str(path.parent), gguf_file=path.name, **options)
    return load_hf_backend(spec.target, revision=spec.revision, **options)
