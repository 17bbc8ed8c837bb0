"""Model specs: the ``--model`` strings users type.

* ``hf:PATH_OR_ID`` — a local Hugging Face folder (with ``config.json``) or a hub id
  (``org/name``, optionally ``org/name@revision``) when the machine is online;
* ``gguf:FILE`` — a local GGUF file, dequantized by transformers (tokenizer from the same file);
* ``replay:REFERENCE/MODEL`` — recorded per-example scores of a reference model (placement only).

What each prefix names and how its model opens is one table, :data:`~flasheval.engine.registry.BACKENDS`.

Commands that score several models (``reference build``, ``sweep``) and live ``place`` take
``[NAME=]SPEC`` (:func:`parse_named_models`) and check every local file before loading any
(:func:`check_model_files`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flasheval.checks import check_model_id
from flasheval.engine.registry import BACKENDS
from flasheval.errors import InputError, UnknownNameError

__all__ = ["ModelSpec", "parse_model_spec", "SPEC_PREFIXES", "NamedModel", "parse_named_models", "check_model_files"]

SPEC_PREFIXES = tuple(BACKENDS)
"""Every prefix a spec may have: the keys of :data:`~flasheval.engine.registry.BACKENDS`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A parsed ``--model`` value."""

    kind: str
    """One of :data:`SPEC_PREFIXES`."""
    target: str
    """Path, hub id or ``REFERENCE/MODEL`` (without the prefix and revision)."""
    revision: str | None = None
    """Hub revision from ``hf:org/name@revision``."""

    def __post_init__(self) -> None:
        if self.kind not in SPEC_PREFIXES:
            raise UnknownNameError("model spec prefix", self.kind, SPEC_PREFIXES)
        if not self.target:
            raise InputError(f"empty {self.kind}: model spec", field="--model")


def parse_model_spec(text: str) -> ModelSpec:
    """Parse ``PREFIX:TARGET``.

    Examples
    --------
    >>> parse_model_spec("hf:HuggingFaceTB/SmolLM2-135M@main")
    ModelSpec(kind='hf', target='HuggingFaceTB/SmolLM2-135M', revision='main')
    >>> parse_model_spec("gguf:/models/m.gguf").target
    '/models/m.gguf'
    """
    prefix, sep, target = text.partition(":")
    if not sep:
        raise InputError(f"model spec {text!r} has no PREFIX: (e.g. hf:PATH_OR_ID)", field="--model", allowed=SPEC_PREFIXES)
    if prefix not in SPEC_PREFIXES:
        raise UnknownNameError("model spec prefix", prefix, SPEC_PREFIXES, field="--model")
    revision = None
    if BACKENDS[prefix].revisions and "@" in target and not Path(target).expanduser().exists():
        target, _, revision = target.rpartition("@")
    return ModelSpec(kind=prefix, target=target, revision=revision)


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedModel:
    """A ``--models`` entry: ``[NAME=]SPEC``."""

    model_id: str
    """Name in the reference (default: the file stem or the last path / hub-id component)."""
    spec: ModelSpec
    text: str
    """The spec as typed, without the name."""


def parse_named_models(texts: Sequence[str], *, field: str = "--models") -> tuple[NamedModel, ...]:
    """Parse ``[NAME=]SPEC`` strings; duplicate names and ``replay:`` specs are refused.

    Examples
    --------
    >>> [m.model_id for m in parse_named_models(["gguf:/m/smollm2-135m.gguf", "big=hf:org/model"])]
    ['smollm2-135m', 'big']
    """
    models = []
    for text in texts:
        name, sep, rest = text.partition("=")
        if not sep or ":" in name:
            name, rest = "", text
        elif not name.strip() or name != name.strip():
            raise InputError(f"{text!r}: the NAME before '=' is empty or has spaces around it; give a name or drop "
                             "'NAME='", field=field)
        else:
            check_model_id(name, field=field)
        spec = parse_model_spec(rest)
        if BACKENDS[spec.kind].open is None:
            raise InputError(f"{text!r}: {spec.kind} models have no weights to score", field=field,
                             allowed=[f"{p}:..." for p, kind in BACKENDS.items() if kind.open is not None])
        target = Path(spec.target)
        model_id = name or (target.stem if BACKENDS[spec.kind].local_file else target.name or spec.target)
        models.append(NamedModel(model_id=model_id, spec=spec, text=rest))
    names = [m.model_id for m in models]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"model names {dup} appear twice (name them with NAME=SPEC)", field=field)
    return tuple(models)


def check_model_files(models: Sequence[NamedModel], *, field: str = "--models") -> None:
    """Refuse, before any model is loaded, specs whose local files are missing (all listed)."""
    missing = []
    for model in models:
        path = Path(model.spec.target).expanduser()
        is_file = BACKENDS[model.spec.kind].local_file
        local = is_file or model.spec.target.startswith(("/", ".", "~"))
        if local and not path.exists():
            missing.append(f"{model.model_id} ({path})")
        elif is_file and not path.is_file():
            missing.append(f"{model.model_id} ({path} is not a file)")
    if missing:
        raise InputError(f"model files not found: {', '.join(missing)}", field=field)
