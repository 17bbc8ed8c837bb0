"""Open a model as an lm-eval model (:class:`~flasheval.lmeval.model.FlashevalLM`) behind the results store.

The stack is the one ``flasheval evaluate`` uses, with lm-eval's conventions in the middle:
``CachedBackend(DistributedBackend(LmEvalConventionBackend(HFBackend)))``. The store makes a
killed run resume from its last finished batch; under ``accelerate launch`` the work is split
across the processes of ``distributed="all"`` and only the main process writes the store (the engine's one runner,
:func:`flasheval.engine.loading.behind_store`). The model is a spec's weights or one the caller
holds in memory (:class:`~flasheval.engine.hf.in_memory.LoadedModel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.hf.device_map import DeviceMap
from flasheval.engine.coordination.distributed import is_main
from flasheval.engine.hf.in_memory import LoadedModel
from flasheval.engine.base import TokenBackend
from flasheval.engine.loading import BackendModel, behind_store, n_parameters, open_model
from flasheval.engine.specs import NamedModel
from flasheval.engine.store.results import CachedBackend, ResultStore
from flasheval.errors import InputError
from flasheval.lmeval.conventions import LmEvalConventionBackend, lmeval_max_length, resolve_lmeval_max_length
from flasheval.lmeval.model import FlashevalLM

__all__ = ["OpenedModel", "open_lmeval_model"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class OpenedModel:
    """A model opened for lm-eval: the lm-eval model, its store (close it when done) and counts."""

    lm: FlashevalLM
    cached: CachedBackend
    """The store-backed backend (``n_computed``: requests computed rather than read from the store)."""
    store: ResultStore
    backend: Any
    """The loaded Hugging Face backend under lm-eval's conventions."""
    n_parameters: int | None
    is_main_process: bool

    def close(self) -> None:
        """Close the results store (release its writer lock)."""
        self.store.close()


def open_lmeval_model(model: NamedModel | LoadedModel | BackendModel, store_dir: Path, *, dtype: str = "float32",
                      device: str = "auto", batch_size: int | None = None, max_length: int | None = None,
                      state: Any = None, progress_bar: bool | None = None,
                      device_map: DeviceMap | None = None) -> OpenedModel:
    """Load ``model`` and wrap it as an lm-eval model behind the results store in ``store_dir``.

    ``max_length`` is lm-eval's maximum input length (default: what lm-eval's HF backend reads
    from the model's config); the HF backend is opened to keep one more token, as lm-eval does.
    ``state``: the :class:`~flasheval.engine.coordination.distributed.Processes` scoring together (``None``: this process
    alone; :func:`~flasheval.engine.coordination.distributed.processes`). ``progress_bar``: the lm-eval model's
    per-batch bar (:class:`~flasheval.lmeval.model.FlashevalLM`), on the main process only. A spec's
    weights load on the first request the store cannot answer; ``device_map`` spreads them over this
    replica's devices (:mod:`flasheval.engine.hf.device_map`).
    """
    if isinstance(model, BackendModel) and not isinstance(model.backend, TokenBackend):
        raise InputError(f"{type(model.backend).__name__} scores no token ids: lm-eval's conventions need a TokenBackend "
                         "(tokenizer, plan_token_batches, loglikelihood_tokens)", field="--model")
    if max_length is not None:
        length = max_length
    elif isinstance(model, BackendModel):
        keeps = model.backend.info.max_length
        length = keeps - 1 if keeps is not None and keeps > 1 else lmeval_max_length({}, None)
    elif isinstance(model, LoadedModel):
        length = lmeval_max_length(model.module.config.to_dict(), getattr(model.tokenizer, "model_max_length", None))
    else:
        length = resolve_lmeval_max_length(model.spec)
    hf = open_model(model, dtype=dtype, device=device, batch_size=batch_size, max_length=length + 1,
                    device_map=device_map, record_in=store_dir if is_main(state) else None,
                    state=state)
    cached, store = behind_store(LmEvalConventionBackend(hf, max_length=length), store_dir, state)
    main = is_main(state)
    lm = FlashevalLM(cached, tokenizer=hf.tokenizer,  # type: ignore[attr-defined]  # every one here is a TokenBackend
                     max_length=length, model_id=model.model_id, progress_bar=progress_bar if main else False,
                     processes=state)
    return OpenedModel(lm=lm, cached=cached, store=store, backend=hf, n_parameters=n_parameters(hf),
                       is_main_process=main)
