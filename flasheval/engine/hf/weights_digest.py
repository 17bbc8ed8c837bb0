"""What weights an in-memory model computes with: a cheap digest of them, and the record kept with an identity.

An in-memory model's results are stored under the ``identity`` the caller gives (a run name and step).
The same identity may later name other weights: a restarted run that reaches the same step, a step
name reused, the same object after an optimizer step, another adapter switched on. So the identity
alone never keys results: :func:`weights_digest` summarises what computes, and the digest is part of the
fingerprint (:func:`~flasheval.engine.hf.in_memory.in_memory_fingerprint`). Other weights under a known identity
are therefore scored afresh, never served the earlier weights' results; :func:`note_identity` keeps, in the
store folder, which digests each identity has held (and under which key), and says in one warning when they differ.

What the digest covers: every tensor the forward pass reads, wherever it lives. Each parameter (tied
weights once, in ``named_parameters`` order) and persistent buffer; one offloaded by a device map (``meta``
on its module) is read from the ``weights_map`` of accelerate's hook on its module (CPU memory or the
offload folder), in the module's dtype; each tensor a ``torch.nn.utils.parametrize`` parametrization
computes, as computed; forward (pre-)hooks, by qualified name with the numbers and tensors they hold
(closure cells, a bound object's or callable's attributes, a ``partial``'s arguments; the hooks of
torch.distributed, DeepSpeed and accelerate, which gather, shard or move the weights digested as held, are
left out); PEFT's adapter state: on every PEFT module the active, merged and disabled adapters and their
scaling, and the adapters' configs. A ``PeftModel`` is scored as itself (:func:`~flasheval.engine.hf.in_memory.unwrap`
does not look through it): its parameters are every adapter's, active or not; the state says which compute.
A ``meta`` tensor no hook holds cannot be read: the model is refused in one line (:func:`weights_digest`),
never keyed by names and shapes. Not covered: what a hook computes from state it does not hold (a global,
a file), and code (the same names are taken for the same code).

Per tensor: name, shape and dtype; the wrapping (modulo 2**64) sum of its bytes read as 64-bit
integers; and the bit patterns of 16 elements at fixed, evenly spaced positions. Wrapping integer sums
are exact, so they do not depend on the order of the reduction (thread count, device kernels): the same
weights give the same digest anywhere, on any device (the device type is in the run settings of the
key, not in the digest), and a change to any single element changes its tensor's sum (a float64 sum of
the values would do almost as well, but its last bits depend on the reduction order, and it costs a
conversion of every element). Everything is computed on the tensor's device; one transfer brings the
results to the host. :data:`DIGEST_VERSION` names the formula; digests of another version are never compared.

Sharded parameters are digested as each process holds them: a ``DTensor`` (FSDP2) by its local shard
(``to_local()``), a DeepSpeed ZeRO-3 parameter by its partition (``ds_tensor``), an FSDP1 flat
parameter as it is (the local shard). No collective is run here.

Cost (``benchmarks/weights_digest.py``; figures in ``docs/engine.md``, "Models held in memory"): one
read of every weight (of an offloaded one, from where it lives); on the CPU numpy sums each tensor on
one thread (torch's parallel reductions mostly waited for a busy core on a loaded machine), on a GPU
torch does, with one transfer to the host.
A Llama of SmolLM2-135M's shape (134.5M float32 parameters, 272 tensors) on 2 CPU cores shared with
other jobs: 0.23 s, 0.17 to 0.3% of one forward pass of 32 x 256 tokens (the time of about 25 tokens
of forward passes): about 2% of a placement that stops at its first stage (1,300 tokens), under 1%
from 3,000 tokens, 0.25% at 10,000.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flasheval.atomic import atomic_write_text
from flasheval.errors import InputError
from flasheval.hashing import stable_hash

__all__ = ["weights_digest", "note_identity", "digest_under", "IDENTITIES_DIR", "N_SAMPLES", "DIGEST_VERSION"]

logger = logging.getLogger(__name__)

N_SAMPLES = 16
"""Elements per tensor whose exact bit patterns enter the digest (evenly spaced, fixed positions)."""
IDENTITIES_DIR = "identities"
"""Folder of a store where each identity's record (the digests of the weights it held) is kept."""
DIGEST_VERSION = 2
"""The digest's formula (2: every tensor that computes, offloaded ones read, adapters, hooks; no device type)."""


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


def _offload_sources(model: Any) -> dict[str, tuple[Any, str]]:
    """Where each tensor an accelerate hook offloads lives: full name -> (the hook's ``weights_map``, its key there)."""
    sources: dict[str, tuple[Any, str]] = {}
    for prefix, module in model.named_modules():
        attached = getattr(module, "_hf_hook", None)
        for hook in getattr(attached, "hooks", None) or ([] if attached is None else [attached]):  # SequentialHook
            weights = getattr(hook, "weights_map", None)
            if not getattr(hook, "offload", False) or weights is None:
                continue
            recurse = bool(getattr(hook, "place_submodules", False))
            names = [n for n, _ in module.named_parameters(recurse=recurse)]
            names += [n for n, _ in module.named_buffers(recurse=recurse)]
            for name in names:
                sources.setdefault(f"{prefix}.{name}" if prefix else name, (weights, name))
    return sources


