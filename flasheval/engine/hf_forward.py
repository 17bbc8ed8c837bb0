"""The scoring forward pass of a Hugging Face causal LM: planned groups in, summed log-likelihoods out.

Three ways to run a batch of :class:`~flasheval.engine.planning.Group` s:

- packed (:func:`forward_packed`, models without sliding-window layers under SDPA or eager attention):
  each whole context once, left-padded, whose last position predicts every choice's first token; then
  one row per group holding all its choices' other inputs side by side, each choice's segment starting
  at a multiple of the pad width and attending to the context's cache and to itself (a 4-D mask);
- shared (:func:`forward_shared`, sliding-window models): each context prefix once, then every choice in
  its own row from the expanded key/value cache (the window masks transformers builds stay exact);
- unpadded (:func:`forward_unpadded`): one plain pass per item, for families whose padded batches are
  not tested exact.

torch is imported inside the functions, never at module import.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flasheval.engine.planning import Group, Item, padded_width
from flasheval.errors import BackendError

__all__ = ["Scored", "PassSettings", "PAD_MULTIPLE", "padded_width", "pass_settings", "keep_columns", "score_logits",
           "forward_packed", "forward_shared", "forward_unpadded", "packs_choices"]

Scored = tuple[Item, float, bool]
"""One scored item: the item, its summed log-likelihood, whether every token was the argmax."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PassSettings:
    """What the shared-context passes need to know about the model, read once when the backend is built."""

    device: Any
    """The ``torch.device`` inputs go to: the model's, or its input embeddings' when a device map spreads it
    (:func:`~flasheval.engine.device_map.input_device`)."""
    pad_id: int
    """Token id written in padded positions (masked out)."""
    cache_kw: str
    """Name of the forward argument taking the key/value cache (``cache`` in transformers 5.x, else ``past_key_values``)."""
    keep_one: dict[str, int] = field(default_factory=dict)
    """Forward keyword that keeps the logits of one position only (empty when the model has none). The same
    keyword, given a 1-D tensor of columns, keeps those columns' logits: the continuation pass's scored ones."""
    pad_multiple: int = 16
    """Padded widths (the context prefixes', the continuations') are rounded up to a multiple of this
    (:func:`padded_width`), so a row's real tokens sit at the same offsets modulo it whatever its companions."""
    packed: bool = False
    """Whether batches run :func:`forward_packed` (:func:`packs_choices`), else :func:`forward_shared`."""


PAD_MULTIPLE = 16
"""The padded-width multiple models are loaded with (:func:`padded_width`); part of their fingerprint."""

MIN_LOGIT_ROWS = 16
"""Positions a pass keeps logits for at the least (more columns than the scored ones when a pass scores fewer):
the CPU's float32 matrix product gives a row other last bits when it has fewer than 16 rows (SmolLM2's output
layer: 3e-6 per logit, 1.5e-5 nats per choice), and a request's sums must not depend on its companions."""


def pass_settings(model: Any, *, pad_id: int, pad_multiple: int = 16) -> PassSettings:
    """Read the input device and the forward signature of ``model``."""
    from flasheval.engine.device_map import input_device
    from flasheval.engine.in_memory import unwrap

    # transformers 5.x renamed ``past_key_values`` to ``cache``; support both. The model's own signature
    # (an FSDP1 wrapper's forward takes ``*args, **kwargs``).
    forward_parameters = inspect.signature(unwrap(model)[1].forward).parameters
    cache_kw = "cache" if "cache" in forward_parameters else "past_key_values"
    # The context pass needs no logits: keep one position (older releases call it num_logits_to_keep).
    # ``logits_to_keep`` (transformers >= 4.50) also takes a 1-D tensor of columns: the continuation pass keeps
    # only the columns it scores. The older ``num_logits_to_keep`` took an int only: keep one, or all logits.
    keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward_parameters), None)
    return PassSettings(device=input_device(model), pad_id=pad_id, cache_kw=cache_kw,
                        keep_one={} if keep is None else {keep: 1}, pad_multiple=pad_multiple,
                        packed=keep == "logits_to_keep" and packs_choices(getattr(unwrap(model)[1], "config", None)))


def packs_choices(config: Any) -> bool:
    """Whether a model of ``config`` can score a group's choices packed in one row (:func:`forward_packed`).

    That pass gives the model a ready 4-D attention mask, which transformers applies to every layer as
    it is: right for full attention, wrong for sliding-window layers (their window is not in it). So:
    attention SDPA or eager (the implementations that take such a mask; not flash-attention), and no
    sliding-window layer (``layer_types`` all full attention; else no ``sliding_window``, or
    ``use_sliding_window`` false).

    Examples
    --------
    >>> from types import SimpleNamespace as C
    >>> packs_choices(C(_attn_implementation="sdpa")), packs_choices(C(_attn_implementation="flash_attention_2"))
    (True, False)
    >>> packs_choices(C(_attn_implementation="sdpa", sliding_window=4096))
    False
    >>> packs_choices(C(_attn_implementation="sdpa", sliding_window=4096, use_sliding_window=False))
    True
    >>> packs_choices(C(_attn_implementation="eager", sliding_window=512, layer_types=["sliding_attention"]))
    False
    """
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(config, "use_sliding_window", True) is False or getattr(config, "sliding_window", None) is None


