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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from flasheval.engine.coordination.distributed import CollectiveError, Processes
from flasheval.errors import FlashevalError

__all__ = ["TIMEOUT_ENV", "DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "RENDEZVOUS_TIMEOUT_S", "LaunchEnvironment",
           "read_environment", "launched_processes", "launch"]

TIMEOUT_ENV = "FLASHEVAL_COLLECTIVE_TIMEOUT"
"""Environment variable: seconds a process of a launched command waits for the others at a collective
(default :data:`DEFAULT_TIMEOUT_S`). Set it on every node, like the launcher's own settings. It applies to the
group this module creates only: a group the caller made keeps its own timeout."""
DEFAULT_TIMEOUT_S = 1800.0
"""Long enough for every process to load a large checkpoint between two collectives."""
MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest collective timeout taken (a week): past it a timeout is a typo (``inf``, ``1e300``), not a wait."""
RENDEZVOUS_TIMEOUT_S = 300.0
"""How long the processes a launcher started wait for each other to join (at most the collective timeout): a
launcher starts them together, so a process left alone past it runs in a stray launcher environment."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchEnvironment:
    """The launcher's environment, read once (:func:`read_environment`) and checked."""

    world_size: int
    """``WORLD_SIZE``: the processes the launcher started (1 without a launcher)."""
    rank: int | None = None
    """``RANK``: this process among them (``None``: one process)."""
    master: str | None = None
    """``MASTER_ADDR:MASTER_PORT``, where the processes meet (``None``: one process)."""
    local_rank: int = 0
    """``LOCAL_RANK``: this process among those of its machine (its GPU)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """``$FLASHEVAL_COLLECTIVE_TIMEOUT``."""
    cpu: bool = False
    """``ACCELERATE_USE_CPU`` (``accelerate launch --cpu``)."""


def _whole(environ: Mapping[str, str], name: str, default: int | None, low: int, high: int | None = None
           ) -> int | None:
    """The variable as a whole number in ``[low, high]``; ``default`` when unset or empty."""
    text = environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise FlashevalError(f"environment variable {name}: must be a whole number {bound}, got {text!r}")
    return value


def _timeout_s(environ: Mapping[str, str]) -> float:
    text = environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise FlashevalError(f"environment variable {TIMEOUT_ENV}: must be a number of seconds > 0, got {text!r}")
    if not value <= MAX_TIMEOUT_S:  # inf, 1e300: an OverflowError in timedelta, or a wait of centuries
        raise FlashevalError(f"environment variable {TIMEOUT_ENV}: must be at most {MAX_TIMEOUT_S:.0f} seconds (a "
                             f"week), got {text!r}")
    return value


def read_environment(environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
    """The launcher's environment (``os.environ`` unless given), every variable checked, in one line naming it.

    Without a launcher (``WORLD_SIZE`` unset or 1) only the collective timeout is read. Under one, ``RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` are read too; where flasheval makes the group they must be set (a
    ``WORLD_SIZE`` alone is a stray one): :func:`launch` says so in one line.
    """
    environ = os.environ if environ is None else environ
    world_size = _whole(environ, "WORLD_SIZE", 1, 1) or 1
    timeout = _timeout_s(environ)
    if world_size == 1:
        return LaunchEnvironment(world_size=1, timeout_s=timeout)
    address, port = environ.get("MASTER_ADDR", "").strip(), _whole(environ, "MASTER_PORT", None, 1, 65535)
    return LaunchEnvironment(world_size=world_size, rank=_whole(environ, "RANK", None, 0, world_size - 1),
                             master=f"{address}:{port}" if address and port is not None else None,
                             local_rank=_whole(environ, "LOCAL_RANK", 0, 0), timeout_s=timeout,
                             cpu=environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"))


def launched_processes() -> int:
    """The processes the launcher started (its ``WORLD_SIZE``; 1 without a launcher)."""
    return read_environment().world_size


def _create_group(env: LaunchEnvironment) -> None:
    """The default group of this launch: gloo on CPU (or under ``accelerate launch --cpu``), else NCCL on the
    local process's GPU. The processes meet within :data:`RENDEZVOUS_TIMEOUT_S` (at most the collective timeout),
    or a line says which did not come, rather than waiting the whole collective timeout for peers that may not
    exist."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if env.rank is None or env.master is None:
        missing = ["RANK"] * (env.rank is None) + ["MASTER_ADDR", "MASTER_PORT"] * (env.master is None)
        raise FlashevalError(f"environment variables {', '.join(missing)}: not all set, but WORLD_SIZE="
                             f"{env.world_size} says a launcher started several processes (torchrun and accelerate "
                             "launch set RANK, MASTER_ADDR and MASTER_PORT too); launch with one of them, or unset "
                             "WORLD_SIZE to run on this process alone")
    timeout = timedelta(seconds=env.timeout_s)
    meet = min(env.timeout_s, RENDEZVOUS_TIMEOUT_S)
    cpu = env.cpu or not torch.cuda.is_available()
    if not cpu:
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    try:
        store, rank, world_size = next(dist.rendezvous("env://", timeout=timedelta(seconds=meet)))
    except (RuntimeError, ValueError, OSError, TimeoutError) as exc:  # DistStoreError, DistNetworkError: one line
        reason = " ".join(str(exc).split())[:200]
        raise FlashevalError(f"the launcher's environment (WORLD_SIZE={env.world_size}, RANK={env.rank}, "
                             f"MASTER_ADDR:MASTER_PORT={env.master}) names {env.world_size} processes, but they did "
                             f"not all meet within {meet:g} s ({type(exc).__name__}: {reason}): a stray launcher "
                             "environment? Unset WORLD_SIZE to run on this process alone, or start every process "
                             "(torchrun, accelerate launch)") from None
    store.set_timeout(timeout)
    dist.init_process_group("gloo" if cpu else "nccl", store=store, rank=rank, world_size=world_size, timeout=timeout)


@contextmanager
def launch(enabled: bool = True) -> Iterator[str]:
    """The ``distributed`` value of a command's call: ``"all"`` under a launcher of several processes, else ``"main"``.

    Creates the default group when the launcher started several processes and none exists, and destroys it on
    leaving once every process got there (not after a failure: the others may be inside another collective, and
    the launcher ends them). A failed collective's line then says that a rerun resumes: the command's results
    store keeps every finished round. ``enabled=False``: ``"main"``, whatever the environment (commands that run
    no model).
    """
    env = read_environment() if enabled else None  # every variable checked, once, before any group is made
    if env is None or env.world_size == 1:
        yield "main"
        return
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        _create_group(env)
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
