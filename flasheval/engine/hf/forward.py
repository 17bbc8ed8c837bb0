"""The scoring forward pass of a Hugging Face causal LM: planned groups in, summed log-likelihoods out.

Three ways to run a batch of :class:`~flasheval.engine.planning.Group` s:

- packed (:func:`~flasheval.engine.hf.packed.forward_packed`, models without sliding-window layers under
  SDPA or eager attention, and the short groups of sliding-window ones that fit their window; its own module);
- shared (:func:`forward_shared`, sliding-window models' other groups): each context prefix once, then every
  choice in its own row from the expanded key/value cache (the window masks transformers builds stay exact);
- unpadded (:func:`forward_unpadded`): one plain pass per item, for families whose padded batches are
  not tested exact.

torch is imported inside the functions, never at module import.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flasheval.engine.batching import ModelShape, one_pass_context
from flasheval.engine.planning import Group, Item, padded_width
from flasheval.errors import BackendError

__all__ = ["Scored", "PassSettings", "PAD_MULTIPLE", "default_pad_multiple", "compute_dtype", "MIN_LOGIT_ROWS",
           "padded_width", "pass_settings", "keep_columns",
           "score_logits", "check_finite", "forward_shared", "forward_unpadded", "packs_choices", "one_pass_window"]

PAD_MULTIPLE = 16
"""The padded-width multiple of a model that computes in a 2-byte float type (:func:`default_pad_multiple`,
:func:`padded_width`); part of its fingerprint."""


Scored = tuple[Item, float, bool]
"""One scored item: the item, its summed log-likelihood, whether every token was the argmax."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PassSettings:
    """What the shared-context passes need to know about the model, read once when the backend is built."""

    device: Any
    """The ``torch.device`` inputs go to: the model's, or its input embeddings' when a device map spreads it
    (:func:`~flasheval.engine.hf.device_map.input_device`)."""
    pad_id: int
    """Token id written in padded positions (masked out)."""
    cache_kw: str
    """Name of the forward argument taking the key/value cache (``cache`` in transformers 5.x, else ``past_key_values``)."""
    keep_one: dict[str, int] = field(default_factory=dict)
    """Forward keyword that keeps the logits of one position only (empty when the model has none). The same
    keyword, given a 1-D tensor of columns, keeps those columns' logits: the continuation pass's scored ones."""
    pad_multiple: int = PAD_MULTIPLE
    """Padded widths (the context prefixes', the continuations') are rounded up to a multiple of this
    (:func:`padded_width`), so a row's real tokens sit at the same offsets modulo it whatever its companions."""
    packed: bool = False
    """Whether batches run :func:`~flasheval.engine.hf.packed.forward_packed` (:func:`packs_choices`), else :func:`forward_shared`."""
    one_pass: int = 0
    """Groups whose context has at most this many tokens run in one packed forward pass
    (:func:`~flasheval.engine.batching.one_pass_context` of the model's shape; 0: none), on a sliding-window
    model only those that fit its ``window`` (:func:`~flasheval.engine.planning.runs_in_one_pass`)."""
    window: int | None = None
    """The sliding window of a model with sliding-window layers that runs short groups in one packed pass
    (:func:`one_pass_window`); ``None`` otherwise."""
    row_width: int = 0
    """One pass's rows are at least this wide, for the batch at hand (:func:`~flasheval.engine.rows.layout_width`,
    :func:`~flasheval.engine.rows.row_layout`; 0: as wide as the batch's widest group)."""


def default_pad_multiple(dtype: str | None) -> int:
    """The padded-width multiple a model computing in ``dtype`` (``"float32"``, ...; ``None``: unknown) runs at
    unless told: :data:`PAD_MULTIPLE` in bf16, fp16 and anything else, 1 (no rounding) in float32 and float64.

    In a 2-byte type the rounding is what keeps a request's sums independent of its companions (bf16 SmolLM2: up to
    0.22 nats without it). In float32 it moves no bound on a real model: SmolLM2-135M's largest batch effect is
    5.5e-5 nats with it and 5.3-6.2e-5 without (the attention kernel's own float32 floor; more choices move, by as
    little), while a 0-shot prompt of 21 tokens ran 32 columns or more (``docs/engine.md``, "Batch invariance").

    >>> default_pad_multiple("bfloat16"), default_pad_multiple("float16"), default_pad_multiple("float32")
    (16, 16, 1)
    """
    return 1 if dtype in ("float32", "float64") else PAD_MULTIPLE


