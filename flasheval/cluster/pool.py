"""Models held by Ray actors: at most ``max_models`` actors, each holding one model, serving the driver's jobs.

A :class:`Job` names its model (``key``), how to open it (``opener``, run in the actor: it returns the model
held, an object with ``close()``) and what to compute with it (``fn(held, *args)``, run in the actor, its value
returned to the driver). :meth:`ModelPool.run` serves a list of jobs given in priority order, all at once over
the actors: a job goes to the actor that holds its model; otherwise to an idle actor, which unloads its model
and opens the job's (an empty actor first, then the one whose model no waiting job needs, least recently used
first). The results come back in the jobs' order, whatever order they finish in; ``on_result`` sees each as it
finishes (a driver writes it into its store then, so a run killed later keeps it). Actors start with the first jobs
that need them (a sweep whose every score is stored starts none).

An actor that dies (its process, its node) has its job served again on another actor, at most ``max_retries``
times, then the run stops in one line naming the model and the cause; the pool goes on with the actors left
(one is started again when none is). An error raised by a job itself (a model that does not load) is raised on
the driver as it is, not retried.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flasheval.cluster.executor import GIB, RayExecutor, check_reachable, fitting_slots, largest_node, require_ray
from flasheval.engine.progress_bar import progress_bar
from flasheval.engine.store.results import ResultStore
from flasheval.errors import BackendError, InputError
from flasheval.types import Result

__all__ = ["Job", "ModelPool", "InTempStore", "Held", "run_each", "Captured", "capture", "answering"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One computation on one model, run by the actor that holds it."""

    key: str
    """The model (its id): jobs with the same key share one opened model."""
    opener: Callable[[], Any]
    """Opens the model in the actor (picklable); returns what ``fn`` gets, with a ``close()``."""
    fn: Callable[..., Any]
    """``fn(held, *args)``, run in the actor; its value comes back to the driver (picklable)."""
    args: tuple[Any, ...] = ()


class _Slot:
    """The Ray actor: holds at most one opened model; unloads it before opening another."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.key: str | None = None
        self.held: Any = None

    def run(self, key: str, opener: Callable[[], Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``(fn(held, *args), seconds spent opening, 0.0 when the model was held already)``."""
        seconds = 0.0
        if self.key != key:
            self.unload()
            import torch  # the actor's own process: its thread count is the CPUs reserved for it

            torch.set_num_threads(self.threads)
            start = time.perf_counter()
            self.held, self.key = opener(), key
            seconds = time.perf_counter() - start
        return fn(self.held, *args), seconds

    def unload(self) -> None:
        """Close the model held (its results store, its weights freed)."""
        if self.held is not None:
            held, self.held, self.key = self.held, None, None
            held.close()
            del held
            import gc

            gc.collect()


@dataclass(slots=True)
class _Actor:
    handle: Any
    key: str | None = None
    busy: bool = False
    used: int = 0
    """When it last got a job (a counter): the least recently used idle actor is the first to unload."""


@dataclass(slots=True)
class _Stats:
    loads: dict[str, int] = field(default_factory=dict)
    load_seconds: dict[str, float] = field(default_factory=dict)
    retries: int = 0


