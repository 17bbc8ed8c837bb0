"""Several short groups side by side in one row of the one-pass layout (pure Python, no torch).

A group whose context is short runs its context and its choices in one row under a 4-D mask
(:func:`~flasheval.engine.hf.packed.forward_packed`). One group per row pads every row of a batch to its widest
group: a placement's small stage calls, whose batches mix widths, ran 4-10% more columns per token than one call
of every example (docs/engine.md, "Several groups to a row"). Here a row holds as many groups as fit side by side,
each at its own offset (a multiple of the pad width, so its tokens keep their places modulo it) and attending to
itself only. The rows are as wide as the batch's widest group, or up to twice as wide where that costs less: a row's
attention spans its whole width, masked or not, so the planner weighs the padding a wider row saves against the
attention it adds (:func:`row_cost`).

:func:`fill_rows` is the planner's side (which groups share a pass, in row order, at which row width);
:func:`layout_width` and :func:`row_layout` are the pass's side (the row width, then the row and offset of each
group, from the widths in that order alone, so a batch cut in halves by the out-of-memory back-off lays itself out
again).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["row_layout", "fill_rows", "row_widths", "row_cost", "layout_width", "WIDER_STEPS"]

WIDER_STEPS = 8
"""A batch's rows may be wider than its widest group, up to twice as wide in steps of ``1 / WIDER_STEPS`` of it
(:func:`row_widths`): wide enough for a few groups of about its width to share a row, and no attention over more
than twice the width a group alone pads to."""


def row_layout(widths: Sequence[int], width: int = 0) -> tuple[int, list[tuple[int, int]]]:
    """``(rows, (row, offset) per group)``: groups of these (padded) widths laid out in order, each in the current row
    while it fits in a row of the widest one's width or ``width``, whichever is larger, else at the start of a new row
    (next fit).

    Examples
    --------
    >>> row_layout([48, 32, 16, 16, 16])
    (3, [(0, 0), (1, 0), (1, 32), (2, 0), (2, 16)])
    >>> row_layout([48, 16, 32, 16, 16], width=64)
    (2, [(0, 0), (0, 48), (1, 0), (1, 32), (1, 48)])
    """
    capacity = max(max(widths, default=0), width)
    rows, fill, places = 0, capacity, []
    for span in widths:
        if fill + span > capacity:
            rows, fill = rows + 1, 0
        places.append((rows - 1, fill))
        fill += span
    return rows, places


def row_widths(widest: int, *, max_tokens: int, attention_width: int = 0, most: int | None = None) -> list[int]:
    """The row widths a batch whose widest group is ``widest`` columns wide may take, narrowest first: ``widest``;
    and, where ``attention_width`` is given (:func:`~flasheval.engine.batching.attention_width`), up to twice
    ``widest`` in :data:`WIDER_STEPS` steps, none over ``max_tokens`` or ``most`` (a sliding-window model's window,
    which its one-pass groups fit too).

    Examples
    --------
    >>> row_widths(48, max_tokens=4096), row_widths(48, max_tokens=4096, attention_width=3072)
    ([48], [48, 54, 60, 66, 72, 78, 84, 90, 96])
    >>> row_widths(48, max_tokens=80, attention_width=3072, most=64)
    [48, 54, 60]
    """
    if not attention_width:
        return [widest]
    top = min(2 * widest, max_tokens, most or 2 * widest)
    wider = (-(-widest * (WIDER_STEPS + k) // WIDER_STEPS) for k in range(1, WIDER_STEPS + 1))
    return [widest, *sorted({w for w in wider if widest < w <= top})]


def row_cost(rows: int, width: int, attention_width: int = 0) -> float:
    """What a pass of ``rows`` rows ``width`` columns wide costs, in columns of matrix products: each column's
    attention spans its row, ``width / attention_width`` more (0: attention not counted).

    >>> row_cost(4, 96, 3072), row_cost(4, 96)
    (396.0, 384)
    """
    return rows * width * (1 + width / attention_width) if attention_width else rows * width


def layout_width(widths: Sequence[int], *, max_rows: int, max_tokens: int, attention_width: int = 0,
                 most: int | None = None) -> int:
    """The pass's side of :func:`fill_rows`: the row width of least :func:`row_cost` for groups of these widths in
    this order (:func:`row_layout`), among the :func:`row_widths` of the widest whose rows stay within ``max_rows``
    and ``max_tokens``. On a batch of :func:`fill_rows` this is the width chosen there, or one that costs less.

    >>> layout_width([48, 16, 32, 16, 16], max_rows=4, max_tokens=1000, attention_width=3072)  # rows 48 16 | 32 16 16
    66
    >>> layout_width([48, 16, 32, 16, 16], max_rows=4, max_tokens=1000)
    48
    """
    widest = max(widths, default=0)
    best: tuple[float, int] | None = None
    for width in row_widths(widest, max_tokens=max_tokens, attention_width=attention_width, most=most):
        rows = row_layout(widths, width)[0]
        if rows > 1 and (rows > max_rows or rows * width > max_tokens):
            continue  # (one row: no wider than max_tokens, or the widest group's own, which always runs)
        cost = row_cost(rows, width, attention_width)
        if best is None or cost < best[0]:
            best = (cost, width)
    return widest if best is None else best[1]


def fill_rows(widths: Sequence[int], *, max_rows: int, max_tokens: int, attention_width: int = 0,
              most: int | None = None) -> list[tuple[int, list[int]]]:
    """Batches of group indices (``widths`` in descending order, as the planner sorts them), each with its row width
    and in the order :func:`row_layout` at that width turns back into the rows chosen here.

    A batch has at most ``max_rows`` rows and ``max_tokens`` padded columns (rows x their width). Its rows are as wide
    as its first (widest) group, or, where ``attention_width`` is given, the :func:`row_widths` of it that costs
    least per group column (:func:`row_cost`): a few wide groups that would each pad a row to the widest share wider
    rows instead, while a batch of many narrow groups, whose rows are full anyway, keeps its width (no wider row can
    cost less than ``1 + width / attention_width`` per column). Groups go, widest first, into the first row with room
    (first fit decreasing); a group that fits no row when no row can be opened waits for the next batch, while
    narrower ones may still fill the rows. A batch's groups come row by row: the group that opened a row did not fit
    the row before it then, and that row only filled since, so next fit at that width breaks the rows where they were
    made (and :func:`layout_width` finds that width, or a cheaper one).

    Examples
    --------
    The 32-wide group fits neither row once both are open; the 8-wide one after it still fills the second row:

    >>> fill_rows([48, 40, 32, 8], max_rows=2, max_tokens=1000)
    [(48, [0, 1, 3]), (32, [2])]
    >>> fill_rows([48, 32, 16, 16, 16], max_rows=3, max_tokens=1000)  # rows 48 | 32 16 | 16 16
    [(48, [0, 1, 2, 3, 4])]
    >>> fill_rows([48, 32, 16, 16, 16], max_rows=3, max_tokens=100)  # two rows of 48 columns at most
    [(48, [0, 1, 2]), (16, [3, 4])]
    >>> fill_rows([48, 32, 16, 16, 16], max_rows=3, max_tokens=1000, attention_width=3072)  # 48 16 | 32 16 16
    [(66, [0, 2, 1, 3, 4])]
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"max_rows and max_tokens must be >= 1, got {max_rows} and {max_tokens}")
    if any(a < b for a, b in zip(widths, widths[1:])):
        raise ValueError("fill_rows takes the widths in descending order")
    keys = [-w for w in widths]  # ascending, for bisect
    remaining = list(range(len(widths)))
    batches = []
    while remaining:
        widest = widths[remaining[0]]
        best: tuple[float, tuple[int, list[int]], list[int]] | None = None
        for width in row_widths(widest, max_tokens=max_tokens, attention_width=attention_width, most=most):
            if best is not None and attention_width and 1 + width / attention_width >= best[0]:
                break  # a pass of these rows costs at least this per column, and has no fewer columns than groups
            rows, waiting = _first_fit(widths, keys, remaining, width, max(1, min(max_rows, max_tokens // max(1, width))))
            cost = row_cost(len(rows), width, attention_width) / sum(widths[k] for row in rows for k in row)
            if best is None or cost < best[0]:
                best = (cost, (width, [k for row in rows for k in row]), waiting)
        assert best is not None  # the widest group's own width is always a candidate
        batches.append(best[1])
        remaining = best[2]
    return batches


def _first_fit(widths: Sequence[int], keys: Sequence[int], remaining: Sequence[int], width: int,
               most_rows: int) -> tuple[list[list[int]], list[int]]:
    """One batch of ``remaining`` (indices into ``widths``, widest first; ``keys``: the widths negated) in at most
    ``most_rows`` rows of ``width`` columns, first fit: its rows, and the groups left waiting, in order."""
    room: list[int] = []
    rows: list[list[int]] = []
    waiting: list[int] = []
    i = 0
    while i < len(remaining):
        k = remaining[i]
        row = next((r for r, free in enumerate(room) if free >= widths[k]), None)
        if row is None and len(room) < most_rows:
            room.append(width)
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
    return rows, waiting
