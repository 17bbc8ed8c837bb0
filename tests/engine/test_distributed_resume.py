"""Resuming data-parallel runs on a cluster without a shared filesystem, and processes that die.

Two real ``accelerate launch`` gloo processes (CPU) each open their OWN store folder: the main
process's holds part of the work, the other's holds different (deliberately wrong) results. Every
process must plan from the main process's store: the same final results as one process resuming
from the main's store, each missing request computed once, everything written to the main's store.
A process that stops answering or vanishes ends the job with one line within the collective
timeout, and every round finished before stays stored for the resume.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flasheval.engine.store import STORE_FILE, CachedBackend, ResultStore
from tests.engine.test_distributed import backend_for_test, launch, one_thread, requests_for_test

pytest.importorskip("accelerate")

WORKER = Path(__file__).with_name("_distributed_worker.py")


def _rows(results) -> list[list]:
    return [[r.task_name, r.example_id, r.choice_index, r.logprob_sum, r.n_tokens, r.is_greedy] for r in results]


def _resume_alone(store_dir: Path) -> tuple[list, int]:
    """One process resuming from ``store_dir``: its results and how many requests it computed."""
    backend = backend_for_test()
    with ResultStore(store_dir, fingerprint=backend.fingerprint) as store:
        cached = CachedBackend(backend, store)
        results = one_thread(lambda: cached.loglikelihood(requests_for_test()))
    return _rows(results), cached.n_computed


def _prefill(store_dir: Path, pairs) -> None:
    backend = backend_for_test()
    with ResultStore(store_dir, fingerprint=backend.fingerprint) as store:
        store.put_many(pairs)


@pytest.mark.slow
def test_processes_with_different_store_folders_plan_from_the_main_process(tmp_path):
    requests = requests_for_test()
    full = one_thread(lambda: backend_for_test().loglikelihood(requests))
    main_part = [(r.key, res) for r, res in zip(requests[:5], full[:5])]
    # the other node's folder holds results the main process does not have, with wrong values:
    # if that process planned from (or served) its own store, the run would hang or differ
    wrong = [(r.key, dataclasses.replace(res, logprob_sum=123.0)) for r, res in zip(requests[5:9], full[5:9])]
    _prefill(tmp_path / "store0", main_part)
    _prefill(tmp_path / "store1", wrong)
    _prefill(tmp_path / "alone", main_part)
    expected, n_alone = _resume_alone(tmp_path / "alone")
    assert n_alone == len(requests) - 5
    other_before = (tmp_path / "store1" / STORE_FILE).read_bytes()

    launch(WORKER, str(tmp_path), "--separate-stores", timeout=240)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert rank["results"] == expected  # bitwise: the same plan as one process resuming from the main's store
    assert ranks[0]["n_scored"] + ranks[1]["n_scored"] == len(requests) - 5  # each missing request once
    assert min(rank["n_scored"] for rank in ranks) > 0  # both processes worked
    lines = (tmp_path / "store0" / STORE_FILE).read_text().splitlines()
    assert len(lines) == len(requests)  # everything computed anywhere ends in the main process's store
    assert (tmp_path / "store1" / STORE_FILE).read_bytes() == other_before  # the other process never writes


@pytest.mark.slow
@pytest.mark.parametrize("how", ["hang", "exit", "raise"])
def test_a_process_that_stops_ends_the_job_in_one_line_and_finished_work_stays(tmp_path, how):
    """``hang``/``exit``: the main process notices (timeout, closed connection) and says so in one
    line; ``raise``: the failing process reports its own error and the launcher ends the others."""
    requests = requests_for_test()
    # ``hang`` waits out the collective timeout: 8 s is far above the tiny model's time between two
    # collectives (milliseconds) and above the skew of two processes' start-up on a loaded machine
    done = launch(WORKER, str(tmp_path), "--fail", f"1:2:{how}", timeout=240, check=False,
                  env={"FLASHEVAL_COLLECTIVE_TIMEOUT": "8"})
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("flasheval: error: ")]
    if how == "raise":
        assert "the test's backend failed on purpose" in done.stderr
    else:
        assert len(errors) == 1, done.stderr[-3000:]
        assert "process 0 of 2 lost the other processes" in errors[0] and "rerun the same command" in errors[0]
    backend = backend_for_test()
    with ResultStore(tmp_path, fingerprint=backend.fingerprint, writer=False) as store:
        n_stored = len(store)
    assert 0 < n_stored < len(requests)  # the first round (both processes' first batches) was stored
    resumed, n_computed = _resume_alone(tmp_path)
    assert n_computed == len(requests) - n_stored  # nothing finished is computed again
    full = _rows(one_thread(lambda: backend_for_test().loglikelihood(requests)))
    for got, want in zip(resumed, full):
        assert got[:3] == want[:3] and got[4:] == want[4:] and abs(got[3] - want[3]) <= 1e-4
