"""What weights an in-memory model holds: a cheap digest of them, and the record kept with an identity.

An in-memory model's results are stored under the ``identity`` the caller gives (a run name and step).
The same identity may later name other weights: a restarted run that reaches the same step, a step
name reused, the same object after an optimizer step. So the identity alone never keys results:
:func:`weights_digest` summarises the weights, and the digest is part of the fingerprint
(:func:`~flasheval.engine.in_memory.in_memory_fingerprint`). Other weights under a known identity are
therefore scored afresh, never served the earlier weights' results; :func:`note_identity` keeps, in the
store folder, which digests each identity has held, and says in one warning when they differ.

The digest, per parameter (tied weights once, in ``named_parameters`` order): name, shape and dtype;
the wrapping (modulo 2**64) sum of the parameter's bytes read as 64-bit integers; and the bit patterns
of 16 elements at fixed, evenly spaced positions. Wrapping integer sums are exact, so they do not
depend on the order of the reduction (thread count, device kernels): the same weights give the same
digest anywhere, and a change to any single element changes its parameter's sum (a float64 sum of the
values would do almost as well, but its last bits depend on the reduction order, and it costs a
conversion of every element). Everything is computed on the model's device; one transfer brings the
results to the host.

Sharded parameters are digested as each process holds them: a ``DTensor`` (FSDP2) by its local shard
(``to_local()``), a DeepSpeed ZeRO-3 parameter by its partition (``ds_tensor``), an FSDP1 flat
parameter as it is (the local shard). No collective is run here. Parameters on the ``meta`` device
(offloaded by a device map) count by name, shape and dtype only.

Cost (``benchmarks/weights_digest.py``; figures in ``docs/engine.md``, "Models held in memory"): one
read of every weight; on the CPU numpy sums each parameter on one thread (torch's parallel reductions
mostly waited for a busy core on a loaded machine), on a GPU torch does, with one transfer to the host.
A Llama of SmolLM2-135M's shape (134.5M float32 parameters, 272 tensors) on 2 CPU cores shared with
other jobs: 0.23 s, 0.17 to 0.3% of one forward pass of 32 x 256 tokens (the time of about 25 tokens
of forward passes): about 2% of a placement that stops at its first stage (1,300 tokens), under 1%
from 3,000 tokens, 0.25% at 10,000.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from flasheval.hashing import stable_hash

__all__ = ["weights_digest", "note_identity", "IDENTITIES_DIR", "N_SAMPLES"]

logger = logging.getLogger(__name__)

N_SAMPLES = 16
"""Elements per parameter whose exact bit patterns enter the digest (evenly spaced, fixed positions)."""
IDENTITIES_DIR = "identities"
"""Folder of a store where each identity's record (the digests of the weights it held) is kept."""


def _local(parameter: Any) -> Any:
    """The part of ``parameter`` this process holds (module docstring: DTensor, ZeRO-3, plain)."""
    partition = getattr(parameter, "ds_tensor", None)  # DeepSpeed ZeRO-3: the data is this partition
    if partition is not None:
        return partition
    to_local = getattr(parameter, "to_local", None)  # a DTensor (FSDP2 / tensor parallel)
    return to_local() if callable(to_local) else parameter


def _bit_view(flat: Any) -> Any:
    """``flat`` (1-D) reinterpreted as signed integers of its element size (bytes for 1-byte dtypes)."""
    import torch

    by_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if flat.dtype == torch.bool:
        return flat.to(torch.uint8)
    return flat.view(by_size[flat.element_size()])


