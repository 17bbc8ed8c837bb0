"""Data parallelism over the caller's process group: split work across processes, gather by id.

The contract (``docs/engine.md``, "Several processes"): every command that scores a model takes
``distributed``: ``"main"`` (the default: only the calling process scores, no collective, torch.distributed
is never touched, so rank 0 of a training job may call alone) or ``"all"`` (every process of the existing
default ``torch.distributed`` group calls; the work is split; every process gets the same result).
flasheval never creates, times out or destroys a process group here; the command line's launcher
(:mod:`flasheval.cli.launch`) is the one place that makes (and ends) one, under ``accelerate launch`` or
``torchrun``. :func:`processes` turns the keyword into the :class:`Processes` every layer below passes on
(``None``: one process).

Under ``"all"`` every process holds the same request list and a copy of the model. The work is cut into
units: the backend's own planned batches for log-likelihoods (``plan_batches``: each request is scored in the
same batch, with the same padding, whatever the number of processes: results are identical on 1 and N
processes), chunks of whole examples for generation and rolling log-likelihoods. Units are dealt round-robin;
after each round every process contributes ``(request id, result)`` pairs to ``all_gather_object`` and the
pairs are matched back to requests by id (never by position), duplicates dropped. ``on_results`` then sees
every finished pair on every process; a caching wrapper on top stores them, and only the main process's store
writes. A model whose forward is itself collective (FSDP, DeepSpeed ZeRO-3:
:func:`~flasheval.engine.hf.in_memory.is_sharded`) runs in lockstep, as its backend says
(:meth:`~flasheval.engine.base.Backend.lockstep`): every process joins every forward pass, one that ran out of
work joins with a dummy pass (:mod:`flasheval.engine.coordination.lockstep`).

Processes need not share a filesystem: the main process's store is the one view every process plans from
(:meth:`DistributedBackend.from_main` broadcasts what it holds), and every result computed anywhere reaches the
main process through the gather and is written there. A process that dies or stops answering ends the others
at the group's own timeout with one line (:class:`CollectiveError`); every round gathered before is already in
the main process's store.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from flasheval.engine.base import Backend, OnResults, Wrapper, example_units
from flasheval.engine.hf.device_map import ProcessLayout
from flasheval.engine.progress_bar import progress_bar
from flasheval.engine.store.results import CachedBackend, ResultStore
from flasheval.engine.store.adoption import adopt_shard
from flasheval.errors import BackendError, FlashevalError, InputError
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Request,
    Result,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["DISTRIBUTED", "Processes", "CollectiveError", "check_distributed", "processes", "DistributedBackend",
           "request_id", "from_main", "main_decides", "open_shared_store", "cached_runner", "layout_of",
           "is_main"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DISTRIBUTED = ("main", "all")
"""The values of ``distributed``: ``main`` (only the calling process scores; no collective) and ``all`` (every
process of the existing default process group calls; the work is split)."""


class CollectiveError(BackendError):
    """A collective of ``distributed="all"`` failed: another process died, failed or stopped answering."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Processes:
    """The processes of the caller's default ``torch.distributed`` group that score together (``distributed="all"``).

    Made by :func:`processes`; layers below take it as ``state`` (``None``: one process, no collective).
    """

    num_processes: int
    process_index: int
    """This process's rank in the default group."""
    local_num_processes: int = 1
    """Processes of the group on this machine (found once, by gathering host names)."""
    local_process_index: int = 0

    @property
    def is_main_process(self) -> bool:
        """Rank 0: the process that writes stores, records and references."""
        return self.process_index == 0

    def wait_for_everyone(self, what: str = "a barrier") -> None:
        """A barrier on the default group (its failure: one line, :class:`CollectiveError`)."""
        import torch.distributed as dist

        with collective(self, what):
            dist.barrier()


def check_distributed(distributed: object) -> str:
    """``distributed`` checked at an API entry, in one line: an unknown value (naming the allowed ones), or
    ``"all"`` without an initialised default process group (saying how to get one). Asks nothing of
    torch.distributed for ``"main"``."""
    if not isinstance(distributed, str) or distributed not in DISTRIBUTED:
        raise InputError(f"unknown value {distributed!r}", field="distributed", allowed=DISTRIBUTED)
    if distributed == "all":
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch is a dependency of every live path
            dist = None  # type: ignore[assignment]
        if dist is None or not dist.is_available() or not dist.is_initialized():
            raise InputError("'all' needs the caller's torch.distributed process group, and none is initialised: "
                             "call torch.distributed.init_process_group() on every process first, pass "
                             "distributed='main' to score on the calling process only, or run the command under "
                             "accelerate launch / torchrun", field="distributed")
    return distributed


