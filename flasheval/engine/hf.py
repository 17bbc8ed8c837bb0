"""Hugging Face causal-LM backend (the only module that imports torch / transformers).

Scoring conventions (documented in ``docs/engine.md``):

* The context and the continuation are tokenized separately and concatenated: the context
  with the tokenizer's default special tokens (a BOS only if the tokenizer adds one by
  default), the continuation with ``add_special_tokens=False``. An empty context becomes
  the BOS token (or EOS when there is none), so the first continuation token has a context.
* Too-long inputs lose context tokens from the LEFT; a continuation is never truncated.
  All choices of one context share one truncation (the longest choice decides it).
* Shared context: requests with the same context form a group. The context minus its last
  token runs once (building the KV cache); the cache is then expanded over the group's
  choices and each choice runs as ``[last context token] + continuation``. Logits are thus
  computed only at positions that predict continuation tokens.
* Contexts are LEFT-padded, so every row's prefix ends at the same column and distances
  between real tokens equal distances in the padded tensor: sliding-window masks and caches
  (Mistral, Gemma-2/3, Qwen2, Phi-3) are exact for every row; positions are passed explicitly.
  Families outside :data:`SHARED_CONTEXT_FAMILIES` (recurrent, chunked or otherwise untested
  attention) are scored exactly instead: one unpadded forward pass per request.
* Batches are formed longest first, so an out-of-memory error shows on the first batch, and
  packed under a row limit and a token budget (rows x padded length). On OOM the batch is
  halved (down to one request) and the smaller limits are kept for the rest of the run;
  generation backs off the same way.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.base import OnResults
from flasheval.engine.batching import default_token_budget, pack_batches
from flasheval.errors import BackendError
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["HFBackend", "load_hf_backend", "DTYPES", "SHARED_CONTEXT_FAMILIES"]

logger = logging.getLogger(__name__)

SHARED_CONTEXT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")
"""``config.model_type`` values whose shared-context, padded batches are tested equal to one unpadded
forward pass per request (``tests/engine/test_architectures.py``), sliding windows included.
Other families are scored one request per unpadded forward pass: exact, and slower."""


@dataclass(frozen=True, slots=True)
class _Item:
    """One continuation to score, as token ids (internal)."""

    index: int
    context: tuple[int, ...]
    continuation: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Group:
    """Items sharing one (already truncated) context."""

    context: tuple[int, ...]
    items: tuple[_Item, ...]

    @property
    def length(self) -> int:
        return len(self.context) + max(len(item.continuation) for item in self.items)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError)
    )


class HFBackend:
    """Batch-first scoring with a loaded Hugging Face causal LM.

    Parameters
    ----------
    model, tokenizer
        A ``transformers`` causal LM (already on ``device``, in eval mode) and its tokenizer.
    fingerprint
        The model fingerprint (see :mod:`flasheval.engine.fingerprint`).
    batch_size
        Maximum number of continuations per forward pass (the context pass has at most as
        many rows). Halved automatically on out-of-memory.
    max_length
        Maximum tokens per sequence; default: the model's maximum position embeddings.
    share_context
        Run each distinct context once for all its choices (default). ``False`` scores every
        request on its own (for checks; results agree within float rounding). Models outside
        :data:`SHARED_CONTEXT_FAMILIES` always score each request in its own unpadded pass.
    max_batch_tokens
        Token budget per forward pass, counted as rows x padded length (default
        ``batch_size * 1024``, see :mod:`flasheval.engine.batching`). Halved on out-of-memory.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        fingerprint: str,
        batch_size: int = 32,
        max_length: int | None = None,
        share_context: bool = True,
        max_batch_tokens: int | None = None,
    ) -> None:
        import torch

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        self._torch = torch
        self._model = model
        self._tokenizer = tokenizer
        self._fingerprint = fingerprint
        self._max_rows = batch_size
        self._max_tokens = max_batch_tokens or default_token_budget(batch_size)
        family = getattr(model.config, "model_type", None)
        # Padding, position ids and the key/value cache are tested exact only for these families.
        self._unpadded = family not in SHARED_CONTEXT_FAMILIES
        if self._unpadded:
            logger.warning("model type %r is not among the families whose padded, shared-context batches are tested "
                           "exact (%s): scoring each request in its own unpadded forward pass (exact, slower)",
                           family, ", ".join(SHARED_CONTEXT_FAMILIES))
        self._share_context = share_context and not self._unpadded
        self._device = next(model.parameters()).device
        # transformers 5.x renamed ``past_key_values`` to ``cache``; support both.
        forward_parameters = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in forward_parameters else "past_key_values"
        # The context pass needs no logits: keep one position (older releases call it num_logits_to_keep).
        keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward_parameters), None)
        self._keep_one = {} if keep is None else {keep: 1}
        config_max = getattr(model.config, "max_position_embeddings", None) or 2048
        self.max_length = int(max_length or config_max)
        special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, 0]
        self._pad_id = next(t for t in [tokenizer.pad_token_id, tokenizer.eos_token_id, 0] if t is not None)
        self._start_id = next(t for t in special if t is not None)

    @property
    def fingerprint(self) -> str:
        """The model fingerprint."""
        return self._fingerprint

    @property
    def prefix_space(self) -> bool:
        """Whether continuations should carry a leading space: the tokenizer encodes ``" a"`` as
        one token (GPT-2 / GPT-NeoX / Llama-3 style BPE), llm-foundry's test; SentencePiece does not."""
        return len(self._tokenizer(" a", add_special_tokens=False).input_ids) == 1

    @property
    def batch_size(self) -> int:
        """Current maximum rows per forward pass (smaller after an out-of-memory back-off)."""
        return self._max_rows

    @property
    def max_batch_tokens(self) -> int:
        """Current token budget per forward pass, rows x padded length (smaller after a back-off)."""
        return self._max_tokens

    @property
    def shares_context(self) -> bool:
        """Whether choices share one run of their context (``False``: one unpadded pass per request)."""
        return self._share_context

    # ------------------------------------------------------------------ tokenization / planning
    def _encode_context(self, text: str) -> list[int]:
        ids = list(self._tokenizer(text).input_ids) if text else []
        return ids or [self._start_id]

    def _encode_continuation(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False).input_ids)

    def _items(self, requests: Sequence[LoglikelihoodRequest]) -> list[_Item]:
        contexts: dict[str, list[int]] = {}
        items = []
        for index, request in enumerate(requests):
            if request.context not in contexts:
                contexts[request.context] = self._encode_context(request.context)
            continuation = self._encode_continuation(request.continuation)
            if not continuation:
                raise BackendError(f"continuation of {request.task_name}/{request.example_id} encodes to no tokens")
            if len(continuation) >= self.max_length:
                raise BackendError(
                    f"continuation of {request.task_name}/{request.example_id} has {len(continuation)} tokens; "
                    f"the model takes at most {self.max_length} (continuations are never truncated)"
                )
            items.append(_Item(index, tuple(contexts[request.context]), tuple(continuation)))
        return items

    def _groups(self, items: Sequence[_Item]) -> list[_Group]:
        """Group items by context (or one group per item), truncate, sort longest first."""
        by_context: dict[tuple[int, ...], list[_Item]] = {}
        for item in items:
            key = item.context if self._share_context else (item.index, *item.context)
            by_context.setdefault(key, []).append(item)
        groups = []
        for members in by_context.values():
            budget = self.max_length - max(len(m.continuation) for m in members)
            context = members[0].context[-budget:]
            groups.append(_Group(context, tuple(_Item(m.index, context, m.continuation) for m in members)))
        groups.sort(key=lambda g: (-g.length, g.items[0].index))
        return groups

    def _batches(self, groups: Sequence[_Group]) -> list[list[_Group]]:
        if self._unpadded:
            return [[group] for group in groups]
        units = [(len(group.items), group.length) for group in groups]
        return [[groups[i] for i in batch] for batch in pack_batches(units, max_rows=self._max_rows, max_tokens=self._max_tokens)]

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """Request indices of each forward batch, in the order they run (longest first).

        The distributed runner hands out whole planned batches, so every request is scored in
        the same batch composition whatever the number of processes.
        """
        batches = self._batches(self._groups(self._items(requests)))
        return [tuple(item.index for group in batch for item in group.items) for batch in batches]

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer, for callers that tokenize by another harness's rules."""
        return self._tokenizer

    def _token_items(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[_Item]:
        items = []
        for index, (context, continuation) in enumerate(pairs):
            if not context or not continuation:
                raise BackendError(f"token pair {index} has an empty context or continuation")
            items.append(_Item(index, tuple(context), tuple(continuation)))
        return items

    def loglikelihood_tokens(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, on_results: OnResults | None = None
    ) -> list[tuple[float, bool]]:
        """``(log-likelihood, is_greedy)`` of already tokenized ``(context ids, continuation ids)`` pairs.

        For callers that tokenize by another harness's rules (the lm-eval bridge). Batching,
        shared contexts and left truncation are those of :meth:`loglikelihood`; ``on_results``
        receives ``(pair index, (log-likelihood, is_greedy))`` pairs as each batch finishes.
        """
        results: list[tuple[float, bool] | None] = [None] * len(pairs)

        def finish(scored: list[tuple[_Item, float, bool]]) -> None:
            done = []
            for item, logprob, greedy in scored:
                results[item.index] = (logprob, greedy)
                done.append((item.index, results[item.index]))
            if on_results is not None:
                on_results(done)  # type: ignore[arg-type]

        self._score_items(self._token_items(pairs), finish)
        return results  # type: ignore[return-value]

    def plan_token_batches(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, ...]]:
        """Pair indices of each forward batch :meth:`loglikelihood_tokens` runs (see :meth:`plan_batches`)."""
        batches = self._batches(self._groups(self._token_items(pairs)))
        return [tuple(item.index for group in batch for item in group.items) for batch in batches]

    # ------------------------------------------------------------------ scoring
    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-likelihood of each continuation given its context (see module docstring)."""
        results: list[LoglikelihoodResult | None] = [None] * len(requests)

        def finish(scored: list[tuple[_Item, float, bool]]) -> None:
            pairs = []
            for item, logprob, greedy in scored:
                request = requests[item.index]
                result = LoglikelihoodResult(
                    task_name=request.task_name,
                    example_id=request.example_id,
                    choice_index=request.choice_index,
                    logprob_sum=logprob,
                    n_tokens=len(item.continuation),
                    is_greedy=greedy,
                    n_context_tokens=len(item.context),
                )
                results[item.index] = result
                pairs.append((item.index, result))
            if on_results is not None:
                on_results(pairs)

        self._score_items(self._items(requests), finish)
        return results  # type: ignore[return-value]

    def _score_items(self, items: Sequence[_Item], finish: Callable[[list[tuple[_Item, float, bool]]], None]) -> None:
        for batch in self._batches(self._groups(items)):
            finish(self._run_with_backoff(batch))

    def _run_with_backoff(self, groups: list[_Group]) -> list[tuple[_Item, float, bool]]:
        rows = sum(len(g.items) for g in groups)
        tokens = rows * max(g.length for g in groups)
        if (rows > self._max_rows or tokens > self._max_tokens) and len(groups) > 1:
            half = len(groups) // 2
            return self._run_with_backoff(groups[:half]) + self._run_with_backoff(groups[half:])
        try:
            return self._forward_unpadded(groups[0]) if self._unpadded else self._forward(groups)
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
        self._back_off(rows, tokens, groups[0].length)
        if len(groups) > 1:
            half = len(groups) // 2
            return self._run_with_backoff(groups[:half]) + self._run_with_backoff(groups[half:])
        group = groups[0]
        half = len(group.items) // 2
        return self._run_with_backoff([_Group(group.context, group.items[:half])]) + self._run_with_backoff(
            [_Group(group.context, group.items[half:])]
        )

    def _back_off(self, rows: int, tokens: int, length: int) -> None:
        """After an out-of-memory error on ``rows`` sequences (``tokens`` padded): halve the limits, or give up."""
        if self._device.type == "cuda":
            self._torch.cuda.empty_cache()
        if rows == 1:
            raise BackendError(
                f"out of memory on a single sequence of {length} tokens; "
                "use a smaller --max-length or a device with more memory"
            )
        self._max_rows = min(self._max_rows, max(1, rows // 2))
        self._max_tokens = min(self._max_tokens, max(1, tokens // 2))
        logger.warning("out of memory with %d sequences (%d padded tokens) per batch; retrying with at most %d "
                       "sequences and %d tokens", rows, tokens, self._max_rows, self._max_tokens)

    def _forward_unpadded(self, group: _Group) -> list[tuple[_Item, float, bool]]:
        """One plain forward pass per item over ``context + continuation``: no padding, no cache."""
        torch = self._torch
        scored = []
        for item in group.items:
            ids = torch.tensor([group.context + item.continuation], device=self._device)
            with torch.inference_mode():
                logits = self._model(input_ids=ids).logits[:, len(group.context) - 1 : -1]
            targets = ids[:, len(group.context) :]
            sums, greedy = self._score(logits, targets, torch.ones_like(targets, dtype=torch.bool))
            scored.append((item, sums[0], greedy[0]))
        return scored

    def _score(self, logits: Any, targets: Any, target_mask: Any) -> tuple[list[float], list[bool]]:
        """Per row: summed log-probability of ``targets`` where ``target_mask``, and whether each is the argmax."""
        torch = self._torch
        logits = logits.float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        sums = (logprobs.double() * target_mask).sum(dim=1)
        if not bool(torch.isfinite(sums).all()):
            raise BackendError(f"non-finite log-likelihood from {type(self._model).__name__} "
                               f"(attention {getattr(self._model.config, '_attn_implementation', '?')}); "
                               "try --dtype float32 or another attention implementation")
        greedy = ((logits.argmax(dim=-1) == targets) | ~target_mask).all(dim=1)
        return [float(x) for x in sums.cpu().tolist()], [bool(x) for x in greedy.cpu().tolist()]

    def _forward(self, groups: list[_Group]) -> list[tuple[_Item, float, bool]]:
        """Two passes: shared context prefixes once, then every choice from the expanded cache."""
        torch = self._torch
        rows = [(g, item) for g, group in enumerate(groups) for item in group.items]
        prefix_lengths = [len(group.context) - 1 for group in groups]
        n_prefix = max(prefix_lengths)
        row_group = torch.tensor([g for g, _ in rows], device=self._device)
        with torch.inference_mode():
            past, prefix_mask = None, None
            if n_prefix > 0:
                # Left padding: every row's prefix ends at the same column, so the distance
                # between any two real tokens (prefix or continuation) equals their distance in
                # the padded tensor. Sliding-window masks (computed on tensor columns) and
                # sliding-window caches (which keep the last window-1 columns) are then exact
                # for every row; rotary positions come from explicit ``position_ids``.
                ids = torch.full((len(groups), n_prefix), self._pad_id, dtype=torch.long)
                prefix_mask = torch.zeros((len(groups), n_prefix), dtype=torch.long)
                positions = torch.zeros((len(groups), n_prefix), dtype=torch.long)
                for g, group in enumerate(groups):
                    start = n_prefix - prefix_lengths[g]
                    ids[g, start:] = torch.tensor(group.context[:-1])
                    prefix_mask[g, start:] = 1
                    positions[g, start:] = torch.arange(prefix_lengths[g])
                out = self._model(
                    input_ids=ids.to(self._device),
                    attention_mask=prefix_mask.to(self._device),
                    position_ids=positions.to(self._device),
                    use_cache=True,
                    **self._keep_one,
                )
                past = getattr(out, "cache", None)
                past = out.past_key_values if past is None else past
                past.reorder_cache(row_group)
                prefix_mask = prefix_mask.to(self._device)[row_group]
            return self._continuation_pass(groups, rows, prefix_lengths, past, prefix_mask)

    def _continuation_pass(
        self, groups: list[_Group], rows: list[tuple[int, _Item]], prefix_lengths: list[int], past: Any, prefix_mask: Any
    ) -> list[tuple[_Item, float, bool]]:
        """Run ``[last context token] + continuation`` for every row (from the expanded cache) and score it."""
        torch = self._torch
        n_query = 1 + max(len(item.continuation) for _, item in rows)
        ids = torch.full((len(rows), n_query), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), n_query), dtype=torch.long)
        for r, (g, item) in enumerate(rows):
            sequence = (groups[g].context[-1], *item.continuation)
            ids[r, : len(sequence)] = torch.tensor(sequence)
            mask[r, : len(sequence)] = 1
        offsets = torch.tensor([prefix_lengths[g] for g, _ in rows]).unsqueeze(1)
        positions = offsets + torch.arange(n_query).unsqueeze(0)
        ids, mask = ids.to(self._device), mask.to(self._device)
        full_mask = mask if prefix_mask is None else torch.cat([prefix_mask, mask], dim=1)
        kwargs = {} if past is None else {self._cache_kw: past}
        logits = self._model(
            input_ids=ids, attention_mask=full_mask, position_ids=positions.to(self._device), use_cache=past is not None, **kwargs
        ).logits[:, :-1]
        sums, greedy = self._score(logits, ids[:, 1:], mask[:, 1:].bool())
        return [(item, sums[r], greedy[r]) for r, (_, item) in enumerate(rows)]

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """Log-likelihood of whole texts in disjoint windows.

        The text is tokenized without special tokens and preceded by the BOS (or EOS) token; it
        is cut into consecutive windows of ``max_length - 1`` predicted tokens, each window
        conditioned on the tokens just before it (the first on the start token only), so every
        token is predicted exactly once.
        """
        windows: list[_Item] = []
        owners: list[int] = []
        span = self.max_length - 1
        for index, request in enumerate(requests):
            tokens = [self._start_id, *self._encode_continuation(request.text)]
            for start in range(1, len(tokens), span):
                chunk = tuple(tokens[start : start + span])
                context = tuple(tokens[max(0, start - (self.max_length - len(chunk))) : start])
                owners.append(index)
                windows.append(_Item(len(windows), context, chunk))
        sums = [0.0] * len(requests)
        counts = [0] * len(requests)
        remaining = [owners.count(i) for i in range(len(requests))]
        results: list[RollingLoglikelihoodResult | None] = [None] * len(requests)

        def finish(scored: list[tuple[_Item, float, bool]]) -> None:
            done = []
            for item, logprob, _ in scored:
                owner = owners[item.index]
                sums[owner] += logprob
                counts[owner] += len(item.continuation)
                remaining[owner] -= 1
                if remaining[owner] == 0:
                    request = requests[owner]
                    results[owner] = RollingLoglikelihoodResult(
                        task_name=request.task_name,
                        example_id=request.example_id,
                        logprob_sum=sums[owner],
                        n_tokens=counts[owner],
                        n_bytes=len(request.text.encode("utf-8")),
                    )
                    done.append((owner, results[owner]))
            if on_results is not None and done:
                on_results(done)

        self._score_items(windows, finish)
        return results  # type: ignore[return-value]

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """Greedy generation, cut at the first stop sequence.

        Requests with the same stop sequences and ``max_new_tokens`` run together in left-padded
        batches, longest context first, packed under the row limit and the token budget
        (rows x (longest context + ``max_new_tokens``)); out-of-memory halves a batch as in scoring.
        """
        encoded = []
        for request in requests:
            budget = max(1, self.max_length - request.max_new_tokens)
            encoded.append(self._encode_context(request.context)[-budget:])
        by_setting: dict[tuple[tuple[str, ...], int], list[int]] = {}
        for i in sorted(range(len(requests)), key=lambda i: (-len(encoded[i]), i)):
            by_setting.setdefault((requests[i].stop_sequences, requests[i].max_new_tokens), []).append(i)
        batches = []
        for (_, max_new), members in by_setting.items():
            units = [(1, len(encoded[i]) + max_new) for i in members]
            batches += [[members[k] for k in batch] for batch in pack_batches(units, max_rows=self._max_rows, max_tokens=self._max_tokens)]
        batches.sort(key=lambda batch: (-len(encoded[batch[0]]), batch[0]))
        results: list[GenerationResult | None] = [None] * len(requests)
        for batch in batches:
            pairs = self._generate_with_backoff(requests, encoded, batch)
            for i, result in pairs:
                results[i] = result
            if on_results is not None:
                on_results(pairs)
        return results  # type: ignore[return-value]

    def _generate_with_backoff(
        self, requests: Sequence[GenerationRequest], encoded: Sequence[list[int]], members: list[int]
    ) -> list[tuple[int, GenerationResult]]:
        rows = len(members)
        length = max(len(encoded[i]) for i in members) + requests[members[0]].max_new_tokens
        if rows > 1 and (rows > self._max_rows or rows * length > self._max_tokens):
            half = rows // 2
            return self._generate_with_backoff(requests, encoded, members[:half]) + self._generate_with_backoff(
                requests, encoded, members[half:])
        try:
            return self._generate_batch(requests, encoded, members)
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
        self._back_off(rows, rows * length, length)
        half = rows // 2
        return self._generate_with_backoff(requests, encoded, members[:half]) + self._generate_with_backoff(
            requests, encoded, members[half:])

    def _generate_batch(
        self, requests: Sequence[GenerationRequest], encoded: Sequence[list[int]], members: list[int]
    ) -> list[tuple[int, GenerationResult]]:
        """One left-padded ``model.generate`` call for requests sharing stop sequences and ``max_new_tokens``."""
        torch = self._torch
        stops, max_new = requests[members[0]].stop_sequences, requests[members[0]].max_new_tokens
        width = max(len(encoded[i]) for i in members)
        ids = torch.full((len(members), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(members), width), dtype=torch.long)
        for r, i in enumerate(members):
            ids[r, width - len(encoded[i]) :] = torch.tensor(encoded[i])
            mask[r, width - len(encoded[i]) :] = 1
        with torch.inference_mode():
            out = self._model.generate(
                input_ids=ids.to(self._device),
                attention_mask=mask.to(self._device),
                max_new_tokens=max_new,
                do_sample=False,
                pad_token_id=self._pad_id,
                stop_strings=list(stops) or None,
                tokenizer=self._tokenizer,
            )
        pairs = []
        for r, i in enumerate(members):
            new_tokens = out[r, width:].tolist()
            text = self._tokenizer.decode(new_tokens, skip_special_tokens=True)
            cut = min([text.find(s) for s in stops if s in text], default=len(text))
            request = requests[i]
            pairs.append((i, GenerationResult(
                task_name=request.task_name,
                example_id=request.example_id,
                text=text[:cut],
                n_context_tokens=len(encoded[i]),
                n_generated_tokens=sum(1 for t in new_tokens if t != self._pad_id),
            )))
        return pairs


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Accepted ``dtype`` names; ``auto`` is float32 on CPU and bfloat16 on GPUs that support it."""


