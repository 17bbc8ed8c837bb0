"""GGUF files converted once: a cached folder of the dequantised weights, reused by every later load.

transformers reads a GGUF file three times to load it (the config, the tokenizer and the weights, each
a full parse of the file's metadata; the weights are dequantised too): 15 s for SmolLM2-135M, about a
minute for Gemma-3-270M on a CPU. The first load of a file writes what it produced into a folder
keyed by the file's SHA-256 and the load dtype (``config.json``, the tokenizer's files and
``model.safetensors``); every later load of the same content reads that folder instead, a plain
safetensors read. The tensors, the config and the tokenizer are the ones the GGUF load gives (tested
bit for bit, logits included), and the model's fingerprint is unchanged: it is the GGUF file's
digest, so stored results keep their keys.

Invalidation is by content: another file (or the same name rewritten) is another key. A folder is
written under a temporary name and renamed into place when complete, so concurrent processes can share
the cache (the loser of a race drops its copy) and a killed write leaves no half folder that is used.

Where: ``$FLASHEVAL_GGUF_CACHE`` when set (``off`` or empty: no cache), else the ``gguf/`` folder of
flasheval's cache (:func:`flasheval.data_paths.cache_root`: ``$FLASHEVAL_CACHE``, ``$XDG_CACHE_HOME/flasheval``
or ``~/.cache/flasheval``). A folder holds the dequantised weights in the load dtype (float32: 4 bytes
per parameter, 0.5 GB for SmolLM2-135M): delete it to reclaim the space. An unwritable cache gives one
warning and the load goes on without it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from flasheval.atomic import atomic_write_text
from flasheval.data_paths import cache_root

__all__ = ["GGUF_CACHE_ENV", "gguf_cache_folder", "content_key", "converted_folder", "write_converted"]

logger = logging.getLogger(__name__)

GGUF_CACHE_ENV = "FLASHEVAL_GGUF_CACHE"
"""Environment variable: the folder converted GGUF files are kept in (``off``: none)."""

_COMPLETE = "flasheval-gguf.json"
"""Written last inside a converted folder: its presence says the folder is whole."""
_warned: set[str] = set()


def gguf_cache_folder() -> Path | None:
    """The folder converted GGUF files are kept in, or ``None`` when the cache is off."""
    chosen = os.environ.get(GGUF_CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen)
    root = cache_root()
    return None if root is None else root / "gguf"


def content_key(path: Path) -> str | None:
    """The SHA-256 of the whole file (not the sampled digest of large files the fingerprint uses: a cached
    folder must never stand for other bytes), or ``None`` when the cache is off (nothing is read then)."""
    import hashlib

    if gguf_cache_folder() is None:
        return None
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _key_folder(digest: str, dtype_name: str) -> Path | None:
    folder = gguf_cache_folder()
    return None if folder is None else folder / f"{digest}-{dtype_name}"


def converted_folder(digest: str, dtype_name: str) -> Path | None:
    """The complete converted folder of the GGUF file with SHA-256 ``digest`` loaded as ``dtype_name``, or ``None``."""
    folder = _key_folder(digest, dtype_name)
    if folder is None or not (folder / _COMPLETE).is_file():
        return None
    return folder


def write_converted(digest: str, dtype_name: str, *, model: Any, config: Any, tokenizer: Any, source: str) -> None:
    """Keep a model just loaded from a GGUF file (``source``, for messages) as a converted folder.

    ``model`` must hold the weights exactly as loaded (not trained, not dispatched over devices); its
    tensors are written as they are, so a later load in the same dtype gives the same values.
    """
    import json

    from safetensors.torch import save_model

    final = _key_folder(digest, dtype_name)
    if final is None or final.exists():
        return
    tmp = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_text(tmp / _COMPLETE, json.dumps({"gguf_sha256": digest, "dtype": dtype_name, "source": source}))
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / _COMPLETE).is_file():  # not a lost race: a real failure
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        tmp = None
        logger.info("kept %s converted in %s: later loads read it instead of the GGUF file", source, final)
    except (OSError, RuntimeError, ValueError) as exc:
        where = str(final.parent)
        if where not in _warned:
            _warned.add(where)
            logger.warning("%s: cannot keep the converted GGUF model (%s); set %s to another folder or to off",
                           where, getattr(exc, "strerror", None) or exc, GGUF_CACHE_ENV)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
