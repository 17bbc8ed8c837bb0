"""Data parallelism with accelerate: split work across processes, gather by id.

Under ``accelerate launch`` every process holds the same request list and a copy of the
model. The work is cut into units: the backend's own planned batches when it offers
``plan_batches`` (so each request is scored in the same batch, with the same padding,
whatever the number of processes: results are identical on 1 and N processes), otherwise
chunks of whole examples. Units are dealt round-robin; after each round every process
contributes ``(request id, result)`` pairs to ``gather_object`` and the pairs are matched
back to requests by id (never by position: padded or uneven gathers reorder and repeat),
duplicates dropped. ``on_results`` then sees every finished pair on every process; a
caching wrapper on top stores them, and only the main process's store writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from flasheval.engine.base import Backend, OnResults
from flasheval.errors import BackendError
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

__all__ = ["DistributedBackend", "request_id", "make_state"]

logger = logging.getLogger(__name__)


def make_state() -> Any:
    """The accelerate ``PartialState`` of this process (gloo on CPU when no GPU, or under ``--cpu``).

    accelerate only starts a CPU process group when asked for CPU explicitly; without a GPU
    there is nothing else to use, so CPU is requested then.
    """
    import os

    import torch
    from accelerate import PartialState

    use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available()
    return PartialState(cpu=use_cpu)


def request_id(request: Request | Result) -> tuple[str, str, int]:
    """``(task_name, example_id, choice_index)``: how gathered results find their request."""
    return (request.task_name, request.example_id, getattr(request, "choice_index", 0))


def _example_units(requests: Sequence[Request], per_unit: int) -> list[tuple[int, ...]]:
    """Chunks of ``per_unit`` requests that never split one example's requests."""
    by_example: dict[tuple[str, str], list[int]] = {}
    for index, request in enumerate(requests):
        by_example.setdefault((request.task_name, request.example_id), []).append(index)
    units: list[tuple[int, ...]] = []
    current: list[int] = []
    for indices in by_example.values():
        if current and len(current) + len(indices) > per_unit:
            units.append(tuple(current))
            current = []
        current.extend(indices)
    if current:
        units.append(tuple(current))
    return units


class DistributedBackend:
    """Run ``backend`` data-parallel over the processes of an accelerate launch.

    Parameters
    ----------
    backend
        Any :class:`~flasheval.engine.base.Backend`; with ``plan_batches`` its batches are the units.
    state
        An ``accelerate.PartialState``; created on first use when omitted (one process without a launcher).
    progress
        Show a progress bar (on the main process only).
    """

    def __init__(self, backend: Backend, *, state: Any = None, progress: bool = False) -> None:
        self._backend = backend
        self._state = state
        self._progress = progress

    @property
    def state(self) -> Any:
        """The accelerate ``PartialState`` in use."""
        if self._state is None:
            self._state = make_state()
        return self._state

    @property
    def fingerprint(self) -> str:
        """The wrapped backend's fingerprint."""
        return self._backend.fingerprint

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood`."""
        plan = getattr(self._backend, "plan_batches", None)
        units = plan(requests) if plan is not None else _example_units(requests, 32)
        return self._run(requests, units, self._backend.loglikelihood, on_results, "log-likelihood")

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """See :meth:`flasheval.engine.base.Backend.generate`."""
        units = _example_units(requests, getattr(self._backend, "batch_size", 8))
        return self._run(requests, units, self._backend.generate, on_results, "generation")

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood_rolling`."""
        units = _example_units(requests, getattr(self._backend, "batch_size", 8))
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
        bar = self._progress_bar(len(requests), what, state.is_main_process)
        for start in range(0, len(units), world):
            mine = units[start + rank] if start + rank < len(units) else ()
            local = method([requests[i] for i in mine]) if mine else []
            gathered = gather_object([(request_id(result), result) for result in local]) if world > 1 else list(
                zip(map(request_id, local), local)
            )
            fresh = []
            for rid, result in gathered:
                for index in where.get(tuple(rid), ()):  # type: ignore[arg-type]
                    if results[index] is None:
                        results[index] = result
                        fresh.append((index, result))
            if bar is not None:
                bar.update(len(fresh))
            if on_results is not None and fresh:
                on_results(fresh)
        if bar is not None:
            bar.close()
        missing = sum(r is None for r in results)
        if missing:
            raise BackendError(f"{missing} request(s) got no result after the gather (duplicate request ids?)")
        return results

    def _progress_bar(self, total: int, what: str, is_main: bool) -> Any:
        if not (self._progress and is_main and total):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=what, unit="req")