def _resolve_device(device: str) -> Any:
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            from accelerate import PartialState

            return torch.device("cuda", PartialState().local_process_index % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise BackendError(f"unknown device {device!r} (e.g. cpu, cuda, cuda:1, auto)") from exc


def _resolve_dtype(dtype: str, device: Any) -> tuple[Any, str]:
    import torch

    if dtype not in DTYPES:
        raise BackendError(f"unknown dtype {dtype!r} (allowed: {', '.join(DTYPES)})")
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return getattr(torch, dtype), dtype


def load_hf_backend(
    target: str,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    batch_size: int = 32,
    max_length: int | None = None,
    share_context: bool = True,
) -> HFBackend:
    """Load a local HF folder, a local GGUF file or a hub id and wrap it in an :class:`HFBackend`.

    Parameters
    ----------
    target
        A local model folder (with ``config.json``), a folder holding ``gguf_file``, or a hub id.
    gguf_file
        File name of a GGUF checkpoint inside ``target`` (dequantized by transformers).
    revision
        Hub branch, tag or commit (hub ids only).
    dtype, device
        See :data:`DTYPES`; ``device`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    batch_size, max_length, share_context
        Passed to :class:`HFBackend`.

    Raises
    ------
    BackendError
        The path does not exist, the files do not load (corrupt or unsupported), or the hub
        cannot be reached.
    """
    from flasheval.engine.base import SCORING_VERSION
    from flasheval.engine.fingerprint import hub_commit, model_fingerprint, path_digest

    path = Path(target).expanduser()
    is_local = path.exists() or target.startswith(("/", ".", "~")) or gguf_file is not None
    if is_local:
        weights = path / gguf_file if gguf_file else path
        if not weights.exists():
            raise BackendError(f"model path {str(weights)!r} does not exist")
        if gguf_file is None and not (path / "config.json").is_file():
            raise BackendError(f"model folder {str(path)!r} has no config.json (for a GGUF file use gguf:FILE)")
    torch_device = _resolve_device(device)
    torch_dtype, dtype_name = _resolve_dtype(dtype, torch_device)
    model, tokenizer = _load_pretrained(str(path) if is_local else target, gguf_file, revision, torch_dtype)
    model.to(torch_device)
    model.eval()
    resolved_max = int(max_length or getattr(model.config, "max_position_embeddings", None) or 2048)
    commit = None
    if not is_local:
        commit = hub_commit(target, revision) or getattr(model.config, "_commit_hash", None)
        if commit is None:
            raise BackendError(f"cannot tell which commit of hub model {target!r} was loaded (no refs/"
                               f"{revision or 'main'} in the hub cache); name one: hf:{target}@<commit>")
    fingerprint = model_fingerprint(
        source="local" if is_local else f"hub:{target}",
        content_digest=path_digest(path / gguf_file if gguf_file else path) if is_local else None,
        revision=commit,
        dtype=dtype_name,
        max_length=resolved_max,
        scoring_version=SCORING_VERSION,
    )
    logger.info("loaded %s on %s in %s (fingerprint %s)", target, torch_device, dtype_name, fingerprint)
    return HFBackend(
        model, tokenizer, fingerprint=fingerprint, batch_size=batch_size, max_length=resolved_max, share_context=share_context
    )


def _load_pretrained(source: str, gguf_file: str | None, revision: str | None, torch_dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    if revision is not None:
        kwargs["revision"] = revision
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any load failure (corrupt file, offline hub) is a user error here
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f"{source}/{gguf_file}" if gguf_file else source
        raise BackendError(f"cannot load model {where!r}: {type(exc).__name__}: {reason[:300]}") from exc
    return model, tokenizer
