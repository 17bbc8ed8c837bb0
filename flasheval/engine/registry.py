"""The one table of model-spec prefixes: what each names and how its model opens.

A ``--model`` string is ``PREFIX:TARGET`` (:mod:`flasheval.engine.specs`); :data:`BACKENDS` maps each prefix
to a :class:`SpecKind`: whether ``TARGET@REVISION`` names a revision, whether the target is one local file,
and the loader that opens the model (``None``: the engine opens nothing, as for ``replay:``, whose
recorded scores the placement code serves). Adding a backend is one module (its backend class and a loader)
and one line here; the spec parser, the file checks and :func:`~flasheval.engine.loading.open_backend` read
this table and nothing else (``docs/engine.md``, "Adding a backend").

A loader is called as ``loader(target, revision=..., deferred=..., **options)`` and returns a
:class:`~flasheval.engine.base.Backend`; ``deferred=True`` asks for one that loads its weights on the first
request the results store cannot answer (a loader whose model costs nothing to open may ignore it).
``options``: ``dtype``, ``device``, ``batch_size``, ``max_length``, ``device_map``, ``layout``.

Importing this module imports neither torch nor transformers: the Hugging Face loaders import them when
called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flasheval.engine.base import Backend

__all__ = ["Loader", "SpecKind", "BACKENDS"]

Loader = Callable[..., Backend]
"""``loader(target, *, revision, deferred, **options) -> Backend`` (module docstring)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecKind:
    """One spec prefix: what its target names and how its model opens."""

    open: Loader | None
    """Opens the model a spec names (module docstring); ``None``: no weights to open (``replay:``)."""
    revisions: bool = False
    """``TARGET@REVISION`` names a hub revision (unless ``TARGET@REVISION`` is itself a local path)."""
    local_file: bool = False
    """The target is one local file: its stem names the model, and a missing file is refused before any load."""


def _hf(spec: str, source: str, where: dict[str, Any], *, deferred: bool, batch_size: int | None = None,
        share_context: bool = True, **options: Any) -> Backend:
    """A Hugging Face model: planned (config, tokenizer, fingerprint), then loaded now or on first use; its
    :class:`~flasheval.engine.base.BackendInfo` names ``spec``."""
    from flasheval.engine.hf.deferred import DeferredBackend
    from flasheval.engine.hf.loading import load_planned, plan_hf_load

    plan = plan_hf_load(source, **where, **options)
    if deferred:
        return DeferredBackend(plan, batch_size=batch_size, share_context=share_context, source=spec)
    return load_planned(plan, batch_size=batch_size, share_context=share_context, source=spec)


def _open_hf(target: str, *, revision: str | None, deferred: bool, **options: Any) -> Backend:
    """``hf:PATH_OR_ID[@REVISION]``: a local folder with ``config.json`` or a hub id."""
    spec = f"hf:{target}" + ("" if revision is None else f"@{revision}")
    return _hf(spec, target, {"revision": revision}, deferred=deferred, **options)


def _open_gguf(target: str, *, revision: str | None, deferred: bool, **options: Any) -> Backend:
    """``gguf:FILE``: a local GGUF file, dequantized by transformers (its tokenizer from the same file)."""
    path = Path(target).expanduser()
    return _hf(f"gguf:{target}", str(path.parent), {"gguf_file": path.name}, deferred=deferred, **options)


BACKENDS: Mapping[str, SpecKind] = MappingProxyType({
    "hf": SpecKind(open=_open_hf, revisions=True),
    "gguf": SpecKind(open=_open_gguf, local_file=True),
    "replay": SpecKind(open=None),
})
"""Every spec prefix, in the order error messages list them (immutable: built once, never changed)."""
