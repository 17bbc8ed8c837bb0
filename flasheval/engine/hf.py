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
* Batches are formed longest first, so an out-of-memory error shows on the first batch; on
  OOM the batch is halved (down to one request) and the smaller size is kept for the rest.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.base import OnResults
from flasheval.errors import BackendError
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["HFBackend", "load_hf_backend", "DTYPES"]

logger = logging.getLogger(__name__)


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
        request on its own (for checks; results agree within float rounding).
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
    ) -> None:
        import torch

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._torch = torch
        self._model = model
        self._tokenizer = tokenizer
        self._fingerprint = fingerprint
        self._max_rows = batch_size
        self._share_context = share_context
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
        batches: list[list[_Group]] = []
        rows = 0
        for group in groups:
            if batches and rows + len(group.items) <= self._max_rows:
                batches[-1].append(group)
                rows += len(group.items)
            else:
                batches.append([group])
                rows = len(group.items)
        return batches

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
        if rows > self._max_rows and len(groups) > 1:
            half = len(groups) // 2
            return self._run_with_backoff(groups[:half]) + self._run_with_backoff(groups[half:])
        try:
            return self._forward(groups)
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
        if self._device.type == "cuda":
            self._torch.cuda.empty_cache()
        if rows == 1:
            raise BackendError(
                f"out of memory scoring a single sequence of {groups[0].length} tokens; "
                "use a smaller --max-length or a device with more memory"
            )
        self._max_rows = max(1, rows // 2)
        logger.warning("out of memory with %d sequences per batch; retrying with %d", rows, self._max_rows)
        if len(groups) > 1:
            half = len(groups) // 2
            return self._run_with_backoff(groups[:half]) + self._run_with_backoff(groups[half:])
        group = groups[0]
        half = len(group.items) // 2
        return self._run_with_backoff([_Group(group.context, group.items[:half])]) + self._run_with_backoff(
            [_Group(group.context, group.items[half:])]
        )

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
                ids = torch.full((len(groups), n_prefix), self._pad_id, dtype=torch.long)
                prefix_mask = torch.zeros((len(groups), n_prefix), dtype=torch.long)
                for g, group in enumerate(groups):
                    ids[g, : prefix_lengths[g]] = torch.tensor(group.context[:-1])
                    prefix_mask[g, : prefix_lengths[g]] = 1
                # Right padding: pad positions attend to real tokens before them, so no row is
                # fully masked (which can give NaN keys); position 0 is unmasked for that reason.
                run_mask = prefix_mask.clone()
                run_mask[:, 0] = 1
                positions = torch.arange(n_prefix).expand(len(groups), n_prefix)
                out = self._model(
                    input_ids=ids.to(self._device),
                    attention_mask=run_mask.to(self._device),
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
        ).logits[:, :-1].float()
        targets = ids[:, 1:]
        target_mask = mask[:, 1:].bool()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        sums = (logprobs.double() * target_mask).sum(dim=1).cpu().tolist()
        greedy = ((logits.argmax(dim=-1) == targets) | ~target_mask).all(dim=1).cpu().tolist()
        return [(item, float(sums[r]), bool(greedy[r])) for r, (_, item) in enumerate(rows)]

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
        """Greedy generation, batched (left padded, longest context first), cut at the first stop sequence."""
        torch = self._torch
        encoded = []
        for request in requests:
            budget = max(1, self.max_length - request.max_new_tokens)
            encoded.append(self._encode_context(request.context)[-budget:])
        order = sorted(range(len(requests)), key=lambda i: (-len(encoded[i]), i))
        results: list[GenerationResult | None] = [None] * len(requests)
        for start in range(0, len(order), self._max_rows):
            chunk = order[start : start + self._max_rows]
            by_setting: dict[tuple[tuple[str, ...], int], list[int]] = {}
            for i in chunk:
                by_setting.setdefault((requests[i].stop_sequences, requests[i].max_new_tokens), []).append(i)
            pairs = []
            for (stops, max_new), members in by_setting.items():
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
                for r, i in enumerate(members):
                    new_tokens = out[r, width:].tolist()
                    text = self._tokenizer.decode(new_tokens, skip_special_tokens=True)
                    cut = min([text.find(s) for s in stops if s in text], default=len(text))
                    request = requests[i]
                    results[i] = GenerationResult(
                        task_name=request.task_name,
                        example_id=request.example_id,
                        text=text[:cut],
                        n_context_tokens=len(encoded[i]),
                        n_generated_tokens=sum(1 for t in new_tokens if t != self._pad_id),
                    )
                    pairs.append((i, results[i]))
            if on_results is not None:
                on_results(pairs)
        return results  # type: ignore[return-value]


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
    from flasheval.engine.fingerprint import model_fingerprint, path_digest

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
    fingerprint = model_fingerprint(
        source="local" if is_local else f"hub:{target}",
        content_digest=path_digest(path / gguf_file if gguf_file else path) if is_local else None,
        revision=None if is_local else (getattr(model.config, "_commit_hash", None) or revision),
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
