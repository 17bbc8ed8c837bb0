"""The ``model`` argument of the API: a spec string, a flasheval model object, or a loaded transformers model.

:func:`resolve_model` turns what the caller passed into one of three things, refusing anything
else in one line:

* :class:`ReplayModel` — ``"replay:MODEL_ID"``: a reference model's recorded scores (held out of the pool);
* :class:`~flasheval.engine.specs.NamedModel` — ``"[NAME=]hf:PATH_OR_ID"`` / ``"[NAME=]gguf:FILE"``: weights
  loaded now, their results keyed by the weights' fingerprint;
* :class:`~flasheval.engine.hf.in_memory.LoadedModel` — a ``transformers`` model the caller holds (``tokenizer=``,
  ``identity=``), scored in place: nothing is written to disk for it;
* :class:`~flasheval.engine.loading.BackendModel` — a backend the caller opened (any object of the
  :class:`~flasheval.engine.base.Backend` protocol, as lm-eval takes an ``LM``), scored as it is and keyed by its
  fingerprint: the same record as its spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flasheval.engine.base import Backend
from flasheval.engine.hf.in_memory import LoadedModel, is_torch_module, is_transformers_model
from flasheval.engine.loading import BackendModel
from flasheval.engine.specs import NamedModel, check_model_files, parse_named_models
from flasheval.errors import InputError
from flasheval.records.run_record import slug

__all__ = ["ReplayModel", "Model", "resolve_model", "resolve_models", "SPEC_FORMS"]

SPEC_FORMS = ("replay:MODEL_ID", "[NAME=]hf:PATH_OR_ID", "[NAME=]gguf:FILE", "a LoadedModel",
              "a transformers model with tokenizer=", "a backend (flasheval.engine.base.Backend)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayModel:
    """A model recorded in the reference itself, replayed from its scores (held out of the pool)."""

    model_id: str

    @property
    def text(self) -> str:
        return f"replay:{self.model_id}"


Model = ReplayModel | NamedModel | LoadedModel | BackendModel


def resolve_model(model: Any, *, tokenizer: Any = None, identity: str | None = None, field: str = "--model",
                  check_files: bool = True) -> Model:
    """What ``model`` names (module docstring); ``tokenizer``/``identity`` apply to transformers models only.

    Any torch module, and anything given with a ``tokenizer``, is taken for an in-memory model and checked
    as one (:func:`~flasheval.engine.hf.in_memory.check_model`: wrappers looked through, one line for a module
    that is not a causal LM), so a DDP-wrapped model is scored and a bare ``LlamaModel`` refused by name.
    """
    if isinstance(model, Backend):  # an opened backend (the protocol's every member), not a transformers model
        model = BackendModel(backend=model)
    ours = isinstance(model, (str, ReplayModel, NamedModel, LoadedModel, BackendModel))
    if is_transformers_model(model) or is_torch_module(model) or (tokenizer is not None and not ours):
        return LoadedModel(model=model, tokenizer=tokenizer, identity=identity)
    for name, value in (("tokenizer", tokenizer), ("identity", identity)):
        if value is not None:
            raise InputError("applies to an in-memory transformers model only", field=name)
    if isinstance(model, (ReplayModel, NamedModel, LoadedModel, BackendModel)):
        resolved = model
    elif isinstance(model, str):
        kind, _, target = model.partition(":")
        if kind == "replay":
            if not target:
                raise InputError(f"unsupported model spec {model!r}", field=field, allowed=SPEC_FORMS)
            return ReplayModel(model_id=target)
        resolved = parse_named_models([model], field=field)[0]
    else:
        raise InputError(f"cannot score a {type(model).__name__}", field=field, allowed=SPEC_FORMS)
    if check_files and isinstance(resolved, NamedModel):
        check_model_files([resolved], field=field)
    return resolved


def resolve_models(models: Sequence[Any], *, field: str = "--models") -> tuple[Model, ...]:
    """Several checkpoints: all replayed or all live, names distinct (also as store folder names)."""
    if isinstance(models, (str, bytes)) or not isinstance(models, Sequence) or not models:
        raise InputError("give a non-empty list of checkpoints", field=field)
    resolved = tuple(resolve_model(m, field=field, check_files=False) for m in models)
    replay = [isinstance(m, ReplayModel) for m in resolved]
    if any(replay) and not all(replay):
        raise InputError("one sweep takes replay:MODEL_ID specs or live specs, not both", field=field,
                         allowed=SPEC_FORMS)
    ids = [m.model_id for m in resolved]
    if all(replay) and len(set(ids)) != len(ids):
        raise InputError(f"checkpoint {next(m for m in ids if ids.count(m) > 1)!r} given twice", field=field)
    dup = sorted({m for m in ids if ids.count(m) > 1})
    if dup:
        raise InputError(f"model names {dup} appear twice (name them with NAME=SPEC)", field=field)
    if not all(replay):
        slugs = [slug(m) for m in ids]
        clash = sorted({m for m, s in zip(ids, slugs) if slugs.count(s) > 1})
        if clash:
            raise InputError(f"checkpoint names {clash} map to the same store folder; rename them with NAME=SPEC",
                             field=field)
        check_model_files([m for m in resolved if isinstance(m, NamedModel)], field=field)
    return resolved
