"""Models larger than one device: accelerate's big-model inference (``device_map``, ``max_memory``, offload).

A model whose weights do not fit one GPU is spread over several (and, when they run out, over CPU
memory and a disk folder) by ``transformers``' ``from_pretrained(device_map=..., max_memory=...,
offload_folder=...)``, which places whole layers with accelerate and moves activations between
them. Three parts, one job each:

* :func:`device_map_from` checks the user's options (a name or an explicit mapping, memory caps, an
  offload folder) in one place and returns a :class:`DeviceMap` (pure: no torch);
* :func:`replica_gpus` and :meth:`ReplicaPlacement.from_pretrained_kwargs` give each replica of a
  data-parallel launch its own slice of the node's GPUs: ``gpus per replica = visible GPUs // local
  processes``; local process ``i`` gets GPUs ``i*k .. i*k+k-1``. GPU numbers a user writes (in an
  explicit mapping or in ``max_memory``) count from the replica's first GPU (pure);
* :func:`plan_replica` reads this machine's GPU count and takes the processes' layout (:class:`ProcessLayout`,
  from the caller's process group; never from the environment), and
  :func:`input_device` finds where a dispatched model's inputs go (torch, imported inside).

The placement never changes the numbers (the same weights run the same layers; only the device
each layer runs on differs), so it is not part of the model fingerprint.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.errors import InputError

__all__ = ["DEVICE_MAP_NAMES", "DeviceMap", "ProcessLayout", "device_map_from", "parse_size", "replica_gpus", "ReplicaPlacement",
           "plan_replica", "load_kwargs", "execution_device", "input_device"]

logger = logging.getLogger(__name__)

DEVICE_MAP_NAMES = ("auto", "balanced", "sequential")
"""How accelerate fills the devices: ``auto`` and ``balanced`` spread the layers evenly over the GPUs,
``sequential`` fills GPU 0 first, then the next; layers that fit no GPU go to CPU memory, then to disk."""

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]+)\s*$")
_GPU = re.compile(r"^(?:cuda:)?(\d+)$")
_PLACES = ("GPU index N (or cuda:N)", "cpu", "disk")

Place = int | str
"""Where a module goes: a GPU index (counted from the replica's first GPU), ``"cpu"`` or ``"disk"``."""


def parse_size(value: object, *, field: str = "--max-memory") -> int:
    """Bytes of ``70GiB``, ``500MB`` (decimal and binary units, any case) or of an integer (bytes).

    Examples
    --------
    >>> parse_size("70GiB"), parse_size("1.5GB"), parse_size(1024)
    (75161927680, 1500000000, 1024)
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or match.group(2).lower() not in _UNITS:
        raise InputError(f"{value!r} is not a size: give a number and a unit, e.g. 70GiB or 500MB", field=field,
                         allowed=("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"))
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _place(value: object, *, field: str, what: str) -> Place:
    """A GPU index, ``cpu`` or ``disk`` from what a user wrote (``0``, ``"0"``, ``"cuda:0"``, ``torch.device``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip() if not isinstance(value, bool) else ""
    gpu = _GPU.match(text)
    if gpu is not None:
        return int(gpu.group(1))
    if text in ("cpu", "disk"):
        return text
    raise InputError(f"{what}: unknown device {value!r}", field=field, allowed=_PLACES)


def _modules(value: Any) -> tuple[tuple[str, Place], ...]:
    """An explicit mapping (a dict, JSON text or a ``.json`` file) as ``(module, place)`` pairs."""
    field = "--device-map"
    if isinstance(value, str):
        text = value
        if not value.lstrip().startswith("{"):
            path = Path(value).expanduser()
            if not path.is_file():
                raise InputError(f"unknown device map {value!r}: give a name, a JSON object of module -> device "
                                 "or a .json file holding one", field=field, allowed=DEVICE_MAP_NAMES)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, ValueError) as exc:  # unreadable, or not UTF-8 text
                raise InputError(f"cannot read the device map ({exc})", path=path, field=field) from None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc})", field=field) from None
    if not isinstance(value, Mapping) or not value:
        raise InputError(f"a device map is a name or a non-empty mapping of module -> device, got {value!r}",
                         field=field, allowed=DEVICE_MAP_NAMES)
    pairs = []
    for module, place in value.items():
        if not isinstance(module, str):
            raise InputError(f"module names are strings, got {module!r}", field=field)
        pairs.append((module, _place(place, field=field, what=f"module {module!r}")))
    return tuple(pairs)


