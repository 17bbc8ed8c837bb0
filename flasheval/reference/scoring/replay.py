"""Replay scorer: serve a model's recorded per-example scores from a reference leaderboard.

``ReplayScorer(reference, model_id)`` answers ``score_many`` (and ``score``) from the reference's score matrix
(and token counts, when the reference has them). Used to place a model that is held out of
the reference (``flasheval place`` by default, and every leave-one-out placement of the
backtest) without running it. It also records every request, so tests can check the
controller never asks twice for an example.

:func:`replay_records` serves ``flasheval evaluate --model replay:REFERENCE/MODEL``: a reference
model's recorded scores as evaluate's per-example records, for the same seeded selection.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flasheval.evaluation.example_records import ExampleRecord
from flasheval.errors import InputError, UnknownNameError
from flasheval.reference.scoring.scorers import OneTask, ScoredExamples
from flasheval.reference.leaderboard import ReferenceLeaderboard, load_reference, reference_folder
from flasheval.stats.sampling import example_order, nested_prefix

__all__ = ["ReplayScorer", "replay_records"]


class ReplayScorer(OneTask):
    """Per-example scores of ``model_id`` replayed from ``reference``.

    Parameters
    ----------
    reference
        A loaded reference that contains ``model_id`` in its pool.
    model_id
        The model to replay.
    n_parameters
        Parameter count for the FLOPs estimate, if known.
    """

    def __init__(self, reference: ReferenceLeaderboard, model_id: str, *, n_parameters: int | None = None) -> None:
        self.model_id = model_id
        self.n_parameters = n_parameters
        self._rows = dict(zip(reference.dataset_names, reference.model_rows(model_id)))
        self._positions = {d: {e: i for i, e in enumerate(ids)} for d, ids in zip(reference.dataset_names, reference.example_ids)}
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        """Every ``(task_name, example_ids)`` asked for, in order."""

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        """The recorded scores (and token counts) of each ``(task_name, example_ids)`` of ``asks``, in order."""
        return [self._replay(task_name, example_ids) for task_name, example_ids in asks]

    def _replay(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        if task_name not in self._rows:
            raise UnknownNameError("task", task_name, self._rows)
        pos = self._positions[task_name]
        try:
            cols = np.fromiter((pos[e] for e in example_ids), dtype=np.int64, count=len(example_ids))
        except KeyError as exc:
            raise InputError(f"example {exc.args[0]!r} is not in task {task_name!r} of the reference") from None
        self.requests.append((task_name, tuple(example_ids)))
        scores, tokens = self._rows[task_name]
        return ScoredExamples(scores=scores[cols].copy(), n_tokens=None if tokens is None else tokens[cols].copy())


def replay_records(
    reference_and_model: str, task_names: Sequence[str], *, n_examples: int | None, seed: int
) -> tuple[list[ExampleRecord], dict[str, float], str]:
    """Records of a reference model's recorded scores (``replay:REFERENCE/MODEL``), same selection rule.

    ``REFERENCE`` is the shortest prefix of ``reference_and_model`` (cut at a ``/``) that names a
    reference; the rest is the model id (model ids contain ``/`` themselves, e.g. ``meta/llama-3-70b``).
    Returns the records, per-task mean scores and the reference name.
    """
    parts = reference_and_model.split("/")
    for cut in range(1, len(parts)):
        try:
            reference_folder("/".join(parts[:cut]))
        except UnknownNameError:
            continue
        reference, model_id = load_reference("/".join(parts[:cut])), "/".join(parts[cut:])
        break
    else:
        raise InputError(f"replay spec {reference_and_model!r} is not REFERENCE/MODEL with a known reference", field="--model")
    if model_id not in reference.model_ids:
        raise UnknownNameError("model of reference " + reference.name, model_id, reference.model_ids, field="--model")
    scorer = ReplayScorer(reference, model_id)
    ids_of = dict(zip(reference.dataset_names, reference.example_ids))
    records: list[ExampleRecord] = []
    means: dict[str, float] = {}
    for name in task_names:
        if name not in ids_of:
            raise UnknownNameError(f"task of reference {reference.name}", name, ids_of, field="--tasks")
        chosen = nested_prefix(example_order(ids_of[name], seed=seed, task_name=name), n_examples)
        scores = scorer.score(name, chosen).scores
        means[name] = float(scores.mean())
        records.extend(
            ExampleRecord(task_name=name, example_id=i, category=None, fewshot_ids=(), choice_logprob_sum=(),
                          choice_n_tokens=(), prediction="", correct=bool(v >= 0.5), score=float(v))
            for i, v in zip(chosen, scores)
        )
    return records, means, reference.name
