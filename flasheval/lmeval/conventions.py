"""lm-evaluation-harness's request conventions on flasheval's Hugging Face backend.

:class:`LmEvalConventionBackend` is a flasheval :class:`~flasheval.engine.base.Backend`: it takes
the same request values (so the results store and data parallelism work unchanged) but turns
their strings into tokens exactly as lm-eval 0.4.13's HF backend (``HFLM``) does, then scores the
tokens with :meth:`flasheval.engine.hf.backend.HFBackend.loglikelihood_tokens` (shared contexts,
continuation-only logits). The rules, from ``lm_eval/api/model.py`` (``TemplateLM``) and
``lm_eval/models/huggingface.py``:

* **Split.** Trailing whitespace of the context moves to the continuation; the whole string
  ``context + continuation`` is encoded and the continuation is the tokens after the context's
  own encoding (so a merge across the boundary counts towards the continuation).
* **Special tokens.** Strings are encoded with the tokenizer's defaults (a BOS only where the
  tokenizer adds one), except a string that already starts with the prefix token's text.
* **Empty context.** The context becomes the prefix token (BOS, else EOS) unless the
  continuation already starts with it.
* **Truncation.** At most ``max_length + 1`` tokens of context + continuation are kept, cut
  from the left (the model's input is ``max_length`` tokens).
* **Rolling log-likelihood.** lm-eval's disjoint windows of ``max_length`` predicted tokens, the
  first conditioned on the prefix token (``lm_eval.utils.get_rolling_token_windows``, re-stated
  here so this module does not need lm-eval).
* **Generation.** Greedy, through the backend's :meth:`~flasheval.engine.hf.backend.HFBackend.generate`
  (context encoded with the tokenizer's defaults, as lm-eval does).

Importing this module imports neither torch nor lm-eval.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from flasheval.engine.base import BackendInfo, Collective, OnLoad, OnResults, TokenBackend
from flasheval.engine.specs import ModelSpec
from flasheval.errors import BackendError
from flasheval.hashing import stable_hash
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["CONVENTION_VERSION", "LmEvalConventionBackend", "rolling_windows", "resolve_lmeval_max_length", "lmeval_max_length"]

CONVENTION_VERSION = "lm-eval-0.4.13-hf/1"
"""Part of the convention backend's fingerprint: results scored by lm-eval's tokenization rules
never mix with those scored by flasheval's own rules in one results store."""

_SEQLEN_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")
_DEFAULT_MAX_LENGTH = 2048


def rolling_windows(tokens: Sequence[int], *, prefix_token: int, max_length: int) -> list[tuple[list[int], list[int]]]:
    """lm-eval's disjoint rolling windows ``(context, continuation)`` (``context_len=1``).

    Every token is predicted exactly once; each window's model input is at most ``max_length``
    tokens; the first window is conditioned on ``prefix_token``.

    Examples
    --------
    >>> rolling_windows([10, 11, 12, 13, 14, 15], prefix_token=0, max_length=4)
    [([0], [10, 11, 12, 13]), ([11, 12, 13], [14, 15])]
    """
    tokens = list(tokens)
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [([prefix_token], tokens[:first])]
    predicted = first
    while predicted < len(tokens):
        n_pred = min(len(tokens) - predicted, max_length)
        end = predicted + n_pred
        context = tokens[max(0, end - max_length - 1) : end - 1]
        windows.append((context[: len(context) - (n_pred - 1)], tokens[end - n_pred : end]))
        predicted += n_pred
    return windows


