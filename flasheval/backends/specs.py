"""Model specs: the ``--model`` strings users type.

* ``hf:PATH_OR_ID`` — a local Hugging Face folder (with ``config.json``) or a hub id
  (``org/name``, optionally ``org/name@revision``) when the machine is online;
* ``gguf:FILE`` — a local GGUF file, dequantized by transformers (tokenizer from the same file);
* ``replay:REFERENCE/MODEL`` — recorded per-example scores of a reference model (placement only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flasheval.errors import InputError, UnknownNameError

__all__ = ["ModelSpec", "parse_model_spec", "SPEC_PREFIXES"]

SPEC_PREFIXES = ("hf", "gguf", "replay")


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
    if prefix == "hf" and "@" in target and not Path(target).expanduser().exists():
        target, _, revision = target.rpartition("@")
    return ModelSpec(kind=prefix, target=target, revision=revision)
