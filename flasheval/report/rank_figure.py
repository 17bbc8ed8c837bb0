"""The reference drawn with every model's rank interval, as an SVG a person reads at a glance.

One row per model, best first: its name, a bar over the ranks its interval allows and a dot at its point
rank; rows of the same group (models the reference cannot tell apart) share a background band, labelled on
the right. A placed model is drawn in red in its own row at its rank, and its interval is shaded down the
whole figure, so the reference models it overlaps are those whose bars cross the shade. Written as SVG
text (no matplotlib): the page inlines it, so its labels are text a browser finds and a test reads.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from flasheval.errors import FlashevalError

__all__ = ["reference_intervals_svg", "pool_intervals", "MAX_ROWS"]

logger = logging.getLogger(__name__)

MAX_ROWS = 80
"""Rows drawn at most: a larger pool is shown around the placed model (or from the top)."""
_POOL, _NEW, _BAND = "#1f77b4", "#d62728", "#eef1f5"
_ROW, _TOP, _LABEL, _WIDTH, _RIGHT = 14, 46, 300, 780, 64


def pool_intervals(reference_name: str, exclude: set[str], aggregate: str | None) -> Any:
    """:class:`~flasheval.reference.intervals.RankIntervals` of the reference without ``exclude`` (``None``, with a
    warning, when it cannot be loaded or its aggregate has no intervals)."""
    from flasheval.reference import load_reference
    from flasheval.reference.intervals import reference_rank_intervals

    try:
        ref = load_reference(reference_name)
        for model_id in exclude & set(ref.model_ids):
            ref = ref.without(model_id)
        return reference_rank_intervals(ref, aggregate=aggregate)
    except FlashevalError as exc:
        logger.warning("reference intervals figure skipped: %s", exc)
        return None


def _window(n_rows: int, focus: tuple[int, int] | None) -> tuple[int, int]:
    """First and last position (1-based, inclusive) of the rows drawn."""
    if n_rows <= MAX_ROWS:
        return 1, n_rows
    centre = 1 if focus is None else (focus[0] + focus[1]) // 2
    first = min(max(1, centre - MAX_ROWS // 2), n_rows - MAX_ROWS + 1)
    return first, first + MAX_ROWS - 1


def _tick_step(n: int) -> int:
    return next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10**9) if n / s <= 14)


def reference_intervals_svg(models: Sequence[Mapping[str, Any]], *, title: str, confidence_level: float,
                            placed: Mapping[str, Any] | None = None) -> str:
    """The SVG text of the figure.

    Parameters
    ----------
    models
        Rows in point order, each with ``model_id``, ``rank``, ``interval`` and ``group``
        (:meth:`~flasheval.reference.intervals.RankIntervals.to_json`'s ``models``).
    title, confidence_level
        The figure's title, and the intervals' level (written under it).
    placed
        ``model_id``, ``rank``, ``interval`` of a placed model (ranks among the pool and itself), or ``None``.

    Examples
    --------
    >>> rows = [{"model_id": "a", "rank": 1, "interval": [1, 2], "group": 1},
    ...         {"model_id": "b<c", "rank": 2, "interval": [1, 2], "group": 1}]
    >>> svg = reference_intervals_svg(rows, title="t", confidence_level=0.95)
    >>> svg.startswith("<svg") and "b&lt;c" in svg and svg.count("<circle") == 2
    True
    """
    n_ranks = len(models) + (1 if placed is not None else 0)
    focus = None if placed is None else (int(placed["interval"][0]), int(placed["interval"][1]))
    rows: list[tuple[Mapping[str, Any], bool]] = [(m, False) for m in models]
    if placed is not None:
        rows.insert(int(placed["rank"]) - 1, (placed, True))
    first, last = _window(len(rows), focus)
    shown = rows[first - 1:last]
    x0, x1 = _LABEL + 10, _WIDTH - _RIGHT
    height = _TOP + _ROW * len(shown) + 30

    def x(rank: float) -> float:
        return x0 + (rank - 0.5) / n_ranks * (x1 - x0)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
             f'viewBox="0 0 {_WIDTH} {height}" font-family="system-ui, sans-serif" role="img">',
             f'<text x="10" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
             f'<text x="10" y="31" font-size="10" fill="#555">{confidence_level:.0%} rank intervals'
             + (" (placed model in red, its interval shaded)" if placed is not None else "")
             + (f"; rows {first}-{last} of {len(rows)}" if (first, last) != (1, len(rows)) else "") + "</text>"]
    bottom = _TOP + _ROW * len(shown)
    previous_group = None
    for k, (row, is_new) in enumerate(shown):
        y = _TOP + _ROW * k
        group = None if is_new else int(row["group"])
        if group is not None and group % 2 == 1:
            parts.append(f'<rect x="0" y="{y}" width="{_WIDTH}" height="{_ROW}" fill="{_BAND}"/>')
        if group is not None and group != previous_group:
            parts.append(f'<text x="{_WIDTH - 6}" y="{y + 10}" font-size="9" text-anchor="end" fill="#555">'
                         f'group {group}</text>')
            previous_group = group
    for step_rank in range(0, n_ranks + 1, _tick_step(n_ranks)):
        rank = max(step_rank, 1)
        parts.append(f'<line x1="{x(rank):.1f}" y1="{_TOP - 4}" x2="{x(rank):.1f}" y2="{bottom}" stroke="#ccc" '
                     f'stroke-width="0.5"/><text x="{x(rank):.1f}" y="{_TOP - 7}" font-size="9" '
                     f'text-anchor="middle">{rank}</text>')
    if focus is not None:
        parts.append(f'<rect x="{x(focus[0] - 0.5):.1f}" y="{_TOP}" width="{x(focus[1] + 0.5) - x(focus[0] - 0.5):.1f}" '
                     f'height="{bottom - _TOP}" fill="{_NEW}" fill-opacity="0.12"/>')
    for k, (row, is_new) in enumerate(shown):
        y = _TOP + _ROW * k + _ROW / 2
        lo, hi = int(row["interval"][0]), int(row["interval"][1])
        color = _NEW if is_new else _POOL
        name = str(row["model_id"])
        label = html.escape(f"{row['rank']}. {name if len(name) <= 44 else name[:43] + '…'}")
        tip = html.escape(f"{name}: rank {row['rank']}, interval [{lo}, {hi}]"
                          + ("" if is_new else f", group {row['group']}"))
        weight = ' font-weight="bold"' if is_new else ""
        parts.append(f'<g><title>{tip}</title><text x="{_LABEL}" y="{y + 3.5:.1f}" font-size="10" text-anchor="end" '
                     f'fill="{color}"{weight}>{label}</text><line x1="{x(lo - 0.4):.1f}" y1="{y:.1f}" '
                     f'x2="{x(hi + 0.4):.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="5" stroke-opacity="0.55"/>'
                     f'<circle cx="{x(int(row["rank"])):.1f}" cy="{y:.1f}" r="3" fill="{color}"/></g>')
    parts.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{bottom + 20}" font-size="10" text-anchor="middle">rank (1 = best); '
                 "bar: the ranks the model can hold; dot: its rank on the full data</text></svg>")
    return "".join(parts)
