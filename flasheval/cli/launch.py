"""The command line under a launcher of several processes (``accelerate launch``, ``torchrun``).

The one place in flasheval that reads the launcher's environment (``WORLD_SIZE``, ``LOCAL_RANK``) and the one
place that creates and destroys a process group: a command launched with several processes runs with
``distributed="all"`` (:mod:`flasheval.engine.coordination.distributed`) on the default group, made here when none exists
(gloo on CPU, NCCL on GPUs) with a collective timeout of ``$FLASHEVAL_COLLECTIVE_TIMEOUT`` seconds, and
destroyed here at the end, after every process has finished. A group that already existed (``main()`` called
by a script that made one) is used and left as it is. Without a launcher a command runs with ``"main"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from flasheval.engine.coordination.distributed import CollectiveError, Processes
from flasheval.errors import FlashevalError

__all__ = ["TIMEOUT_ENV", "DEFAULT_TIMEOUT_S", "launched_processes", "launch"]

TIMEOUT_ENV = "FLASHEVAL_COLLECTIVE_TIMEOUT"
"""Environment variable: seconds a process of a launched command waits for the others at a collective
(default :data:`DEFAULT_TIMEOUT_S`). Set it on every node, like the launcher's own settings. It applies to the
group this module creates only: a group the caller made keeps its own timeout."""
DEFAULT_TIMEOUT_S = 1800.0
"""Long enough for every process to load a large checkpoint between two collectives."""


def launched_processes() -> int:
    """The processes the launcher started (its ``WORLD_SIZE``; 1 without a launcher)."""
    text = os.environ.get("WORLD_SIZE", "1")
    try:
        return max(1, int(text))
    except ValueError:
        raise FlashevalError(f"environment variable WORLD_SIZE: must be a whole number, got {text!r}") from None


def _timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise FlashevalError(f"environment variable {TIMEOUT_ENV}: must be a number of seconds > 0, got {text!r}")
    return value


def _create_group() -> None:
    """The default group of this launch: gloo on CPU (or under ``accelerate launch --cpu``), else NCCL on the
    local process's GPU."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=_timeout_s())
    cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available()
    if not cpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group("gloo" if cpu else "nccl", timeout=timeout)


@contextmanager
def launch(enabled: bool = True) -> Iterator[str]:
    """The ``distributed`` value of a command's call: ``"all"`` under a launcher of several processes, else ``"main"``.

    Creates the default group when the launcher started several processes and none exists, and destroys it on
    leaving once every process got there (not after a failure: the others may be inside another collective, and
    the launcher ends them). A failed collective's line then says that a rerun resumes: the command's results
    store keeps every finished round. ``enabled=False``: ``"main"``, whatever the environment (commands that run
    no model).
    """
    if not enabled or launched_processes() == 1:
        yield "main"
        return
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        _create_group()  # a malformed timeout is refused first, in one line
    try:
        yield "all"
    except CollectiveError as exc:
        raise CollectiveError(f"{exc}; rerun the same command to resume") from None
    if created:
        state = Processes(num_processes=dist.get_world_size(), process_index=dist.get_rank())
        try:
            state.wait_for_everyone("the final barrier")
        except CollectiveError as exc:
            raise CollectiveError(f"{exc}; rerun the same command to resume") from None
        dist.destroy_process_group()
