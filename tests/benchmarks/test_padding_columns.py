"""The padding benchmark's count (benchmarks/padding_columns.py) against a count by hand."""

from __future__ import annotations

from benchmarks import padding_columns as pc
from flasheval.engine.planning import Group, Item


def _group(context: int, lengths: list[int]) -> Group:
    ctx = tuple(range(1, context + 1))
    return Group(context=ctx, items=tuple(Item(index=k, context=ctx, continuation=(7,) * n, slot=k)
                                          for k, n in enumerate(lengths)))


def test_columns_by_hand():
    # ARC-like: contexts of 20 and 30 tokens, four answers of 4 tokens (3 inputs each) and one of 1 token.
    batch = [_group(20, [4, 4, 4, 4]), _group(30, [4, 1, 4, 4])]
    counted = pc.columns([batch], 16)
    assert counted["real"] == 20 + 12 + 30 + 9
    assert counted["pass1"] == 2 * 32  # both rows padded to the longer context, rounded up to 16
    assert counted["pass2_v5"] == 2 * 64  # version 5: four blocks of 16 for the first group's four answers
    assert counted["pass2"] == 2 * 16  # version 6: the 3-token segments at 0, 4, 8, 12 share one block