def resolve_lmeval_max_length(spec: ModelSpec) -> int:
    """The maximum input length lm-eval's HF backend would use for ``spec`` (without loading it).

    lm-eval reads ``n_positions``, ``max_position_embeddings`` or ``n_ctx`` from the model config
    (``text_config`` first), then the tokenizer's ``model_max_length``, then 2048. A GGUF file's
    config is its ``<architecture>.context_length`` metadata.
    """
    path = Path(spec.target).expanduser()
    if spec.kind == "gguf":
        from gguf import GGUFReader

        fields = GGUFReader(str(path)).fields
        arch = _gguf_text(fields, "general.architecture")
        field = fields.get(f"{arch}.context_length")
        return int(field.parts[field.data[0]][0]) if field is not None else _DEFAULT_MAX_LENGTH
    if not (path / "config.json").is_file():
        raise BackendError(f"{spec.target!r} is not a local model folder; pass --max_length for hub models")
    tokenizer_config = path / "tokenizer_config.json"
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        tokenizer = json.loads(tokenizer_config.read_text(encoding="utf-8")) if tokenizer_config.is_file() else {}
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        raise BackendError(f"{spec.target!r}: cannot read its config.json or tokenizer_config.json ({exc})") from None
    if not isinstance(config, dict) or not isinstance(tokenizer, dict):
        raise BackendError(f"{spec.target!r}: its config.json and tokenizer_config.json must be JSON objects")
    return lmeval_max_length(config, tokenizer.get("model_max_length"))


def lmeval_max_length(config: dict[str, Any], tokenizer_max_length: Any = None) -> int:
    """lm-eval's maximum input length from a model config dict and the tokenizer's ``model_max_length``.

    For a model already in memory: ``lmeval_max_length(model.config.to_dict(), tokenizer.model_max_length)``.

    Examples
    --------
    >>> lmeval_max_length({"max_position_embeddings": 512}), lmeval_max_length({}, 1024), lmeval_max_length({}, 10**30)
    (512, 1024, 2048)
    """
    config = config.get("text_config") or config
    for key in _SEQLEN_KEYS:
        if config.get(key) is not None:
            return int(config[key])
    if isinstance(tokenizer_max_length, int) and tokenizer_max_length < 10**29:
        return tokenizer_max_length
    return _DEFAULT_MAX_LENGTH


def _gguf_text(fields: Any, key: str) -> str:
    field = fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


