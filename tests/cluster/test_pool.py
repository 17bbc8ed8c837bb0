"""The actor pool's scheduling, retries and errors, on a stand-in for ``ray`` that runs the actors in this process.

No cluster: :class:`FakeRay` gives :class:`~flasheval.cluster.pool.ModelPool` the calls it makes (``remote``,
``put``, ``wait``, ``get``, ``kill``, ``nodes``, ``exceptions``), finishes jobs in an order the test picks (last
submitted first), and kills the actors the test names. What is checked: every result in the jobs' order whatever
the completion order; a job on the actor that holds its model, a free actor unloading for the next model in
priority order; a dead actor's job served again elsewhere, the run stopped in one line after ``max_retries``;
a job's own error raised as it is; no more actors than the cluster fits; each result handed over as its job
finishes; an actor's temporary store seeded with the driver's results, handing back only what it computed.
"""

from __future__ import annotations

import sys
import types

import pytest

from flasheval.cluster.executor import GIB, RayExecutor
from flasheval.cluster.pool import Job, ModelPool
from flasheval.errors import BackendError, InputError


class _Died(Exception):
    pass


class _TaskError(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Ref:
    def __init__(self, call=None, value=None) -> None:
        self.call, self.value, self.done = call, value, call is None


class FakeRay(types.ModuleType):
    """``ray`` as far as the pool uses it; jobs finish last submitted first; ``doomed`` actors die on their next job."""

    def __init__(self, cpus: float = 2.0) -> None:
        super().__init__("ray")
        self.cpus, self.doomed, self.started, self.ran = cpus, set(), [], []
        self.exceptions = types.SimpleNamespace(
            RayTaskError=_TaskError, RayActorError=_Died, ActorUnavailableError=_Died, NodeDiedError=_Died,
            WorkerCrashedError=_Died, ObjectLostError=_Died, OwnerDiedError=_Died)

    def is_initialized(self) -> bool:
        return True

    def nodes(self) -> list[dict]:
        return [{"Alive": True, "Resources": {"CPU": self.cpus, "memory": 64 * GIB}}]

    def remote(self, **_):
        fake = self

        class Remote:
            def __init__(self, cls) -> None:
                self.cls = cls

            def options(self, **_):
                return self

            def remote(self, *args):
                handle = types.SimpleNamespace(actor=self.cls(*args), number=len(fake.started))
                handle.run = types.SimpleNamespace(remote=lambda *a: fake._submit(handle, a))
                handle.unload = types.SimpleNamespace(remote=lambda: _Ref(value=handle.actor.unload()))
                fake.started.append(handle)
                return handle

        return Remote

    def _submit(self, handle, args) -> _Ref:
        return _Ref(call=(handle, args))

    def put(self, value) -> _Ref:
        return _Ref(value=value)

    def wait(self, refs, num_returns=1):
        return [refs[-1]], refs[:-1]  # the last submitted finishes first

    def get(self, ref, timeout=None):
        if ref.done:
            return ref.value
        handle, (key, opener, fn, args) = ref.call
        if handle.number in self.doomed:
            raise _Died(f"The actor {handle.number} died: its node was removed")
        self.ran.append((handle.number, key))
        try:
            return handle.actor.run(key, opener.value, fn, args)
        except Exception as exc:  # as Ray wraps a task's error
            raise _TaskError(exc) from exc

    def kill(self, handle) -> None:
        pass


class _Model:
    closed: list[str] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def close(self) -> None:
        _Model.closed.append(self.name)


def _opener(name: str):
    return lambda: _Model(name)


def _score(held: _Model, x: int) -> str:
    if x < 0:
        raise InputError("a bad example", field="x")
    return f"{held.name}:{x}"


def _jobs(*keys: str, x: int = 1) -> list[Job]:
    return [Job(key=k, opener=_opener(k), fn=_score, args=(x,)) for k in keys]


@pytest.fixture
def fake(monkeypatch) -> FakeRay:
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    return ray


def test_results_come_in_the_jobs_order_and_models_stay_on_their_actors(fake):
    pool = ModelPool(RayExecutor(progress=False), n_models=3)
    assert pool.n_actors == 2  # two CPUs, one per model
    assert pool.run([]) == [] and fake.started == []  # nothing to compute (a resumed sweep): no actor started
    assert pool.run(_jobs("a", "b", "c")) == ["a:1", "b:1", "c:1"]  # finished in another order
    assert pool.run(_jobs("c", "b", "a", x=2)) == ["c:2", "b:2", "a:2"]
    assert pool.stats.loads == {"a": 2, "b": 2, "c": 1}
    # round 1: a and b go to the two actors; b finishes first (the last submitted), so its actor opens c.
    # round 2: c runs on the actor that holds it; b takes the other (unloading a), then a takes it back
    assert fake.ran == [(1, "b"), (1, "c"), (0, "a"), (0, "b"), (0, "a"), (1, "c")]
    pool.close()


def test_each_result_is_handed_over_as_its_job_finishes(fake):
    """``on_result`` sees each job as it finishes (here the last submitted first), before the next is run; an error it
    raises stops the run there: what finished before is handed over, nothing runs after."""
    pool = ModelPool(RayExecutor(progress=False), n_models=3)
    seen = []
    assert pool.run(_jobs("a", "b", "c"), on_result=lambda i, v: seen.append((i, v, len(fake.ran)))) == \
        ["a:1", "b:1", "c:1"]  # still in the jobs' order
    assert seen == [(1, "b:1", 1), (2, "c:1", 2), (0, "a:1", 3)]
    pool.close()
    fake.ran.clear()
    pool, seen = ModelPool(RayExecutor(progress=False), n_models=3), []

    def killed(i, value):
        seen.append((i, value))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pool.run(_jobs("a", "b", "c"), on_result=killed)
    assert seen == [(1, "b:1")] and [key for _, key in fake.ran] == ["b"]  # a in flight, never taken; c never sent
    pool.close()


def test_a_free_actor_opens_the_next_model_in_priority_order(fake):
    fake.cpus = 1.0  # one actor: the jobs in their order, each unloading the one before
    pool = ModelPool(RayExecutor(progress=False), n_models=3)
    _Model.closed.clear()
    assert pool.run(_jobs("a", "b", "c")) == ["a:1", "b:1", "c:1"]
    assert [key for _, key in fake.ran] == ["a", "b", "c"] and _Model.closed == ["a", "b"]
    pool.close()
    assert _Model.closed == ["a", "b", "c"]


def test_a_dead_actor_has_its_job_served_again_then_the_run_stops_in_one_line(fake):
    pool = ModelPool(RayExecutor(progress=False, max_retries=1), n_models=3)
    fake.doomed.add(1)
    assert pool.run(_jobs("a", "b", "c")) == ["a:1", "b:1", "c:1"]
    assert pool.stats.retries == 1 and {number for number, _ in fake.ran} == {0}  # the survivor served them all
    fake.doomed.add(0)  # the last actor dies: one is started again, and dies too once it is doomed
    fake.doomed.add(2)
    with pytest.raises(BackendError, match=r"^a: its Ray actor died 2 times \(max_retries 1\); last: _Died: The "
                                           r"actor 2 died: its node was removed$"):
        pool.run(_jobs("a"))


def test_a_jobs_own_error_is_raised_as_it_is_and_the_cluster_must_fit_one_model(fake):
    pool = ModelPool(RayExecutor(progress=False), n_models=2)
    with pytest.raises(InputError, match="field 'x': a bad example"):
        pool.run(_jobs("a", x=-1))
    with pytest.raises(InputError, match=r"resources one model needs \(1 CPUs, 1 GPUs, 0.0 GiB memory\); the cluster "
                                         r"has 1 node, the largest with 2 CPUs, 0 GPUs, 64.0 GiB memory"):
        ModelPool(RayExecutor(num_gpus=1), n_models=1)
    assert ModelPool(RayExecutor(memory_gb=30, progress=False), n_models=5).n_actors == 2
    assert ModelPool(RayExecutor(max_models=1, progress=False), n_models=5).n_actors == 1


def test_one_progress_bar_counts_the_jobs_of_every_run_and_the_models_loaded(fake, capsys):
    pool = ModelPool(RayExecutor(progress=True), n_models=3, what="sweep on Ray")
    pool.run(_jobs("a", "b", "c"))
    pool.run(_jobs("a"))
    pool.close()
    err = capsys.readouterr().err
    assert "sweep on Ray: 100%" in err and "4/4" in err and "2 models loaded on 2 actors" in err


def test_an_actors_store_starts_with_the_drivers_results_and_hands_back_only_what_it_computed():
    """What a Ray build's actor gets of the driver's store (its model's shard) is in its temporary store before the
    model opens; what comes back is what the model added, under its own fingerprint only."""
    from flasheval.cluster.pool import InTempStore
    from flasheval.engine.store.results import ResultStore
    from flasheval.types import LoglikelihoodResult

    def result(i: int) -> LoglikelihoodResult:
        return LoglikelihoodResult(task_name="t", example_id=str(i), choice_index=0, logprob_sum=-1.5 * i, n_tokens=i,
                                   is_greedy=False)

    seen = {}

    def open_(folder):
        store = ResultStore(folder, fingerprint="fp")
        seen.update(store.results())  # the seed, before anything is computed
        store.put_many([("k1", result(1)), ("k2", result(2))])  # k1 stored already: not written again
        other = ResultStore(folder, fingerprint="fp-gpu")  # a fingerprint the driver did not seed
        other.put_many([("k1", result(3))])
        other.close()
        return store

    held = InTempStore(open_, seed=("fp", {"k1": result(4)}))()
    assert seen == {"k1": result(4)}
    assert held.computed("fp") == {"k2": result(2)} and held.computed("fp-gpu") == {"k1": result(3)}
    held.close()
    assert not held.folder.exists()
