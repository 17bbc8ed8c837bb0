"""A model the caller already holds (a training loop's ``transformers`` model): scored in place.

:class:`LoadedModel` names an already loaded causal LM and its tokenizer; nothing is written to
disk to score it. Its results are keyed in a results store by the ``identity`` the caller gives
(a run name and step, say): the same identity serves the same stored results, so a rerun resumes.
Without an identity the results are kept for one call only (a fingerprint no other call can
produce), never guessed from the object: two checkpoints of one run look alike to any guess.

While it is scored the model is in eval mode (dropout off) under ``torch.inference_mode()``;
:func:`scoring_mode` hands it back in the mode it came in. The model stays on its device and in
its dtype: a reference pinned to another dtype is refused by the caller before any scoring.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flasheval.engine.fingerprint import RunSettings
from flasheval.errors import InputError

__all__ = ["LoadedModel", "is_transformers_model", "scoring_mode", "in_memory_fingerprint"]


def is_transformers_model(obj: object) -> bool:
    """Whether ``obj`` looks like a loaded ``transformers`` causal LM (a torch module with a config)."""
    return hasattr(obj, "config") and callable(getattr(obj, "parameters", None)) and callable(getattr(obj, "eval", None))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LoadedModel:
    """An already loaded ``transformers`` causal LM and its tokenizer.

    Examples
    --------
    ``LoadedModel(model=model, tokenizer=tokenizer, identity="run-7/step-1200")``; pass it (or the
    model with ``tokenizer=`` and ``identity=``) to :func:`flasheval.place`.
    """

    model: Any
    """A ``transformers`` causal LM (any device, any dtype)."""
    tokenizer: Any
    """Its tokenizer."""
    identity: str | None = None
    """What keys its stored results (e.g. ``"run-7/step-1200"``); ``None``: kept for one call only."""
    name: str | None = None
    """Model id in results (default: the identity, else ``"in-memory"``)."""

    def __post_init__(self) -> None:
        if not is_transformers_model(self.model):
            raise InputError(f"expected a loaded transformers model, got {type(self.model).__name__}", field="model")
        if self.tokenizer is None or not callable(self.tokenizer):
            raise InputError("an in-memory model needs its tokenizer", field="tokenizer")
        for label, value in (("identity", self.identity), ("name", self.name)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InputError(f"must be a non-empty string, got {value!r}", field=label)

    @property
    def model_id(self) -> str:
        """The model's name in results and records."""
        return self.name or self.identity or "in-memory"

    @property
    def dtype(self) -> str:
        """The dtype of the model's first parameter, as a name (``float32``, ``bfloat16``, ...)."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @property
    def text(self) -> str:
        """How records name where the model came from."""
        return f"memory:{self.identity}" if self.identity else "memory:(this call only)"


def in_memory_fingerprint(loaded: LoadedModel, *, max_length: int, scoring_version: str,
                          settings: RunSettings | None) -> str:
    """The fingerprint its results are stored under: its identity and the settings that change numbers.

    Without an identity, a random one: the results serve this call and no other. ``settings``: the run
    settings (device type, attention, library versions, padding); ``None`` gives the key of earlier
    releases, which left them out (their stores are adopted once, :mod:`flasheval.engine.store_adoption`).
    """
    from flasheval.engine.fingerprint import model_fingerprint

    identity = loaded.identity or f"one-call-{uuid.uuid4().hex}"
    return model_fingerprint(source=f"memory:{identity}", content_digest=None, revision=None, dtype=loaded.dtype,
                             max_length=max_length, scoring_version=scoring_version, settings=settings)


@contextmanager
def scoring_mode(model: Any) -> Iterator[None]:
    """Eval mode under ``torch.inference_mode()`` for the block; the model's own mode restored after.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Dropout(0.5).train()
    >>> with scoring_mode(net):
    ...     net.training
    False
    >>> net.training
    True
    """
    import torch

    was_training = bool(model.training)
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)
