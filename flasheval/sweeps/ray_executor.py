"""A live sweep's checkpoints on a Ray cluster: the scorers the sweep sees and the executor that serves its rounds.

:class:`RemoteCheckpoints` stands where :class:`~flasheval.sweeps.models.CheckpointPool` stands in a sweep served in
this process: ``scorers`` for the sweep, ``checkpoint_json`` for the record. It is also the sweep's
:class:`~flasheval.sweeps.executor.Executor`: :meth:`RemoteCheckpoints.serve` asks each request's
:class:`~flasheval.sweeps.store.StoredScorer` what its store lacks (:meth:`~flasheval.sweeps.store.StoredScorer.missing`),
has every checkpoint's missing examples scored at once on the actors of a
:class:`~flasheval.cluster.pool.ModelPool` (one checkpoint per actor, opened once from its spec; in the round's
priority order when there are more checkpoints than actors), and puts the scores in the run folder's store here
(:meth:`~flasheval.sweeps.store.StoredScorer.settle`), in the round's order: the driver is the one writer, so the
store is the one an in-process sweep writes, whatever the number of actors and the order the scores come back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flasheval.cluster.executor import RayExecutor, weights_bytes
from flasheval.cluster.pool import Held, InTempStore, Job, ModelPool
from flasheval.engine.specs import NamedModel
from flasheval.reference.scoring.scorers import OneTask, ScoredExamples
from flasheval.sweeps.rounds import Round

__all__ = ["RemoteCheckpoints", "score_asks"]


def score_asks(held: Held, asks: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[ScoredExamples], str, int]:
    """In the actor: the opened checkpoint's scores of ``asks`` (one ``score_many`` call), its fingerprint and the
    requests it computed for them."""
    opened = held.opened
    before = opened.requests_computed
    answers = list(opened.scorer.score_many(asks))
    return answers, opened.fingerprint, opened.requests_computed - before


class _RemoteScorer(OneTask):
    """A checkpoint as the sweep sees it; its examples are scored by :meth:`RemoteCheckpoints.serve`."""

    def __init__(self, owner: RemoteCheckpoints, model_id: str) -> None:
        self._owner, self._model_id = owner, model_id
        self.n_parameters: int | None = None
        self.requests: list[tuple[str, tuple[str, ...]]] = []

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        return self._owner.score(self._model_id, asks)


class RemoteCheckpoints:
    """Live checkpoints of a sweep held by Ray actors, and the executor of its rounds (module docstring).

    Parameters
    ----------
    models
        The checkpoints (specs: a model held in memory or an opened backend stays in its process).
    opener
        ``opener(model)``: what opens ``model`` behind a results store in a given folder, in the actor
        (picklable; the reference's :meth:`ScoringSetup.open <flasheval.reference.scoring.live.ScoringSetup.open>`
        with its options bound).
    executor
        The cluster and each checkpoint's resources.
    """

    def __init__(self, models: Sequence[NamedModel], opener: Callable[[NamedModel], Callable[[Path], Any]],
                 executor: RayExecutor) -> None:
        self._models = {m.model_id: m for m in models}
        self._openers = {m.model_id: InTempStore(opener(m)) for m in models}
        self.pool = ModelPool(executor, n_models=len(models), what="sweep on Ray",
                              memory_bytes=max(weights_bytes(m.spec.target) for m in models))
        self.max_loaded = self.pool.n_actors
        self.scorers = {m: _RemoteScorer(self, m) for m in self._models}
        self.fingerprints: dict[str, str | None] = dict.fromkeys(self._models)
        self._computed = dict.fromkeys(self._models, 0)

    def serve(self, round_: Round, scorers: Mapping[str, Any]) -> list[list[ScoredExamples]]:
        """Each request's scores, in the round's order (:meth:`Executor.serve <flasheval.sweeps.executor.Executor.serve>`):
        ``scorers`` are the run folder's :class:`~flasheval.sweeps.store.StoredScorer` around :attr:`scorers`."""
        planned = [(r, scorers[r.model_id], scorers[r.model_id].missing(r.asks)) for r in round_.requests]
        jobs = [Job(key=r.model_id, opener=self._openers[r.model_id], fn=score_asks, args=(missing,))
                for r, _, missing in planned if missing]
        values = iter(self.pool.run(jobs))
        out = []
        for request, stored, missing in planned:
            answers: list[ScoredExamples] = []
            if missing:
                answers = self._took(request.model_id, missing, next(values))
            out.append(stored.settle(request.asks, missing, answers))
        return out

    def score(self, model_id: str, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        """One checkpoint's ``asks`` scored on its actor (a call outside :meth:`serve`)."""
        job = Job(key=model_id, opener=self._openers[model_id], fn=score_asks, args=(asks,))
        return self._took(model_id, asks, self.pool.run([job])[0])

    def _took(self, model_id: str, asks: Sequence[tuple[str, Sequence[str]]], value: Any) -> list[ScoredExamples]:
        answers, self.fingerprints[model_id], computed = value
        self._computed[model_id] += computed
        self.scorers[model_id].requests.extend((task_name, tuple(ids)) for task_name, ids in asks)
        return answers

    def checkpoint_json(self, model_id: str) -> dict[str, Any]:
        """The checkpoint's entry under ``live.checkpoints`` of the sweep record (as a sweep in this process writes
        it; ``loads`` and ``load_seconds``: its opens on the actors)."""
        return {"spec": self._models[model_id].text, "fingerprint": self.fingerprints[model_id],
                "loads": self.pool.stats.loads.get(model_id, 0),
                "load_seconds": self.pool.stats.load_seconds.get(model_id, 0.0),
                "requests_computed": self._computed[model_id],
                "asked": [{"task_name": t, "example_ids": list(ids)} for t, ids in self.scorers[model_id].requests]}

    def close(self) -> None:
        """Unload every checkpoint and stop the actors."""
        self.pool.close()

    def __enter__(self) -> RemoteCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
