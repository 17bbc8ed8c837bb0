"""A model the caller already holds (a training loop's ``transformers`` model): scored in place.

:class:`LoadedModel` names an already loaded causal LM and its tokenizer; nothing is written to
disk to score it. Its results are keyed in a results store by the ``identity`` the caller gives
(a run name and step, say): the same identity serves the same stored results, so a rerun resumes.
Without an identity the results are kept for one call only (a fingerprint no other call can
produce), never guessed from the object: two checkpoints of one run look alike to any guess.

While it is scored the model is in eval mode (dropout off) under ``torch.inference_mode()``;
:func:`scoring_mode` hands it back in the mode it came in. The model stays on its device and in
its dtype: a reference pinned to another dtype is refused by the caller before any scoring.

The identity alone never keys results: the fingerprint also holds a digest of what computes
(:mod:`flasheval.engine.hf.weights_digest`), read from the module the forward passes go through (a ``PeftModel``
is scored and digested as itself: its active adapters; offloaded weights read where they live), so the same
identity with other weights (a restarted run, an optimizer step since, another adapter) is scored afresh,
with one warning, never served the earlier weights' results; a weight no one can read is refused.

A model is checked when it is named (:func:`check_model`), each problem refused in one line naming the
model's class: not a torch module, no ``transformers`` config, no language-modelling head (a bare
``LlamaModel``), a tokenizer with more tokens than the model's embedding rows (a tokenizer smaller than
a padded vocabulary is fine). Wrappers are looked through (:func:`unwrap`): ``DistributedDataParallel``,
``DataParallel`` and DeepSpeed's engine run their inner module (a DDP forward would broadcast buffers,
a collective the other processes never join); a ``torch.compile`` module runs its original, eager module
(the numbers of the weights saved to disk, without a recompilation for every new batch shape); FSDP1's
``FullyShardedDataParallel`` runs through the wrapper, which gathers the parameters (the config, head
and forward signature are read from the inner module); an FSDP2 (``fully_shard``) model is the model itself.
A sharded model is scored under ``torch.no_grad()`` instead of ``torch.inference_mode()`` (:func:`no_grad`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from flasheval.engine.coordination.process_group import caller_group
from flasheval.engine.hf.fingerprint import RunSettings
from flasheval.errors import InputError

__all__ = ["LoadedModel", "is_transformers_model", "is_torch_module", "unwrap", "check_model", "is_sharded", "check_sharded_placement",
           "no_grad", "scoring_mode", "in_memory_fingerprint"]


def is_transformers_model(obj: object) -> bool:
    """Whether ``obj`` looks like a loaded ``transformers`` causal LM (a torch module with a config)."""
    return hasattr(obj, "config") and callable(getattr(obj, "parameters", None)) and callable(getattr(obj, "eval", None))


def is_torch_module(obj: object) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module`` (told from its classes: torch is not imported)."""
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in type(obj).__mro__)


_INNER = {"DistributedDataParallel": "module", "DataParallel": "module", "DeepSpeedEngine": "module",
          "OptimizedModule": "_orig_mod"}
"""Wrappers whose inner module is scored instead (class name -> attribute holding it)."""


def _wrapper(obj: object, name: str) -> bool:
    return any(c.__name__ == name for c in type(obj).__mro__)


def unwrap(model: Any) -> tuple[Any, Any]:
    """``(runner, inner)``: the module forward passes go through, and the ``transformers`` model inside.

    Parallel and compiled wrappers are looked through (module docstring), nested ones too; FSDP1's
    ``FullyShardedDataParallel`` stays the runner (it gathers the parameters), its inner module is read.

    Examples
    --------
    >>> import torch
    >>> inner = torch.nn.Linear(2, 2)
    >>> unwrap(torch.nn.DataParallel(inner)) == (inner, inner)
    True
    """
    runner = model
    for _ in range(8):  # wrappers nest a few deep at most (compile over DDP, say)
        attribute = next((a for n, a in _INNER.items() if _wrapper(runner, n)), None)
        if attribute is None:
            break
        runner = getattr(runner, attribute)
    inner = runner
    while _wrapper(inner, "FullyShardedDataParallel"):
        inner = inner.module
    return runner, inner


