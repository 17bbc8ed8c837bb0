"""Several short groups to a row of the one-pass layout (:mod:`flasheval.engine.rows`): the planner's batches hold
every group once, within the limits and full; the pass lays out the rows the planner made; a group scores in a shared
row what an independent plain forward gives, and what it scores alone, in float32 and in bf16."""

from __future__ import annotations

import random

import pytest

from flasheval.engine.planning import Group, Item, batch_shape, group_items, pack_groups
from flasheval.engine.rows import fill_rows, row_layout
from flasheval.types import LoglikelihoodRequest
from tests.engine.conftest import tiny_model_and_tokenizer


def _rows(widths: list[int]) -> list[int]:
    """Each row's filled columns under :func:`row_layout`, recomputed from its places."""
    n_rows, places = row_layout(widths)
    fills = [0] * n_rows
    for (row, offset), width in zip(places, widths):
        assert offset == fills[row]  # side by side, no gap, no overlap
        fills[row] += width
    return fills


@pytest.mark.parametrize("seed", range(6))
def test_batches_hold_every_group_once_within_the_limits_and_leave_no_room_a_later_group_fits(seed):
    rng = random.Random(seed)
    multiple = rng.choice([1, 16])
    widths = sorted((-(-rng.randint(3, 150) // multiple) * multiple for _ in range(rng.randint(1, 400))), reverse=True)
    max_rows, max_tokens = rng.choice([(4, 4096), (32, 4096), (512, 41984), (3, 200)])
    batches = fill_rows(widths, max_rows=max_rows, max_tokens=max_tokens)
    assert sorted(k for b in batches for k in b) == list(range(len(widths)))
    for b, batch in enumerate(batches):
        capacity = widths[batch[0]]
        assert capacity == max(widths[k] for k in batch)
        fills = _rows([widths[k] for k in batch])
        assert max(fills) <= capacity and len(fills) <= max_rows
        assert len(fills) * capacity <= max_tokens or len(fills) == 1
        assert len(fills) >= -(-sum(widths[k] for k in batch) // capacity)
        later = [widths[k] for c in batches[b + 1:] for k in c]
        if later:  # a group waited only because no row had room for it and none could be opened
            assert min(later) > capacity - min(fills)
            assert len(fills) == min(max_rows, max(1, max_tokens // capacity))


def test_fill_rows_takes_widths_widest_first():
    with pytest.raises(ValueError, match="descending"):
        fill_rows([16, 32], max_rows=4, max_tokens=1000)


def test_short_groups_share_rows_and_the_batch_shape_counts_rows_not_groups():
    rng = random.Random(0)
    groups = []
    for k in range(40):
        context = tuple(range(1, rng.randint(2, 30)))
        groups.append(Group(context=context, items=tuple(
            Item(index=10 * k + c, context=context, continuation=(7,) * rng.randint(1, 5), slot=c)
            for c in range(rng.randint(1, 4)))))
    batches = pack_groups(groups, max_rows=4, max_tokens=4096, packed=16, overhead=64, pad_multiple=16, one_pass=33)
    assert sum(len(b) for b in batches) == 40 and len(batches) < 10  # one group per row: at least 10 batches
    for batch in batches:
        rows, width = batch_shape(batch, packed=16, pad_multiple=16, one_pass=33)
        assert rows <= 4 and rows * width <= 4096
    assert max(batch_shape(b, packed=16, pad_multiple=16, one_pass=33)[0] for b in batches) < max(map(len, batches))


@pytest.fixture(scope="module")
def tiny():
    import torch

    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=2048)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # logits over several nats: a wrong offset, position or mask shows
    return model, tokenizer


def _independent(model, context: list[int], continuation: list[int]) -> float:
    """One plain forward over context + continuation, float32 log-softmax by hand."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([context + continuation])).logits[0].float()
    logprobs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return sum(float(logprobs[len(context) - 1 + j, t]) for j, t in enumerate(continuation))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_groups_sharing_a_row_score_what_they_score_alone_and_a_plain_forward_gives(tiny, dtype):
    import torch

    from flasheval.engine.hf.backend import HFBackend
    from flasheval.engine.hf.packed import forward_packed

    model, tokenizer = tiny
    rng = random.Random(1)
    text = lambda n: "".join(rng.choice("abcdefgh ") for _ in range(n))  # noqa: E731
    requests = [LoglikelihoodRequest(task_name="t", example_id=str(e), choice_index=c, context=context,
                                     continuation=" " + text(rng.randint(1, 6)))
                for e, context in enumerate(map(text, [30, 3, 4, 5, 2, 6, 3, 4, 2, 5, 3, 4])) for c in range(3)]
    model.to(getattr(torch, dtype))
    try:
        backend = HFBackend(model, tokenizer, fingerprint="x", batch_size=4)
        settings = backend._pass
        groups = group_items(backend._items(requests), max_length=backend.max_length, share_context=True)
        assert all(len(g.context) <= settings.one_pass for g in groups)
        batches = pack_groups(groups, max_rows=4, max_tokens=4096, packed=settings.pad_multiple, overhead=64,
                              pad_multiple=settings.pad_multiple, one_pass=settings.one_pass)
        shared = {item.index: s for batch in batches for item, s, _ in forward_packed(model, batch, settings)}
        rows = [batch_shape(b, packed=settings.pad_multiple, pad_multiple=settings.pad_multiple,
                            one_pass=settings.one_pass)[0] for b in batches]
        assert sum(rows) < len(groups)  # groups did share rows
        alone = {item.index: s for g in groups for item, s, _ in forward_packed(model, [g], settings)}
        assert max(abs(shared[k] - alone[k]) for k in alone) <= (1e-5 if dtype == "float32" else 1e-4)
        if dtype == "float32":
            for item in (i for g in groups for i in g.items):
                assert shared[item.index] == pytest.approx(
                    _independent(model, list(item.context), list(item.continuation)), abs=1e-4)
    finally:
        model.to(torch.float32)