def processes(distributed: str) -> Processes | None:
    """The :class:`Processes` that score a call with ``distributed``; ``None`` for one process.

    ``"main"``: ``None``, and torch.distributed is not touched (not imported, not asked). ``"all"``: every
    process of the existing default group, which must exist (one line otherwise, :func:`check_distributed`); a
    group of one process is ``None`` too. Collective under ``"all"`` (one gather of host names).
    """
    if check_distributed(distributed) == "main":
        return None
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1:
        return None
    import socket

    state = Processes(num_processes=world, process_index=rank)
    hosts: list[Any] = [None] * world
    with collective(state, "the first collective of distributed='all' (finding the processes of each machine)",
                    hint="distributed='all' is collective: every process of the group must make this same call at "
                         "the same point (each process's Trainer callback; a training loop's call outside any "
                         "`if rank == 0`); to place from one process alone, use distributed='main'"):
        dist.all_gather_object(hosts, socket.gethostname())
    here = [r for r, host in enumerate(hosts) if host == hosts[rank]]
    return Processes(num_processes=world, process_index=rank, local_num_processes=len(here),
                     local_process_index=here.index(rank))


def layout_of(state: Any) -> ProcessLayout:
    """The :class:`~flasheval.engine.hf.device_map.ProcessLayout` of ``state`` (one process for ``None``)."""
    if state is None:
        return ProcessLayout()
    return ProcessLayout(world_size=state.num_processes, process_index=state.process_index,
                         n_local_processes=getattr(state, "local_num_processes", 1),
                         local_process_index=getattr(state, "local_process_index", 0))


def is_main(state: Any) -> bool:
    """Whether this process writes (one process, or rank 0 of the group)."""
    return state is None or bool(state.is_main_process)


@contextmanager
def collective(state: Any, what: str, *, hint: str | None = None) -> Iterator[None]:
    """Turn a failed or timed-out collective into one line saying what happened and what is kept (``hint``: the
    likely cause, said first, for a collective whose failure has one)."""
    try:
        yield
    except RuntimeError as exc:  # torch.distributed.DistBackendError and gloo/NCCL errors are RuntimeErrors
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        cause = (f"{hint}; or another process died" if hint is not None
                 else "another process died, failed or stopped answering")
        raise CollectiveError(
            f"process {state.process_index} of {state.num_processes} lost the other processes during {what} "
            f"({reason}): {cause}, and the wait ended at the process group's own timeout (set by whoever created "
            "the group); every round finished before is in the main process's results store") from None


def from_main(state: Any, value: T, *, what: str = "a broadcast from the main process") -> T:
    """The main process's ``value`` on every process (pickled broadcast; as is on one process)."""
    if state is None or state.num_processes == 1:
        return value
    from torch.distributed import broadcast_object_list

    box = [value if state.is_main_process else None]
    with collective(state, what):
        broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def main_decides(state: Any, decide: Callable[[], T], *, what: str) -> T:
    """Run ``decide`` on the main process only and hand its result, or its refusal, to every process.

    For what must be decided once from the main process's files (a run folder's settings, a
    store's contents): every process then raises the same one-line error, or goes on with the
    same value, instead of some waiting forever for one that stopped.
    """
    outcome: tuple[bool, Any] = (True, None)
    if state is None or state.is_main_process:
        try:
            outcome = (True, decide())
        except FlashevalError as exc:
            if state is None or state.num_processes == 1:
                raise
            from_main(state, (False, str(exc)), what=what)
            raise
    ok, value = from_main(state, outcome, what=what)
    if not ok:
        raise FlashevalError(value)
    return value


def open_shared_store(store_dir: Path, fingerprint: str, state: Any, *, previous: str | None = None) -> ResultStore:
    """The results store of ``store_dir``: written by the main process, read by the others.

    The main process opens (and repairs) it before any other reads its own copy (which on a
    cluster without a shared filesystem may be empty or different: the plan comes from the
    main process's, see :meth:`DistributedBackend.from_main`). It first adopts the results an
    earlier release stored under the model's ``previous`` key (:func:`~flasheval.engine.store.adoption.adopt_shard`).
    """
    store = None
    if state is None or state.is_main_process:
        if previous is not None:
            adopt_shard(store_dir, previous=previous, fingerprint=fingerprint)
        store = ResultStore(store_dir, fingerprint=fingerprint)
    if state is not None and state.num_processes > 1:
        state.wait_for_everyone("opening the results store")
    return store if store is not None else ResultStore(store_dir, fingerprint=fingerprint, writer=False)


def cached_runner(backend: Backend, store_dir: Path, state: Any, *,
                  progress: bool | None = None) -> tuple[CachedBackend, ResultStore]:
    """``backend`` data-parallel over ``state``'s processes, behind the results store of ``store_dir``.

    The one way every command runs a model: ``evaluate``, ``reference build``, ``place`` and
    ``sweep``. ``progress``: the per-batch bar of :class:`DistributedBackend` (``None``: when stderr
    is a terminal). Close the returned store when done.
    """
    store = open_shared_store(store_dir, backend.fingerprint, state, previous=backend.info.previous_fingerprint)
    runner = DistributedBackend(backend, state=state, progress=progress)
    return CachedBackend(runner, store, share=runner.from_main), store


def request_id(request: Request | Result) -> tuple[str, str, int]:
    """``(task_name, example_id, choice_index)``: how gathered results find their request."""
    return (request.task_name, request.example_id, getattr(request, "choice_index", 0))


