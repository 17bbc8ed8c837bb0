"""The Ray executor's options, how ``executor=`` is read, and the checks made before a cluster is used.

``executor`` on :func:`flasheval.sweep`, :func:`flasheval.build_reference` and :func:`flasheval.watch` is ``None``
or ``"in-process"`` (this process, the default), ``"ray"`` (:class:`RayExecutor` with its defaults) or a
:class:`RayExecutor` with options. Every check that needs no cluster runs in :func:`resolve_executor`; those that
need it (``ray`` installed, the address reachable, a node with the resources of one model) run in
:func:`check_cluster` before any model is opened, each a one-line :class:`~flasheval.errors.InputError`.
"""

from __future__ import annotations

import importlib.util
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from flasheval.errors import InputError

__all__ = ["RayExecutor", "EXECUTORS", "INSTALL_HINT", "resolve_executor", "require_ray", "check_reachable",
           "weights_bytes", "fitting_slots"]

EXECUTORS = ("in-process", "ray")
"""The executors ``executor=`` names (``--executor``)."""

INSTALL_HINT = 'pip install -e ".[ray]"  (or: pip install "ray>=2.60")'

GIB = 2**30


def _number(value: Any, field: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
            or (positive and value == 0):
        raise InputError(f"must be a number {'>' if positive else '>='} 0, got {value!r}", field=field)
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RayExecutor:
    """Serve models on a Ray cluster: one actor per loaded model, on the resources given here.

    The driver (the calling process) keeps every decision and writes every file; each actor holds one model,
    opened from its spec, and computes what the driver asks (docs/cluster.md).
    """

    address: str | None = None
    """The cluster (``HOST:PORT`` of its head, ``ray://HOST:10001``, ``auto``); ``None``: the one ``RAY_ADDRESS``
    names, else a Ray started on this machine for the call (Ray's own rule). A driver already connected
    (``ray.init`` called) uses its cluster."""
    num_cpus: float = 1.0
    """CPUs reserved per model (its actor); torch in the actor runs that many threads."""
    num_gpus: float = 0.0
    """GPUs per model: 1 for a model that fits one GPU; 0 for CPU models."""
    memory_gb: float | None = None
    """Memory reserved per model, in GiB; ``None``: the size of the largest model's weight files (0 where unknown,
    a hub id)."""
    max_models: int | None = None
    """Most models loaded at once (actors); ``None``: as many as the cluster's nodes fit, at most one per model."""
    max_retries: int = 2
    """Times a job whose actor (or node) died is served again on another actor before the run stops."""
    progress: bool | None = None
    """The driver's progress bar (requests done / total, models loaded): ``None`` when stderr is a terminal."""

    def __post_init__(self) -> None:
        if self.address is not None and (not isinstance(self.address, str) or not self.address.strip()):
            raise InputError(f"expected HOST:PORT, ray://HOST:PORT or auto, got {self.address!r}",
                             field="--ray-address")
        _number(self.num_cpus, "num_cpus", positive=True)
        _number(self.num_gpus, "num_gpus", positive=False)
        if self.memory_gb is not None:
            _number(self.memory_gb, "memory_gb", positive=False)
        for field, value, least in (("max_models", self.max_models, 1), ("max_retries", self.max_retries, 0)):
            if value is None and field == "max_models":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"must be an integer >= {least}, got {value!r}", field=field)
        if self.progress is not None and not isinstance(self.progress, bool):
            raise InputError(f"must be True, False or None, got {self.progress!r}", field="progress")

    def describe(self) -> str:
        """For a start line: ``on Ray (127.0.0.1:6379, 1 CPU per model)``."""
        each = ", ".join(f"{n:g} {what}" for n, what in ((self.num_cpus, "CPU"), (self.num_gpus, "GPU")) if n)
        return f"on Ray ({self.address or 'default cluster'}, {each} per model)"


def resolve_executor(value: Any, *, field: str = "executor") -> RayExecutor | None:
    """``None`` for this process (``None``, ``"in-process"``), a :class:`RayExecutor` for ``"ray"`` or one given;
    anything else, or ``ray`` not installed, refused in one line. Nothing is imported or contacted."""
    if value is None or value == "in-process":
        return None
    if value != "ray" and not isinstance(value, RayExecutor):
        raise InputError(f"unknown executor {value!r}", field=field, allowed=[*EXECUTORS, "RayExecutor(...)"])
    if importlib.util.find_spec("ray") is None:  # found, not imported: before any file is read
        raise InputError(f"the Ray executor needs ray, which is not installed; install it with: {INSTALL_HINT}",
                         field=field)
    return RayExecutor() if value == "ray" else value


def require_ray() -> ModuleType:
    """``ray``, imported; a one-line :class:`~flasheval.errors.InputError` with the install command if absent."""
    try:
        import ray
    except ImportError:
        raise InputError(f"the Ray executor needs ray, which is not installed; install it with: {INSTALL_HINT}",
                         field="--executor") from None
    return ray


def check_reachable(address: str | None, *, timeout: float = 5.0) -> None:
    """Refuse an address whose head cannot be reached (a TCP connect), before Ray tries for minutes."""
    if address is None or address in ("auto", "local"):
        return
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InputError(f"expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}", field="--ray-address")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); start it with "
                         "'ray start --head' or give the head's address", field="--ray-address") from None


def weights_bytes(target: str) -> int:
    """Bytes of a local model's weight files (a folder's ``*.safetensors`` / ``*.bin`` / ``*.pt``, or one file such
    as a ``.gguf``); 0 where the target is not a local path (a hub id)."""
    path = Path(target).expanduser()
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return 0
    return sum(p.stat().st_size for p in path.iterdir()
               if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt", ".gguf"))


def fitting_slots(nodes: list[dict[str, Any]], *, num_cpus: float, num_gpus: float, memory: float) -> int:
    """How many models the alive ``nodes`` (``ray.nodes()``) hold at once, each taking the resources given.

    Examples
    --------
    >>> nodes = [{"Alive": True, "Resources": {"CPU": 4.0, "memory": 8 * GIB}},
    ...          {"Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0, "memory": 8 * GIB}}]
    >>> fitting_slots(nodes, num_cpus=1, num_gpus=0, memory=3 * GIB), fitting_slots(nodes, num_cpus=1, num_gpus=1, memory=0)
    (4, 1)
    """
    total = 0
    for node in nodes:
        if not node.get("Alive"):
            continue
        have = node.get("Resources", {})
        fits = [have.get("CPU", 0.0) / num_cpus]
        if num_gpus:
            fits.append(have.get("GPU", 0.0) / num_gpus)
        if memory:
            fits.append(have.get("memory", 0.0) / memory)
        total += int(math.floor(min(fits) + 1e-9))
    return total


def largest_node(nodes: list[dict[str, Any]]) -> str:
    """The alive nodes' most CPUs, GPUs and memory, for a message."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    most = {k: max((r.get(k, 0.0) for r in alive), default=0.0) for k in ("CPU", "GPU", "memory")}
    return (f"{len(alive)} node{'s' if len(alive) != 1 else ''}, the largest with {most['CPU']:g} CPUs, "
            f"{most['GPU']:g} GPUs, {most['memory'] / GIB:.1f} GiB memory")
