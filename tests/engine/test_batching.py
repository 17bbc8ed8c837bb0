"""Batch packing under a row limit and a token budget, checked against the limits themselves."""

from __future__ import annotations

import numpy as np
import pytest

from flasheval.engine.batching import default_token_budget, pack_batches


@pytest.mark.parametrize("seed", range(20))
def test_batches_respect_both_limits_keep_order_and_cannot_grow(seed):
    rng = np.random.default_rng(seed)
    units = [(int(rng.integers(1, 6)), int(rng.integers(1, 400))) for _ in range(int(rng.integers(1, 40)))]
    max_rows, max_tokens = int(rng.integers(1, 20)), int(rng.integers(50, 3000))
    batches = pack_batches(units, max_rows=max_rows, max_tokens=max_tokens)
    assert [i for batch in batches for i in batch] == list(range(len(units)))  # every unit once, in order
    for k, batch in enumerate(batches):
        rows = sum(units[i][0] for i in batch)
        tokens = rows * max(units[i][1] for i in batch)
        assert len(batch) == 1 or (rows <= max_rows and tokens <= max_tokens)
        if k + 1 < len(batches):  # greedy: the next unit would have broken a limit
            grown = batch + (batches[k + 1][0],)
            rows = sum(units[i][0] for i in grown)
            assert rows > max_rows or rows * max(units[i][1] for i in grown) > max_tokens


def test_a_unit_over_the_limits_runs_alone_and_bad_limits_are_refused():
    assert pack_batches([(1, 10), (8, 500), (1, 10)], max_rows=4, max_tokens=100) == [(0,), (1,), (2,)]
    assert pack_batches([], max_rows=1, max_tokens=1) == []
    assert default_token_budget(8) == 8 * 1024
    with pytest.raises(ValueError, match="max_tokens"):
        pack_batches([(1, 1)], max_rows=1, max_tokens=0)
