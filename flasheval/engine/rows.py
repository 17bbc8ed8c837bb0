"""Several short groups side by side in one row of the one-pass layout (pure Python, no torch).

A group whose context is short runs its context and its choices in one row under a 4-D mask
(:func:`~flasheval.engine.hf.packed.forward_packed`). One group per row pads every row of a batch to its widest
group: a placement's small stage calls, whose batches mix widths, ran 4-10% more columns per token than one call
of every example (docs/engine.md, "Several groups to a row"). Here a row holds as many groups as fit side by side
in the width of the batch's widest group, each at its own offset (a multiple of the pad width, so its tokens keep
their places modulo it) and attending to itself only. A group's attention then spans at most that widest group's
width, as it did when it was padded to it.

:func:`fill_rows` is the planner's side (which groups share a pass, in row order); :func:`row_layout` is the
pass's side (the row and offset of each group, from the widths in that order alone, so a batch cut in halves by the
out-of-memory back-off lays itself out again).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["row_layout", "fill_rows"]


def row_layout(widths: Sequence[int]) -> tuple[int, list[tuple[int, int]]]:
    """``(rows, (row, offset) per group)``: groups of these (padded) widths laid out in order, each in the current row
    while it fits in the widest one's width, else at the start of a new row (next fit).

    Examples
    --------
    >>> row_layout([48, 32, 16, 16, 16])
    (3, [(0, 0), (1, 0), (1, 32), (2, 0), (2, 16)])
    """
    capacity = max(widths, default=0)
    rows, fill, places = 0, capacity, []
    for width in widths:
        if fill + width > capacity:
            rows, fill = rows + 1, 0
        places.append((rows - 1, fill))
        fill += width
    return rows, places


def fill_rows(widths: Sequence[int], *, max_rows: int, max_tokens: int) -> list[list[int]]:
    """Batches of group indices (``widths`` in descending order, as the planner sorts them), each in the order
    :func:`row_layout` turns back into the rows chosen here.

    Each batch is as wide as its first (widest) group and has at most ``max_rows`` rows and ``max_tokens`` padded
    columns (rows x that width). Groups go, widest first, into the first row with room (first fit decreasing); a
    group that fits no row when no row can be opened waits for the next batch, while narrower ones may still fill the
    rows. A batch's groups come row by row: the group that opened a row did not fit the row before it then, and that
    row only filled since, so next fit breaks the rows where they were made.

    Examples
    --------
    The 32-wide group fits neither row once both are open; the 8-wide one after it still fills the second row:

    >>> fill_rows([48, 40, 32, 8], max_rows=2, max_tokens=1000)
    [[0, 1, 3], [2]]
    >>> fill_rows([48, 32, 16, 16, 16], max_rows=3, max_tokens=1000)  # rows 48 | 32 16 | 16 16
    [[0, 1, 2, 3, 4]]
    >>> fill_rows([48, 32, 16, 16, 16], max_rows=3, max_tokens=100)  # two rows of 48 columns at most
    [[0, 1, 2], [3, 4]]
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"max_rows and max_tokens must be >= 1, got {max_rows} and {max_tokens}")
    if any(a < b for a, b in zip(widths, widths[1:])):
        raise ValueError("fill_rows takes the widths in descending order")
    keys = [-w for w in widths]  # ascending, for bisect
    remaining = list(range(len(widths)))
    batches = []
    while remaining:
        capacity = widths[remaining[0]]
        most_rows = max(1, min(max_rows, max_tokens // max(1, capacity)))
        room: list[int] = []
        rows: list[list[int]] = []
        waiting: list[int] = []
        i = 0
        while i < len(remaining):
            k = remaining[i]
            row = next((r for r, free in enumerate(room) if free >= widths[k]), None)
            if row is None and len(room) < most_rows:
                room.append(capacity)
                rows.append([])
                row = len(room) - 1
            if row is None:  # every row is open and none has room: skip to the first group that fits the roomiest
                first = bisect_left(keys, -max(room))  # the first index as narrow as the roomiest row's room
                j = max(i + 1, bisect_left(remaining, first, lo=i + 1))
                waiting.extend(remaining[i:j])
                i = j
                continue
            room[row] -= widths[k]
            rows[row].append(k)
            i += 1
        batches.append([k for members in rows for k in members])
        remaining = waiting
    return batches
