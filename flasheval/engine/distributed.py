"""Data parallelism with accelerate: split work across processes, gather by id.

Under ``accelerate launch`` every process holds the same request list and a copy of the
model. The work is cut into units: the backend's own planned batches for log-likelihoods
(``plan_batches``: each request is scored in the same batch, with the same padding, whatever
the number of processes: results are identical on 1 and N processes), chunks of whole examples
for generation and rolling log-likelihoods. Units are dealt round-robin; after each round every process
contributes ``(request id, result)`` pairs to ``gather_object`` and the pairs are matched
back to requests by id (never by position: padded or uneven gathers reorder and repeat),
duplicates dropped. ``on_results`` then sees every finished pair on every process; a
caching wrapper on top stores them, and only the main process's store writes.

Processes need not share a filesystem: the main process's store is the one view every process
plans from (:meth:`DistributedBackend.from_main` broadcasts what it holds, so a node whose
own store folder is empty or different plans exactly the main process's work), and every
result computed anywhere reaches the main process through the gather and is written there.
A process that dies or stops answering ends the others within the collective timeout
(:data:`TIMEOUT_ENV`) with one line (:class:`~flasheval.errors.BackendError`); every round
gathered before is already in the main process's store, so rerunning the command resumes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from flasheval.engine.base import Backend, OnResults, Wrapper, example_units
from flasheval.engine.progress_bar import progress_bar
from flasheval.engine.store import CachedBackend, ResultStore
from flasheval.engine.store_adoption import adopt_shard
from flasheval.errors import BackendError, FlashevalError
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

__all__ = ["DistributedBackend", "request_id", "make_state", "launch_state", "TIMEOUT_ENV", "DEFAULT_TIMEOUT_S",
           "from_main", "main_decides", "open_shared_store", "cached_runner", "shutdown"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

TIMEOUT_ENV = "FLASHEVAL_COLLECTIVE_TIMEOUT"
"""Environment variable: seconds a process waits for the others at a collective (default
:data:`DEFAULT_TIMEOUT_S`). Set it on every node, like accelerate's own launch settings."""
DEFAULT_TIMEOUT_S = 1800.0
"""Long enough for every process to load a large checkpoint between two collectives."""


def _timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise FlashevalError(f"environment variable {TIMEOUT_ENV}: must be a number of seconds > 0, got {text!r}")
    return value


def make_state() -> Any:
    """The accelerate ``PartialState`` of this process (gloo on CPU when no GPU, or under ``--cpu``).

    accelerate only starts a CPU process group when asked for CPU explicitly; without a GPU
    there is nothing else to use, so CPU is requested then. Collectives of a launch time out
    after ``$FLASHEVAL_COLLECTIVE_TIMEOUT`` seconds (default 1800), so a process that stops
    answering ends the job instead of hanging it.
    """
    from datetime import timedelta

    import torch
    from accelerate import PartialState

    use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return PartialState(cpu=use_cpu, timeout=timedelta(seconds=_timeout_s()))
    return PartialState(cpu=use_cpu)


def launch_state() -> Any:
    """The process state under a launch of several processes (``WORLD_SIZE > 1``), else ``None``.

    Commands that also run without a launcher take this, so one process neither starts a
    process group nor shows the per-call progress bars of the data-parallel runner.
    """
    return make_state() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None


@contextmanager
def _collective(state: Any, what: str) -> Iterator[None]:
    """Turn a failed or timed-out collective into one line saying what happened and what is kept."""
    try:
        yield
    except RuntimeError as exc:  # torch.distributed.DistBackendError and gloo/NCCL errors are RuntimeErrors
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BackendError(
            f"process {state.process_index} of {state.num_processes} lost the other processes during {what} "
            f"(a process died or stopped answering within {TIMEOUT_ENV}={_timeout_s():.0f}s: {reason}); "
            "finished results are in the main process's store: rerun the same command to resume") from None


def from_main(state: Any, value: T, *, what: str = "a broadcast from the main process") -> T:
    """The main process's ``value`` on every process (pickled broadcast; as is on one process)."""
    if state is None or state.num_processes == 1:
        return value
    from torch.distributed import broadcast_object_list

    box = [value if state.is_main_process else None]
    with _collective(state, what):
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
    earlier release stored under the model's ``previous`` key (:func:`~flasheval.engine.store_adoption.adopt_shard`).
    """
    store = None
    if state is None or state.is_main_process:
        if previous is not None:
            adopt_shard(store_dir, previous=previous, fingerprint=fingerprint)
        store = ResultStore(store_dir, fingerprint=fingerprint)
    if state is not None and state.num_processes > 1:
        with _collective(state, "opening the results store"):
            state.wait_for_everyone()
    return store if store is not None else ResultStore(store_dir, fingerprint=fingerprint, writer=False)


def cached_runner(backend: Backend, store_dir: Path, state: Any, *,
                  progress: bool | None = None) -> tuple[CachedBackend, ResultStore]:
    """``backend`` data-parallel over the launch's processes, behind the results store of ``store_dir``.

    The one way every command runs a model: ``evaluate``, ``reference build``, ``place`` and
    ``sweep``. ``progress``: the per-batch bar of :class:`DistributedBackend` (``None``: when stderr
    is a terminal). Close the returned store when done.
    """
    store = open_shared_store(store_dir, backend.fingerprint, state, previous=backend.info.previous_fingerprint)
    runner = DistributedBackend(backend, state=state, progress=progress)
    return CachedBackend(runner, store, share=runner.from_main), store


def shutdown(state: Any) -> None:
    """Wait for every process, then tear the process group down (an implicit teardown at
    interpreter exit can abort a gloo/NCCL process and fail the launch)."""
    if state is not None and state.num_processes > 1:
        with _collective(state, "the final barrier"):
            state.wait_for_everyone()
        state.destroy_process_group()


def request_id(request: Request | Result) -> tuple[str, str, int]:
    """``(task_name, example_id, choice_index)``: how gathered results find their request."""
    return (request.task_name, request.example_id, getattr(request, "choice_index", 0))


class DistributedBackend(Wrapper):
    """Run ``backend`` data-parallel over the processes of an accelerate launch.

    Parameters
    ----------
    backend
        Any :class:`~flasheval.engine.base.Backend`; its planned batches are the units of log-likelihood work,
        chunks of :attr:`~flasheval.engine.base.BackendInfo.batch_size` whole examples those of the rest.
    state
        An ``accelerate.PartialState``; created on first use when omitted (one process without a launcher).
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

    @property
    def state(self) -> Any:
        """The accelerate ``PartialState`` in use."""
        if self._state is None:
            self._state = make_state()
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
        from accelerate.utils import gather_object

        state = self.state
        world, rank = state.num_processes, state.process_index
        where: dict[tuple[str, str, int], list[int]] = {}
        for index, request in enumerate(requests):
            same_id = where.setdefault(request_id(request), [])
            if same_id and requests[same_id[0]].key != request.key:
                raise ValueError(f"two different requests share the id {request_id(request)}")
            same_id.append(index)
        results: list[Result | None] = [None] * len(requests)
        bar = progress_bar(len(requests), desc=what, enabled=self._progress) if state.is_main_process else None

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

            local = method([requests[i] for i in mine], on_results=batch_done) if mine else []
            if world > 1:
                with _collective(state, f"{what} scoring"):
                    gathered = gather_object([(request_id(result), result) for result in local])
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

