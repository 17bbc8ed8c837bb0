"""The order among a sweep's checkpoints: simultaneous pairwise rank intervals, the reference's machinery."""

from __future__ import annotations

import numpy as np

from flasheval.analysis.simulation import synthetic_reference
from flasheval.sweeps.schedule import checkpoint_order


def _checkpoints(ref, rows, n_examples):
    """Checkpoints replayed from ``rows`` of ``ref``, scored on the first ``n_examples`` of every dataset."""
    out = []
    for name, i in rows:
        columns = [np.arange(min(n_examples, s.shape[1])) for s in ref.scores]
        out.append((name, [s[i, c] for s, c in zip(ref.scores, columns)], columns))
    return out


def test_identical_checkpoints_share_their_ranks_and_full_data_orders_exactly():
    ref = synthetic_reference(12, [200, 300], rng=0, ability_spread=1.5)
    rows = [("a", 0), ("b", 3), ("copy of a", 0), ("c", 7)]
    partial = checkpoint_order(ref, _checkpoints(ref, rows, 40), aggregate=None, n_resamples=400,
                               confidence_level=0.95, seed=0)
    by_name = {o.model_id: o for o in partial}
    assert by_name["a"].rank == by_name["copy of a"].rank  # tied: the same competition rank
    lo, hi = by_name["a"].interval
    assert by_name["copy of a"].interval == (lo, hi) and hi - lo >= 1  # neither can be placed above the other
    full = checkpoint_order(ref, _checkpoints(ref, rows, 10**6), aggregate=None, n_resamples=400,
                            confidence_level=0.95, seed=0)
    values = ref.aggregate_values()
    index = dict(rows)
    for o in full:  # every example scored: nothing left to sample, ranks exact (ties share a pair of ranks)
        mine = values[index[o.model_id]]
        better = sum(values[i] > mine + 1e-9 for _, i in rows)
        tied = sum(abs(values[i] - mine) <= 1e-9 for _, i in rows)
        assert o.rank == 1 + better and o.interval == (1 + better, better + tied)


def test_one_checkpoint_is_rank_one():
    ref = synthetic_reference(5, [50], rng=1)
    (only,) = checkpoint_order(ref, _checkpoints(ref, [("x", 2)], 20), aggregate=None, n_resamples=200,
                               confidence_level=0.95, seed=0)
    assert (only.rank, only.interval) == (1, (1, 1))