def score_logits(model: Any, logits: Any, targets: Any, target_mask: Any) -> tuple[list[float], list[bool]]:
    """Per row: summed log-probability of ``targets`` where ``target_mask``, and whether each is the argmax.

    ``logits`` is ``[rows, columns, vocab]`` (column ``j`` predicting ``targets[:, j]``) with ``columns`` at most
    the targets' width: columns past it are never scored (a forward that kept only the first columns' logits).
    Only the scored positions (``target_mask``) are upcast to float32 and log-softmaxed, a ``[n_scored, vocab]``
    tensor: the padding's logits are never copied. The per-position values are then put back in place and
    summed per row in float64, as over the full width (zeros at padding). Computed on the device the logits
    come from (the last layer's, under a device map).

    Raises
    ------
    BackendError
        A sum is not finite (``model`` is named in the message).
    """
    import torch

    width = logits.shape[1]
    targets, target_mask = targets.to(logits.device), target_mask.to(logits.device)
    if bool(target_mask[:, width:].any()):
        raise ValueError(f"logits of {width} columns cannot score targets up to column {target_mask.shape[1]}")
    scored = logits[target_mask[:, :width]].float()  # [n_scored, vocab]: the only float32 copy
    picked = targets[target_mask]
    logprobs = torch.zeros(target_mask.shape, dtype=torch.float32, device=logits.device)
    logprobs[target_mask] = torch.log_softmax(scored, dim=-1).gather(-1, picked.unsqueeze(-1)).squeeze(-1)
    sums = (logprobs.double() * target_mask).sum(dim=1)
    _check_finite(model, sums)
    hits = torch.ones(target_mask.shape, dtype=torch.bool, device=logits.device)
    hits[target_mask] = scored.argmax(dim=-1) == picked
    greedy = hits.all(dim=1)
    return [float(x) for x in sums.cpu().tolist()], [bool(x) for x in greedy.cpu().tolist()]


def _check_finite(model: Any, sums: Any) -> None:
    """Raise :class:`~flasheval.errors.BackendError` (naming ``model``) unless every sum is finite."""
    import torch

    if not bool(torch.isfinite(sums).all()):
        raise BackendError(f"non-finite log-likelihood from {type(model).__name__} "
                           f"(attention {getattr(model.config, '_attn_implementation', '?')}); "
                           "try --dtype float32 or another attention implementation")


def keep_columns(settings: PassSettings, columns: Sequence[int]) -> dict[str, Any]:
    """The forward keyword keeping only ``columns``' logits (a 1-D tensor of column indices), or ``{}`` for all.

    ``{}`` when the model has no such keyword (:attr:`PassSettings.keep_one` empty) or only the integer-only
    ``num_logits_to_keep`` of older releases: the forward then computes every column's logits, as before.
    """
    import torch

    name = next(iter(settings.keep_one), None)
    if name != "logits_to_keep":
        return {}
    # On the CPU: the index selects columns of the last layer's output, which a device map may put on
    # another device than the inputs; a CPU index serves a tensor on any device.
    return {name: torch.tensor(list(columns), dtype=torch.long)}


def forward_unpadded(model: Any, group: Group, settings: PassSettings) -> list[Scored]:
    """One plain forward pass per item over ``context + continuation``: no padding, no cache.

    Logits are kept only at the columns that predict the continuation (where the model's forward allows it).
    """
    import torch

    from flasheval.engine.in_memory import no_grad

    scored = []
    for item in group.items:
        ids = torch.tensor([group.context + item.continuation], device=settings.device)
        start, stop = len(group.context) - 1, ids.shape[1] - 1
        keep = keep_columns(settings, range(max(0, min(start, stop - MIN_LOGIT_ROWS)), stop))
        with no_grad(model):
            logits = model(input_ids=ids, **keep).logits
        logits = (logits if keep else logits[:, :stop])[:, start - stop :]  # the continuation's columns
        targets = ids[:, len(group.context) :]
        sums, greedy = score_logits(model, logits, targets, torch.ones_like(targets, dtype=torch.bool))
        scored.append((item, sums[0], greedy[0]))
    return scored


