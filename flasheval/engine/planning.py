"""Request planning for the Hugging Face backend: token ids in, ordered forward batches out (pure Python, no torch).

Requests become :class:`Item` s (one continuation as token ids); items with one context form a
:class:`Group`, whose context is truncated from the left so its longest choice fits; groups run
longest first, packed under a row limit and a token budget (:mod:`flasheval.engine.batching`).
Rolling log-likelihood texts are cut here into windows, which are items like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flasheval.engine.batching import pack_least_cost
from flasheval.engine.rows import fill_rows, row_layout
from flasheval.errors import BackendError
from flasheval.types import LoglikelihoodRequest

__all__ = ["Item", "Group", "runs_in_one_pass", "one_pass_widths", "split_at_window", "group_unit", "batch_shape",
           "group_passes", "padded_width", "segment_columns", "encode_context", "encode_continuation", "prefix_space",
           "request_items", "token_items", "group_items", "pack_groups", "batch_indices", "rolling_windows"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One continuation to score, as token ids."""

    index: int
    """Position of the request (or token pair, or rolling window) this item scores."""
    context: tuple[int, ...]
    """Context token ids (never empty)."""
    continuation: tuple[int, ...]
    """Token ids whose log-likelihood is summed (never empty, never truncated)."""
    slot: int = 0
    """The request's choice index (0 for token pairs and rolling windows): which part of a pad-width block the
    packed pass places this item's segment in (:func:`segment_columns`). A property of the request itself, never
    of its companions, so where its tokens fall modulo the pad width does not depend on them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """Items sharing one (already truncated) context."""

    context: tuple[int, ...]
    """The shared context token ids."""
    items: tuple[Item, ...]
    """The group's items, each carrying ``context``."""

    @property
    def rows(self) -> int:
        """Sequences the group runs: one per item."""
        return len(self.items)

    @property
    def length(self) -> int:
        """Tokens of the group's longest sequence, context included (its padded length)."""
        return len(self.context) + max(len(item.continuation) for item in self.items)

    @property
    def tokens(self) -> int:
        """Tokens the group's passes run: its context once and every continuation."""
        return len(self.context) + sum(len(item.continuation) for item in self.items)

    def halves(self) -> tuple[Group, Group]:
        """The group cut into two groups of half its items each (for an out-of-memory back-off)."""
        half = len(self.items) // 2
        return Group(context=self.context, items=self.items[:half]), Group(context=self.context, items=self.items[half:])


def prefix_space(tokenizer: Any) -> bool:
    """Whether continuations should carry a leading space: the tokenizer encodes ``" a"`` as one token
    (GPT-2 / GPT-NeoX / Llama-3 style BPE), llm-foundry's test; SentencePiece does not."""
    return len(tokenizer(" a", add_special_tokens=False).input_ids) == 1


def encode_context(tokenizer: Any, text: str, *, start_id: int) -> list[int]:
    """Context ids with the tokenizer's default special tokens; an empty context is ``[start_id]``."""
    ids = list(tokenizer(text).input_ids) if text else []
    return ids or [start_id]


def encode_continuation(tokenizer: Any, text: str) -> list[int]:
    """Continuation ids, without special tokens."""
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def request_items(
    requests: Sequence[LoglikelihoodRequest], tokenizer: Any, *, start_id: int, max_length: int
) -> list[Item]:
    """Tokenize each request into an :class:`Item` (each distinct context once).

    Raises
    ------
    BackendError
        A continuation encodes to no tokens, or to ``max_length`` tokens or more.
    """
    # One tokenizer call per kind of text, not per request: a fast tokenizer encodes a batch in one Rust
    # call (the same ids as one text at a time; nothing is padded).
    texts = list(dict.fromkeys(r.context for r in requests if r.context))
    encoded = tokenizer(texts).input_ids if texts else []
    contexts = {text: tuple(ids) or (start_id,) for text, ids in zip(texts, encoded)}
    contexts[""] = (start_id,)
    continuations = tokenizer([r.continuation for r in requests], add_special_tokens=False).input_ids if requests else []
    items = []
    for index, (request, ids) in enumerate(zip(requests, continuations)):
        continuation = tuple(ids)
        if not continuation:
            raise BackendError(f"continuation of {request.task_name}/{request.example_id} encodes to no tokens")
        if len(continuation) >= max_length:
            raise BackendError(
                f"continuation of {request.task_name}/{request.example_id} has {len(continuation)} tokens; "
                f"the model takes at most {max_length} (continuations are never truncated)"
            )
        items.append(Item(index=index, context=contexts[request.context], continuation=continuation,
                          slot=request.choice_index))
    return items


