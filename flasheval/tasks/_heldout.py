"""Held-out text files → rolling log-likelihood requests (for validation loss).

A file is either JSON lines with a ``"text"`` field (one document per line) or plain UTF-8
text (the whole file is one document). Documents are scored whole, in windows, by the backend.
"""

from __future__ import annotations

import json
from pathlib import Path

from flasheval.errors import InputError
from flasheval.types import RollingLoglikelihoodRequest

__all__ = ["heldout_requests"]


def _jsonl_documents(text: str, where: str) -> list[tuple[int, str]]:
    documents = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"broken JSON: {exc.msg}", path=where, line=number) from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError("missing or not a string", path=where, line=number, field="text")
        if record["text"]:
            documents.append((number, record["text"]))
    return documents


def heldout_requests(path: str | Path, *, task_name: str = "heldout") -> tuple[RollingLoglikelihoodRequest, ...]:
    """One :class:`RollingLoglikelihoodRequest` per document of the held-out file ``path``.

    Example ids are the 0-based document index, zero-padded to 6 digits.
    """
    where = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=where) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid UTF-8 (byte {exc.start + 1})", path=where) from None
    is_jsonl = where.endswith((".jsonl", ".json")) or text.lstrip().startswith("{")
    documents = _jsonl_documents(text, where) if is_jsonl else ([(1, text)] if text.strip() else [])
    if not documents:
        raise InputError("file has no text", path=where)
    return tuple(
        RollingLoglikelihoodRequest(task_name=task_name, example_id=f"{i:06d}", text=doc)
        for i, (_, doc) in enumerate(documents)
    )
