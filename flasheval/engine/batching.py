"""Batch packing by a row limit and a token budget (pure Python, no torch).

Memory of a forward pass grows with rows x padded length (activations, the key/value cache,
the logits), not with rows alone: 32 rows of 40 tokens and 32 rows of 4,000 tokens differ by
100x. Batches are therefore packed under two limits, a row count and a token budget counted
as rows x the longest unit in the batch (its padded length).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TOKENS_PER_ROW", "default_token_budget", "pack_batches"]

TOKENS_PER_ROW = 1024
"""Default token budget per row of ``batch_size``: a budget of ``batch_size * 1024`` tokens keeps
ordinary few-shot prompts (a few hundred tokens) at the full row count and cuts the rows of
long prompts (a 4,096-token prompt at batch size 32 runs 8 rows per pass)."""


def default_token_budget(batch_size: int) -> int:
    """The token budget used when none is given: ``batch_size * TOKENS_PER_ROW``.

    Examples
    --------
    >>> default_token_budget(32)
    32768
    """
    return batch_size * TOKENS_PER_ROW


def pack_batches(units: Sequence[tuple[int, int]], *, max_rows: int, max_tokens: int) -> list[tuple[int, ...]]:
    """Cut a sequence of units into consecutive batches under a row limit and a token budget.

    Parameters
    ----------
    units
        ``(rows, length)`` per unit, in the order they should run (longest first for an early
        out-of-memory error). A unit is never split: a context group keeps its choices together.
    max_rows
        Most rows per batch.
    max_tokens
        Most ``total rows x longest length`` per batch (the padded size of the batch).

    Returns
    -------
    list of tuple of int
        Unit indices of each batch, in order. A unit that alone exceeds a limit forms a batch
        by itself (the backend's out-of-memory back-off then splits it if it must).

    Examples
    --------
    >>> pack_batches([(4, 100), (4, 100), (4, 50), (1, 50)], max_rows=32, max_tokens=800)
    [(0, 1), (2, 3)]
    >>> pack_batches([(2, 10)] * 3, max_rows=4, max_tokens=10_000)
    [(0, 1), (2,)]
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"max_rows and max_tokens must be >= 1, got {max_rows} and {max_tokens}")
    batches: list[list[int]] = []
    rows = longest = 0
    for index, (n_rows, length) in enumerate(units):
        grown_rows, grown_longest = rows + n_rows, max(longest, length)
        if batches and grown_rows <= max_rows and grown_rows * grown_longest <= max_tokens:
            batches[-1].append(index)
            rows, longest = grown_rows, grown_longest
        else:
            batches.append([index])
            rows, longest = n_rows, length
    return [tuple(batch) for batch in batches]