def _persistent_buffers(model: Any) -> Iterator[tuple[str, Any]]:
    """Buffers saved with the model (``persistent=True``); those computed from the config are left out."""
    for prefix, module in model.named_modules():
        skipped = getattr(module, "_non_persistent_buffers_set", set())
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name not in skipped:
                yield (f"{prefix}.{name}" if prefix else name), buffer


def _stored_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    """Parameters (as this process holds them) and persistent buffers; an offloaded one read where it lives.

    Raises
    ------
    InputError
        A tensor on the ``meta`` device that no offload hook holds (its values cannot be read).
    """
    sources = None
    named = [*model.named_parameters(), *(("buffer " + n, b) for n, b in _persistent_buffers(model))]
    for name, tensor in named:
        local = _local(tensor)
        if local.device.type == "meta":
            sources = _offload_sources(model) if sources is None else sources
            weights, key = sources.get(name.removeprefix("buffer "), (None, None))
            try:
                local = weights[key].to(local.dtype) if weights is not None else None
            except (KeyError, OSError, RuntimeError):
                local = None
            if local is None:
                raise InputError(f"{type(model).__name__}'s tensor {name!r} is on the meta device and no offload hook "
                                 "holds its values, so its weights cannot be digested and an identity could be "
                                 "served other weights' results: load it with every weight reachable (on a device "
                                 "or offloaded through accelerate's hooks), place a saved copy (hf:PATH), or give "
                                 "no identity (results kept for this call only)", field="model")
        yield name, local


def _computed_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    """Each tensor a ``torch.nn.utils.parametrize`` parametrization computes, as the forward pass reads it."""
    for prefix, module in model.named_modules():
        parametrizations = getattr(module, "parametrizations", None)
        if parametrizations is None or not hasattr(parametrizations, "keys"):
            continue
        for name in parametrizations.keys():
            yield f"{prefix}.{name} (computed)" if prefix else f"{name} (computed)", getattr(module, name)


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-able data for the digest: containers kept (3 levels), scalars as they are, anything else
    by its type's name (never ``repr``: an object's address would change the digest on every run)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, depth)
    if depth < 3 and isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v, depth + 1) for v in value]
        return sorted(items, key=json.dumps) if isinstance(value, (set, frozenset)) else items
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


_ADAPTER_STATE = ("active_adapters", "merged_adapters", "disable_adapters", "scaling")
"""What a PEFT module says of its adapters beyond their weights: which compute, which are merged, their scaling."""


def _adapter_state(model: Any) -> list[Any]:
    """Every PEFT module's adapter state (:data:`_ADAPTER_STATE`) and adapter configs, in module order."""
    state = []
    for name, module in model.named_modules():
        if not type(module).__module__.startswith("peft."):
            continue
        entry = {}
        for attribute in _ADAPTER_STATE:
            try:
                value = getattr(module, attribute)
            except Exception:  # noqa: BLE001 - a property PEFT refuses on this module (e.g. several adapters)
                continue
            if not callable(value):
                entry[attribute] = _plain(value)
        configs = getattr(module, "peft_config", None)
        if isinstance(configs, dict):
            entry["configs"] = {k: _plain(c.to_dict()) for k, c in configs.items() if hasattr(c, "to_dict")}
        if entry:
            state.append([name, entry])
    return state


def _held(hook: Any) -> list[Any]:
    """What a hook holds beyond its code, lists, tuples and dicts opened one level: closure cells, a bound method's
    object's or a callable object's attributes, a partial's arguments (a module is left out: its tensors are digested
    as the model's, or not at all)."""
    import types

    import torch

    if isinstance(hook, functools.partial):
        held = [*_held(hook.func), *hook.args, *hook.keywords.values()]
    else:
        held = []
        for cell in getattr(getattr(hook, "__func__", hook), "__closure__", None) or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # an empty cell (a variable not assigned yet)
                continue
        owner = getattr(hook, "__self__", None if hasattr(hook, "__code__") else hook)
        if hasattr(owner, "__dict__") and not isinstance(owner, (types.ModuleType, type, torch.nn.Module)):
            held.extend(vars(owner).values())
    opened = [list(v.values()) if isinstance(v, dict) else v for v in held]
    return [item for v in opened for item in (v if isinstance(v, (list, tuple)) else [v])]


_PLACING = ("torch.distributed.", "deepspeed.", "accelerate.")
"""Libraries whose hooks gather, shard or move the weights (FSDP, ZeRO-3, device maps), digested as held: left out."""


