"""Data-parallel runs whose processes die: a process that stops answering or vanishes ends the job
with one line within the collective timeout, and every round finished before stays stored for the
resume. (Resuming on separate store folders, a cluster without a shared filesystem, is checked in
``test_distributed.py``, in the same launch as 2 processes == 1.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flasheval.engine.store.results import ResultStore
from tests.engine.test_distributed import _resume_alone, _rows, backend_for_test, launch, one_thread, requests_for_test

pytest.importorskip("accelerate")

WORKER = Path(__file__).with_name("_distributed_worker.py")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["hang", "exit", "raise"])
def test_a_process_that_stops_ends_the_job_in_one_line_and_finished_work_stays(tmp_path, how):
    """``hang``/``exit``: the main process notices (timeout, closed connection) and says so in one
    line; ``raise``: the failing process reports its own error and the launcher ends the others."""
    requests = requests_for_test()
    # ``hang`` waits out the collective timeout: 10 s is far above the tiny model's time between two
    # collectives (milliseconds) and above the skew of two processes' start-up on a loaded machine
    done = launch(WORKER, str(tmp_path), "--fail", f"1:2:{how}", timeout=240, check=False,
                  env={"FLASHEVAL_COLLECTIVE_TIMEOUT": "10"})
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
