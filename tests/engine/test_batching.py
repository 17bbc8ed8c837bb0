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


def test_auto_limits_cpu_measured_and_gpu_from_free_memory():
    from types import SimpleNamespace

    from flasheval.engine.batching import CPU_ROWS, CPU_TOKENS, GPU_ROWS, ModelShape, auto_limits

    assert auto_limits("cpu", free_bytes=10**12) == (CPU_ROWS, CPU_TOKENS)  # a CPU ignores memory: measured limits
    # SmolLM2-135M's config, read as transformers gives it; each byte of one token counted by hand.
    config = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                             num_key_value_heads=3, vocab_size=49152)
    shape = ModelShape.from_config(config, dtype_bytes=2)
    assert (shape.kv_width, shape.n_layers) == (3 * 64, 30)
    per_token = 30 * 2 * 192 * 2 + (4 * 576 + 3 * 1536) * 2 + 49152 * (2 + 8)
    assert shape.token_bytes() == per_token
    rows, tokens = auto_limits("cuda", free_bytes=8 * 2**30, shape=shape)
    assert rows == GPU_ROWS and tokens == (4 * 2**30 // per_token) // 256 * 256  # half the free memory
    assert tokens * per_token <= 4 * 2**30
    # More free memory never gives a smaller budget; the budget stays within its range.
    budgets = [auto_limits("cuda", free_bytes=f, shape=shape)[1] for f in (0, 2**20, 2**30, 2**34, 2**40, 2**50)]
    assert budgets == sorted(budgets) and budgets[0] == 1024 and budgets[-1] == 2**20


def _cost(batch, passes, overhead):
    total = 0
    for k in range(len(passes[batch[0]])):
        rows = sum(passes[i][k][0] for i in batch)
        if rows:
            total += overhead + rows * max(passes[i][k][1] for i in batch if passes[i][k][0])
    return total


@pytest.mark.parametrize("seed", range(12))
def test_least_cost_packing_is_the_cheapest_cut_within_the_limits_by_enumeration(seed):
    """Every way of cutting up to 10 units into consecutive batches, enumerated: none within the limits is cheaper."""
    import itertools

    from flasheval.engine.batching import pack_least_cost

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 11))
    units = [(int(rng.integers(1, 4)), int(rng.integers(1, 300))) for _ in range(n)]
    passes = [[(1, u[1]), (int(rng.integers(0, 2)) * u[0], int(rng.integers(1, 100)))] for u in units]
    max_rows, max_tokens, overhead = int(rng.integers(2, 12)), int(rng.integers(200, 2000)), int(rng.integers(0, 200))
    batches = pack_least_cost(units, passes, max_rows=max_rows, max_tokens=max_tokens, overhead=overhead)
    assert [i for batch in batches for i in batch] == list(range(n))

    def allowed(batch):
        rows = sum(units[i][0] for i in batch)
        return len(batch) == 1 or (rows <= max_rows and rows * max(units[i][1] for i in batch) <= max_tokens)

    assert all(allowed(b) for b in batches)
    cheapest = None
    for cuts in itertools.product((False, True), repeat=n - 1):
        split, start = [], 0
        for k, c in enumerate(cuts, 1):
            if c:
                split.append(tuple(range(start, k)))
                start = k
        split.append(tuple(range(start, n)))
        if all(allowed(b) for b in split):
            cost = sum(_cost(b, passes, overhead) for b in split)
            cheapest = cost if cheapest is None else min(cheapest, cost)
    assert sum(_cost(b, passes, overhead) for b in batches) == cheapest
