"""Model fingerprints: one digest of everything that determines a model's scores.

Results are stored under ``(model fingerprint, request key)``, so the fingerprint must change
whenever the numbers could: weights, config, tokenizer files, hub revision, dtype, the maximum
sequence length (it decides truncation) and flasheval's scoring conventions
(:data:`~flasheval.engine.base.SCORING_VERSION`). Pure Python (hashlib); no torch.

Content policy: files up to :data:`FULL_HASH_LIMIT` bytes are hashed in full. Larger files
(multi-GiB weight shards) are hashed by size plus the first and last MiB plus 16 evenly
spaced 64 KiB blocks: a re-quantized, re-trained or truncated file changes these with
near certainty, while hashing 100 GiB of shards in full would take minutes per run.
File modification times are never used (a copy of the same checkpoint keeps its fingerprint).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from flasheval.hashing import stable_hash

__all__ = ["FULL_HASH_LIMIT", "file_digest", "path_digest", "model_fingerprint"]

FULL_HASH_LIMIT = 64 * 2**20
_EDGE = 2**20
_BLOCK = 64 * 2**10
_N_BLOCKS = 16


def file_digest(path: str | os.PathLike[str]) -> str:
    """Content digest of one file under the policy in the module docstring."""
    target = Path(path)
    size = target.stat().st_size
    digest = hashlib.sha256(f"size:{size};".encode())
    with target.open("rb") as fh:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: fh.read(2**20), b""):
                digest.update(chunk)
        else:
            offsets = [0, size - _EDGE] + [int(size * (k + 1) / (_N_BLOCKS + 1)) for k in range(_N_BLOCKS)]
            for offset in offsets:
                fh.seek(offset)
                digest.update(fh.read(_EDGE if offset in (0, size - _EDGE) else _BLOCK))
    return digest.hexdigest()


def path_digest(path: str | os.PathLike[str]) -> str:
    """Digest of a file, or of every regular file below a folder (relative names included;
    hidden files and folders such as ``.cache`` or ``.git`` skipped)."""
    root = Path(path)
    if root.is_file():
        return file_digest(root)
    entries = []
    for file in sorted(root.rglob("*")):
        rel = file.relative_to(root)
        if not file.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        entries.append((rel.as_posix(), file_digest(file)))
    return stable_hash(entries, n_chars=64)


def model_fingerprint(
    *, source: str, content_digest: str | None, revision: str | None, dtype: str, max_length: int, scoring_version: str
) -> str:
    """The model fingerprint (32 hex characters).

    Parameters
    ----------
    source
        ``hf`` / ``gguf`` plus the file name for local files, the repo id for hub models.
        The local folder itself is NOT part of it: moving a checkpoint keeps its results.
    content_digest
        :func:`path_digest` of the local files, ``None`` for hub models (the revision pins them).
    revision
        Hub commit hash (``None`` for local files).
    dtype, max_length, scoring_version
        Settings that change the numbers.

    Examples
    --------
    >>> a = model_fingerprint(source="hf", content_digest="x", revision=None, dtype="float32",
    ...                       max_length=2048, scoring_version="1")
    >>> a == model_fingerprint(source="hf", content_digest="x", revision=None, dtype="bfloat16",
    ...                        max_length=2048, scoring_version="1")
    False
    """
    return stable_hash(
        {
            "source": source,
            "content": content_digest,
            "revision": revision,
            "dtype": dtype,
            "max_length": max_length,
            "scoring_version": scoring_version,
        }
    )
