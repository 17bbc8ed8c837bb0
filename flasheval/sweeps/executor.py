"""Who serves a sweep's rounds: the :class:`Executor` protocol and the in-process executor (the default).

The scheduler (:func:`flasheval.sweeps.schedule.sweep`) plans a :class:`~flasheval.sweeps.rounds.Round`
(:func:`~flasheval.sweeps.rounds.plan_round`, pure), hands it to an executor, and feeds each controller the
scores that come back. An executor decides only where and in which order a round's requests run: each
request is one checkpoint's look, served by that checkpoint's scorer in ONE ``score_many`` call; the
scores of an example do not depend on who served it or when, so every executor gives the same sweep.
A request is idempotent: a scorer behind the run folder's store
(:class:`~flasheval.sweeps.store.StoredScorer`) answers what it already holds and computes the rest once,
so a request served again (after a crash, or by another worker) spends nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from flasheval.reference.scoring.scorers import ExampleScorer, ScoredExamples
from flasheval.sweeps.rounds import Round

__all__ = ["Executor", "InProcessExecutor"]


@runtime_checkable
class Executor(Protocol):
    """Serves a sweep's rounds: submit a round, get each request's scores back."""

    def serve(self, round_: Round, scorers: Mapping[str, ExampleScorer]) -> Sequence[Sequence[ScoredExamples]]:
        """Each request's scores, in the order of ``round_.requests``.

        Parameters
        ----------
        round_
            The requests (at most one per checkpoint), in priority order.
        scorers
            ``{model_id: scorer}``, every checkpoint of the sweep.

        Returns
        -------
        Per request, ``scorers[request.model_id].score_many(request.asks)``: one
        :class:`~flasheval.reference.scoring.scorers.ScoredExamples` per ask, in the asks' order.
        """
        ...


class InProcessExecutor:
    """Serves a round in this process, one request after the other in the round's (priority) order."""

    __slots__ = ()

    def serve(self, round_: Round, scorers: Mapping[str, ExampleScorer]) -> list[list[ScoredExamples]]:
        """Each request's ``score_many`` answer, in the round's order (:meth:`Executor.serve`)."""
        return [list(scorers[r.model_id].score_many(r.asks)) for r in round_.requests]