def _hook_parts(model: Any, known: set[int]) -> tuple[list[Any], list[tuple[str, Any]]]:
    """Forward (pre-)hooks: ``(descriptions, tensors)``. A hook is named by its qualified name with the numbers it
    holds; the tensors it holds (not the model's own parameters and buffers, digested already) are digested."""
    import torch

    described, tensors = [], []
    for name, module in model.named_modules():
        for kind in ("_forward_pre_hooks", "_forward_hooks"):
            for i, hook in enumerate(getattr(module, kind, {}).values()):
                target = getattr(hook, "func", hook)  # a partial's function
                function = getattr(target, "__func__", target)  # a bound method's
                where = str(getattr(function, "__module__", None) or type(hook).__module__)
                if where.startswith(_PLACING):
                    continue
                values = []
                for j, value in enumerate(_held(hook)):
                    if isinstance(value, torch.Tensor):
                        if id(value) not in known:
                            tensors.append((f"{name}:{kind}[{i}].{j}", value))
                    else:
                        values.append(_plain(value))
                qualname = getattr(function, "__qualname__", None) or type(hook).__qualname__
                described.append([name, kind, f"{where}.{qualname}", values])
    return described, tensors


def weights_digest(model: Any) -> str:
    """A digest (32 hex characters) of what ``model`` computes with, as this process holds it (module docstring).

    Any change to the weights (an optimizer step, an in-place edit of one element, a cast to another
    dtype, another active adapter, a parametrization or hook that computes other weights) changes it; the
    same weights give the same digest on any thread count or device.

    Raises
    ------
    InputError
        A tensor on the ``meta`` device that no offload hook holds: its values cannot be read.

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
        stored = list(_stored_tensors(model))
        own = {id(t) for t in model.parameters()} | {id(b) for b in model.buffers()}
        hooks, held = _hook_parts(model, own)
        for name, tensor in [*stored, *_computed_tensors(model), *held]:
            local = _local(tensor)
            described.append([name, list(local.shape), str(local.dtype).removeprefix("torch.")])
            if local.numel() == 0:
                continue
            bits = _bit_view(local.detach().reshape(-1))
            sums.append(_word_sum(bits))
            samples.append(bits[:: max(1, bits.numel() // N_SAMPLES)][:N_SAMPLES].to(torch.int64))
        sampled = [] if not samples else torch.cat([s.to(samples[0].device) for s in samples]).cpu().tolist()
    return stable_hash({"version": DIGEST_VERSION, "tensors": described, "sums": _on_host(sums), "samples": sampled,
                        "adapters": _adapter_state(model), "hooks": hooks})


def _record_path(store_dir: Path, identity: str) -> Path:
    return store_dir / IDENTITIES_DIR / f"{stable_hash(identity)}.json"


def _read_record(path: Path) -> tuple[list[str], dict[str, str]]:
    """``(digests, keys)`` of an identity's record; empty when it is missing, unreadable or of another digest
    formula (:data:`DIGEST_VERSION`: its digests cannot be compared with this one's)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("version") != DIGEST_VERSION:
            logger.info("identity %r: its record holds digests of another formula: started afresh",
                        record.get("identity"))
            return [], {}
        held, keys = record["digests"], record.get("keys") or {}
        return [str(d) for d in held], {str(k): str(v) for k, v in keys.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [], {}


def note_identity(store_dir: str | os.PathLike[str], identity: str, digest: str, *, key: str | None = None) -> bool:
    """Record that ``identity`` now holds weights ``digest`` (stored under fingerprint ``key``) in store
    ``store_dir``; warn if it held others.

    The record (``<store>/identities/<hash of identity>.json``: the identity, the digest formula, every
    digest it has held, oldest first, and which digest each fingerprint was computed with) serves the warning
    and :func:`digest_under` only: the digest in the fingerprint is what keeps other weights' results apart.
    Written atomically (a temporary file renamed); an unreadable record, or one of another digest formula
    (no weights differ: the formula did), is started afresh. Call it from the process that writes the store.

    Returns
    -------
    bool
        Whether ``identity`` held other weights before and none like these (the warning was given).

    Examples
    --------
    >>> folder = tempfile.mkdtemp()
    >>> note_identity(folder, "run/step-3", "a"), note_identity(folder, "run/step-3", "a")
    (False, False)
    >>> note_identity(folder, "run/step-3", "b", key="k"), note_identity(folder, "run/step-3", "a")
    (True, False)
    >>> digest_under(folder, "run/step-3", "k"), digest_under(folder, "run/step-3", "other key")
    ('b', None)
    """
    path = _record_path(Path(store_dir), identity)
    held, keys = _read_record(path)
    differs = bool(held) and digest not in held
    if differs:
        logger.warning("identity %r: weights differ from those stored under it (digest %s, now %s): scored afresh",
                       identity, held[-1][:12], digest[:12])
    if digest in held and (key is None or keys.get(key) == digest):
        return False
    atomic_write_text(path, json.dumps({"identity": identity, "version": DIGEST_VERSION, "digests": [*held, digest]
                                        if digest not in held else held,
                                        "keys": {**keys, **({} if key is None else {key: digest})}}))
    return differs


def digest_under(store_dir: str | os.PathLike[str], identity: str, key: str) -> str | None:
    """The weights digest ``identity``'s results under fingerprint ``key`` were computed with (:func:`note_identity`),
    ``None`` when its record does not say (no record, another digest formula, another key)."""
    return _read_record(_record_path(Path(store_dir), identity))[1].get(key)