class DistributedBackend(Wrapper):
    """Run ``backend`` data-parallel over the processes of ``state`` (:class:`Processes`).

    Parameters
    ----------
    backend
        Any :class:`~flasheval.engine.base.Backend`; its planned batches are the units of log-likelihood work,
        chunks of :attr:`~flasheval.engine.base.BackendInfo.batch_size` whole examples those of the rest.
    state
        The :class:`Processes` that score together; ``None`` (the default): this process alone.
    progress
        A bar per call that advances as each forward batch finishes, on the main process only
        (:func:`~flasheval.engine.progress_bar.progress_bar`: ``None`` shows it when stderr is a terminal,
        ``False`` never).

    Under one process each batch's results reach ``on_results`` (the store) as the backend finishes
    it; under several, at the gather after each round of units (the bar still advances per local batch).
    """

    def __init__(self, backend: Backend, *, state: Any = None, progress: bool | None = False) -> None:
        super().__init__(backend)
        self._state = state
        self._progress = progress

    def _lockstep(self) -> AbstractContextManager[None]:
        """The wrapped backend's lockstep (:meth:`~flasheval.engine.base.Backend.lockstep`: a sharded model's passes
        matched on every process) under several processes; nothing under one."""
        state = self._state
        if state is None or state.num_processes == 1:
            return nullcontext()
        return self._backend.lockstep(lambda what: collective(state, what))

    @property
    def state(self) -> Any:
        """The :class:`Processes` in use (``None``: this process alone)."""
        return self._state

    def from_main(self, value: T) -> T:
        """The main process's ``value`` on every process: a caching wrapper plans from the main
        process's store through this, so every process deals out the same units."""
        return from_main(self.state, value, what="planning from the main process's store")

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood`."""
        units = self._backend.plan_batches(requests)
        return self._run(requests, units, self._backend.loglikelihood, on_results, "log-likelihood")

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """See :meth:`flasheval.engine.base.Backend.generate`."""
        units = example_units(requests, self._backend.info.batch_size)
        return self._run(requests, units, self._backend.generate, on_results, "generation")

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood_rolling`."""
        units = example_units(requests, self._backend.info.batch_size)
        return self._run(requests, units, self._backend.loglikelihood_rolling, on_results, "rolling log-likelihood")

    def _run(
        self,
        requests: Sequence[Request],
        units: Sequence[tuple[int, ...]],
        method: Callable[..., list[Any]],
        on_results: OnResults | None,
        what: str,
    ) -> list[Any]:
        state = self.state
        world, rank = (1, 0) if state is None else (state.num_processes, state.process_index)
        where: dict[tuple[str, str, int], list[int]] = {}
        for index, request in enumerate(requests):
            same_id = where.setdefault(request_id(request), [])
            if same_id and requests[same_id[0]].key != request.key:
                raise ValueError(f"two different requests share the id {request_id(request)}")
            same_id.append(index)
        results: list[Result | None] = [None] * len(requests)
        bar = progress_bar(len(requests), desc=what, enabled=self._progress) if is_main(state) else None

        def accept(pairs: Sequence[tuple[Any, Result]]) -> list[tuple[int, Result]]:
            """Fill ``results`` from ``(request id, result)`` pairs; the newly filled ``(index, result)``."""
            fresh = []
            for rid, result in pairs:
                for index in where.get(tuple(rid), ()):  # type: ignore[arg-type]
                    if results[index] is None:
                        results[index] = result
                        fresh.append((index, result))
            if on_results is not None and fresh:
                on_results(fresh)
            return fresh

        for start in range(0, len(units), world):
            mine = units[start + rank] if start + rank < len(units) else ()
            advanced = 0

            def batch_done(pairs: Sequence[tuple[int, Result]]) -> None:
                # One forward batch of this unit finished: one process stores it now; several wait for the gather.
                nonlocal advanced
                n = len(accept([(request_id(r), r) for _, r in pairs])) if world == 1 else len(pairs)
                advanced += n
                if bar is not None:
                    bar.update(n)

            with self._lockstep():  # a sharded model: every process in every pass
                local = method([requests[i] for i in mine], on_results=batch_done) if mine else []
            if world > 1:
                gathered = _gather(state, [(request_id(result), result) for result in local], f"{what} scoring")
            else:
                gathered = list(zip(map(request_id, local), local))
            fresh = accept(gathered)  # what the batches did not report, and the other processes' units
            if bar is not None:
                bar.update(max(0, len(fresh) - (advanced if world > 1 else 0)))
        if bar is not None:
            bar.close()
        missing = sum(r is None for r in results)
        if missing:
            raise BackendError(f"{missing} request(s) got no result after the gather (duplicate request ids?)")
        return results



def _gather(state: Any, pairs: list[Any], what: str) -> list[Any]:
    """Every process's ``pairs``, concatenated in rank order (``all_gather_object`` on the default group)."""
    import torch.distributed as dist

    out: list[Any] = [None] * state.num_processes
    with collective(state, what):
        dist.all_gather_object(out, pairs)
    return [pair for part in out for pair in part]
