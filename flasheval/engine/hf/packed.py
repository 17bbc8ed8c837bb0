"""The packed scoring passes of a Hugging Face causal LM (SDPA or eager; sliding-window models: one pass only).

:func:`forward_packed` scores a batch of groups (a context and its choices) in two forward passes or in one. Two
(:func:`_two_passes`, long contexts): each whole context once, right-padded and without an attention mask (the
causal kernel path), keeping the logits of each context's last column only, which predict every choice's first
token; then one row per group holding all its choices' other inputs side by side, each choice's segment at a
column whose remainder modulo the pad width the choice alone fixes, attending to the context's cache and to
itself (a 4-D mask), keeping the logits of its real tokens only. One (:func:`_one_pass`, a context of at most
:attr:`~flasheval.engine.hf.forward.PassSettings.one_pass` tokens: zero-shot prompts): the context and, right after
it, the same segments in one row under one 4-D mask, so a short prompt's row is rounded up to the pad width once,
not twice. :func:`_logits_at` is how the logits are limited to the scored positions: a forward pre-hook on the
model's output layer, removed when the pass ends.

torch is imported inside the functions, never at module import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flasheval.engine.hf.forward import MIN_LOGIT_ROWS, PassSettings, Scored, check_finite, forward_shared, padded_width
from flasheval.engine.planning import Group, Item, one_pass_widths, runs_in_one_pass, segment_columns
from flasheval.engine.rows import row_layout

__all__ = ["forward_packed"]


def forward_packed(model: Any, groups: list[Group], settings: PassSettings) -> list[Scored]:
    """Score ``groups``: those whose context has at most ``settings.one_pass`` tokens (on a sliding-window model,
    those that also fit its window: :func:`~flasheval.engine.planning.runs_in_one_pass`) in one pass
    (:func:`_one_pass`), the others in two (:func:`_two_passes`; on a sliding-window model, one row per choice:
    :func:`~flasheval.engine.hf.forward.forward_shared`). Which one a group takes depends on the group alone, never
    on its companions (the planner keeps the kinds in separate batches; a mixed batch runs as two)."""
    alone = [runs_in_one_pass(group, settings.one_pass, settings.window) for group in groups]
    one = [group for group, a in zip(groups, alone) if a]
    rest = [group for group, a in zip(groups, alone) if not a]
    run_rest = _two_passes if settings.packed else forward_shared
    return (run_rest(model, rest, settings) if rest else []) + (_one_pass(model, one, settings) if one else [])


def _one_pass(model: Any, groups: list[Group], settings: PassSettings) -> list[Scored]:
    """Groups side by side in rows (:func:`~flasheval.engine.rows.row_layout`: in the order given, each in the current
    row while it fits in the widest group's width), each group at an offset that is a multiple of the pad width: its
    context at ``offset .. offset + len - 1``, then its choices' segments, each at ``offset + len(context) +`` the
    column :func:`~flasheval.engine.planning.segment_columns` gives it, at positions ``len(context) + j``; one forward
    pass under a 4-D mask (the context causal; a segment sees its context and causally itself; nothing sees another
    group; a padding column sees column 0 only, so no softmax row is empty). Logits at each context's last column
    (every choice's first token) and at the segments' real tokens. A group's tokens sit at the same places modulo the
    pad width and see the same keys whatever its companions; only the columns around it depend on them."""
    import torch

    from flasheval.engine.hf.in_memory import no_grad

    multiple = settings.pad_multiple
    lengths = [len(group.context) for group in groups]
    columns = [segment_columns(group.items, multiple) for group in groups]
    spans = one_pass_widths(groups, packed=multiple, pad_multiple=multiple, one_pass=settings.one_pass,
                            window=settings.window)  # the widths the planner and the back-off lay out
    n_rows, places = row_layout(spans, settings.row_width)
    n = max(offset + span for (_, offset), span in zip(places, spans))
    ids = torch.full((n_rows, n), settings.pad_id, dtype=torch.long)
    positions = torch.zeros((n_rows, n), dtype=torch.long)
    allowed = torch.zeros((n_rows, n, n), dtype=torch.bool)
    allowed[:, :, 0] = True
    segments = []  # (its context's entry in ``at``, row, group start, context length, item, first column or None)
    at: tuple[list[int], list[int]] = ([], [])  # each context's last column, then the segments' tokens
    for group, length, (row, start), (firsts, _) in zip(groups, lengths, places, columns):
        end = start + length
        ids[row, start:end] = torch.tensor(group.context)
        positions[row, start:end] = torch.arange(length)
        allowed[row, start:end, 0] = start == 0
        allowed[row, start:end, start:end] = torch.ones(length, length, dtype=torch.bool).tril()
        at[0].append(row)
        at[1].append(end - 1)
        segments.extend((len(at[0]) - 1, row, start, length, item, None if column is None else end + column)
                        for item, column in zip(group.items, firsts))
    targets = [item.continuation[0] for *_, item, _ in segments]
    owners = list(range(len(segments)))
    for s, (_, row, start, length, item, column) in enumerate(segments):
        if column is None:
            continue
        k = len(item.continuation) - 1
        ids[row, column:column + k] = torch.tensor(item.continuation[:-1])
        positions[row, column:column + k] = length + torch.arange(k)
        allowed[row, column:column + k, 0] = start == 0
        allowed[row, column:column + k, start:start + length] = True
        allowed[row, column:column + k, column:column + k] = torch.ones(k, k, dtype=torch.bool).tril()
        at[0].extend([row] * k)
        at[1].extend(range(column, column + k))
        targets.extend(item.continuation[1:])
        owners.extend([s] * k)
    device = settings.device
    with no_grad(model):
        with _logits_at(model, *at) as pick:
            out = model(input_ids=ids.to(device), attention_mask=_additive(model, allowed).unsqueeze(1).to(device),
                        position_ids=positions.to(device), use_cache=False)
            logits = pick(out.logits)  # [groups + scored segment tokens, vocab]
        firsts = logits[torch.tensor([g for g, *_ in segments], device=logits.device)]
        sums, greedy = _score_rows(model, torch.cat([firsts, logits[len(groups):]]), targets, owners, len(segments))
    return [(item, sums[s], greedy[s]) for s, (*_, item, _) in enumerate(segments)]


def _two_passes(model: Any, groups: list[Group], settings: PassSettings) -> list[Scored]:
    """Each whole context once, then one row per group with all its choices' other inputs side by side.

    Pass 1 runs every group's full context, right-padded and without an attention mask: under causal attention
    a real token never sees the padding after it, so the kernel's causal path runs (no mask, grouped-query
    attention without copied keys), and every row's tokens sit at columns ``0 .. len - 1`` whatever its
    companions. Its logits are computed only at each row's last real column (:func:`_logits_at`), which predicts
    every choice's first token. Pass 2 runs, for choices of two or more tokens, ``continuation[:-1]`` (a
    continuation's last token predicts nothing), each choice in a segment of the group's row at a column whose
    remainder modulo the pad width the choice alone decides (:func:`~flasheval.engine.planning.segment_columns`), at
    positions ``len(context) + j``, attending to the real context columns of the cache and causally to its own
    segment (a 4-D mask), logits only at its real tokens. No cache is copied per choice, no row is padded to the
    group's longest choice, and a choice's tokens sit at the same offsets modulo the pad width whatever its
    companions, so its sums do not depend on them.
    """
    import torch

    from flasheval.engine.hf.in_memory import no_grad

    device, multiple = settings.device, settings.pad_multiple
    lengths = [len(group.context) for group in groups]
    n_prefix = padded_width(max(lengths), multiple)
    ids = torch.full((len(groups), n_prefix), settings.pad_id, dtype=torch.long)
    for g, group in enumerate(groups):
        ids[g, : lengths[g]] = torch.tensor(group.context)
    prefix_mask = (torch.arange(n_prefix).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    # Segments of pass 2: (group, item, first column), where segment_columns puts them (one-token items: no column).
    segments, widths = [], []
    for g, group in enumerate(groups):
        columns, width = segment_columns(group.items, multiple)
        segments.extend((g, item, column or 0) for item, column in zip(group.items, columns))
        widths.append(width)
    n_query = padded_width(max(widths), multiple)
    with no_grad(model):
        with _logits_at(model, list(range(len(groups))), [n - 1 for n in lengths]) as pick:
            out = model(input_ids=ids.to(device), use_cache=n_query > 0)
            last = pick(out.logits)  # [groups, vocab]: each context's last column
        # The last context token's prediction, once per choice (its first token).
        rows = [last[torch.tensor([g for g, _, _ in segments], device=last.device)]]
        targets = [item.continuation[0] for _, item, _ in segments]
        owners = list(range(len(segments)))
        if n_query > 0:
            past = getattr(out, "cache", None)
            past = out.past_key_values if past is None else past
            # Pass 2 runs only the groups that have a choice of two or more tokens (their rows of the cache).
            active = [g for g, width in enumerate(widths) if width]
            row = {g: r for r, g in enumerate(active)}
            if len(active) < len(groups):
                past.reorder_cache(torch.tensor(active, device=device))
            inputs = [(row[g], item, column) for g, item, column in segments if g in row]
            rows.append(_segment_pass(model, inputs, n_query, past, prefix_mask[active], [lengths[g] for g in active],
                                      settings))  # [scored tokens, vocab], in the order of ``inputs``
            for s, (g, item, column) in enumerate(segments):
                targets.extend(item.continuation[1:])
                owners.extend([s] * (len(item.continuation) - 1))
        sums, greedy = _score_rows(model, torch.cat(rows), targets, owners, len(segments))
    return [(item, sums[s], greedy[s]) for s, (_, item, _) in enumerate(segments)]


def _segment_pass(model: Any, segments: list[tuple[int, Item, int]], n_query: int, past: Any, prefix_mask: Any,
                  lengths: list[int], settings: PassSettings) -> Any:
    """Pass 2 of :func:`_two_passes` over the rows of ``prefix_mask`` (``segments`` name their row): the logits
    ``[scored tokens, vocab]`` of every segment's tokens, segment by segment."""
    import torch

    n_groups, n_prefix = prefix_mask.shape
    ids = torch.full((n_groups, n_query), settings.pad_id, dtype=torch.long)
    positions = torch.zeros((n_groups, n_query), dtype=torch.long)
    allowed = torch.zeros((n_groups, n_query, n_prefix + n_query), dtype=torch.bool)
    allowed[:, :, :n_prefix] = prefix_mask.bool().unsqueeze(1)  # every query sees its group's real context
    at: tuple[list[int], list[int]] = ([], [])
    for g, item, column in segments:
        n = len(item.continuation) - 1
        ids[g, column:column + n] = torch.tensor(item.continuation[:-1])
        positions[g, column:column + n] = lengths[g] + torch.arange(n)
        allowed[g, column:column + n, n_prefix + column:n_prefix + column + n] = torch.ones(n, n, dtype=torch.bool).tril()
        at[0].extend([g] * n)
        at[1].extend(range(column, column + n))
    device = settings.device
    with _logits_at(model, *at) as pick:
        out = model(input_ids=ids.to(device), attention_mask=_additive(model, allowed).unsqueeze(1).to(device),
                    position_ids=positions.to(device), use_cache=True, **{settings.cache_kw: past})
        return pick(out.logits)


@contextmanager
def _logits_at(model: Any, rows: list[int], columns: list[int]) -> Iterator[Callable[[Any], Any]]:
    """While open, the model's output layer computes logits only at the positions ``(rows[i], columns[i])``: a
    forward pre-hook on its output embeddings keeps those rows of the last hidden states, in that order, repeating
    the last one up to :data:`MIN_LOGIT_ROWS` rows. Yields ``pick``: the forward's logits in, ``[positions, vocab]``
    out (taken from the full logits when the model has no such layer or its forward did not call it).
    The hook is removed on leaving, whatever happens."""
    import torch

    from flasheval.engine.hf.in_memory import unwrap

    n = len(rows)
    spare = max(0, MIN_LOGIT_ROWS - n)
    index = (torch.tensor(rows + rows[-1:] * spare), torch.tensor(columns + columns[-1:] * spare))
    ran: list[bool] = []

    def keep(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        ran.append(True)
        hidden = args[0]
        return (hidden[index[0].to(hidden.device), index[1].to(hidden.device)].unsqueeze(0), *args[1:])

    def pick(logits: Any) -> Any:
        return logits[0, :n] if ran else logits[index[0][:n].to(logits.device), index[1][:n].to(logits.device)]

    head = getattr(unwrap(model)[1], "get_output_embeddings", lambda: None)()
    handle = None if head is None else head.register_forward_pre_hook(keep)
    try:
        yield pick
    finally:
        if handle is not None:
            handle.remove()


def _additive(model: Any, allowed: Any) -> Any:
    """``allowed`` (bool) as the 4-D mask the attention takes: boolean for SDPA; for eager attention, which adds
    the mask to the scores, 0 and the dtype's lowest value in the input embeddings' dtype."""
    import torch

    from flasheval.engine.hf.in_memory import unwrap

    inner = unwrap(model)[1]
    if inner.config._attn_implementation == "sdpa":
        return allowed
    dtype = inner.get_input_embeddings().weight.dtype
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)


def _score_rows(model: Any, logits: Any, targets: list[int], owners: list[int], n: int) -> tuple[list[float], list[bool]]:
    """Sum the float32 log-probabilities of ``targets`` under the rows of ``logits`` ``[positions, vocab]``
    into ``n`` items (``owners[i]``: the item of row ``i``) in float64; and whether every target is the argmax."""
    import torch

    picked = torch.tensor(targets, device=logits.device)
    owner = torch.tensor(owners, device=logits.device)
    scored = logits.float()
    logprobs = torch.log_softmax(scored, dim=-1).gather(-1, picked.unsqueeze(-1)).squeeze(-1)
    sums = torch.zeros(n, dtype=torch.float64, device=logits.device).index_add_(0, owner, logprobs.double())
    check_finite(model, sums)
    misses = torch.zeros(n, dtype=torch.long, device=logits.device).index_add_(
        0, owner, (scored.argmax(dim=-1) != picked).long())
    return [float(x) for x in sums.cpu().tolist()], [bool(x == 0) for x in misses.cpu().tolist()]