def forward_shared(model: Any, groups: list[Group], settings: PassSettings) -> list[Scored]:
    """Two passes: shared context prefixes once, then every choice from the expanded cache."""
    import torch

    from flasheval.engine.in_memory import no_grad

    device = settings.device
    rows = [(g, item) for g, group in enumerate(groups) for item in group.items]
    prefix_lengths = [len(group.context) - 1 for group in groups]
    n_prefix = padded_width(max(prefix_lengths), settings.pad_multiple)
    row_group = torch.tensor([g for g, _ in rows], device=device)
    with no_grad(model):
        past, prefix_mask = None, None
        if n_prefix > 0:
            # Left padding: every row's prefix ends at the same column, so the distance
            # between any two real tokens (prefix or continuation) equals their distance in
            # the padded tensor. Sliding-window masks (computed on tensor columns) and
            # sliding-window caches (which keep the last window-1 columns) are then exact
            # for every row; rotary positions come from explicit ``position_ids``.
            ids = torch.full((len(groups), n_prefix), settings.pad_id, dtype=torch.long)
            prefix_mask = torch.zeros((len(groups), n_prefix), dtype=torch.long)
            positions = torch.zeros((len(groups), n_prefix), dtype=torch.long)
            for g, group in enumerate(groups):
                start = n_prefix - prefix_lengths[g]
                ids[g, start:] = torch.tensor(group.context[:-1])
                prefix_mask[g, start:] = 1
                positions[g, start:] = torch.arange(prefix_lengths[g])
            out = model(
                input_ids=ids.to(device),
                attention_mask=prefix_mask.to(device),
                position_ids=positions.to(device),
                use_cache=True,
                **settings.keep_one,
            )
            past = getattr(out, "cache", None)
            past = out.past_key_values if past is None else past
            past.reorder_cache(row_group)
            prefix_mask = prefix_mask.to(device)[row_group]
        return _continuation_pass(model, groups, rows, prefix_lengths, past, prefix_mask, settings)


