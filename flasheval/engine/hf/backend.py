"""Hugging Face causal-LM backend: :class:`HFBackend`, the batch-first API over a loaded model.

Its parts, one job each: :mod:`~flasheval.engine.planning` (requests -> items -> groups -> batches, pure Python),
:mod:`~flasheval.engine.hf.backoff` (the out-of-memory back-off), :mod:`~flasheval.engine.hf.forward` (the forward
pass), :mod:`~flasheval.engine.hf.generation` (greedy generation) and :mod:`~flasheval.engine.hf.loading` (loading).
torch and transformers are imported lazily, in those modules, never when this one is imported.

Scoring conventions (in full: ``docs/engine.md``, "Scoring conventions"):

* The context (the tokenizer's default special tokens) and the continuation (``add_special_tokens=False``)
  are tokenized separately and concatenated; an empty context becomes the BOS token (or EOS when there is none).
* Too-long inputs lose context tokens from the LEFT; a continuation is never truncated. All choices of
  one context share one truncation (the longest choice decides it).
* Shared context: requests with the same context form a group. The context minus its last token runs once
  (building the KV cache), expanded over the group's choices; each choice runs as ``[last context token] +
  continuation``, so logits are computed only at positions that predict continuation tokens.
* Contexts are LEFT-padded, so distances between real tokens equal distances in the padded tensor:
  sliding-window masks and caches are exact for every row; positions are passed explicitly. Families outside
  :data:`SHARED_CONTEXT_FAMILIES` are scored exactly instead: one unpadded forward pass per request.
* Batches are formed longest first (an out-of-memory error shows on the first batch) under a row limit and
  a token budget (rows x padded length). On OOM the batch is halved (down to one request) and the smaller
  limits are kept for the rest of the run; generation backs off the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from flasheval.engine.hf.backoff import Limits, run_with_backoff
from flasheval.engine.base import BackendInfo, Collective, OnLoad, OnResults
from flasheval.engine.batching import ModelShape, attention_width, auto_limits, default_token_budget, pass_overhead
from flasheval.engine.hf.forward import (Scored, compute_dtype, default_pad_multiple, forward_shared, forward_unpadded,
                                        pass_settings)
from flasheval.engine.hf.generation import generate_batch, generation_batches
from flasheval.engine.hf.packed import forward_packed
from flasheval.engine.planning import (Group, Item, batch_indices, batch_shape, encode_context, encode_continuation,
                                       group_items, one_pass_widths, pack_groups, prefix_space, request_items,
                                       rolling_windows, split_at_window, token_items)
from flasheval.engine.rows import layout_width
from flasheval.types import (GenerationRequest, GenerationResult, LoglikelihoodRequest, LoglikelihoodResult,
                             RollingLoglikelihoodRequest, RollingLoglikelihoodResult)

__all__ = ["HFBackend", "SHARED_CONTEXT_FAMILIES"]

logger = logging.getLogger(__name__)

SHARED_CONTEXT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3")
"""``config.model_type`` values whose shared-context, padded batches are tested equal to one unpadded
forward pass per request (``tests/engine/test_architectures.py``), sliding windows included.
Other families are scored one request per unpadded forward pass: exact, and slower."""


class HFBackend:
    """Batch-first scoring with a loaded Hugging Face causal LM.

    Parameters
    ----------
    model, tokenizer
        A ``transformers`` causal LM (already on ``device``, in eval mode) and its tokenizer.
    fingerprint
        The model fingerprint (see :mod:`flasheval.engine.hf.fingerprint`).
    batch_size
        Maximum number of continuations per forward pass (the context pass has at most as
        many rows). Halved automatically on out-of-memory. ``None`` (default): chosen for the
        device with the token budget (:func:`~flasheval.engine.batching.auto_limits`).
    max_length
        Maximum tokens per sequence; default: the model's maximum position embeddings.
    share_context
        Run each distinct context once for all its choices (default). ``False`` scores every
        request on its own (for checks; results agree within float rounding). Models outside
        :data:`SHARED_CONTEXT_FAMILIES` always score each request in its own unpadded pass.
    max_batch_tokens
        Token budget per forward pass, counted as rows x padded length (default: ``batch_size * 1024``
        when ``batch_size`` is given, else chosen for the device: a measured budget on a CPU, one from the
        free memory and the model's sizes on a GPU; see :mod:`flasheval.engine.batching`). Halved on out-of-memory.
    pad_multiple
        Padded widths are rounded up to a multiple of this many tokens, so that a request's sums do not depend
        on its companions (:func:`~flasheval.engine.hf.forward.padded_width`); 1 pads to the longest row only.
        Default: by the weights' dtype (:func:`~flasheval.engine.hf.forward.default_pad_multiple`: 16 in bf16
        and fp16, 1 in float32). CPU attention on 512 keys or more blocks them by 512: 512 makes those
        batch-invariant too, at the cost of the padding.
    previous_fingerprint, source
        :class:`~flasheval.engine.base.BackendInfo`'s: the key to adopt, the spec the model was opened from.

    Attributes
    ----------
    forward_seconds
        Wall seconds spent in the model's forward passes so far (tokenization and planning excluded;
        each pass ends by copying its results to the host, so on CUDA the time covers the device's work).
    forward_tokens
        Tokens those passes ran: each context group once plus every continuation (a generation: its
        context and the tokens it generated), as :func:`~flasheval.evaluation.evaluate.example_tokens` counts.
    """

    def __init__(self, model: Any, tokenizer: Any, *, fingerprint: str, batch_size: int | None = None,
                 max_length: int | None = None, share_context: bool = True, max_batch_tokens: int | None = None,
                 pad_multiple: int | None = None, previous_fingerprint: str | None = None,
                 source: str | None = None) -> None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        if pad_multiple is not None and pad_multiple < 1:
            raise ValueError(f"pad_multiple must be >= 1, got {pad_multiple}")
        self._model = model
        self._tokenizer = tokenizer
        self._fingerprint = fingerprint
        self._previous_fingerprint, self._source = previous_fingerprint, source
        self._prefix_space: bool | None = None  # asked of the tokenizer on first use
        first = next(iter(model.parameters()), None)
        self._dtype = None if first is None else str(first.dtype).removeprefix("torch.")
        self._n_parameters = int(sum(p.numel() for p in model.parameters()))  # tied weights once
        family = getattr(model.config, "model_type", None)
        # Padding, position ids and the key/value cache are tested exact only for these families.
        self._unpadded = family not in SHARED_CONTEXT_FAMILIES
        if self._unpadded:
            logger.warning("model type %r is not among the families whose padded, shared-context batches are tested "
                           "exact (%s): scoring each request in its own unpadded forward pass (exact, slower)",
                           family, ", ".join(SHARED_CONTEXT_FAMILIES))
        self._share_context = share_context and not self._unpadded
        config_max = getattr(model.config, "max_position_embeddings", None) or 2048
        self.max_length = int(max_length or config_max)
        special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, 0]
        self._start_id = next(t for t in special if t is not None)
        pad_id = next(t for t in [tokenizer.pad_token_id, tokenizer.eos_token_id, 0] if t is not None)
        multiple = default_pad_multiple(compute_dtype(model)) if pad_multiple is None else pad_multiple
        self._pass = pass_settings(model, pad_id=pad_id, pad_multiple=multiple)
        rows, tokens = _initial_limits(model, self._pass.device, batch_size, max_batch_tokens)
        self._limits = Limits(max_rows=rows, max_tokens=tokens, on_cuda=self._pass.device.type == "cuda")
        self._attention_width = attention_width(ModelShape.from_config(model.config, dtype_bytes=4))
        self.forward_seconds = 0.0
        self.forward_tokens = 0

    @property
    def fingerprint(self) -> str:
        """The model fingerprint."""
        return self._fingerprint

    @property
    def info(self) -> BackendInfo:
        """What the backend reports about itself (:class:`~flasheval.engine.base.BackendInfo`): the weights
        were handed to it loaded, so ``is_loaded`` is true and ``load_seconds`` 0.0."""
        if self._prefix_space is None:
            self._prefix_space = prefix_space(self._tokenizer)
        return BackendInfo(prefix_space=self._prefix_space, batch_size=self._limits.max_rows, is_loaded=True,
                           load_seconds=0.0, n_parameters=self._n_parameters, dtype=self._dtype,
                           device=str(self._pass.device), forward_seconds=self.forward_seconds,
                           forward_tokens=self.forward_tokens, previous_fingerprint=self._previous_fingerprint,
                           max_length=self.max_length, source=self._source)

    @property
    def model(self) -> Any:
        """The ``transformers`` model scored (for callers that run it by other rules: lm-eval's ``HFLM``, checks)."""
        return self._model

    def release(self) -> None:
        """Nothing to free: the model was handed over loaded and belongs to whoever loaded it."""

    def notify_load(self, callback: OnLoad) -> None:
        """Nothing loads later: the weights were handed over loaded."""

    def lockstep(self, collective: Collective) -> AbstractContextManager[None]:
        """Every pass matched across processes for a sharded model (:mod:`flasheval.engine.coordination.lockstep`)."""
        from flasheval.engine.coordination.lockstep import lockstep_if_sharded

        return lockstep_if_sharded(self._model, collective)

    @property
    def max_batch_tokens(self) -> int:
        """Current token budget per forward pass, rows x padded length (smaller after a back-off)."""
        return self._limits.max_tokens

    @property
    def shares_context(self) -> bool:
        """Whether choices share one run of their context (``False``: one unpadded pass per request)."""
        return self._share_context

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer, for callers that tokenize by another harness's rules."""
        return self._tokenizer

    # ------------------------------------------------------------------ planning
    def _items(self, requests: Sequence[LoglikelihoodRequest]) -> list[Item]:
        return request_items(requests, self._tokenizer, start_id=self._start_id, max_length=self.max_length)

    def _batches(self, items: Sequence[Item]) -> list[list[Group]]:
        """Group, truncate and sort ``items``, then pack the groups under the current limits."""
        groups = split_at_window(group_items(items, max_length=self.max_length, share_context=self._share_context),
                                 self._pass.one_pass, self._pass.window)
        if self._unpadded:
            return [[group] for group in groups]
        return pack_groups(groups, max_rows=self._limits.max_rows, max_tokens=self._limits.max_tokens,
                           packed=self._packed, pad_multiple=self._pass.pad_multiple, one_pass=self._pass.one_pass,
                           window=self._pass.window, overhead=pass_overhead(self._limits.max_tokens, self._n_parameters),
                           attention_width=self._attention_width)

    @property
    def _packed(self) -> int | None:
        """The pad width when a group's choices run packed in one row (:func:`forward_packed`), else ``None``."""
        return self._pass.pad_multiple if self._pass.packed else None

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """Request indices of each forward batch, in the order they run (longest first).

        The distributed runner hands out whole planned batches, so every request is scored in
        the same batch composition whatever the number of processes.
        """
        return batch_indices(self._batches(self._items(requests)))

    def plan_token_batches(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, ...]]:
        """Pair indices of each forward batch :meth:`loglikelihood_tokens` runs (see :meth:`plan_batches`)."""
        return batch_indices(self._batches(token_items(pairs)))

    # ------------------------------------------------------------------ scoring
    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-likelihood of each continuation given its context (see module docstring)."""
        results: list[LoglikelihoodResult | None] = [None] * len(requests)

        def finish(scored: list[Scored]) -> None:
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

    def loglikelihood_tokens(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, on_results: OnResults | None = None
    ) -> list[tuple[float, bool]]:
        """``(log-likelihood, is_greedy)`` of already tokenized ``(context ids, continuation ids)`` pairs.

        For callers that tokenize by another harness's rules (the lm-eval bridge). Batching,
        shared contexts and left truncation are those of :meth:`loglikelihood`; ``on_results``
        receives ``(pair index, (log-likelihood, is_greedy))`` pairs as each batch finishes.
        """
        results: list[tuple[float, bool] | None] = [None] * len(pairs)

        def finish(scored: list[Scored]) -> None:
            done = []
            for item, logprob, greedy in scored:
                results[item.index] = (logprob, greedy)
                done.append((item.index, results[item.index]))
            if on_results is not None:
                on_results(done)  # type: ignore[arg-type]

        self._score_items(token_items(pairs), finish)
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """Log-likelihood of whole texts in disjoint windows.

        The text is tokenized without special tokens and preceded by the BOS (or EOS) token; it
        is cut into consecutive windows of ``max_length - 1`` predicted tokens, each window
        conditioned on the tokens just before it (the first on the start token only), so every
        token is predicted exactly once.
        """
        texts = [encode_continuation(self._tokenizer, request.text) for request in requests]
        windows, owners = rolling_windows(texts, start_id=self._start_id, max_length=self.max_length)
        sums = [0.0] * len(requests)
        counts = [0] * len(requests)
        remaining = [owners.count(i) for i in range(len(requests))]
        results: list[RollingLoglikelihoodResult | None] = [None] * len(requests)

        def finish(scored: list[Scored]) -> None:
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

    def _score_items(self, items: Sequence[Item], finish: Callable[[list[Scored]], None]) -> None:
        """Score the planned batches of ``items`` in order, handing each batch's results to ``finish``."""
        for batch in self._batches(items):
            finish(run_with_backoff(batch, self._forward, self._limits, split=Group.halves,
                                    shape=self._shape))

    def _shape(self, groups: Sequence[Group]) -> tuple[int, int]:
        """``(rows, padded length)`` of a pass over ``groups`` in the layouts they run in (:func:`batch_shape`)."""
        return batch_shape(groups, packed=self._packed, pad_multiple=self._pass.pad_multiple,
                           one_pass=self._pass.one_pass, window=self._pass.window, row_width=self._row_width(groups))

    def _row_width(self, groups: Sequence[Group]) -> int:
        """The width of the one-pass rows of ``groups`` (:func:`~flasheval.engine.rows.layout_width` under the
        current limits: the planner's, or a cheaper one); 0 when none runs in one pass."""
        widths = one_pass_widths(groups, packed=self._packed, pad_multiple=self._pass.pad_multiple,
                                 one_pass=self._pass.one_pass, window=self._pass.window)
        return layout_width(widths, max_rows=self._limits.max_rows, max_tokens=self._limits.max_tokens,
                            attention_width=self._attention_width, most=self._pass.window) if widths else 0

    def _forward(self, groups: Sequence[Group]) -> list[Scored]:
        """One forward batch: a single group in unpadded passes, or the shared-context passes (timed)."""
        start = time.perf_counter()
        try:
            if self._unpadded:
                scored = forward_unpadded(self._model, groups[0], self._pass)
            elif self._pass.packed or self._pass.one_pass:  # one-pass rows as wide as planned for this batch
                settings = replace(self._pass, row_width=self._row_width(groups))
                scored = forward_packed(self._model, list(groups), settings)
            else:
                scored = forward_shared(self._model, list(groups), self._pass)
        finally:  # a pass that ran out of memory still took the time
            self.forward_seconds += time.perf_counter() - start
        self.forward_tokens += sum(g.tokens for g in groups)
        return scored

    # ------------------------------------------------------------------ generation
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
            encoded.append(encode_context(self._tokenizer, request.context, start_id=self._start_id)[-budget:])
        batches = generation_batches(requests, encoded, max_rows=self._limits.max_rows, max_tokens=self._limits.max_tokens)

        def run(members: Sequence[int]) -> list[tuple[int, GenerationResult]]:
            start = time.perf_counter()
            try:
                pairs = generate_batch(self._model, self._tokenizer, requests, encoded, members,
                                       device=self._pass.device, pad_id=self._pass.pad_id)
            finally:
                self.forward_seconds += time.perf_counter() - start
            self.forward_tokens += sum(r.n_context_tokens + r.n_generated_tokens for _, r in pairs)
            return pairs

        results: list[GenerationResult | None] = [None] * len(requests)
        for batch in batches:
            pairs = run_with_backoff(batch, run, self._limits, shape=lambda part: (
                len(part), max(len(encoded[i]) + requests[i].max_new_tokens for i in part)))
            for i, result in pairs:
                results[i] = result
            if on_results is not None:
                on_results(pairs)
        return results  # type: ignore[return-value]


def _initial_limits(model: Any, device: Any, batch_size: int | None, max_batch_tokens: int | None) -> tuple[int, int]:
    """``(rows, tokens)`` per pass: the caller's options, the rest chosen for the device (:func:`auto_limits`).

    A ``batch_size`` alone keeps its own budget (``batch_size * 1024``), as before batches were sized for the device.
    """
    if batch_size is not None:
        return batch_size, max_batch_tokens or default_token_budget(batch_size)
    free = None
    if device.type == "cuda":
        import torch

        free = torch.cuda.mem_get_info(device)[0]
    first = next(iter(model.parameters()), None)
    shape = ModelShape.from_config(model.config, dtype_bytes=4 if first is None else first.element_size())
    rows, tokens = auto_limits(device.type, free_bytes=free, shape=shape)
    return rows, max_batch_tokens or tokens
