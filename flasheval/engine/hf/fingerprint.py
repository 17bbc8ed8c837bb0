"""Model fingerprints: one digest of everything that determines a model's scores.

Results are stored under ``(model fingerprint, request key)``, so the fingerprint must change
whenever the numbers could: weights, config, tokenizer files, hub revision, dtype, the maximum
sequence length (it decides truncation), flasheval's scoring conventions
(:data:`~flasheval.engine.base.SCORING_VERSION`) and the run settings (:class:`RunSettings`: the
device type, the attention implementation, the torch and transformers versions and the padding
multiple; kernels differ by up to 0.7 nats on long prompts, see ``docs/engine.md``). A result
computed under other settings is therefore never served: it is computed again. Results stored before
the settings were part of the fingerprint are adopted once (:mod:`flasheval.engine.store.adoption`).
Pure Python (hashlib); no torch.

Content policy: files up to :data:`FULL_HASH_LIMIT` bytes are hashed in full. Larger files
(multi-GiB weight shards) are hashed by size plus the first and last MiB plus 16 evenly
spaced 64 KiB blocks: a re-quantized, re-trained or truncated file changes these with
near certainty, while hashing 100 GiB of shards in full would take minutes per run.
File modification times are never used (a copy of the same checkpoint keeps its fingerprint).

A local model folder contributes only the model's own files (:data:`MODEL_FILE_PATTERNS`, top
level): outputs, stores or notes written into the folder leave its fingerprint unchanged. A hub
model without ``@revision`` is pinned by the commit its cached snapshot came from
(:func:`hub_commit`), so a model updated on the hub never reuses stale results.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from flasheval.hashing import stable_hash

__all__ = ["FULL_HASH_LIMIT", "MODEL_FILE_PATTERNS", "RunSettings", "file_digest", "path_digest", "hub_commit",
           "model_fingerprint"]

FULL_HASH_LIMIT = 64 * 2**20
_EDGE = 2**20
_BLOCK = 64 * 2**10
_N_BLOCKS = 16
_COMMIT = re.compile(r"[0-9a-f]{40}")

MODEL_FILE_PATTERNS = (
    "config.json", "generation_config.json",  # architecture, dtype, special token ids
    "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt", "*.model", "*.tiktoken",
    "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.gguf",  # weights
)
"""Top-level file names (``fnmatch`` patterns) that make up a Hugging Face model folder: config,
tokenizer and weights. Nothing else in the folder is part of the fingerprint."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """How a model runs, beyond its files and dtype: what else changes its numbers.

    Examples
    --------
    >>> RunSettings(device_type="cpu", attn_implementation="sdpa", torch_version="2.13.0",
    ...             transformers_version="5.24.0", pad_multiple=16).device_type
    'cpu'
    """

    device_type: str
    """``cpu``, ``cuda`` (ROCm too), ``mps``: each runs its own kernels."""
    attn_implementation: str
    """The attention kernels (``sdpa``, ``eager``, ``flash_attention_2``, ...), as transformers resolved them."""
    torch_version: str
    transformers_version: str
    pad_multiple: int
    """Padded widths are rounded up to a multiple of this (:func:`~flasheval.engine.hf.forward.padded_width`)."""

    def __post_init__(self) -> None:
        for name in ("device_type", "attn_implementation", "torch_version", "transformers_version"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        if self.pad_multiple < 1:
            raise ValueError(f"pad_multiple must be >= 1, got {self.pad_multiple}")


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
    """Digest of a file, or of a model folder's own files: the top-level files matching
    :data:`MODEL_FILE_PATTERNS` (names included), so nothing else written into the folder counts."""
    root = Path(path)
    if root.is_file():
        return file_digest(root)
    entries = [
        (file.name, file_digest(file))
        for file in sorted(root.iterdir())
        if file.is_file() and any(fnmatch.fnmatchcase(file.name, pattern) for pattern in MODEL_FILE_PATTERNS)
    ]
    return stable_hash(entries, n_chars=64)


def hub_commit(repo_id: str, revision: str | None = None, *, cache_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The commit a hub model's cached files come from, read offline from the hub cache.

    Parameters
    ----------
    repo_id
        ``org/name``.
    revision
        A branch, tag or commit; ``None`` means ``main``. A 40-digit commit is returned as is.
    cache_dir
        The hub cache (default: ``huggingface_hub``'s, which honours ``HF_HUB_CACHE`` / ``HF_HOME``).

    Returns
    -------
    str or None
        The commit recorded in ``models--org--name/refs/<revision>``, or ``None`` when the
        cache has no such reference.
    """
    if revision is not None and _COMMIT.fullmatch(revision):
        return revision
    if cache_dir is None:
        from huggingface_hub import constants

        cache_dir = constants.HF_HUB_CACHE
    ref = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}" / "refs" / (revision or "main")
    if not ref.is_file():
        return None
    commit = ref.read_text(encoding="utf-8").strip()
    return commit if _COMMIT.fullmatch(commit) else None


def model_fingerprint(
    *, source: str, content_digest: str | None, revision: str | None, dtype: str, max_length: int, scoring_version: str,
    settings: RunSettings | None = None,
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
    settings
        The run settings (:class:`RunSettings`). ``None`` gives the key of earlier releases, which left them
        out: the one their stores hold, adopted once (:mod:`flasheval.engine.store.adoption`).

    Examples
    --------
    >>> a = model_fingerprint(source="hf", content_digest="x", revision=None, dtype="float32",
    ...                       max_length=2048, scoring_version="1")
    >>> a == model_fingerprint(source="hf", content_digest="x", revision=None, dtype="bfloat16",
    ...                        max_length=2048, scoring_version="1")
    False
    >>> cpu = RunSettings(device_type="cpu", attn_implementation="sdpa", torch_version="2.13.0",
    ...                   transformers_version="5.24.0", pad_multiple=16)
    >>> b = model_fingerprint(source="hf", content_digest="x", revision=None, dtype="float32",
    ...                       max_length=2048, scoring_version="1", settings=cpu)
    >>> from dataclasses import replace
    >>> b != a, b == model_fingerprint(source="hf", content_digest="x", revision=None, dtype="float32",
    ...                                max_length=2048, scoring_version="1", settings=replace(cpu, device_type="cuda"))
    (True, False)
    """
    identity = {
        "source": source,
        "content": content_digest,
        "revision": revision,
        "dtype": dtype,
        "max_length": max_length,
        "scoring_version": scoring_version,
    }
    if settings is not None:
        identity["settings"] = {
            "device_type": settings.device_type,
            "attn_implementation": settings.attn_implementation,
            "torch_version": settings.torch_version,
            "transformers_version": settings.transformers_version,
            "pad_multiple": settings.pad_multiple,
        }
    return stable_hash(identity)
