"""Greedy generation with a Hugging Face causal LM: batching of generation requests and one ``generate`` call.

Requests with the same stop sequences and ``max_new_tokens`` run together in left-padded
batches, longest context first, packed under the row limit and the token budget counted as
rows x (longest context + ``max_new_tokens``). torch is imported inside the functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flasheval.engine.batching import pack_batches
from flasheval.errors import InputError
from flasheval.types import GenerationRequest, GenerationResult

__all__ = ["generation_batches", "generate_batch"]


def generation_batches(
    requests: Sequence[GenerationRequest], encoded: Sequence[Sequence[int]], *, max_rows: int, max_tokens: int
) -> list[list[int]]:
    """Request indices of each generation batch, longest context first.

    ``encoded`` holds each request's (already truncated) context ids. A batch holds requests of
    one setting (stop sequences, ``max_new_tokens``) only.

    Examples
    --------
    >>> requests = [GenerationRequest(task_name="g", example_id=str(i), context="", max_new_tokens=4) for i in range(3)]
    >>> generation_batches(requests, [[1], [1, 2, 3], [1, 2]], max_rows=2, max_tokens=100)
    [[1, 2], [0]]
    """
    by_setting: dict[tuple[tuple[str, ...], int], list[int]] = {}
    for i in sorted(range(len(requests)), key=lambda i: (-len(encoded[i]), i)):
        by_setting.setdefault((requests[i].stop_sequences, requests[i].max_new_tokens), []).append(i)
    batches = []
    for (_, max_new), members in by_setting.items():
        units = [(1, len(encoded[i]) + max_new) for i in members]
        batches += [[members[k] for k in batch] for batch in pack_batches(units, max_rows=max_rows, max_tokens=max_tokens)]
    batches.sort(key=lambda batch: (-len(encoded[batch[0]]), batch[0]))
    return batches


def generate_batch(
    model: Any,
    tokenizer: Any,
    requests: Sequence[GenerationRequest],
    encoded: Sequence[Sequence[int]],
    members: Sequence[int],
    *,
    device: Any,
    pad_id: int,
) -> list[tuple[int, GenerationResult]]:
    """One left-padded ``model.generate`` call for requests sharing stop sequences and ``max_new_tokens``.

    Returns ``(request index, result)`` pairs; each text is cut at its first stop sequence.
    """
    import torch

    from flasheval.engine.hf.in_memory import no_grad, unwrap

    if unwrap(model)[1] is not model:  # FSDP1: generate() would run the inner module without gathering
        raise InputError(f"generation through {type(model).__name__} is not supported (its generate() bypasses the "
                         "parameter gathering): score generation tasks on a saved checkpoint", field="model")
    stops, max_new = requests[members[0]].stop_sequences, requests[members[0]].max_new_tokens
    width = max(len(encoded[i]) for i in members)
    ids = torch.full((len(members), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(members), width), dtype=torch.long)
    for r, i in enumerate(members):
        ids[r, width - len(encoded[i]) :] = torch.tensor(encoded[i])
        mask[r, width - len(encoded[i]) :] = 1
    with no_grad(model):
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=pad_id,
            stop_strings=list(stops) or None,
            tokenizer=tokenizer,
            synced_gpus=False,  # a sharded model is kept in step by flasheval's own lockstep (engine/coordination/lockstep.py)
        )
    pairs = []
    for r, i in enumerate(members):
        new_tokens = out[r, width:].tolist()
        text = tokenizer.decode(new_tokens, skip_special_tokens=True)
        cut = min([text.find(s) for s in stops if s in text], default=len(text))
        request = requests[i]
        pairs.append((i, GenerationResult(
            task_name=request.task_name,
            example_id=request.example_id,
            text=text[:cut],
            n_context_tokens=len(encoded[i]),
            n_generated_tokens=sum(1 for t in new_tokens if t != pad_id),
        )))
    return pairs