def _word_sum(bits: Any) -> Any:
    """The sum, modulo 2**64, of ``bits``'s bytes read as 64-bit words (as its own elements when they do not fit).

    Wrapping integer addition is associative, so the sum is exact whatever the order of the reduction;
    changing any one word changes it. On the CPU numpy sums (one thread: no waiting on a busy core),
    giving an ``int``; elsewhere torch, giving a 0-d tensor on the device (its int64 sum is vectorised,
    a sum of narrower integers into int64 is not). Either is the same number modulo 2**64.
    """
    import torch

    if bits.device.type == "cpu":
        import numpy as np

        array = bits.numpy()
        try:
            words = array.view(np.uint64)
        except ValueError:  # a size that is no whole number of 8-byte words
            words = array.astype(np.int64).view(np.uint64)
        return int(words.sum(dtype=np.uint64))
    if bits.numel() * bits.element_size() % 8:  # a size that is no whole number of 8-byte words
        return bits.sum(dtype=torch.int64)
    try:
        return bits.view(torch.int64).sum()
    except RuntimeError:  # an offset into its storage that is not 8-byte aligned
        return bits.clone().view(torch.int64).sum()


def _on_host(sums: list[Any]) -> list[int]:
    """Every sum as an ``int`` modulo 2**64; the device ones brought over in one transfer."""
    import torch

    on_device = [s for s in sums if not isinstance(s, int)]
    if on_device:
        values = iter(torch.stack([s.to(on_device[0].device) for s in on_device]).cpu().tolist())
        sums = [s if isinstance(s, int) else next(values) for s in sums]
    return [int(s) % 2**64 for s in sums]


def weights_digest(model: Any) -> str:
    """A digest (32 hex characters) of ``model``'s parameters as this process holds them (module docstring).

    Any change to the weights (an optimizer step, an in-place edit of one element, a cast to another
    dtype) changes it; the same weights give the same digest on any thread count or device.

    Examples
    --------
    >>> import torch
    >>> layer = torch.nn.Linear(3, 2)
    >>> before = weights_digest(layer)
    >>> before == weights_digest(layer)
    True
    >>> with torch.no_grad():
    ...     layer.weight[1, 2] += 1e-6
    >>> before == weights_digest(layer)
    False
    """
    import torch

    described, sums, samples = [], [], []
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            local = _local(parameter)
            described.append([name, list(local.shape), str(local.dtype).removeprefix("torch."), local.device.type])
            if local.device.type == "meta" or local.numel() == 0:
                continue
            bits = _bit_view(local.detach().reshape(-1))
            sums.append(_word_sum(bits))
            samples.append(bits[:: max(1, bits.numel() // N_SAMPLES)][:N_SAMPLES].to(torch.int64))
        sampled = [] if not samples else torch.cat([s.to(samples[0].device) for s in samples]).cpu().tolist()
    return stable_hash({"parameters": described, "sums": _on_host(sums), "samples": sampled})


def _record_path(store_dir: Path, identity: str) -> Path:
    return store_dir / IDENTITIES_DIR / f"{stable_hash(identity)}.json"


def note_identity(store_dir: str | os.PathLike[str], identity: str, digest: str) -> bool:
    """Record that ``identity`` now holds weights ``digest`` in store ``store_dir``; warn if it held others.

    The record (``<store>/identities/<hash of identity>.json``: the identity and every digest it has held,
    oldest first) serves the warning only: the digest in the fingerprint is what keeps other weights'
    results apart. Written atomically (a temporary file renamed); an unreadable record is started afresh.
    Call it from the process that writes the store.

    Returns
    -------
    bool
        Whether ``identity`` held other weights before and none like these (the warning was given).

    Examples
    --------
    >>> folder = tempfile.mkdtemp()
    >>> note_identity(folder, "run/step-3", "a"), note_identity(folder, "run/step-3", "a")
    (False, False)
    >>> note_identity(folder, "run/step-3", "b"), note_identity(folder, "run/step-3", "a")
    (True, False)
    """
    path = _record_path(Path(store_dir), identity)
    try:
        held = json.loads(path.read_text(encoding="utf-8"))["digests"]
        held = [str(d) for d in held] if isinstance(held, list) else []
    except (OSError, ValueError, KeyError, TypeError):
        held = []
    if digest in held:
        return False
    if held:
        logger.warning("identity %r: weights differ from those stored under it (digest %s, now %s): scored afresh",
                       identity, held[-1][:12], digest[:12])
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump({"identity": identity, "digests": [*held, digest]}, out)
    os.replace(temporary, path)
    return bool(held)