def _vocabulary_rows(inner: Any) -> int | None:
    """Rows of the model's token embeddings and of its head, whichever is fewer (``None``: unknown)."""
    rows = [getattr(inner.get_input_embeddings(), "num_embeddings", None),
            getattr(inner.get_output_embeddings(), "out_features", None)]
    known = [int(r) for r in rows if isinstance(r, int)]
    return min(known) if known else None


def check_model(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """Unwrap ``model`` (:func:`unwrap`) and check it can be scored with ``tokenizer``; ``(runner, inner)``.

    Raises
    ------
    InputError
        One line naming the model's class and what is needed (module docstring).
    """
    kind = type(model).__name__
    if not is_torch_module(model):
        raise InputError(f"expected a loaded transformers causal LM (a torch.nn.Module), got {kind}", field="model")
    runner, inner = unwrap(model)
    kind = type(inner).__name__
    if not hasattr(inner, "config") or not callable(getattr(inner, "get_output_embeddings", None)):
        raise InputError(f"{kind} is not a transformers model (no config): load one with "
                         "AutoModelForCausalLM.from_pretrained, or pass the transformers model a wrapper holds",
                         field="model")
    if inner.get_output_embeddings() is None:
        raise InputError(f"{kind} has no language-modelling head (it returns hidden states, not logits): pass the "
                         "causal LM (AutoModelForCausalLM, e.g. LlamaForCausalLM)", field="model")
    if tokenizer is None:
        raise InputError(f"{kind} needs its tokenizer (tokenizer=)", field="tokenizer")
    if not callable(tokenizer):  # given, but not a tokenizer: name what was given
        raise InputError(f"expected {kind}'s tokenizer (a transformers tokenizer, callable on text), got "
                         f"{type(tokenizer).__name__}", field="tokenizer")
    rows = _vocabulary_rows(inner)
    try:
        n_tokens = len(tokenizer)
    except TypeError:
        n_tokens = None
    if rows is not None and n_tokens is not None and n_tokens > rows:
        raise InputError(f"the tokenizer has {n_tokens} tokens but {kind} has {rows} embedding rows: pass the "
                         "model's own tokenizer (or resize the model's embeddings: "
                         "model.resize_token_embeddings(len(tokenizer)))", field="tokenizer")
    return runner, inner


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LoadedModel:
    """An already loaded ``transformers`` causal LM and its tokenizer.

    Examples
    --------
    ``LoadedModel(model=model, tokenizer=tokenizer, identity="run-7/step-1200")``; pass it (or the
    model with ``tokenizer=`` and ``identity=``) to :func:`flasheval.place`.
    """

    model: Any
    """A ``transformers`` causal LM (any device, any dtype), or a wrapper of one; once made, what forward passes
    go through (:func:`unwrap`: a DDP or ``torch.compile`` wrapper is replaced by its inner module)."""
    tokenizer: Any
    """Its tokenizer."""
    identity: str | None = None
    """What keys its stored results (e.g. ``"run-7/step-1200"``); ``None``: kept for one call only."""
    name: str | None = None
    """Model id in results (default: the identity, else ``"in-memory"``)."""
    module: Any = field(default=None, init=False)
    """The ``transformers`` model itself (:attr:`model` unless an FSDP1 wrapper runs it): its config and head."""

    def __post_init__(self) -> None:
        runner, inner = check_model(self.model, self.tokenizer)
        object.__setattr__(self, "model", runner)
        object.__setattr__(self, "module", inner)
        for label, value in (("identity", self.identity), ("name", self.name)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InputError(f"must be a non-empty string, got {value!r}", field=label)

    @property
    def model_id(self) -> str:
        """The model's name in results and records."""
        return self.name or self.identity or "in-memory"

    @property
    def dtype(self) -> str:
        """The dtype of the model's first parameter, as a name (``float32``, ``bfloat16``, ...)."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @property
    def text(self) -> str:
        """How records name where the model came from."""
        return f"memory:{self.identity}" if self.identity else "memory:(this call only)"


def in_memory_fingerprint(loaded: LoadedModel, *, max_length: int, scoring_version: str,
                          settings: RunSettings | None, digest: str | None = None) -> str:
    """The fingerprint its results are stored under: its identity, its weights and the settings that change numbers.

    ``digest``: :func:`~flasheval.engine.hf.weights_digest.weights_digest` of :attr:`LoadedModel.model` now, the
    module the forward passes go through (``None``: left out, the key of earlier releases). Without an identity,
    a random one: the results serve this call and no other. ``settings``: the run settings (device type,
    attention, library versions, padding).
    """
    from flasheval.engine.hf.fingerprint import model_fingerprint

    identity = loaded.identity or f"one-call-{uuid.uuid4().hex}"
    return model_fingerprint(source=f"memory:{identity}", content_digest=digest, revision=None, dtype=loaded.dtype,
                             max_length=max_length, scoring_version=scoring_version, settings=settings)


def is_sharded(model: Any) -> bool:
    """Whether ``model``'s forward is collective (the one test, for :func:`no_grad` and for lockstep scoring,
    :mod:`flasheval.engine.coordination.lockstep`): an FSDP1 (``FullyShardedDataParallel``) or FSDP2
    (``FSDPModule``) module in it, parameters that are ``DTensor`` s, or DeepSpeed ZeRO-3 parameters (``ds_id``).
    Told from class names and attributes: torch is not imported.

    Examples
    --------
    >>> import torch
    >>> zero3 = torch.nn.Linear(2, 2)
    >>> is_sharded(zero3), setattr(zero3.weight, "ds_id", 0), is_sharded(zero3)
    (False, None, True)
    """
    modules = model.modules() if callable(getattr(model, "modules", None)) else (model,)
    if any(_wrapper(m, "FullyShardedDataParallel") or _wrapper(m, "FSDPModule") for m in modules):
        return True
    parameters = model.parameters() if callable(getattr(model, "parameters", None)) else ()
    return any(type(p).__name__ == "DTensor" or hasattr(p, "ds_id") for p in parameters)


def check_sharded_placement(model: Any, distributed: str, *, sharded: bool = False) -> None:
    """Refuse ``distributed="main"`` for a sharded model (:func:`is_sharded`, or ``sharded``: a framework set to
    shard it): its forward passes are collective (FSDP gathers the parameters from every process, as DeepSpeed
    ZeRO-3 does), so the main process alone would wait forever for the others. The one rule for ``place``,
    ``place_checkpoint``, ``sweep``, ``evaluate`` and the Trainer callback, checked before anything is written.
    A group of one process (or none) is not refused: there, process zero is every process."""
    group = caller_group()
    if distributed == "main" and group is not None and group[0] > 1 and (sharded or is_sharded(model)):
        raise InputError("'main' places on process zero alone, but the model is sharded (FSDP or DeepSpeed ZeRO-3: "
                         "each forward pass runs on every process together): give distributed=\"all\" (every "
                         "process places, in lockstep)", field="distributed")


def no_grad(model: Any) -> Any:
    """``torch.inference_mode()``, or ``torch.no_grad()`` for a sharded model (FSDP's parameter gathering
    tracks tensor versions, which inference tensors do not have); the numbers are the same."""
    import torch

    return torch.no_grad() if is_sharded(model) else torch.inference_mode()


@contextmanager
def scoring_mode(model: Any) -> Iterator[None]:
    """Eval mode under ``torch.inference_mode()`` (:func:`no_grad`) for the block; the model's own mode restored after.

    The model computes as its weights are: a mixed-precision autocast around its forward (accelerate's, the
    Trainer's ``bf16``/``fp16``) or around the call is off for the block and put back after
    (:func:`~flasheval.engine.hf.mixed_precision.without_autocast`).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Dropout(0.5).train()
    >>> with scoring_mode(net):
    ...     net.training
    False
    >>> net.training
    True
    """
    from flasheval.engine.hf.mixed_precision import without_autocast

    was_training = bool(model.training)
    model.eval()
    try:
        with no_grad(model), without_autocast(model, inside=unwrap(model)):
            yield
    finally:
        model.train(was_training)
