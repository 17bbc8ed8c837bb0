"""Batch packing by a row limit and a token budget (pure Python, no torch).

Memory of a forward pass grows with rows x padded length (activations, the key/value cache,
the logits), not with rows alone: 32 rows of 40 tokens and 32 rows of 4,000 tokens differ by
100x. Batches are therefore packed under two limits, a row count and a token budget counted
as rows x the longest unit in the batch (its padded length).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flasheval.engine.throughput import forward_flops

__all__ = ["TOKENS_PER_ROW", "CPU_ROWS", "CPU_TOKENS", "GPU_ROWS", "GPU_MEMORY_SHARE", "ModelShape", "auto_limits",
           "default_token_budget", "pack_batches", "PASS_OVERHEAD_SHARE", "PASS_OVERHEAD_FLOP",
           "pass_overhead", "pack_least_cost", "one_pass_context", "attention_width"]

TOKENS_PER_ROW = 1024
"""Default token budget per row of ``batch_size``: a budget of ``batch_size * 1024`` tokens keeps
ordinary few-shot prompts (a few hundred tokens) at the full row count and cuts the rows of
long prompts (a 4,096-token prompt at batch size 32 runs 8 rows per pass)."""


CPU_ROWS = 32
"""Most rows per pass on a CPU when no batch option is given."""
CPU_TOKENS = 4096
"""Token budget (rows x padded length) per pass on a CPU when no batch option is given. A 10-shot group (4 choices
x about 700 tokens) runs alone, as in the engine benchmark's batch of 4, and short prompts still share a pass; a CPU
has nothing to gain from passes of 32,768 tokens (the earlier default): ``benchmarks/batch_budget.py`` found no
budget of 2,048-32,768 faster beyond its noise on 2 shared cores (``docs/engine.md``, "Batching")."""
GPU_ROWS = 512
"""Most rows per pass on a GPU when no batch option is given (the token budget comes from free memory)."""
GPU_MEMORY_SHARE = 0.5
"""Share of the GPU's free memory (after the weights loaded) the token budget may plan to fill."""
_GPU_TOKENS = (1024, 1 << 20)  # the range a GPU's token budget is kept in


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    """The sizes of a model that set the memory of one token in a forward pass.

    Examples
    --------
    >>> ModelShape(hidden=576, intermediate=1536, n_layers=30, kv_width=192, vocab=49152, dtype_bytes=4).token_bytes()
    663552
    """

    hidden: int
    intermediate: int
    n_layers: int
    kv_width: int
    """Key (or value) values per token and layer: key/value heads x head dimension."""
    vocab: int
    dtype_bytes: int
    """Bytes per value of the weights' dtype (4 float32, 2 bfloat16 / float16)."""
    q_width: int = 0
    """Query values per token and layer: attention heads x head dimension (0: ``hidden``, as in most models;
    Gemma-3-270M: 4 x 256 against a hidden size of 640)."""

    @classmethod
    def from_config(cls, config: Any, *, dtype_bytes: int) -> ModelShape:
        """Read the sizes of a ``transformers`` config (missing ones get a Llama-like guess)."""
        hidden = int(getattr(config, "hidden_size", 0) or 4096)
        heads = int(getattr(config, "num_attention_heads", 0) or 32)
        head_dim = int(getattr(config, "head_dim", 0) or hidden // heads)
        return cls(hidden=hidden, intermediate=int(getattr(config, "intermediate_size", 0) or 4 * hidden),
                   n_layers=int(getattr(config, "num_hidden_layers", 0) or 32),
                   kv_width=int(getattr(config, "num_key_value_heads", 0) or heads) * head_dim,
                   vocab=int(getattr(config, "vocab_size", 0) or 32000), dtype_bytes=dtype_bytes,
                   q_width=heads * head_dim)

    def token_bytes(self) -> int:
        """Memory one padded token may hold in a pass: its keys and values in every layer (the expanded cache),
        one layer's activations (hidden states, projections, the gated MLP), and float32 log-probabilities over
        the vocabulary (the worst case: every token scored, as in rolling windows) next to its logits."""
        cache = 2 * self.n_layers * self.kv_width * self.dtype_bytes
        activations = (4 * self.hidden + 3 * self.intermediate) * self.dtype_bytes
        return cache + activations + self.vocab * (self.dtype_bytes + 8)


def one_pass_context(shape: ModelShape, multiple: int) -> int:
    """The longest context whose group the packed pass runs in ONE forward pass (context and choices side by side in
    one row under a 4-D mask) instead of two (the context, then the choices from its cache).

    One pass saves the second pass's own rounding up to ``multiple`` columns, half a block per row on average, which
    costs ``multiple / 2 x 2 x`` a layer's parameters in each layer's matrix products; it pays a full (masked)
    attention over its row, ``4 x n**2 x hidden`` per layer. This is the length where the two are equal:
    ``sqrt(multiple x layer parameters / (4 x hidden))``, a layer's parameters counted as its attention projections
    (``hidden x (2 hidden + 2 kv_width)``) and its gated MLP (``3 x hidden x intermediate``). Zero-shot prompts fall
    under it, few-shot prompts over it (``docs/engine.md``, "One pass for short contexts").

    Examples
    --------
    >>> smollm2 = ModelShape(hidden=576, intermediate=1536, n_layers=30, kv_width=192, vocab=49152, dtype_bytes=4)
    >>> qwen05b = ModelShape(hidden=896, intermediate=4864, n_layers=24, kv_width=128, vocab=151936, dtype_bytes=4)
    >>> one_pass_context(smollm2, 16), one_pass_context(qwen05b, 16)
    (156, 257)
    """
    layer = shape.hidden * (2 * shape.hidden + 2 * shape.kv_width + 3 * shape.intermediate)
    return math.isqrt(multiple * layer // (4 * shape.hidden))


def attention_width(shape: ModelShape) -> int:
    """The row width at which a column's attention costs as much as its matrix products: a row of ``n`` columns
    under a 4-D mask attends over all ``n`` (``4 x n x q_width`` per column and layer, masked or not) against
    ``2 x`` a layer's parameters (``hidden x (2 q_width + 2 kv_width + 3 intermediate)``). A pass of rows ``n``
    wide costs ``1 + n / attention_width`` times its columns' matrix products (:func:`~flasheval.engine.rows.row_cost`).

    Examples
    --------
    >>> attention_width(ModelShape(hidden=576, intermediate=1536, n_layers=30, kv_width=192, vocab=49152, dtype_bytes=4))
    3072
    >>> attention_width(ModelShape(hidden=640, intermediate=2048, n_layers=18, kv_width=256, vocab=262144, dtype_bytes=4,
    ...                            q_width=1024))  # Gemma-3-270M
    2720
    """
    q = shape.q_width or shape.hidden
    return shape.hidden * (2 * q + 2 * shape.kv_width + 3 * shape.intermediate) // (2 * q)


PASS_OVERHEAD_SHARE = 64
"""A forward pass's fixed cost is at least the token budget / this, in padded tokens (:func:`pass_overhead`). On 2 CPU
cores SmolLM2-135M's context passes took 0.19 s + 2.5 ms per padded token (11 batches of 176-4,464 tokens, a linear
fit): about 77 tokens, and 4,096 / 64 = 64. A larger budget (a GPU's) means a dearer pass, so fuller batches."""

PASS_OVERHEAD_FLOP = 16 * 10**9
"""A forward pass's fixed cost (dispatching every layer, reading the weights) as floating-point work of the model's own
tokens at 2 x parameters per token: SmolLM2-135M's fits gave 40-77 tokens (synthetic passes of 16-4,096 tokens on a pool
model; one placement's context passes), 1.1e10-2.1e10; this is their middle. A small model pays the same fixed cost
for far cheaper tokens: a 1M-parameter model's pass costs 8,000 of them, and its batches fill as greedily as before."""


def pass_overhead(max_tokens: int, n_parameters: int) -> int:
    """A forward pass's fixed cost in padded tokens, for :func:`pack_least_cost`: the larger of the budget's share
    (:data:`PASS_OVERHEAD_SHARE`) and the model's tokens worth :data:`PASS_OVERHEAD_FLOP`.

    Examples
    --------
    >>> pass_overhead(4096, 134_515_008), pass_overhead(4096, 1_000_000), pass_overhead(41984, 8_030_261_248)
    (64, 8000, 656)
    """
    return max(max_tokens // PASS_OVERHEAD_SHARE, math.ceil(PASS_OVERHEAD_FLOP / forward_flops(max(1, n_parameters), 1)))


def auto_limits(device_kind: str, *, free_bytes: int | None = None, shape: ModelShape | None = None) -> tuple[int, int]:
    """``(most rows, token budget)`` per pass for a device, when the caller gives no batch option.

    Parameters
    ----------
    device_kind
        ``cpu``, ``cuda``, ``mps``, ...: a CPU gets the measured :data:`CPU_ROWS` and :data:`CPU_TOKENS`.
    free_bytes
        An accelerator's free memory once the weights are loaded (``None``: not known yet, the least budget).
    shape
        The model's sizes (:class:`ModelShape`); needed with ``free_bytes``.

    Returns
    -------
    tuple of int
        On an accelerator the budget fills :data:`GPU_MEMORY_SHARE` of the free memory at
        :meth:`ModelShape.token_bytes` per token, kept in 1,024 .. 2**20 and rounded down to a multiple of 256;
        rows :data:`GPU_ROWS`. The out-of-memory back-off halves both if a pass still does not fit.

    Examples
    --------
    >>> auto_limits("cpu")
    (32, 4096)
    >>> llama8b = ModelShape(hidden=4096, intermediate=14336, n_layers=32, kv_width=1024, vocab=128256, dtype_bytes=2)
    >>> auto_limits("cuda", free_bytes=120 * 2**30, shape=llama8b)
    (512, 41984)
    >>> auto_limits("cuda", free_bytes=2**20, shape=llama8b), auto_limits("cuda")
    ((512, 1024), (512, 1024))
    """
    if device_kind == "cpu":
        return CPU_ROWS, CPU_TOKENS
    if free_bytes is None or shape is None:  # not known yet (before the weights load): the least budget
        return GPU_ROWS, _GPU_TOKENS[0]
    tokens = int(free_bytes * GPU_MEMORY_SHARE) // shape.token_bytes()
    tokens = min(max(tokens, _GPU_TOKENS[0]), _GPU_TOKENS[1])
    return GPU_ROWS, tokens // 256 * 256


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


def pack_least_cost(units: Sequence[tuple[int, int]], passes: Sequence[Sequence[tuple[int, int]]], *, max_rows: int,
                    max_tokens: int, overhead: int) -> list[tuple[int, ...]]:
    """Cut a sequence of units into consecutive batches under the limits of :func:`pack_batches`, at the least cost.

    Greedy filling pads every row of a batch to its widest unit: a few long prompts among many short ones
    (a placement stage's handful of examples per task) make every row long. Here the cut points minimise
    the total cost over batches, a batch costing, for each forward pass it runs, ``overhead`` plus its rows in
    that pass times the widest of them (the padded tokens it computes): an exact dynamic programme over the
    cut points, under the same limits (rows, and rows x the longest unit).

    Parameters
    ----------
    units
        ``(rows, length)`` per unit for the limits, as :func:`pack_batches` takes them.
    passes
        Per unit, ``(rows, width)`` in each forward pass a batch runs (same number of passes for every unit;
        ``rows`` 0: the unit has nothing in that pass, which a batch then skips when none of its units has).
    overhead
        A pass's fixed cost in padded tokens (:func:`pass_overhead`).

    Examples
    --------
    Two long units and six short ones, one pass: greedy filling pads all eight to 100 (800 tokens);
    cut after the long ones: 200 + 60 + one more pass.

    >>> units = [(1, 100)] * 2 + [(1, 10)] * 6
    >>> pack_batches(units, max_rows=8, max_tokens=1000)
    [(0, 1, 2, 3, 4, 5, 6, 7)]
    >>> pack_least_cost(units, [[u] for u in units], max_rows=8, max_tokens=1000, overhead=64)
    [(0, 1), (2, 3, 4, 5, 6, 7)]
    >>> pack_least_cost(units, [[u] for u in units], max_rows=8, max_tokens=1000, overhead=1000)
    [(0, 1, 2, 3, 4, 5, 6, 7)]
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"max_rows and max_tokens must be >= 1, got {max_rows} and {max_tokens}")
    n = len(units)
    if n == 0:
        return []
    rows, lengths = (np.array([u[k] for u in units], dtype=np.int64) for k in (0, 1))
    pass_rows = np.array([[r for r, _ in p] for p in passes], dtype=np.int64).reshape(n, -1)
    pass_widths = np.array([[w if r else 0 for r, w in p] for p in passes], dtype=np.int64).reshape(n, -1)
    best = np.full(n + 1, np.iinfo(np.int64).max)  # best[j]: least cost of units[:j]
    best[0] = 0
    cut = np.zeros(n + 1, dtype=np.int64)  # where the last batch of that best starts
    for i in range(n):
        stop = min(n, i + max_rows)  # every unit has a row at least
        total = np.cumsum(rows[i:stop])
        fits = (total <= max_rows) & (total * np.maximum.accumulate(lengths[i:stop]) <= max_tokens)
        fits[0] = True  # a unit over the limits runs alone
        m = int(np.argmin(fits)) if not fits.all() else len(fits)  # rows and the longest only grow
        in_pass = np.cumsum(pass_rows[i:i + m], axis=0)
        cost = (np.where(in_pass > 0, overhead + in_pass * np.maximum.accumulate(pass_widths[i:i + m], axis=0), 0)
                .sum(axis=1) + best[i])
        better = cost < best[i + 1:i + 1 + m]
        best[i + 1:i + 1 + m][better] = cost[better]
        cut[i + 1:i + 1 + m][better] = i
    batches, j = [], n
    while j > 0:
        batches.append(tuple(range(int(cut[j]), j)))
        j = int(cut[j])
    return batches[::-1]