def _max_memory(value: Any) -> tuple[tuple[Place, int], ...]:
    """``0=70GiB,1=70GiB,cpu=200GiB`` (or a mapping) as ``(device, bytes)`` pairs."""
    field = "--max-memory"
    if isinstance(value, str):
        entries = [part.partition("=") for part in value.split(",") if part.strip()]
        bad = [k + s + v for k, s, v in entries if not s]
        if bad or not entries:
            raise InputError(f"{value!r}: give DEVICE=SIZE pairs separated by commas, e.g. 0=70GiB,1=70GiB,cpu=200GiB",
                             field=field)
        keys = [k.strip() for k, _, _ in entries]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise InputError(f"device {twice[0]!r} given twice", field=field)
        value = {k.strip(): v.strip() for k, _, v in entries}
    if not isinstance(value, Mapping) or not value:
        raise InputError(f"give DEVICE=SIZE pairs (a string or a mapping), got {value!r}", field=field)
    pairs: dict[Place, int] = {}
    for key, size in value.items():
        device = _place(key, field=field, what="a memory cap")
        if device == "disk":
            raise InputError("disk has no cap (the offload folder takes what does not fit)", field=field,
                             allowed=("GPU index N", "cpu"))
        if device in pairs:
            raise InputError(f"device {device!r} given twice", field=field)
        pairs[device] = parse_size(size, field=field)
    return tuple(pairs.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceMap:
    """How one replica of a model is spread over devices (made and checked by :func:`device_map_from`)."""

    name: str | None = None
    """``auto``, ``balanced`` or ``sequential`` (:data:`DEVICE_MAP_NAMES`); ``None`` with ``modules``."""
    modules: tuple[tuple[str, Place], ...] = ()
    """An explicit mapping, module name -> GPU index (from the replica's first GPU), ``cpu`` or ``disk``."""
    max_memory: tuple[tuple[Place, int], ...] = ()
    """Caps in bytes per GPU (replica-relative index) and for ``cpu``; a device not named gets its free memory."""
    offload_folder: str | None = None
    """Where layers that fit neither GPUs nor CPU memory are written (one subfolder per process of a launch)."""

    def __post_init__(self) -> None:
        if (self.name is None) == (not self.modules):
            raise InputError("give either a device map name or an explicit mapping", field="--device-map",
                             allowed=DEVICE_MAP_NAMES)
        if self.name is not None and self.name not in DEVICE_MAP_NAMES:
            raise InputError(f"unknown device map {self.name!r}", field="--device-map", allowed=DEVICE_MAP_NAMES)
        if self.modules and self.max_memory:
            raise InputError("caps the devices a device map name (auto, balanced, sequential) fills; an explicit "
                             "mapping already says where every module goes", field="--max-memory")
        if self.offload_folder is not None and Path(self.offload_folder).exists() \
                and not Path(self.offload_folder).is_dir():
            raise InputError(f"{self.offload_folder!r} is a file, not a folder", field="--offload-folder")


def device_map_from(device_map: Any = None, *, max_memory: Any = None, offload_folder: Any = None,
                    device: str | None = None) -> DeviceMap | None:
    """Check the big-model options together; ``None`` when none is given (the model loads on one device).

    Parameters
    ----------
    device_map
        ``auto``, ``balanced``, ``sequential``, a mapping of module name -> device (GPU index, ``cpu``,
        ``disk``), JSON text of one, a ``.json`` file holding one, or a :class:`DeviceMap`.
    max_memory
        Caps per device, ``"0=70GiB,1=70GiB,cpu=200GiB"`` or ``{0: "70GiB", "cpu": "200GiB"}``; with a name only.
    offload_folder
        A folder for layers that fit neither GPUs nor CPU memory (disk offload).
    device
        The ``--device`` option: ``None`` or ``auto`` only (a device map places the model itself).

    Raises
    ------
    InputError
        One line naming the option: an unknown name or device, a malformed size, ``max_memory`` or
        ``offload_folder`` without a device map, a device map with an explicit ``device``.

    Examples
    --------
    >>> device_map_from("auto", max_memory="0=70GiB,cpu=200GiB").max_memory
    ((0, 75161927680), ('cpu', 214748364800))
    >>> device_map_from(None) is None
    True
    """
    if device_map is None:
        for option, value in (("--max-memory", max_memory), ("--offload-folder", offload_folder)):
            if value is not None:
                raise InputError("applies with a device map only (e.g. --device-map auto)", field=option)
        return None
    if device not in (None, "auto"):
        raise InputError(f"conflicts with --device {device}: a device map places the model itself (omit --device; "
                         "to keep it off the GPUs, use --device cpu without a device map)", field="--device-map")
    if isinstance(device_map, DeviceMap):
        if max_memory is not None or offload_folder is not None:
            raise InputError("a DeviceMap carries its own caps and offload folder", field="--device-map")
        return device_map
    if offload_folder is not None and (not isinstance(offload_folder, (str, os.PathLike)) or not str(offload_folder)):
        raise InputError(f"must be a folder, got {offload_folder!r}", field="--offload-folder")
    named = isinstance(device_map, str) and device_map.strip() in DEVICE_MAP_NAMES
    return DeviceMap(name=device_map.strip() if named else None, modules=() if named else _modules(device_map),
                     max_memory=() if max_memory is None else _max_memory(max_memory),
                     offload_folder=None if offload_folder is None else str(Path(offload_folder).expanduser()))


def replica_gpus(n_gpus: int, *, n_local_processes: int = 1, local_process_index: int = 0) -> tuple[int, ...]:
    """The GPUs of one replica: ``n_gpus // n_local_processes`` of them, local process ``i`` taking the ``i``-th slice.

    GPUs left over by the division are not used (the caller says so).

    Raises
    ------
    InputError
        Fewer GPUs than processes on the node (a device map needs at least one GPU per replica).

    Examples
    --------
    >>> replica_gpus(8, n_local_processes=2, local_process_index=1)
    (4, 5, 6, 7)
    >>> replica_gpus(0)
    ()
    """
    if n_local_processes < 1 or not 0 <= local_process_index < n_local_processes:
        raise ValueError(f"local process {local_process_index} of {n_local_processes}")
    if n_gpus == 0:
        return ()
    if n_gpus < n_local_processes:
        raise InputError(f"{n_local_processes} processes per node need at least one GPU each for a device map, this "
                         f"node sees {n_gpus}: launch at most {n_gpus} processes per node", field="--device-map")
    per = n_gpus // n_local_processes
    return tuple(range(local_process_index * per, (local_process_index + 1) * per))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaPlacement:
    """One process's :class:`DeviceMap` on its own GPUs (:func:`plan_replica`); checked when made."""

    device_map: DeviceMap
    gpus: tuple[int, ...]
    """This replica's GPUs (indices among the node's visible GPUs)."""
    n_local_processes: int = 1
    """Processes (replicas) on this node, sharing its CPU memory."""
    process_index: int = 0
    """This process among all processes of the launch (names its offload subfolder)."""
    world_size: int = 1

    def __post_init__(self) -> None:
        own = [d for _, d in self.device_map.modules] + [d for d, _ in self.device_map.max_memory]
        for device in own:
            if isinstance(device, int) and device >= len(self.gpus):
                where = ("this machine sees no GPU" if not self.gpus else
                         f"this replica has {len(self.gpus)} GPU(s), numbered 0 to {len(self.gpus) - 1} from its "
                         f"first (GPU {self.gpus[0]} of the node)")
                option = "--device-map" if self.device_map.modules else "--max-memory"
                raise InputError(f"GPU {device} does not exist: {where}", field=option)

    @property
    def needs_free_memory(self) -> bool:
        """Whether :meth:`from_pretrained_kwargs` needs the devices' free memory (caps to fill in or to share)."""
        return self.device_map.name is not None and (bool(self.device_map.max_memory) or self.n_local_processes > 1)

    @property
    def main_device(self) -> str:
        """What ``dtype="auto"`` is resolved for: the replica's first GPU that holds layers, else ``cpu``."""
        if self.device_map.name is not None:
            return f"cuda:{self.gpus[0]}" if self.gpus else "cpu"
        gpus = [d for _, d in self.device_map.modules if isinstance(d, int)]
        return f"cuda:{self.gpus[min(gpus)]}" if gpus else "cpu"

    def from_pretrained_kwargs(self, free_memory: Mapping[Place, int] | None = None) -> dict[str, Any]:
        """``device_map``, ``max_memory`` and ``offload_folder`` for ``from_pretrained``, on this replica's GPUs.

        ``free_memory``: bytes free per node GPU index and ``cpu`` (accelerate's ``get_max_memory()``),
        needed when :attr:`needs_free_memory`. A device without a cap gets its free memory; CPU memory is
        shared by the node's replicas, so without a cap each gets its share.

        Examples
        --------
        >>> placed = ReplicaPlacement(device_map=DeviceMap(name="auto", max_memory=((0, 70),)), gpus=(4, 5),
        ...                           n_local_processes=2, process_index=1)
        >>> placed.from_pretrained_kwargs({4: 80, 5: 80, "cpu": 100})["max_memory"]
        {4: 70, 5: 80, 'cpu': 50}
        """
        dm = self.device_map
        kwargs: dict[str, Any] = {}
        if dm.modules:
            kwargs["device_map"] = {m: self.gpus[d] if isinstance(d, int) else d for m, d in dm.modules}
        else:
            kwargs["device_map"] = dm.name
            if self.needs_free_memory:
                if free_memory is None:
                    raise ValueError("free_memory is needed to cap or share the devices")
                caps = dict(dm.max_memory)
                memory: dict[Place, int] = {gpu: caps.get(j, free_memory.get(gpu, 0))
                                            for j, gpu in enumerate(self.gpus)}
                memory["cpu"] = caps.get("cpu", free_memory.get("cpu", 0) // self.n_local_processes)
                kwargs["max_memory"] = memory
        if dm.offload_folder is not None:
            folder = Path(dm.offload_folder)
            kwargs["offload_folder"] = str(folder / f"process-{self.process_index}" if self.world_size > 1 else folder)
        return kwargs


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessLayout:
    """Where this process stands among the processes that score together (one process by default).

    Given by the caller's process group (:func:`flasheval.engine.coordination.distributed.layout_of`), never read from the
    environment.
    """

    world_size: int = 1
    process_index: int = 0
    n_local_processes: int = 1
    """Processes on this machine (replicas sharing its GPUs and CPU memory)."""
    local_process_index: int = 0


def plan_replica(device_map: DeviceMap, layout: ProcessLayout | None = None) -> ReplicaPlacement:
    """This process's placement: its slice of the node's visible GPUs under the processes' ``layout``."""
    import torch

    layout = layout or ProcessLayout()
    n_local, local_index = layout.n_local_processes, layout.local_process_index
    rank, world = layout.process_index, layout.world_size
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = replica_gpus(n_gpus, n_local_processes=n_local, local_process_index=local_index)
    if n_gpus % n_local and local_index == 0:
        logger.warning("%d GPUs over %d processes per node: %d per replica, GPUs %s unused", n_gpus, n_local,
                       len(gpus), list(range(len(gpus) * n_local, n_gpus)))
    return ReplicaPlacement(device_map=device_map, gpus=gpus, n_local_processes=n_local, process_index=rank,
                            world_size=world)


def load_kwargs(placement: ReplicaPlacement) -> dict[str, Any]:
    """:meth:`ReplicaPlacement.from_pretrained_kwargs` with this machine's free memory, read now."""
    free = None
    if placement.needs_free_memory:
        from accelerate.utils import get_max_memory

        free = get_max_memory()
    return placement.from_pretrained_kwargs(free)


def execution_device(hf_device_map: Mapping[str, Any], module: str) -> Any:
    """Where ``module`` runs under a dispatched model's ``hf_device_map`` (accelerate's rule).

    Modules placed on ``cpu`` or ``disk`` run on the main device: the map's first GPU when it has one
    (their weights are brought there for each pass), else the CPU.

    Examples
    --------
    >>> execution_device({"model.embed_tokens": "cpu", "model.layers": 1, "lm_head": 2}, "model.embed_tokens")
    1
    >>> execution_device({"": "disk"}, "model.embed_tokens")
    'cpu'
    """
    entries = [k for k in hf_device_map if k == "" or module == k or module.startswith(k + ".")]
    if not entries:
        raise ValueError(f"module {module!r} is not in the device map")
    place = hf_device_map[max(entries, key=len)]
    if place not in ("cpu", "disk"):
        return place
    gpus = [d for d in hf_device_map.values() if d not in ("cpu", "disk")]
    return (min(gpus) if all(isinstance(d, int) for d in gpus) else gpus[0]) if gpus else "cpu"


def input_device(model: Any) -> Any:
    """The ``torch.device`` a model's inputs go to: its input embeddings' (its parameters' when not dispatched)."""
    import torch

    hf_device_map = getattr(model, "hf_device_map", None)
    if not hf_device_map:
        return next(model.parameters()).device
    embedding = model.get_input_embeddings()
    name = next(n for n, m in model.named_modules() if m is embedding)
    place = execution_device(hf_device_map, name)
    return torch.device("cuda", place) if isinstance(place, int) else torch.device(place)