class ModelPool:
    """Actors on a Ray cluster, each holding one model at a time (module docstring).

    Parameters
    ----------
    executor
        The cluster's address and each model's resources.
    n_models
        Models the run will open (no more actors than that are started).
    memory_bytes
        Memory each model needs when ``executor.memory_gb`` is not given (its weight files).
    what
        The bar's label.

    Every check runs here, before any actor starts: ``ray`` installed, the address reachable, a node that holds
    one model (:class:`~flasheval.errors.InputError` in one line each).
    """

    def __init__(self, executor: RayExecutor, *, n_models: int, memory_bytes: int = 0, what: str = "cluster") -> None:
        ray = require_ray()
        check_reachable(executor.address)
        self._ray, self._executor, self._what = ray, executor, what
        self._actors: list[_Actor] = []
        self._bar: Any = None
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                ray.init(address=executor.address, include_dashboard=False, logging_level="WARNING",
                         log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InputError(f"cannot connect to the Ray cluster at {executor.address or 'default'}: "
                                 f"{' '.join(str(exc).split())[:300]}", field="--ray-address") from None
        memory = executor.memory_gb * GIB if executor.memory_gb is not None else float(memory_bytes)
        nodes = ray.nodes()
        fits = fitting_slots(nodes, num_cpus=executor.num_cpus, num_gpus=executor.num_gpus, memory=memory)
        if fits == 0:
            self.close()
            raise InputError(
                f"no node of the Ray cluster has the resources one model needs ({executor.num_cpus:g} CPUs, "
                f"{executor.num_gpus:g} GPUs, {memory / GIB:.1f} GiB memory); the cluster has {largest_node(nodes)}",
                field="--executor")
        self.n_actors = max(1, min(fits, n_models, executor.max_models or fits))
        self._options = {"num_cpus": executor.num_cpus, "num_gpus": executor.num_gpus,
                         **({"memory": int(memory)} if memory else {}), "scheduling_strategy": "SPREAD"}
        self._remote = ray.remote(max_restarts=0)(_Slot)  # actors start with the first jobs that need them
        self._openers: dict[str, Any] = {}
        self._clock = 0
        self.stats = _Stats()
        self._done = 0

    def _start(self) -> _Actor:
        threads = max(1, int(self._executor.num_cpus))
        return _Actor(handle=self._remote.options(**self._options).remote(threads))

    @property
    def n_loaded(self) -> int:
        """Models held by the actors now."""
        return sum(a.key is not None for a in self._actors)

    def run(self, jobs: Sequence[Job], *, on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Every job's value, in the jobs' order (jobs given in priority order; module docstring).

        ``on_result(i, value)`` is called here as job ``i`` finishes, in the order they finish, before the next
        one is waited for (an error it raises stops the run, as a job's own error does).
        """
        self._grow_bar(len(jobs))
        results: list[Any] = [None] * len(jobs)
        waiting, inflight = list(range(len(jobs))), {}
        tries = [0] * len(jobs)
        while waiting or inflight:
            for i in list(waiting):
                actor = self._actor_for(jobs[i], [jobs[j].key for j in waiting if j != i])
                if actor is None:
                    continue
                waiting.remove(i)
                inflight[self._submit(actor, jobs[i])] = (i, actor)
            if not inflight:  # cannot happen: an idle or new actor takes the first job waiting
                raise BackendError("no Ray actor is left to serve the jobs")
            ready, _ = self._ray.wait(list(inflight), num_returns=1)
            i, actor = inflight.pop(ready[0])
            actor.busy = False
            try:
                results[i] = self._take(ready[0], jobs[i])
            except _ActorLost as lost:
                self._lose(actor, jobs[i], lost.cause, tries, i)
                waiting = sorted([*waiting, i])  # back in its place in the priority order
                continue
            self._done += 1
            self._tick()
            if on_result is not None:
                on_result(i, results[i])
        return results

    def _actor_for(self, job: Job, later: list[str]) -> _Actor | None:
        """The actor that holds ``job``'s model if idle; else an idle one to unload (module docstring)."""
        holder = next((a for a in self._actors if a.key == job.key), None)
        if holder is not None:
            return None if holder.busy else holder
        idle = [a for a in self._actors if not a.busy]
        empty = [a for a in idle if a.key is None]
        if empty:
            return empty[0]
        if len(self._actors) < self.n_actors:  # room for one more: started rather than unloading a model
            self._actors.append(self._start())
            return self._actors[-1]
        if not idle:
            return None
        return min(idle, key=lambda a: (a.key in later, a.used))

    def _submit(self, actor: _Actor, job: Job) -> Any:
        if job.key not in self._openers:  # sent to the object store once, not with every job
            self._openers[job.key] = self._ray.put(job.opener)
        self._clock += 1
        actor.busy, actor.used, actor.key = True, self._clock, job.key
        return actor.handle.run.remote(job.key, self._openers[job.key], job.fn, job.args)

    def _take(self, ref: Any, job: Job) -> Any:
        exceptions = self._ray.exceptions
        try:
            value, seconds = self._ray.get(ref)
        except exceptions.RayTaskError as exc:  # the job's own error: raised as it is
            raise exc.cause from None
        except (exceptions.RayActorError, exceptions.ActorUnavailableError, exceptions.NodeDiedError,
                exceptions.WorkerCrashedError, exceptions.ObjectLostError, exceptions.OwnerDiedError) as exc:
            raise _ActorLost(exc) from None
        if seconds:
            self.stats.loads[job.key] = self.stats.loads.get(job.key, 0) + 1
            self.stats.load_seconds[job.key] = self.stats.load_seconds.get(job.key, 0.0) + seconds
        return value

    def _lose(self, actor: _Actor, job: Job, cause: BaseException, tries: list[int], i: int) -> None:
        """An actor died under ``job``: forget it, one actor fewer from now on (its node may be gone; one is started
        again when none is left); stop after ``max_retries``."""
        self._actors.remove(actor)
        self.n_actors = max(1, self.n_actors - 1)
        tries[i] += 1
        self.stats.retries += 1
        reason = " ".join(str(cause).split())[:300]
        if tries[i] > self._executor.max_retries:
            raise BackendError(f"{job.key}: its Ray actor died {tries[i]} times (max_retries "
                               f"{self._executor.max_retries}); last: {type(cause).__name__}: {reason}")
        logger.warning("%s: its Ray actor died (%s); served again on another actor (retry %d of %d)", job.key,
                       type(cause).__name__, tries[i], self._executor.max_retries)

    def _grow_bar(self, n: int) -> None:
        if self._bar is None:
            self._bar = progress_bar(n, desc=self._what, enabled=self._executor.progress)
        elif n:
            self._bar.total += n
            self._bar.refresh()

    def _tick(self) -> None:
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix_str(f"{self.n_loaded} models loaded on {len(self._actors)} actors")

    def close(self) -> None:
        """Unload every model (their stores closed) and stop the actors; disconnect when this pool connected."""
        for actor in self._actors:
            try:
                self._ray.get(actor.handle.unload.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - an actor already dead has nothing to unload
                pass
            self._ray.kill(actor.handle)
        self._actors = []
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._owns:
            self._ray.shutdown()
            self._owns = False

    def __enter__(self) -> ModelPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ActorLost(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True, slots=True)
class InTempStore:
    """A :attr:`Job.opener` that opens a model behind a results store in a new temporary folder of the actor's
    machine (removed when the model is unloaded): the actor's store is its own cache, never the driver's."""

    open: Callable[[Path], Any]
    """Opens the model behind the store in the folder given (returns an object with ``close()``)."""
    seed: tuple[str, Mapping[str, Result]] | None = None
    """``(fingerprint, {request key: result})``: what the driver's store holds of the model, put in the folder's
    store before the model opens, so that only the rest is computed (:meth:`Held.computed` leaves it out)."""

    def __call__(self) -> Held:
        folder = Path(tempfile.mkdtemp(prefix="flasheval-actor-store-"))
        try:
            if self.seed is not None:
                with ResultStore(folder, fingerprint=self.seed[0]) as store:
                    store.put_many(list(self.seed[1].items()))
            return Held(self.open(folder), folder, seeded=self.seed)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise


class Held:
    """What :class:`InTempStore` opened, and its store's folder."""

    __slots__ = ("opened", "folder", "_seeded")

    def __init__(self, opened: Any, folder: Path, *, seeded: tuple[str, Mapping[str, Result]] | None = None) -> None:
        self.opened, self.folder = opened, folder
        self._seeded = (seeded[0], frozenset(seeded[1])) if seeded is not None else ("", frozenset())

    def computed(self, fingerprint: str) -> dict[str, Result]:
        """What the folder's store holds under ``fingerprint`` that it was not seeded with: what the model computed
        (to be written into the driver's store)."""
        with ResultStore(self.folder, fingerprint=fingerprint, writer=False) as store:
            stored = store.results()
        seeded = self._seeded[1] if self._seeded[0] == fingerprint else frozenset()
        return {key: result for key, result in stored.items() if key not in seeded}

    def close(self) -> None:
        self.opened.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _nothing(folder: Path) -> _Nothing:
    return _Nothing()


class _Nothing:
    __slots__ = ()

    def close(self) -> None:
        """Nothing is held between calls: each call opens and closes its own model."""


def _call(held: Held, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], folder_keyword: str) -> Any:
    """In the actor: ``fn(*args, **kwargs)`` with the actor's folder as ``folder_keyword``; its error returned, not
    raised (one call's failure is that call's)."""
    try:
        return fn(*args, **kwargs, **{folder_keyword: held.folder})
    except Exception as exc:  # noqa: BLE001 - handed back to the driver, which decides
        return exc


def run_each(executor: RayExecutor, calls: Sequence[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]], *,
             folder_keyword: str, memory_bytes: int = 0, what: str = "cluster") -> list[Any]:
    """Each ``(key, fn, args, kwargs)`` run at once on the actors, as ``fn(*args, **kwargs, FOLDER_KEYWORD=folder)``
    with a temporary folder of the actor's machine (a results store); its value, or the exception it raised, in
    the calls' order. An actor that dies is handled as for every job (:class:`ModelPool`)."""
    jobs = [Job(key=key, opener=InTempStore(_nothing), fn=_call, args=(fn, args, kwargs, folder_keyword))
            for key, fn, args, kwargs in calls]
    with ModelPool(executor, n_models=len(jobs), memory_bytes=memory_bytes, what=what) as pool:
        return pool.run(jobs)


class Captured(Exception):
    """Raised by :func:`capture` with the call it stood in for: how a driver learns what a function would compute
    (its arguments), to have it computed on an actor instead (:func:`run_each`)."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__("captured")
        self.args_, self.kwargs = args, kwargs


def capture(*args: Any, store: Any = None, **kwargs: Any) -> Any:
    """A stand-in for a function called with ``store=``: raises :class:`Captured` with the other arguments."""
    raise Captured(args, kwargs)


def answering(value: Any) -> Callable[..., Any]:
    """A stand-in for a function whose answer an actor computed: returns ``value`` (raises it, an error)."""
    def answer(*args: Any, **kwargs: Any) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    return answer