def compute_dtype(model: Any) -> str | None:
    """The float type ``model``'s matrix products run in, as :func:`default_pad_multiple` takes it: the
    ``param_dtype`` of an FSDP wrapper's mixed-precision policy where it sets one (float32 parameters gathered in
    bf16; FSDP1's ``mixed_precision``, FSDP2's ``fully_shard(mp_policy=...)``, read only), else its first
    parameter's dtype (``None``: no parameters).

    >>> import torch
    >>> compute_dtype(torch.nn.Linear(2, 2)), compute_dtype(torch.nn.Linear(2, 2).bfloat16())
    ('float32', 'bfloat16')
    """
    policy = getattr(model, "mixed_precision", None)
    if policy is None and callable(getattr(model, "_get_fsdp_state", None)):
        policy = getattr(model._get_fsdp_state(), "_mp_policy", None)  # noqa: SLF001 - FSDP2 keeps it there
    gathered = getattr(policy, "param_dtype", None)
    first = next(iter(model.parameters()), None)
    dtype = gathered if gathered is not None else None if first is None else first.dtype
    return None if dtype is None else str(dtype).removeprefix("torch.")


MIN_LOGIT_ROWS = 16
"""Positions a pass keeps logits for at the least (more columns than the scored ones when a pass scores fewer):
the CPU's float32 matrix product gives a row other last bits when it has fewer than 16 rows (SmolLM2's output
layer: 3e-6 per logit, 1.5e-5 nats per choice), and a request's sums must not depend on its companions."""


def pass_settings(model: Any, *, pad_id: int, pad_multiple: int = PAD_MULTIPLE) -> PassSettings:
    """Read the input device and the forward signature of ``model``."""
    from flasheval.engine.hf.device_map import input_device
    from flasheval.engine.hf.in_memory import unwrap

    # transformers 5.x renamed ``past_key_values`` to ``cache``; support both. The model's own signature
    # (an FSDP1 wrapper's forward takes ``*args, **kwargs``).
    forward_parameters = inspect.signature(unwrap(model)[1].forward).parameters
    cache_kw = "cache" if "cache" in forward_parameters else "past_key_values"
    # The context pass needs no logits: keep one position (older releases call it num_logits_to_keep).
    # ``logits_to_keep`` (transformers >= 4.50) also takes a 1-D tensor of columns: the continuation pass keeps
    # only the columns it scores. The older ``num_logits_to_keep`` took an int only: keep one, or all logits.
    keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward_parameters), None)
    config = getattr(unwrap(model)[1], "config", None)
    packed = keep == "logits_to_keep" and packs_choices(config)
    window = None if packed or keep != "logits_to_keep" else one_pass_window(config)
    one = packed or window is not None
    # The layout's limit, counted at the 16-column block whatever the padding multiple: without rounding the two
    # packed layouts pad alike, and a sliding-window model's other layout is one row per choice (docs/engine.md).
    one_pass = one_pass_context(ModelShape.from_config(config, dtype_bytes=4), PAD_MULTIPLE) if one else 0
    return PassSettings(device=input_device(model), pad_id=pad_id, cache_kw=cache_kw,
                        keep_one={} if keep is None else {keep: 1}, pad_multiple=pad_multiple, packed=packed,
                        one_pass=one_pass, window=window)


def one_pass_window(config: Any) -> int | None:
    """The window a sliding-window model's one-pass rows must fit, or ``None`` where it runs none.

    The one packed pass gives every layer the same ready 4-D mask; where a row is no longer than the window, no
    window masks anything and that mask is exact on the sliding layers too. So: the ``sliding_window`` of a
    model with sliding-window layers (:func:`packs_choices` false for that reason alone), attention SDPA or
    eager, causal (not ``use_bidirectional_attention``).

    Examples
    --------
    >>> from types import SimpleNamespace as C
    >>> one_pass_window(C(_attn_implementation="sdpa", sliding_window=512, layer_types=["sliding_attention"]))
    512
    >>> one_pass_window(C(_attn_implementation="sdpa")), one_pass_window(C(_attn_implementation="flash_attention_2",
    ...                                                                    sliding_window=512))
    (None, None)
    """
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", "eager") or packs_choices(config):
        return None
    window = getattr(config, "sliding_window", None)
    causal = not getattr(config, "use_bidirectional_attention", False)
    return window if isinstance(window, int) and window > 0 and causal else None


def packs_choices(config: Any) -> bool:
    """Whether a model of ``config`` can score a group's choices packed in one row
    (:func:`~flasheval.engine.hf.packed.forward_packed`).

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
    check_finite(model, sums)
    hits = torch.ones(target_mask.shape, dtype=torch.bool, device=logits.device)
    hits[target_mask] = scored.argmax(dim=-1) == picked
    greedy = hits.all(dim=1)
    return [float(x) for x in sums.cpu().tolist()], [bool(x) for x in greedy.cpu().tolist()]


def check_finite(model: Any, sums: Any) -> None:
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

    from flasheval.engine.hf.in_memory import no_grad

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

    from flasheval.engine.hf.in_memory import no_grad

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
