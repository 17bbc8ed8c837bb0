"""Several short groups to a row of the one-pass layout (:mod:`flasheval.engine.rows`): the planner's batches hold
every group once, within the limits and full; the pass lays out the rows the planner made; a group scores in a shared
row what an independent plain forward gives, and what it scores alone, in float32 and in bf16."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from flasheval.engine.planning import Group, Item, batch_shape, group_items, one_pass_widths, pack_groups
from flasheval.engine.rows import fill_rows, layout_width, row_cost, row_layout
from flasheval.types import LoglikelihoodRequest
from tests.engine.conftest import tiny_model_and_tokenizer


def _rows(widths: list[int], width: int = 0) -> list[int]:
    """Each row's filled columns under :func:`row_layout`, recomputed from its places."""
    n_rows, places = row_layout(widths, width)
    fills = [0] * n_rows
    for (row, offset), width in zip(places, widths):
        assert offset == fills[row]  # side by side, no gap, no overlap
        fills[row] += width
    return fills


@pytest.mark.parametrize("seed", range(12))
def test_batches_hold_every_group_once_within_the_limits_and_leave_no_room_a_later_group_fits(seed):
    """At the width the planner chose for each batch; and the pass's own width (:func:`layout_width`) for it."""
    rng = random.Random(seed)
    multiple = rng.choice([1, 16])
    widths = sorted((-(-rng.randint(3, 150) // multiple) * multiple for _ in range(rng.randint(1, 400))), reverse=True)
    max_rows, max_tokens = rng.choice([(4, 4096), (32, 4096), (512, 41984), (3, 200)])
    attention = rng.choice([0, 64, 3072]) if seed > 1 else 3072 * seed  # seeds 0, 1: rows only as wide as a group
    planned = fill_rows(widths, max_rows=max_rows, max_tokens=max_tokens, attention_width=attention)
    batches = [batch for _, batch in planned]
    assert sorted(k for b in batches for k in b) == list(range(len(widths)))
    for b, (capacity, batch) in enumerate(planned):
        widest = widths[batch[0]]
        assert widest == max(widths[k] for k in batch)
        assert capacity == widest if not attention else widest <= capacity <= 2 * widest
        fills = _rows([widths[k] for k in batch], capacity)  # next fit at the planner's width: its rows
        assert max(fills) <= capacity and len(fills) <= max_rows
        assert len(fills) * capacity <= max_tokens or len(fills) == 1
        assert len(fills) >= -(-sum(widths[k] for k in batch) // capacity)
        later = [widths[k] for c in batches[b + 1:] for k in c]
        if later:  # a group waited only because no row had room for it and none could be opened
            assert min(later) > capacity - min(fills)
            assert len(fills) == min(max_rows, max(1, max_tokens // capacity))
        # the pass, from the batch alone: within the limits, and no dearer than the planner's rows
        width = layout_width([widths[k] for k in batch], max_rows=max_rows, max_tokens=max_tokens,
                             attention_width=attention)
        rows = len(_rows([widths[k] for k in batch], width))
        assert (rows <= max_rows and rows * width <= max_tokens) or width == widest
        assert row_cost(rows, width, attention) <= row_cost(len(fills), capacity, attention)


def test_the_pass_keeps_to_the_limits_even_where_narrower_rows_would_cost_less():
    # four 48-wide groups in two rows: 96 wide; as wide as the widest group they would need four rows
    assert layout_width([48] * 4, max_rows=2, max_tokens=1000, attention_width=3072) == 96
    assert layout_width([48] * 4, max_rows=4, max_tokens=1000, attention_width=3072) == 48
    assert layout_width([48] * 4, max_rows=2, max_tokens=150, attention_width=3072) == 48  # nothing fits: as planned


def test_wider_rows_cut_the_padding_of_a_few_wide_groups_where_their_attention_costs_less():
    widths = [211, 208, 195, 188, 185, 70]  # six HellaSwag 0-shot groups (SmolLM2, float32): one to a row pads 20%
    ((width, batch),) = fill_rows(widths, max_rows=32, max_tokens=4096, attention_width=3072)
    assert width == layout_width([widths[k] for k in batch], max_rows=32, max_tokens=4096, attention_width=3072)
    rows = len(_rows([widths[k] for k in batch], width))
    assert (rows, width) == (3, 396) and rows * width < 6 * 211
    assert row_cost(rows, width, 3072) < row_cost(6, 211, 3072)
    ((width, _),) = fill_rows(widths, max_rows=32, max_tokens=4096, attention_width=300)  # attention too dear
    assert width == 211


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


@pytest.mark.parametrize("wider", [False, True], ids=["widest-group rows", "wider rows"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_groups_sharing_a_row_score_what_they_score_alone_and_a_plain_forward_gives(tiny, dtype, wider):
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
        widths = [one_pass_widths(b, packed=settings.pad_multiple, pad_multiple=settings.pad_multiple,
                                  one_pass=settings.one_pass) for b in batches]
        row_widths = [2 * max(w) if wider else max(w) for w in widths]  # twice the widest: the widest rows planned
        shared = {item.index: s for batch, width in zip(batches, row_widths)
                  for item, s, _ in forward_packed(model, batch, replace(settings, row_width=width))}
        rows = [batch_shape(b, packed=settings.pad_multiple, pad_multiple=settings.pad_multiple,
                            one_pass=settings.one_pass, row_width=width)[0] for b, width in zip(batches, row_widths)]
        assert sum(rows) < len(groups)  # groups did share rows
        narrow = [batch_shape(b, packed=settings.pad_multiple, pad_multiple=settings.pad_multiple,
                              one_pass=settings.one_pass)[0] for b in batches]
        assert (sum(rows) < sum(narrow)) == wider  # and more of them in the wider rows
        alone = {item.index: s for g in groups for item, s, _ in forward_packed(model, [g], settings)}
        assert max(abs(shared[k] - alone[k]) for k in alone) <= (1e-5 if dtype == "float32" else 1e-4)
        if dtype == "float32":
            for item in (i for g in groups for i in g.items):
                assert shared[item.index] == pytest.approx(
                    _independent(model, list(item.context), list(item.continuation)), abs=1e-4)
    finally:
        model.to(torch.float32)