def _continuation_pass(
    model: Any, groups: list[Group], rows: list[tuple[int, Item]], prefix_lengths: list[int], past: Any,
    prefix_mask: Any, settings: PassSettings,
) -> list[Scored]:
    """Run ``[last context token] + continuation`` for every row (from the expanded cache) and score it."""
    import torch

    device = settings.device
    n_query = padded_width(1 + max(len(item.continuation) for _, item in rows), settings.pad_multiple)
    ids = torch.full((len(rows), n_query), settings.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), n_query), dtype=torch.long)
    for r, (g, item) in enumerate(rows):
        sequence = (groups[g].context[-1], *item.continuation)
        ids[r, : len(sequence)] = torch.tensor(sequence)
        mask[r, : len(sequence)] = 1
    offsets = torch.tensor([prefix_lengths[g] for g, _ in rows]).unsqueeze(1)
    positions = offsets + torch.arange(n_query).unsqueeze(0)
    ids, mask = ids.to(device), mask.to(device)
    full_mask = mask if prefix_mask is None else torch.cat([prefix_mask, mask], dim=1)
    kwargs = {} if past is None else {settings.cache_kw: past}
    # Column j predicts token j + 1: only the first ``longest continuation`` columns are ever scored, so
    # only their logits are computed (the rest are padding, or the last token, which predicts nothing),
    # and at least MIN_LOGIT_ROWS positions (rows x n_query >= 16 always allows it).
    longest = max(len(item.continuation) for _, item in rows)
    keep = keep_columns(settings, range(min(n_query, max(longest, -(-MIN_LOGIT_ROWS // len(rows))))))
    logits = model(
        input_ids=ids, attention_mask=full_mask, position_ids=positions.to(device), use_cache=past is not None,
        **kwargs, **keep,
    ).logits
    sums, greedy = score_logits(model, logits[:, : n_query - 1], ids[:, 1:], mask[:, 1:].bool())
    return [(item, sums[r], greedy[r]) for r, (_, item) in enumerate(rows)]


def forward_packed(model: Any, groups: list[Group], settings: PassSettings) -> list[Scored]:
    """Each whole context once, then one row per group with all its choices' other inputs side by side.

    Pass 1 runs every group's full context, left-padded (as :func:`forward_shared`'s prefixes), keeping the
    logits of its last :data:`MIN_LOGIT_ROWS` columns or fewer: the last one predicts every choice's first
    token. Pass 2 runs, for choices of two or more tokens, ``continuation[:-1]`` (a continuation's last token
    predicts nothing), each choice in a segment of the group's row that starts at a multiple of the pad
    width, at positions ``len(context) + j``, attending to the real context columns of the cache and
    causally to its own segment (a 4-D additive mask). No cache is copied per choice, no row is padded
    to the group's longest choice, and a choice's tokens sit at the same offsets modulo the pad width
    whatever its companions, so its sums do not depend on them.
    """
    import torch

    from flasheval.engine.in_memory import no_grad

    device, multiple = settings.device, settings.pad_multiple
    lengths = [len(group.context) for group in groups]
    n_prefix = padded_width(max(lengths), multiple)
    ids = torch.full((len(groups), n_prefix), settings.pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((len(groups), n_prefix), dtype=torch.long)
    positions = torch.zeros((len(groups), n_prefix), dtype=torch.long)
    for g, group in enumerate(groups):
        ids[g, n_prefix - lengths[g]:] = torch.tensor(group.context)
        prefix_mask[g, n_prefix - lengths[g]:] = 1
        positions[g, n_prefix - lengths[g]:] = torch.arange(lengths[g])
    # Segments of pass 2: (group, item, first column), each rounded to the pad width.
    segments, widths = [], []
    for g, group in enumerate(groups):
        column = 0
        for item in group.items:
            segments.append((g, item, column))
            column += padded_width(len(item.continuation) - 1, multiple)
        widths.append(column)
    n_query = max(widths)
    n_last = min(n_prefix, -(-MIN_LOGIT_ROWS // len(groups)))
    with no_grad(model):
        out = model(input_ids=ids.to(device), attention_mask=prefix_mask.to(device), position_ids=positions.to(device),
                    use_cache=n_query > 0, **keep_columns(settings, range(n_prefix - n_last, n_prefix)))
        # The last context token's prediction, once per choice (its first token).
        rows = [out.logits[:, -1][torch.tensor([g for g, _, _ in segments])]]
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
            logits, at = _segment_pass(model, [(row[g], item, column) for g, item, column in segments if g in row],
                                       n_query, past, prefix_mask[active], [lengths[g] for g in active], settings)
            where: tuple[list[int], list[int]] = ([], [])
            for s, (g, item, column) in enumerate(segments):
                n = len(item.continuation) - 1
                where[0].extend([row[g]] * n if n else [])  # a group with a multi-token choice is in pass 2
                where[1].extend(at[column + j] for j in range(n))
                targets.extend(item.continuation[1:])
                owners.extend([s] * n)
            rows.append(logits[torch.tensor(where[0]), torch.tensor(where[1])])  # [scored tokens, vocab]
        sums, greedy = _score_rows(model, torch.cat(rows), targets, owners, len(segments))
    return [(item, sums[s], greedy[s]) for s, (_, item, _) in enumerate(segments)]


def _segment_pass(model: Any, segments: list[tuple[int, Item, int]], n_query: int, past: Any, prefix_mask: Any,
                  lengths: list[int], settings: PassSettings) -> tuple[Any, dict[int, int]]:
    """Pass 2 of :func:`forward_packed` over the rows of ``prefix_mask`` (``segments`` name their row): the logits
    ``[rows, kept columns, vocab]`` and ``{column: its index}``."""
    import torch

    n_groups, n_prefix = prefix_mask.shape
    ids = torch.full((n_groups, n_query), settings.pad_id, dtype=torch.long)
    positions = torch.zeros((n_groups, n_query), dtype=torch.long)
    allowed = torch.zeros((n_groups, n_query, n_prefix + n_query), dtype=torch.bool)
    allowed[:, :, :n_prefix] = prefix_mask.bool().unsqueeze(1)  # every query sees its group's real context
    real: set[int] = set()
    for g, item, column in segments:
        n = len(item.continuation) - 1
        ids[g, column:column + n] = torch.tensor(item.continuation[:-1])
        positions[g, column:column + n] = lengths[g] + torch.arange(n)
        allowed[g, column:column + n, n_prefix + column:n_prefix + column + n] = torch.ones(n, n, dtype=torch.bool).tril()
        real.update(range(column, column + n))
    mask = _additive(model, allowed).unsqueeze(1)
    # Logits at the columns some group has a token in (the same columns for every row), MIN_LOGIT_ROWS at least.
    spare = (c for c in range(n_query) if c not in real)
    kept = sorted(real | {next(spare) for _ in range(min(n_query - len(real),
                                                          max(0, -(-MIN_LOGIT_ROWS // n_groups) - len(real))))})
    device, keep = settings.device, keep_columns(settings, kept)
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                   use_cache=True, **{settings.cache_kw: past}, **keep).logits
    return logits, {c: k for k, c in enumerate(kept)} if keep else {c: c for c in kept}


def _additive(model: Any, allowed: Any) -> Any:
    """``allowed`` (bool) as the 4-D mask the attention takes: boolean for SDPA; for eager attention, which adds
    the mask to the scores, 0 and the dtype's lowest value in the input embeddings' dtype."""
    import torch

    from flasheval.engine.in_memory import unwrap

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
    _check_finite(model, sums)
    misses = torch.zeros(n, dtype=torch.long, device=logits.device).index_add_(
        0, owner, (scored.argmax(dim=-1) != picked).long())
    return [float(x) for x in sums.cpu().tolist()], [bool(x == 0) for x in misses.cpu().tolist()]
