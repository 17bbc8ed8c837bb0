"""The batch-first backend contract every model backend implements.

A backend answers a whole list of requests at once and returns results in request order,
each carrying its ``task_name`` / ``example_id`` / ``choice_index``, so results can be
matched by id after a distributed gather. Backends may call ``on_results`` with
``(request index, result)`` pairs as each internal batch finishes, so a caching wrapper can
store finished work durably before the whole call returns.

The contract is the methods of :class:`Backend` plus ONE value, :class:`BackendInfo`: what a
backend reports about itself (prefix space, batch size, whether its weights are loaded, load and
forward seconds, parameter count, dtype, device, maximum length, the spec it was opened from).
Every backend states each of them, so no caller
guesses a default for a backend that does not say (a prefix space silently assumed would change the
prompts). Wrappers (the results store's :class:`~flasheval.engine.store.results.CachedBackend`, the
data-parallel runner, lm-eval's conventions) report the info of the backend they wrap.

What a caller needs of a backend beyond scoring is a method of the contract, never found by walking
wrappers or testing classes: :meth:`Backend.notify_load` (a callback when weights load, for progress),
:meth:`Backend.lockstep` (every forward pass matched across processes when the forward is itself collective),
and, for callers that tokenize by another harness's rules, :class:`TokenBackend` (the tokenizer and scoring of
token ids; the maximum length is :attr:`BackendInfo.max_length`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Result,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["Backend", "BackendInfo", "OnResults", "OnLoad", "Collective", "SCORING_VERSION", "TokenBackend", "Wrapper",
           "example_units"]

SCORING_VERSION = "7"
"""Version of the scoring conventions (tokenization, truncation, windows). Part of every model
fingerprint: bump it when a change alters any log-likelihood, so stored results are not reused.
2: left-padded shared contexts (sliding-window models were inexact under version 1).
3: padded widths rounded up to a multiple of 16 tokens (a request's sums no longer depend on its batch).
4: models without sliding windows score a group's choices packed in one row, the first token from the
   context pass (:func:`~flasheval.engine.hf.packed.forward_packed`): the same sums within 1e-4 nats in
   float32, other last bits.
5: the packed context pass right-padded without an attention mask (the causal kernel), logits only at scored
   positions: the same sums within 1e-4 nats in float32 (7.6e-5 on SmolLM2's HellaSwag), other last bits.
6: a packed choice's segment starts at a remainder modulo the pad width fixed by its choice index and length
   (:func:`~flasheval.engine.planning.segment_columns`), so short choices share a block: other last bits.
7: a group whose context is short (:func:`~flasheval.engine.batching.one_pass_context`: zero-shot prompts) runs its
   context and choices in one packed pass, on a sliding-window model when it fits the window (it ran one row per
   choice): other last bits."""

OnResults = Callable[[Sequence[tuple[int, Result]]], None]
"""Callback receiving ``(index into the request list, result)`` pairs as a batch finishes."""

OnLoad = Callable[[float], None]
"""Callback receiving the wall seconds a load of the weights took, as it ends."""

Collective = Callable[[str], AbstractContextManager[None]]
"""``collective(what)``: a block around one collective call that names it in one line when it fails
(:func:`~flasheval.engine.coordination.distributed.collective`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendInfo:
    """What a backend reports about itself, at the moment it is asked (ask again after scoring).

    Examples
    --------
    >>> info = BackendInfo(prefix_space=True, batch_size=32, is_loaded=False, load_seconds=0.0,
    ...                    n_parameters=134_515_008, dtype="float32", device="cpu")
    >>> info.is_loaded, info.forward_tokens, info.previous_fingerprint
    (False, 0, None)
    >>> BackendInfo(prefix_space=True, batch_size=0, is_loaded=True, load_seconds=0.0, n_parameters=None,
    ...             dtype=None, device=None)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be >= 1, got 0
    """

    prefix_space: bool
    """Whether continuations should carry a leading space (:func:`~flasheval.engine.planning.prefix_space`):
    the prompts are built with it."""
    batch_size: int
    """Rows per forward pass now (smaller after an out-of-memory back-off); the data-parallel runner's
    unit of generation work."""
    is_loaded: bool
    """Whether the weights are in memory (``False``: a model opened without them, that the store has
    answered entirely so far)."""
    load_seconds: float
    """Wall seconds this backend spent loading the weights (0.0: not loaded, or handed over loaded)."""
    n_parameters: int | None
    """Parameters of the model (tied weights once); ``None`` when the backend cannot tell."""
    dtype: str | None
    """The dtype the model computes in (``float32``, ``bfloat16``, ...); ``None`` when unknown."""
    device: str | None
    """Where the inputs go (``cpu``, ``cuda:0``, ...); ``None`` when unknown."""
    forward_seconds: float = 0.0
    """Seconds spent in the model's forward passes so far."""
    forward_tokens: int = 0
    """Tokens those passes ran."""
    previous_fingerprint: str | None = None
    """The key this model's results had before the fingerprint covered the run settings (device type,
    attention, library versions, padding): a store written then is adopted under :attr:`Backend.fingerprint`
    once (:mod:`flasheval.engine.store.adoption`). ``None``: nothing to adopt."""
    max_length: int | None = None
    """Most tokens one scored sequence may hold (longer inputs lose context tokens from the left); ``None``:
    the backend states no limit."""
    source: str | None = None
    """The spec the model was opened from (``hf:PATH_OR_ID``, ``gguf:FILE``): records name a backend passed as a
    model by it, as they name its spec. ``None``: not opened from a spec (a model held in memory)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {self.max_length}")
        if self.load_seconds < 0 or self.forward_seconds < 0 or self.forward_tokens < 0:
            raise ValueError("seconds and token counts must be >= 0")
        if self.n_parameters is not None and self.n_parameters < 0:
            raise ValueError(f"n_parameters must be >= 0, got {self.n_parameters}")


@runtime_checkable
class Backend(Protocol):
    """A model that scores requests batch-first.

    Implementations return one result per request, in request order.
    """

    @property
    def fingerprint(self) -> str:
        """Stable digest of everything that determines the results (weights, config, tokenizer,
        revision, dtype, scoring version, and the run settings: device type, attention implementation,
        torch and transformers versions, padding multiple). Results of different fingerprints never mix."""
        ...

    @property
    def info(self) -> BackendInfo:
        """What the backend reports about itself now (:class:`BackendInfo`)."""
        ...

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """Request indices of each forward batch :meth:`loglikelihood` would run, in order (the data-parallel
        runner deals these out, so a request is scored in the same batch whatever the number of processes);
        a backend without batches of its own returns :func:`example_units`."""
        ...

    def release(self) -> None:
        """Free the weights this backend loaded (a later request loads them again); a no-op for a backend
        that loaded none of its own (a model the caller holds stays where it is)."""
        ...

    def notify_load(self, callback: OnLoad) -> None:
        """Call ``callback(seconds)`` each time this backend's weights finish loading (callbacks added earlier are
        kept and called first); a no-op for a backend that loads nothing later (a model handed over loaded)."""
        ...

    def lockstep(self, collective: Collective) -> AbstractContextManager[None]:
        """A block within which every forward pass of this backend on this process is matched on every other
        process of the default group, when its forward is itself collective (a sharded model: FSDP, DeepSpeed
        ZeRO-3; :mod:`flasheval.engine.coordination.lockstep`); a null context for a backend whose passes are not.
        Every process enters the block together (the data-parallel runner's rounds do)."""
        ...

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-likelihood (sum, token count, greedy match) of each continuation given its context."""
        ...

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """Greedy generation until a stop sequence or ``max_new_tokens``."""
        ...

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """Log-likelihood of whole texts, scored in windows of the model's context length."""
        ...


@runtime_checkable
class TokenBackend(Backend, Protocol):
    """A backend that also scores token ids, for callers that tokenize by another harness's rules (lm-eval's
    conventions, :class:`~flasheval.lmeval.conventions.LmEvalConventionBackend`); its sequences hold at most
    :attr:`BackendInfo.max_length` tokens."""

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (a ``transformers`` tokenizer)."""
        ...

    def plan_token_batches(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, ...]]:
        """Indices of each forward batch :meth:`loglikelihood_tokens` would run on these pairs, in order."""
        ...

    def loglikelihood_tokens(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                             on_results: OnResults | None = None) -> list[tuple[float, bool]]:
        """``(log-likelihood sum, greedy)`` of each ``(context ids, continuation ids)`` pair."""
        ...


class Wrapper:
    """A backend around another (data parallelism, the results store): the parts of the contract it reports
    as the wrapped backend does. Subclasses add the scoring methods."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @property
    def fingerprint(self) -> str:
        """The wrapped backend's fingerprint."""
        return self._backend.fingerprint

    @property
    def info(self) -> BackendInfo:
        """The wrapped backend's :class:`BackendInfo`."""
        return self._backend.info

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """The wrapped backend's planned batches (stored requests included)."""
        return self._backend.plan_batches(requests)

    def release(self) -> None:
        """Free the wrapped backend's weights."""
        self._backend.release()

    def notify_load(self, callback: OnLoad) -> None:
        """Called when the wrapped backend's weights load."""
        self._backend.notify_load(callback)

    def lockstep(self, collective: Collective) -> AbstractContextManager[None]:
        """The wrapped backend's lockstep."""
        return self._backend.lockstep(collective)


def example_units(requests: Sequence[LoglikelihoodRequest | GenerationRequest | RollingLoglikelihoodRequest],
                  per_unit: int) -> list[tuple[int, ...]]:
    """Chunks of about ``per_unit`` request indices that never split one example's requests.

    Examples
    --------
    >>> reqs = [RollingLoglikelihoodRequest(task_name="t", example_id=e, text="x") for e in "aabbc"]
    >>> example_units(reqs, 3)
    [(0, 1), (2, 3, 4)]
    """
    by_example: dict[tuple[str, str], list[int]] = {}
    for index, request in enumerate(requests):
        by_example.setdefault((request.task_name, request.example_id), []).append(index)
    units: list[tuple[int, ...]] = []
    current: list[int] = []
    for indices in by_example.values():
        if current and len(current) + len(indices) > per_unit:
            units.append(tuple(current))
            current = []
        current.extend(indices)
    if current:
        units.append(tuple(current))
    return units
