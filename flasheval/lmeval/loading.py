"""Open a model spec as an lm-eval model (:class:`~flasheval.lmeval.model.FlashevalLM`) behind the results store.

The stack is the one ``flasheval evaluate`` uses, with lm-eval's conventions in the middle:
``CachedBackend(DistributedBackend(LmEvalConventionBackend(HFBackend)))``. The store makes a
killed run resume from its last finished batch; under ``accelerate launch`` the work is split
across processes and only the main process writes the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.loading import n_parameters, open_backend
from flasheval.engine.specs import NamedModel
from flasheval.engine.store import CachedBackend, ResultStore
from flasheval.lmeval.conventions import LmEvalConventionBackend, resolve_lmeval_max_length
from flasheval.lmeval.model import FlashevalLM

__all__ = ["OpenedModel", "open_lmeval_model"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class OpenedModel:
    """A model opened for lm-eval: the lm-eval model, its store (close it when done) and counts."""

    lm: FlashevalLM
    cached: CachedBackend
    """The store-backed backend (``n_computed``: requests computed rather than read from the store)."""
    store: ResultStore
    n_parameters: int | None
    is_main_process: bool

    def close(self) -> None:
        """Close the results store (release its writer lock)."""
        self.store.close()


def open_lmeval_model(model: NamedModel, store_dir: Path, *, dtype: str = "float32", device: str = "auto",
                      batch_size: int = 32, max_length: int | None = None) -> OpenedModel:
    """Load ``model`` and wrap it as an lm-eval model behind the results store in ``store_dir``.

    ``max_length`` is lm-eval's maximum input length (default: what lm-eval's HF backend reads
    from the model's config); the HF backend is opened to keep one more token, as lm-eval does.
    """
    length = max_length or resolve_lmeval_max_length(model.spec)
    hf = open_backend(model.spec, dtype=dtype, device=device, batch_size=batch_size, max_length=length + 1)
    runner: Any = LmEvalConventionBackend(hf, max_length=length)
    is_main = True
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from flasheval.engine.distributed import DistributedBackend

        runner = DistributedBackend(runner, progress=True)
        is_main = runner.state.is_main_process
        if is_main:
            store = ResultStore(store_dir, fingerprint=runner.fingerprint)
        runner.state.wait_for_everyone()  # the main process opens (and repairs) the store before anyone reads it
        if not is_main:
            store = ResultStore(store_dir, fingerprint=runner.fingerprint, writer=False)
    else:
        store = ResultStore(store_dir, fingerprint=runner.fingerprint)
    cached = CachedBackend(runner, store)
    lm = FlashevalLM(cached, tokenizer=hf.tokenizer, max_length=length, model_id=model.model_id)
    return OpenedModel(lm=lm, cached=cached, store=store, n_parameters=n_parameters(hf), is_main_process=is_main)
