"""Where the packed pass puts each choice (:func:`~flasheval.engine.planning.segment_columns`): short choices share a
block, and a choice's offset modulo the pad width is the one it has alone, whatever its companions."""

from __future__ import annotations

import random

from flasheval.engine.planning import Item, padded_width, segment_columns
from tests.engine.test_batch_invariance import _requests


def _random_items(rng: random.Random, n: int) -> list[Item]:
    return [Item(index=k, context=(1,), continuation=tuple(range(rng.choice([1, 2, 3, 4, 5, 7, 9, 12, 16, 17, 30]))),
                 slot=rng.randrange(6)) for k in range(n)]


def test_a_choice_keeps_its_offset_modulo_the_pad_width_in_any_group():
    rng = random.Random(0)
    for _ in range(500):
        items = _random_items(rng, rng.randint(1, 9))
        rng.shuffle(items)
        columns, width = segment_columns(items, 16)
        spans = []
        for item, column in zip(items, columns):
            n = len(item.continuation) - 1
            if n == 0:
                assert column is None
                continue
            alone = segment_columns([item], 16)[0][0]
            assert column % 16 == alone % 16  # the lanes the attention kernel adds its keys in
            spans.append(range(column, column + n))
        taken = [c for span in spans for c in span]
        assert len(taken) == len(set(taken))  # no two segments overlap
        assert width == max(taken, default=-1) + 1
        # never wider than one pad-width block per choice, each rounded up (the layout before scoring version 6)
        assert padded_width(width, 16) <= sum(padded_width(len(i.continuation) - 1, 16) for i in items)


def test_short_choices_share_one_block():
    items = [Item(index=k, context=(1,), continuation=(5,) * n, slot=k) for k, n in enumerate((3, 4, 2, 5))]
    columns, width = segment_columns(items, 16)
    assert width <= 16 and sorted(c % 16 for c in columns) == sorted(set(c % 16 for c in columns))


def test_the_batch_invariance_requests_place_choices_off_the_block_start():
    """The requests of tests/engine/test_batch_invariance.py exercise offsets other than 0 (else they could not
    catch a layout whose offsets depend on companions)."""
    from tests.engine.conftest import byte_tokenizer
    from flasheval.engine.planning import request_items

    items = request_items(_requests((1, 12)), byte_tokenizer(), start_id=256, max_length=2048)
    offsets = [segment_columns([item], 16)[0][0] for item in items]
    assert any(c is not None and c % 16 for c in offsets)
