"""The caller's process group as it is: how many processes, and how long a collective waits before the job ends.

Read, never changed: flasheval creates, times out and destroys no group it did not make (the contract:
:mod:`flasheval.engine.coordination.distributed`). What is read tells a caller under ``distributed="main"`` what its placement
costs the other processes: they wait in their next collective for all of it, up to the group's timeout.
"""

from __future__ import annotations

import sys

__all__ = ["caller_group"]


def caller_group() -> tuple[int, float | None] | None:
    """``(processes, timeout in seconds)`` of the caller's default process group; ``None`` when none is initialised.

    The timeout is the one the group's backend was made with (``init_process_group(timeout=...)``, the Trainer's
    ``ddp_timeout``, NCCL's and gloo's defaults), read where torch exposes it (``None`` where it does not): how long
    a process waits in a collective before the job ends. The group is only read: nothing is created, timed out or
    changed, and no collective runs.
    """
    dist = sys.modules.get("torch.distributed")  # no group exists where it was never imported (a replay)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    group = dist.group.WORLD
    seconds: list[float] = []
    for device in getattr(group, "_device_types", ()):
        try:
            seconds.append(group._get_backend(device).options._timeout.total_seconds())
        except (AttributeError, RuntimeError, ValueError):  # a backend that does not expose its options
            continue
    return dist.get_world_size(), (min(seconds) if seconds else None)
