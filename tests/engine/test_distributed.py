"""Data parallelism: 2 CPU processes (gloo, accelerate's debug launcher) give exactly the
results of 1 process, gathered by id; only the main process writes the store.

On a cluster without a shared filesystem each process opens its OWN store folder: the main
process's holds part of the work, the other's holds different (deliberately wrong) results. Every
process must plan from the main process's store: the same final results as one process resuming
from the main's store, each missing request computed once, everything written to the main's store.
Both checks run in ONE ``accelerate launch`` (``_distributed_worker.py --also-separate``)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.engine.base import example_units
from flasheval.engine.coordination.distributed import DistributedBackend
from flasheval.engine.store.results import CachedBackend, ResultStore, iter_store
from flasheval.types import LoglikelihoodRequest
from tests.conftest import REPO_ROOT
from tests.engine.conftest import tiny_model_and_tokenizer

pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")


def requests_for_test() -> list[LoglikelihoodRequest]:
    # Uneven: 7 examples with 1-4 choices, so processes get different amounts of work.
    out = []
    for e in range(7):
        for k in range(1 + e % 4):
            out.append(
                LoglikelihoodRequest(
                    task_name="t" if e % 2 else "u", example_id=f"e{e}", choice_index=k, context="ctx " * (e + 1), continuation=f" choice {k}" * (k + 1)
                )
            )
    return out


def backend_for_test():
    from flasheval.engine.hf.backend import HFBackend

    model, tokenizer = tiny_model_and_tokenizer(seed=2)
    # 1 row: the 7 examples (short groups share a row where they fit) make 7 batches, so each of 2 processes has 3
    # rounds or more
    return HFBackend(model, tokenizer, fingerprint="tiny-2", batch_size=1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(script: Path | str, *args: str, num_processes: int = 2, timeout: int = 300, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``accelerate launch --multi_gpu --num_processes N script args`` as a real subprocess.

    Without a GPU, accelerate only starts several processes through its torchrun path
    (``--multi_gpu``); the launcher code (:mod:`flasheval.cli.launch`) then makes a CPU (gloo) process group.
    ``script`` may be
    ``-m MODULE`` (e.g. ``-m flasheval``).
    """
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()), *str(script).split(" ", 1), *args,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, done.stderr[:2000] + "\n...\n" + done.stderr[-3000:]
    return done


def one_thread(run):
    """``run()`` with one torch thread, as the launched processes run (``OMP_NUM_THREADS=1``): a
    matmul split over another number of threads may round differently."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run()
    finally:
        torch.set_num_threads(threads)


def _rows(results) -> list[list]:
    return [[r.task_name, r.example_id, r.choice_index, r.logprob_sum, r.n_tokens, r.is_greedy] for r in results]


def _resume_alone(store_dir: Path) -> tuple[list, int]:
    """One process resuming from ``store_dir``: its results and how many requests it computed."""
    backend = backend_for_test()
    with ResultStore(store_dir, fingerprint=backend.fingerprint) as store:
        cached = CachedBackend(backend, store)
        results = one_thread(lambda: cached.loglikelihood(requests_for_test()))
    return _rows(results), cached.n_computed


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _prefill(store_dir: Path, pairs) -> None:
    backend = backend_for_test()
    with ResultStore(store_dir, fingerprint=backend.fingerprint) as store:
        store.put_many(pairs)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """One launch of 2 processes: a job on one shared store (``shared``), then one on separate store
    folders prefilled as above (``separate``), with what one process gives for each."""
    root = tmp_path_factory.mktemp("launched")
    shared, separate = root / "shared", root / "separate"
    shared.mkdir()
    requests = requests_for_test()
    full = one_thread(lambda: backend_for_test().loglikelihood(requests))
    main_part = [(r.key, res) for r, res in zip(requests[:5], full[:5])]
    # the other node's folder holds results the main process does not have, with wrong values:
    # if that process planned from (or served) its own store, the run would hang or differ
    wrong = [(r.key, dataclasses.replace(res, logprob_sum=123.0)) for r, res in zip(requests[5:9], full[5:9])]
    _prefill(separate / "store0", main_part)
    _prefill(separate / "store1", wrong)
    _prefill(root / "alone", main_part)
    expected, n_alone = _resume_alone(root / "alone")
    other_before = _snapshot(separate / "store1")
    launch(Path(__file__).with_name("_distributed_worker.py"), str(shared), "--also-separate", str(separate),
           timeout=300)
    return {"shared": shared, "separate": separate, "single": _rows(full), "resumed": expected, "n_alone": n_alone,
            "other_before": other_before}


@pytest.mark.slow
def test_two_processes_equal_one_exactly(launched):
    requests = requests_for_test()
    shared = launched["shared"]
    ranks = [json.loads((shared / f"rank{r}.json").read_text()) for r in (0, 1)]
    expected = launched["single"]
    for rank in ranks:
        assert rank["world"] == 2
        assert rank["results"] == expected  # bitwise: same batches whatever the world size
    assert ranks[0]["n_scored"] + ranks[1]["n_scored"] == len(requests)  # each request scored once
    assert min(rank["n_scored"] for rank in ranks) > 0  # both processes worked
    stored = [r.key for r in iter_store(shared)]
    assert sorted(stored) == sorted({r.key for r in requests})  # written once, by the main process only


@pytest.mark.slow
def test_processes_with_different_store_folders_plan_from_the_main_process(launched):
    requests = requests_for_test()
    separate = launched["separate"]
    assert launched["n_alone"] == len(requests) - 5
    ranks = [json.loads((separate / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert rank["results"] == launched["resumed"]  # bitwise: the same plan as one process resuming from the main's store
    assert ranks[0]["n_scored"] + ranks[1]["n_scored"] == len(requests) - 5  # each missing request once
    assert min(rank["n_scored"] for rank in ranks) > 0  # both processes worked
    stored = [r.key for r in iter_store(separate / "store0")]
    assert sorted(stored) == sorted({r.key for r in requests})  # everything computed anywhere ends in the main's store
    assert _snapshot(separate / "store1") == launched["other_before"]  # the other process never writes


def test_example_units_never_split_an_example():
    requests = requests_for_test()
    units = example_units(requests, per_unit=3)
    assert sorted(i for unit in units for i in unit) == list(range(len(requests)))
    for unit in units:
        examples = {requests[i].example_id for i in unit}
        for example_id in examples:
            assert all(i in unit for i, r in enumerate(requests) if r.example_id == example_id)


def test_single_process_without_launcher_matches_backend():
    backend = backend_for_test()
    requests = requests_for_test()
    assert DistributedBackend(backend).loglikelihood(requests) == backend.loglikelihood(requests)
