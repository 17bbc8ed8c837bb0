"""Short contexts run in one packed pass (:func:`~flasheval.engine.hf.packed.forward_packed`, scoring version 7): the
same sums as the two-pass layout, the mode fixed by the context alone, no batch mixing the two, batch invariance."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from flasheval.engine.batching import ModelShape, one_pass_context
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.hf.packed import forward_packed
from flasheval.engine.planning import Group, Item, group_items, group_passes, pack_groups, padded_width
from tests.engine.conftest import tiny_model_and_tokenizer
from tests.engine.test_batch_invariance import _requests, largest_batch_effect


@pytest.fixture(scope="module")
def tiny():
    import torch

    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=2048)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # logits over several nats: a wrong position or mask shows
    return model, tokenizer


def _groups(backend: HFBackend, requests) -> list[Group]:
    return group_items(backend._items(requests), max_length=backend.max_length, share_context=True)


def test_one_pass_scores_what_two_passes_score(tiny):
    """Every group of a batch scored by the one-pass layout and by the two-pass one (forced through the settings):
    the same log-likelihoods in float32 and the same greedy flags; a wrong mask, position or segment column would
    move them by far more (the head is scaled x4)."""
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, fingerprint="x", batch_size=8)
    groups = _groups(backend, _requests((1, 12)) + _requests((1, 6), seed=3))
    settings = backend._pass
    one = {item.index: (s, g) for item, s, g in forward_packed(model, groups, replace(settings, one_pass=10**6))}
    two = {item.index: (s, g) for item, s, g in forward_packed(model, groups, replace(settings, one_pass=0))}
    assert one.keys() == two.keys() and len(one) == sum(len(g.items) for g in groups)
    assert max(abs(one[k][0] - two[k][0]) for k in one) <= 1e-5
    assert all(one[k][1] == two[k][1] for k in one)
    assert len({round(s, 3) for s, _ in one.values()}) > len(one) // 2  # the sums differ: not all one value


def test_a_group_takes_one_pass_by_its_context_alone_and_batches_never_mix():
    rng = random.Random(0)
    groups = []
    for k in range(60):
        context = tuple(range(rng.randint(1, 80)))
        groups.append(Group(context=context, items=tuple(
            Item(index=10 * k + c, context=context, continuation=(7,) * rng.randint(1, 9), slot=c)
            for c in range(rng.randint(1, 4)))))
    limit = 33
    batches = pack_groups(groups, max_rows=5, max_tokens=400, packed=16, overhead=16, pad_multiple=16,
                          one_pass=limit)
    assert sorted(i for b in batches for g in b for i in [it.index for it in g.items]) == sorted(
        it.index for g in groups for it in g.items)
    kinds = [{len(g.context) <= limit for g in batch} for batch in batches]
    assert all(len(k) == 1 for k in kinds) and {True} in kinds and {False} in kinds
    # one pass: one row of the context and the segments, rounded up once; never wider than the two passes' rows
    for g in groups:
        one, two = group_passes(g, pad_multiple=16, packed=True, one_pass=10**6), group_passes(g, pad_multiple=16,
                                                                                              packed=True)
        assert one[1] == (0, 0) and one[0][1] <= two[0][1] + (two[1][1] if two[1][0] else 0)
        assert one[0][1] == padded_width(one[0][1], 16)


def test_short_requests_are_batch_invariant_in_one_pass(tiny):
    """Alone and in four other batchings, requests whose contexts nearly all run in one pass (checked): bf16 and
    float32 within 1e-4 nats, as for the two-pass layout (``test_batch_invariance.py``)."""
    import torch

    model, tokenizer = tiny
    requests = _requests((1, 6), seed=5)
    backend = HFBackend(model, tokenizer, fingerprint="x", batch_size=4)
    lengths = [len(g.context) for g in _groups(backend, requests)]
    assert sum(n <= backend._pass.one_pass for n in lengths) >= 4, lengths
    for dtype in (torch.bfloat16, torch.float32):
        model.to(dtype)
        try:
            assert largest_batch_effect(model, tokenizer, requests) <= 1e-4
        finally:
            model.to(torch.float32)


def test_the_limit_is_where_full_attention_costs_half_a_block_of_linear_work():
    """An independent count: at the limit, 4 n^2 hidden attention FLOPs per layer are within one token's worth of
    16 / 2 columns x 2 x the layer's parameters, counted from the projections' shapes."""
    shape = ModelShape(hidden=576, intermediate=1536, n_layers=30, kv_width=192, vocab=49152, dtype_bytes=4)
    n = one_pass_context(shape, 16)
    per_layer = 576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536  # q, o; k, v; gate, up, down
    assert 4 * n**2 * 576 <= 16 / 2 * 2 * per_layer < 4 * (n + 1) ** 2 * 576
