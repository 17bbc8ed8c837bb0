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
engine's one data-parallel runner (:func:`flasheval.engine.coordination.distributed.cached_runner`). A checkpoint
is opened by the reference's :class:`~flasheval.reference.scoring.live.ScoringSetup`, so DCLM-format
and lm-eval references share this pool.
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

from flasheval.errors import InputError
from flasheval.reference.scoring.live import LiveModel, OpenedScorer
from flasheval.reference.scoring.scorers import OneTask, ScoredExamples
from flasheval.sweeps.folder import MODELS_DIR
from flasheval.records.run_record import slug

__all__ = ["CheckpointPool"]

logger = logging.getLogger(__name__)

Opener = Callable[[LiveModel, Path], OpenedScorer]
"""Loads one checkpoint behind the request store of a folder (``ScoringSetup.open`` with its options bound)."""


class _PooledScorer(OneTask):
    """The scorer a sweep sees for one checkpoint: loads it on first use, logs what was asked across loads.

    A look's asks go to the loaded checkpoint's scorer in one ``score_many`` call."""

    def __init__(self, pool: CheckpointPool, model_id: str) -> None:
        self._pool = pool
        self._model_id = model_id
        self.n_parameters: int | None = None
        self.requests: list[tuple[str, tuple[str, ...]]] = []

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        opened = self._pool.opened(self._model_id)
        self.requests.extend((task_name, tuple(ids)) for task_name, ids in asks)
        return list(opened.scorer.score_many(asks))

    def asked_json(self) -> list[dict[str, Any]]:
        """Every ``(task_name, example_ids)`` asked, as run records store them."""
        return [{"task_name": t, "example_ids": list(ids)} for t, ids in self.requests]


class CheckpointPool:
    """Live checkpoints of a sweep, loaded on demand, at most ``max_loaded`` at once (LRU).

    Parameters
    ----------
    models
        The checkpoints (spec models or in-memory ones).
    out
        The sweep's run folder (request stores go to ``out/models/<name>/``).
    opener
        Loads one checkpoint behind the request store of a folder: the reference's
        :meth:`ScoringSetup.open <flasheval.reference.scoring.live.ScoringSetup.open>` with its options bound.
    max_loaded
        Most checkpoints held in memory together.

    Attributes
    ----------
    scorers
        ``{model_id: scorer}`` for the sweep (each loads its checkpoint when first asked).
    peak_loaded
        Most checkpoints that were in memory at the same time.
    """

    def __init__(self, models: Sequence[LiveModel], out: Path, opener: Opener, *, max_loaded: int) -> None:
        if isinstance(max_loaded, bool) or not isinstance(max_loaded, int) or max_loaded < 1:
            raise InputError(f"must be an integer >= 1, got {max_loaded!r}", field="--max-loaded")
        self._models = {m.model_id: m for m in models}
        self._out, self._opener = out, opener
        self.max_loaded = max_loaded
        self._loaded: OrderedDict[str, OpenedScorer] = OrderedDict()
        self.peak_loaded = 0
        self.loads = dict.fromkeys(self._models, 0)
        self.load_seconds = dict.fromkeys(self._models, 0.0)
        self.fingerprints: dict[str, str | None] = dict.fromkeys(self._models)
        self._computed = dict.fromkeys(self._models, 0)
        self.scorers = {m: _PooledScorer(self, m) for m in self._models}

    def opened(self, model_id: str) -> OpenedScorer:
        """The checkpoint, loaded now (evicting the least recently used) if needed."""
        if model_id in self._loaded:
            self._loaded.move_to_end(model_id)
            return self._loaded[model_id]
        while len(self._loaded) >= self.max_loaded:
            self._evict(next(iter(self._loaded)))
        start = time.perf_counter()
        opened = self._opener(self._models[model_id], self._out / MODELS_DIR / slug(model_id))
        self._loaded[model_id] = opened
        self.peak_loaded = max(self.peak_loaded, len(self._loaded))
        self.loads[model_id] += 1
        self.fingerprints[model_id] = opened.fingerprint
        self.scorers[model_id].n_parameters = opened.n_parameters
        logger.info("opened %s (open %d, %.1f s)", model_id, self.loads[model_id], time.perf_counter() - start)
        return opened

    def _evict(self, model_id: str) -> None:
        """Close the checkpoint's request store and free its weights."""
        opened = self._loaded.pop(model_id)
        self._computed[model_id] += opened.requests_computed
        self.load_seconds[model_id] += opened.load_seconds  # opening, and the weights' load if a request needed them
        opened.close()
        del opened
        gc.collect()
        torch = sys.modules.get("torch")  # loaded with the first model; never imported here
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        logger.info("unloaded %s", model_id)

    def requests_computed(self, model_id: str) -> int:
        """Requests the checkpoint computed in this run, over all its loads."""
        opened = self._loaded.get(model_id)
        return self._computed[model_id] + (0 if opened is None else opened.requests_computed)

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
