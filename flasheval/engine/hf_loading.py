"""Load a Hugging Face causal LM (local folder, local GGUF file or hub id) into an :class:`~flasheval.engine.hf.HFBackend`.

Resolves the device and dtype, loads the model and tokenizer, and computes the fingerprint the
results store keys on. torch, transformers and accelerate are imported inside the functions only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flasheval.engine.hf import HFBackend
from flasheval.errors import BackendError

__all__ = ["DTYPES", "load_hf_backend"]

logger = logging.getLogger(__name__)


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
    from flasheval.engine.fingerprint import hub_commit, model_fingerprint, path_digest

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
    commit = None
    if not is_local:
        commit = hub_commit(target, revision) or getattr(model.config, "_commit_hash", None)
        if commit is None:
            raise BackendError(f"cannot tell which commit of hub model {target!r} was loaded (no refs/"
                               f"{revision or 'main'} in the hub cache); name one: hf:{target}@<commit>")
    fingerprint = model_fingerprint(
        source="local" if is_local else f"hub:{target}",
        content_digest=path_digest(path / gguf_file if gguf_file else path) if is_local else None,
        revision=commit,
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