class LmEvalConventionBackend:
    """A flasheval backend that tokenizes requests as lm-eval's HF backend does (module docstring).

    Parameters
    ----------
    backend
        A :class:`~flasheval.engine.base.TokenBackend` (the Hugging Face backend, loaded or deferred) whose
        :attr:`~flasheval.engine.base.BackendInfo.max_length` is at least ``max_length + 1`` (so it never truncates
        what lm-eval would keep; a backend that states no limit truncates nothing).
    max_length
        lm-eval's maximum input length (:func:`resolve_lmeval_max_length`).
    """

    def __init__(self, backend: TokenBackend, *, max_length: int) -> None:
        keeps = backend.info.max_length
        if keeps is not None and keeps < max_length + 1:
            raise ValueError(f"the backend keeps {keeps} tokens; lm-eval's rules need {max_length + 1}")
        self._backend = backend
        self._tokenizer = backend.tokenizer
        self.max_length = max_length
        self._fingerprint = stable_hash((backend.fingerprint, CONVENTION_VERSION, max_length))
        previous = backend.info.previous_fingerprint  # the key earlier releases stored these results under
        self._previous = None if previous is None else stable_hash((previous, CONVENTION_VERSION, max_length))
        tok = self._tokenizer
        self.prefix_token_id = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self._prefix_text = tok.decode(self.prefix_token_id)

    @property
    def fingerprint(self) -> str:
        """The wrapped model's fingerprint combined with :data:`CONVENTION_VERSION` and ``max_length``."""
        return self._fingerprint

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer."""
        return self._tokenizer

    @property
    def info(self) -> BackendInfo:
        """The wrapped backend's :class:`~flasheval.engine.base.BackendInfo` (the previous key combined as
        :attr:`fingerprint` is)."""
        return dataclasses.replace(self._backend.info, previous_fingerprint=self._previous)

    def release(self) -> None:
        """Free the wrapped backend's weights."""
        self._backend.release()

    def notify_load(self, callback: OnLoad) -> None:
        """Called when the wrapped backend's weights load."""
        self._backend.notify_load(callback)

    def lockstep(self, collective: Collective) -> AbstractContextManager[None]:
        """The wrapped backend's lockstep."""
        return self._backend.lockstep(collective)

    def tok_encode(self, text: str, *, add_special_tokens: bool | None = None) -> list[int]:
        """``HFLM.tok_encode`` with ``add_bos_token`` unset."""
        kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        if add_special_tokens is None and text.startswith(self._prefix_text):
            kwargs["add_special_tokens"] = False
        return list(self._tokenizer.encode(text, **kwargs))

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """``TemplateLM.loglikelihood``'s context / continuation tokens, truncated as ``HFLM`` does."""
        if context == "":
            cont = self.tok_encode(continuation, add_special_tokens=False)
            starts_with_prefix = bool(cont) and cont[0] == self.prefix_token_id
            ctx, cont = (cont[:1], cont[1:]) if starts_with_prefix else ([self.prefix_token_id], cont)
        else:
            n_spaces = len(context) - len(context.rstrip())
            if n_spaces:
                context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
            whole = self.tok_encode(context + continuation)
            ctx = self.tok_encode(context)
            cont = whole[len(ctx) :]
        keep = self.max_length + 1
        if len(ctx) + len(cont) > keep:
            if len(cont) > self.max_length:
                raise BackendError(f"a continuation of {len(cont)} tokens exceeds max_length {self.max_length}")
            ctx = ctx[len(ctx) + len(cont) - keep :]
        if not cont:
            raise BackendError(f"continuation {continuation!r} encodes to no tokens after context {context[-40:]!r}")
        return ctx, cont

    def plan_batches(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[int, ...]]:
        """The wrapped backend's forward batches for these requests (for data parallelism)."""
        return self._backend.plan_token_batches([self.encode_pair(r.context, r.continuation) for r in requests])

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-likelihood and greedy match of each continuation, tokenized by lm-eval's rules."""
        pairs = [self.encode_pair(r.context, r.continuation) for r in requests]

        def result(index: int, value: tuple[float, bool]) -> LoglikelihoodResult:
            request, (ctx, cont) = requests[index], pairs[index]
            return LoglikelihoodResult(task_name=request.task_name, example_id=request.example_id,
                                       choice_index=request.choice_index, logprob_sum=value[0], n_tokens=len(cont),
                                       is_greedy=value[1], n_context_tokens=len(ctx))

        def forward(done: Sequence[tuple[int, Any]]) -> None:
            if on_results is not None:
                on_results([(i, result(i, value)) for i, value in done])

        values = self._backend.loglikelihood_tokens(pairs, on_results=forward)
        return [result(i, value) for i, value in enumerate(values)]

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """Sum of log-likelihoods over lm-eval's rolling windows of each text."""
        windows, owners = [], []
        for index, request in enumerate(requests):
            for window in rolling_windows(self.tok_encode(request.text), prefix_token=self.prefix_token_id,
                                          max_length=self.max_length):
                windows.append(window)
                owners.append(index)
        sums = [0.0] * len(requests)
        counts = [0] * len(requests)
        remaining = [owners.count(i) for i in range(len(requests))]
        results: list[RollingLoglikelihoodResult | None] = [None] * len(requests)

        def finish(done: Sequence[tuple[int, Any]]) -> None:
            finished = []
            for w, (logprob, _) in done:
                owner = owners[w]
                sums[owner] += logprob
                counts[owner] += len(windows[w][1])
                remaining[owner] -= 1
                if remaining[owner] == 0:
                    request = requests[owner]
                    results[owner] = RollingLoglikelihoodResult(
                        task_name=request.task_name, example_id=request.example_id, logprob_sum=sums[owner],
                        n_tokens=counts[owner], n_bytes=len(request.text.encode("utf-8")))
                    finished.append((owner, results[owner]))
            if on_results is not None and finished:
                on_results(finished)

        self._backend.loglikelihood_tokens(windows, on_results=finish)
        if any(r is None for r in results):
            raise BackendError("a text encodes to no tokens (rolling log-likelihood needs at least one)")
        return results  # type: ignore[return-value]

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """Greedy generation (the wrapped backend's), cut at the first stop sequence."""
        return self._backend.generate(requests, on_results=on_results)