def token_items(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[Item]:
    """One :class:`Item` per already tokenized ``(context ids, continuation ids)`` pair.

    Raises
    ------
    BackendError
        A pair has an empty context or continuation.
    """
    items = []
    for index, (context, continuation) in enumerate(pairs):
        if not context or not continuation:
            raise BackendError(f"token pair {index} has an empty context or continuation")
        items.append(Item(index=index, context=tuple(context), continuation=tuple(continuation)))
    return items


def group_items(items: Sequence[Item], *, max_length: int, share_context: bool) -> list[Group]:
    """Group items by context (or one group per item), truncate from the left, sort longest first.

    All choices of a context share one truncation: the longest continuation decides it.

    Examples
    --------
    >>> items = [Item(index=0, context=(1, 2, 3), continuation=(4,)), Item(index=1, context=(9,), continuation=(5, 6)),
    ...          Item(index=2, context=(1, 2, 3), continuation=(7, 8))]
    >>> [(g.context, [i.index for i in g.items]) for g in group_items(items, max_length=4, share_context=True)]
    [((2, 3), [0, 2]), ((9,), [1])]
    """
    by_context: dict[tuple[int, ...], list[Item]] = {}
    for item in items:
        key = item.context if share_context else (item.index, *item.context)
        by_context.setdefault(key, []).append(item)
    groups = []
    for members in by_context.values():
        budget = max_length - max(len(m.continuation) for m in members)
        context = members[0].context[-budget:]
        groups.append(Group(
            context=context, items=tuple(Item(index=m.index, context=context, continuation=m.continuation, slot=m.slot)
                                          for m in members)
        ))
    groups.sort(key=lambda g: (-g.length, g.items[0].index))
    return groups


def runs_in_one_pass(group: Group, one_pass: int, window: int | None = None) -> bool:
    """Whether ``group`` runs its context and choices in one packed pass
    (:func:`~flasheval.engine.hf.packed.forward_packed`): its context has at most ``one_pass`` tokens and, on a
    model with sliding-window layers (``window``: their window; ``None``: none), its longest sequence fits the
    window, where no window masks anything and the pass's one 4-D mask is exact on every layer.

    >>> g = Group(context=(1, 2, 3), items=(Item(index=0, context=(1, 2, 3), continuation=(5, 6)),))
    >>> runs_in_one_pass(g, 3), runs_in_one_pass(g, 2), runs_in_one_pass(g, 3, window=5), runs_in_one_pass(g, 3, window=4)
    (True, False, True, False)
    """
    return len(group.context) <= one_pass and (window is None or group.length <= window)


def split_at_window(groups: Sequence[Group], one_pass: int, window: int | None) -> list[Group]:
    """On a model with sliding-window layers (``window``), each group whose context may run one pass
    (:func:`runs_in_one_pass`) cut in two: its choices that fit the window with the context, and the others. Whether
    a choice runs one pass then depends on the choice alone, never on a longer sibling (a resumed or split call
    that asks for some choices of a context plans them as a full call does). Without a window: ``groups``.

    >>> g = Group(context=(1, 2), items=(Item(index=0, context=(1, 2), continuation=(5,)),
    ...                                  Item(index=1, context=(1, 2), continuation=(5, 6, 7))))
    >>> [[i.index for i in part.items] for part in split_at_window([g], one_pass=4, window=4)]
    [[0], [1]]
    >>> [[i.index for i in part.items] for part in split_at_window([g], one_pass=1, window=4)]
    [[0, 1]]
    """
    if window is None:
        return list(groups)
    out = []
    for group in groups:
        fits = [len(group.context) + len(item.continuation) <= window for item in group.items]
        if len(group.context) > one_pass or all(fits) or not any(fits):
            out.append(group)
            continue
        out.extend(Group(context=group.context, items=tuple(i for i, f in zip(group.items, fits) if f is keep))
                   for keep in (True, False))
    return out


def group_unit(group: Group, packed: int | None = None) -> tuple[int, int]:
    """``(rows, padded length)`` of a group that does not run in one pass, for the batch limits (one-pass groups
    share rows: :func:`batch_shape`).

    One row per choice, as long as the context and the longest choice; or, ``packed`` (the pad width of
    :func:`~flasheval.engine.hf.packed.forward_packed`, which runs a group's choices packed in one row),
    one row as long as the longer of its context and its choices' segments (:func:`segment_columns`).

    >>> g = Group(context=(1, 2, 3), items=tuple(Item(index=i, context=(1, 2, 3), continuation=(5,) * 20, slot=i)
    ...                                         for i in range(4)))
    >>> group_unit(g), group_unit(g, packed=16)
    ((4, 23), (1, 96))
    """
    if packed is None:
        return group.rows, group.length
    return 1, max(len(group.context), segment_columns(group.items, packed)[1])


def batch_shape(groups: Sequence[Group], *, packed: int | None, pad_multiple: int, one_pass: int = 0,
                window: int | None = None, row_width: int = 0) -> tuple[int, int]:
    """``(rows, padded length)`` of a batch in the layouts it runs in: the size the out-of-memory back-off checks.
    Groups that :func:`runs_in_one_pass` share rows ``row_width`` wide or as wide as the widest of them
    (:func:`~flasheval.engine.rows.row_layout` of their :func:`one_pass_widths`); each other group is its
    :func:`group_unit` (its segments at ``packed``, or one row per choice).

    >>> g = Group(context=(1, 2, 3), items=(Item(index=0, context=(1, 2, 3), continuation=(5,) * 20),))
    >>> [batch_shape([g] * 3, packed=None, pad_multiple=16, one_pass=p, window=w) for p, w in ((3, None), (0, None))]
    [(3, 32), (3, 23)]
    >>> h = Group(context=(1, 2, 3), items=(Item(index=1, context=(1, 2, 3), continuation=(5,)),))
    >>> batch_shape([g, h, h, h], packed=None, pad_multiple=8, one_pass=3)  # rows of 24 columns: g | h h h
    (2, 24)
    """
    widths = one_pass_widths(groups, packed=packed, pad_multiple=pad_multiple, one_pass=one_pass, window=window)
    if widths:
        n_rows, places = row_layout(widths, row_width)
        units = [(n_rows, max(offset + w for (_, offset), w in zip(places, widths)))]
    else:
        units = []
    units += [group_unit(g, packed) for g in groups if not runs_in_one_pass(g, one_pass, window)]
    return sum(r for r, _ in units), max((n for _, n in units), default=0)


def one_pass_widths(groups: Sequence[Group], *, packed: int | None, pad_multiple: int, one_pass: int = 0,
                    window: int | None = None) -> list[int]:
    """The padded one-pass width (:func:`group_passes`) of each of ``groups`` that :func:`runs_in_one_pass`, in
    order: the widths :func:`~flasheval.engine.rows.row_layout` lays out."""
    return [group_passes(g, pad_multiple=packed or pad_multiple, packed=True, one_pass=one_pass)[0][1]
            for g in groups if runs_in_one_pass(g, one_pass, window)]


def group_passes(group: Group, *, pad_multiple: int, packed: bool, one_pass: int = 0) -> list[tuple[int, int]]:
    """``(rows, padded width)`` of ``group`` in each of the two forward passes that score it.

    Packed (:func:`~flasheval.engine.hf.packed.forward_packed`): the whole context in one row, then one row of
    its choices' segments (:func:`segment_columns`, rounded up), none when every choice is one token; a context of
    at most ``one_pass`` tokens and its segments in one row of one pass, the second pass empty. Shared
    (:func:`~flasheval.engine.hf.forward.forward_shared`): the context less its last token in one row (none when
    that is empty), then one row per choice of ``1 + len`` tokens.

    >>> g = Group(context=(1, 2, 3), items=(Item(index=0, context=(1, 2, 3), continuation=(5,)),
    ...                                     Item(index=1, context=(1, 2, 3), continuation=(5, 6, 7))))
    >>> group_passes(g, pad_multiple=16, packed=True), group_passes(g, pad_multiple=16, packed=False)
    ([(1, 16), (1, 16)], [(1, 16), (2, 16)])
    >>> group_passes(g, pad_multiple=16, packed=True, one_pass=3)
    [(1, 16), (0, 0)]
    """
    if packed and len(group.context) <= one_pass:
        return [(1, padded_width(len(group.context) + segment_columns(group.items, pad_multiple)[1], pad_multiple)),
                (0, 0)]
    if packed:
        width = padded_width(segment_columns(group.items, pad_multiple)[1], pad_multiple)
        return [(1, padded_width(len(group.context), pad_multiple)), (1 if width else 0, width)]
    prefix = len(group.context) - 1
    return [(1 if prefix else 0, padded_width(prefix, pad_multiple)),
            (group.rows, padded_width(1 + max(len(item.continuation) for item in group.items), pad_multiple))]


def padded_width(n_tokens: int, multiple: int) -> int:
    """``n_tokens`` rounded up to a multiple of ``multiple``: the width of a padded batch.

    CPU attention kernels add keys up in 16-wide lanes counted from column 0: a shift of a row's tokens by other
    than a multiple (left padding, a companion before them) reorders the sums, visible in bf16 (SmolLM2: up to 0.2
    nats). Widths rounded to a multiple keep a row's tokens in place modulo it whatever the batch (``docs/engine.md``).

    >>> padded_width(17, 16), padded_width(32, 16), padded_width(0, 16), padded_width(5, 1)
    (32, 32, 0, 5)
    """
    return -(-n_tokens // multiple) * multiple


def segment_columns(items: Sequence[Item], multiple: int) -> tuple[list[int | None], int]:
    """Where the packed pass puts each item's segment (its ``len(continuation) - 1`` inputs) in the group's row:
    ``(first column of each item, None for one-token items; the row's width)``.

    Each segment starts at a column whose remainder modulo ``multiple`` is fixed by the item alone (its
    :attr:`Item.slot` and length). A segment of ``n`` tokens, ``n`` rounded up to a power of two ``s``: when ``s <
    multiple``, remainder ``slot * s`` modulo ``multiple``, so the short segments of one question's choices share a
    block instead of taking one each; else remainder 0 for an even slot, and for an odd slot the one that makes the
    segment end on a block edge, so an even choice and the odd one after it share the block between them. Segments
    are placed in slot order, each at the first column of its remainder where it overlaps none placed before;
    companions move a segment by whole blocks only, so its tokens keep their offsets modulo ``multiple`` (the CPU
    attention kernel's lanes: see :func:`padded_width`) and its sums do not depend on them.

    Examples
    --------
    >>> short = [Item(index=i, context=(1,), continuation=(5, 6, 7), slot=i) for i in range(4)]
    >>> segment_columns(short, 16)  # four 2-token segments in one block, not four blocks
    ([0, 2, 4, 6], 8)
    >>> long = [Item(index=0, context=(1,), continuation=(5,) * 20),
    ...         Item(index=1, context=(1,), continuation=(5,), slot=1)]
    >>> segment_columns(long, 16)
    ([0, None], 19)
    >>> pair = [Item(index=i, context=(1,), continuation=(5,) * 20, slot=i) for i in range(2)]
    >>> segment_columns(pair, 16)  # the odd choice ends on a block edge: 48 columns, not 64
    ([0, 29], 48)
    """
    columns: list[int | None] = [None] * len(items)
    taken: set[int] = set()
    sizes = [len(item.continuation) - 1 for item in items]
    for k in sorted((k for k in range(len(items)) if sizes[k]), key=lambda k: (items[k].slot, k)):
        n, slot = sizes[k], items[k].slot
        width = 1 << (n - 1).bit_length()
        column = (slot * width) % multiple if width < multiple else (-n) % multiple if slot % 2 else 0
        while any(c in taken for c in range(column, column + n)):
            column += multiple
        taken.update(range(column, column + n))
        columns[k] = column
    return columns, max(taken, default=-1) + 1


def pack_groups(groups: Sequence[Group], *, max_rows: int, max_tokens: int, packed: int | None = None,
                overhead: int, pad_multiple: int = 1, one_pass: int = 0, window: int | None = None,
                attention_width: int = 0) -> list[list[Group]]:
    """Groups packed into batches under the row limit and token budget; a group is never split. Groups that run in one
    packed pass (:func:`runs_in_one_pass` with ``one_pass`` and ``window``) never share a batch with the others (on
    a model that is not ``packed``, a sliding-window one, those run one row per choice): they come after them, several
    to a row and every batch full (:func:`~flasheval.engine.rows.fill_rows`; nearly nothing is padded; rows up to
    twice a batch's widest group where that costs less by ``attention_width``,
    :func:`~flasheval.engine.batching.attention_width` of the model, 0: never). The others are cut at the least
    padded cost (:func:`~flasheval.engine.batching.pack_least_cost` over :func:`group_passes`,
    each group's :func:`group_unit` for the limits; ``overhead``: a pass's fixed cost in padded tokens,
    :func:`~flasheval.engine.batching.pass_overhead` of the model).

    Groups run in order of their padded context width, longest first, then of their second pass's width: a
    batch's context pass pads to a multiple of ``pad_multiple`` anyway, and within one width the groups whose
    choices are short run together instead of padding to a long-choice companion."""
    width = packed or pad_multiple
    alone = [runs_in_one_pass(g, one_pass, window) for g in groups]
    passes = [group_passes(g, pad_multiple=width, packed=a or packed is not None, one_pass=one_pass if a else 0)
              for g, a in zip(groups, alone)]
    order = sorted(range(len(groups)), key=lambda k: (alone[k], -passes[k][0][1], -passes[k][1][1], k))
    split = sum(not a for a in alone)  # the others first, then the one-pass groups: no batch mixes them
    if 0 < split < len(groups):
        return [*pack_groups([groups[k] for k in order[:split]], max_rows=max_rows, max_tokens=max_tokens,
                             packed=packed, overhead=overhead, pad_multiple=pad_multiple),
                *pack_groups([groups[k] for k in order[split:]], max_rows=max_rows, max_tokens=max_tokens,
                             packed=packed, overhead=overhead, pad_multiple=pad_multiple, one_pass=one_pass,
                             window=window, attention_width=attention_width)]
    if split == 0:
        batches = [members for _, members in fill_rows([passes[k][0][1] for k in order], max_rows=max_rows,
                                                        max_tokens=max_tokens, attention_width=attention_width,
                                                        most=window)]
    else:
        units = [group_unit(groups[k], packed) for k in order]
        batches = pack_least_cost(units, [passes[k] for k in order], max_rows=max_rows, max_tokens=max_tokens,
                                  overhead=overhead)
    return [[groups[order[i]] for i in batch] for batch in batches]


def batch_indices(batches: Sequence[Sequence[Group]]) -> list[tuple[int, ...]]:
    """The item indices of each batch, in order."""
    return [tuple(item.index for group in batch for item in group.items) for batch in batches]


def rolling_windows(texts: Sequence[Sequence[int]], *, start_id: int, max_length: int) -> tuple[list[Item], list[int]]:
    """Cut token sequences into disjoint windows of ``max_length - 1`` predicted tokens.

    Each text is preceded by ``start_id``; each window is conditioned on the tokens just before
    it, up to ``max_length`` tokens in all, so every token is predicted exactly once. Returns the
    windows (indexed by position) and, per window, the index of the text it belongs to.

    Examples
    --------
    >>> windows, owners = rolling_windows([[1, 2, 3, 4, 5]], start_id=0, max_length=3)
    >>> [(w.context, w.continuation) for w in windows], owners
    ([((0,), (1, 2)), ((2,), (3, 4)), ((3, 4), (5,))], [0, 0, 0])
    """
    windows: list[Item] = []
    owners: list[int] = []
    span = max_length - 1
    for index, text in enumerate(texts):
        tokens = [start_id, *text]
        for start in range(1, len(tokens), span):
            chunk = tuple(tokens[start : start + span])
            context = tuple(tokens[max(0, start - (max_length - len(chunk))) : start])
            owners.append(index)
            windows.append(Item(index=len(windows), context=context, continuation=chunk))
    return windows, owners
