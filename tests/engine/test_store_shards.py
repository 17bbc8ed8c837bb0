"""Per-model shards of the results store: the earlier release's single file read and migrated, writers of
different models at once, one writer per model, and opening that never reads other models' results."""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flasheval.engine.store.journal import append_lines
from flasheval.engine.store.results import CachedBackend, ResultStore, iter_store, shard_path
from flasheval.engine.store.shards import _checksum, encode_record
from flasheval.errors import BackendError
from flasheval.hashing import stable_hash
from flasheval.types import (
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    RollingLoglikelihoodResult,
)
from tests.conftest import REPO_ROOT


# --- the single-file store of the earlier release, its encoder verbatim (flasheval/engine/store/results.py before shards)
def _legacy_checksum(record):
    return stable_hash({k: v for k, v in record.items() if k != "crc"}, n_chars=16)


def _legacy_encode(fingerprint, key, result):
    kind_of = {LoglikelihoodResult: "ll", GenerationResult: "gen", RollingLoglikelihoodResult: "roll"}
    record = {"fp": fingerprint, "key": key, "kind": kind_of[type(result)], "result": dataclasses.asdict(result)}
    record["crc"] = _legacy_checksum(record)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


LEGACY_LINE = ('{"fp":"model-x","key":"k00000000","kind":"ll","result":{"task_name":"t","example_id":"1",'
               '"choice_index":0,"logprob_sum":-0.5,"n_tokens":3,"is_greedy":true,"n_context_tokens":0},'
               '"crc":"a1b88b305285c832"}')  # written by the earlier release's store, byte for byte


def _ll(i: int, task: str = "t") -> LoglikelihoodResult:
    return LoglikelihoodResult(task_name=task, example_id=str(i), choice_index=0, logprob_sum=-0.25 * i, n_tokens=1 + i,
                               is_greedy=i % 2 == 0)


def _requests(n: int) -> list[LoglikelihoodRequest]:
    return [LoglikelihoodRequest(task_name="t", example_id=str(i), choice_index=0, context=f"question {i}",
                                 continuation=" answer") for i in range(n)]


class _Counting:
    """A backend that must not be asked: it counts what it computes."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.n_computed = 0

    def loglikelihood(self, requests, *, on_results=None):
        self.n_computed += len(requests)
        return [_ll(99) for _ in requests]


def test_the_earlier_release_encoding_is_pinned_and_shards_keep_it():
    old = _legacy_encode("model-x", "k00000000", LoglikelihoodResult(task_name="t", example_id="1", choice_index=0,
                                                                     logprob_sum=-0.5, n_tokens=3, is_greedy=True))
    assert old == LEGACY_LINE
    results = [_ll(3), GenerationResult(task_name="g", example_id="é", text="ünïcode \n \"q\"", n_generated_tokens=4),
               RollingLoglikelihoodResult(task_name="v", example_id="0", logprob_sum=-12.5, n_tokens=9, n_bytes=40),
               LoglikelihoodResult(task_name="t", example_id="1", choice_index=0, logprob_sum=-0.5, n_tokens=3,
                                   is_greedy=True)]
    for result in results:
        assert encode_record("hf:org/m@abc|bf16", "key", result) == _legacy_encode("hf:org/m@abc|bf16", "key", result)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -0.0, 1e-310, 3, True, None, "ünï\"\\",
                                   (1, [2.5, "x"]), {"b": 1, "a": [None]}])
def test_the_fast_checksum_is_stable_hash(value):
    record = {"fp": "m", "key": "k", "kind": "ll", "result": {"z": value, "a": 1}, "crc": "ignored"}
    assert _checksum(record) == _legacy_checksum(record)


def _write_legacy(folder: Path, requests) -> tuple[Path, list[bytes]]:
    """An earlier release's ``results.jsonl``: models a (3 results) and b (2), a corrupt line 3, a torn tail."""
    lines = [_legacy_encode("a", requests[0].key, _ll(0)), _legacy_encode("b", requests[0].key, _ll(10)),
             _legacy_encode("a", requests[1].key, _ll(1)).replace('"n_tokens":2', '"n_tokens":5'),  # bad checksum
             _legacy_encode("a", requests[2].key, _ll(2)), _legacy_encode("a", requests[3].key, _ll(3)),
             _legacy_encode("b", requests[1].key, _ll(11))]
    path = folder / "results.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode() + lines[0][:30].encode())  # kill -9 mid-write
    return path, [line.encode() for line in lines]


def test_an_earlier_release_store_is_read_then_migrated_once_without_recomputing(tmp_path, caplog):
    requests = _requests(4)
    legacy, lines = _write_legacy(tmp_path, requests)
    before = legacy.read_bytes()
    with ResultStore(tmp_path, fingerprint="a", writer=False) as reader:  # a reader finds them, migrates nothing
        assert len(reader) == 3 and reader.get(requests[3].key) == _ll(3) and reader.get(requests[1].key) is None
    assert legacy.read_bytes() == before and not (tmp_path / "shards").exists()
    with caplog.at_level(logging.INFO), ResultStore(tmp_path, fingerprint="b") as store:
        backend = _Counting("b")
        served = CachedBackend(backend, store).loglikelihood(requests[:2])
    assert backend.n_computed == 0 and [r.logprob_sum for r in served] == [_ll(10).logprob_sum, _ll(11).logprob_sum]
    migrated = [r for r in caplog.records if "migrated" in r.getMessage()]
    assert [r.getMessage() for r in migrated] == [
        f"{legacy}: migrated 5 results of 2 models into {tmp_path / 'shards'}/ (one file per model); "
        "the old file is kept as results.jsonl.migrated"]
    assert f"{legacy}:3: corrupt record skipped" in caplog.text
    assert f"{legacy}:7: torn last record (interrupted write) dropped" in caplog.text
    assert not legacy.exists() and (tmp_path / "results.jsonl.migrated").read_bytes() == before
    assert shard_path(tmp_path, "a").read_bytes().splitlines() == [lines[0], lines[3], lines[4]]  # byte for byte
    assert shard_path(tmp_path, "b").read_bytes().splitlines() == [lines[1], lines[5]]
    caplog.clear()
    with caplog.at_level(logging.INFO), ResultStore(tmp_path, fingerprint="a") as again:
        assert len(again) == 3
    assert "migrated" not in caplog.text and "corrupt" not in caplog.text


def test_an_interrupted_migration_runs_again_without_duplicates(tmp_path, caplog):
    requests = _requests(4)
    _, lines = _write_legacy(tmp_path, requests)
    shard = shard_path(tmp_path, "a")  # the first run was killed part way through model a's shard
    shard.parent.mkdir()
    shard.write_bytes(lines[0] + b"\n" + lines[3][:40])
    with caplog.at_level(logging.WARNING), ResultStore(tmp_path, fingerprint="c") as store:
        assert len(store) == 0
    assert f"{shard}:2: torn last record" in caplog.text
    counts = collections.Counter((r.fingerprint, r.key) for r in iter_store(tmp_path))
    assert sorted(counts.values()) == [1] * 5 and {fp for fp, _ in counts} == {"a", "b"}


def test_a_run_of_the_earlier_release_still_writing_blocks_migration_in_one_line(tmp_path):
    requests = _requests(4)
    _write_legacy(tmp_path, requests)
    fd = os.open(tmp_path / "results.lock", os.O_CREAT | os.O_RDWR)  # the lock the earlier release's writer holds
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(BackendError, match="a run of an earlier flasheval release is writing results.jsonl"):
            ResultStore(tmp_path, fingerprint="a")
        with ResultStore(tmp_path, fingerprint="a", writer=False) as reader:
            assert len(reader) == 3
    finally:
        os.close(fd)
    with ResultStore(tmp_path, fingerprint="a") as store:
        assert len(store) == 3
    assert not (tmp_path / "results.jsonl").exists()


def test_a_record_of_another_model_in_a_shard_is_skipped_with_a_warning(tmp_path, caplog):
    with ResultStore(tmp_path, fingerprint="a") as store:
        store.put_many([("k", _ll(1))])
    shard_path(tmp_path, "b").write_bytes(shard_path(tmp_path, "a").read_bytes())  # a misplaced copy
    with caplog.at_level(logging.WARNING), ResultStore(tmp_path, fingerprint="b") as store:
        assert len(store) == 0
    assert f"{shard_path(tmp_path, 'b')}:1: 1 record(s) of another model ('a') skipped; this file holds 'b'" in caplog.text
    assert [r.fingerprint for r in iter_store(tmp_path)] == ["a"]  # the copy is not listed as a's either


# --- opening costs one model's results, not the store's

_WATCHED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _WATCHED is not None and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, os.PathLike)):
        _WATCHED.append(os.fspath(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one records only while a test watches


def _opened(action) -> tuple[float, list[str]]:
    global _WATCHED
    _WATCHED = []
    try:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start, _WATCHED
    finally:
        _WATCHED = None


@pytest.fixture(scope="module")
def big_store(tmp_path_factory) -> Path:
    """200,000 results of 20 models, written as shards with the store's encoder; model ``m-0`` holds 10,000."""
    folder = tmp_path_factory.mktemp("big")
    result = _ll(7)
    for m in range(20):
        fingerprint = f"m-{m}"
        path = shard_path(folder, fingerprint)
        path.parent.mkdir(exist_ok=True)
        append_lines(path, [encode_record(fingerprint, f"{i:06d}", result) for i in range(10_000)])
    return folder


@pytest.mark.parametrize("writer", [False, True])
def test_opening_an_absent_model_in_a_big_store_reads_nothing_of_the_others(big_store, writer):
    stores = []
    seconds, opened = _opened(lambda: stores.append(ResultStore(big_store, fingerprint="absent", writer=writer)))
    store = stores[0]
    own = {str(store.path), str(store.path.with_suffix(".lock")), str(big_store / "shards")}
    assert len(store) == 0 and set(opened) <= own, opened  # no other shard opened or listed
    assert seconds < 0.2
    _, opened = _opened(lambda: stores.append(ResultStore(big_store, fingerprint="m-0", writer=False)))
    assert len(stores[1]) == 10_000 and set(opened) == {str(shard_path(big_store, "m-0"))}
    for s in stores:
        s.close()
    if writer:
        shard_path(big_store, "absent").unlink()  # leave the fixture as it was


# --- writers at once: different models in parallel, two runs of one model, a migration racing them

@pytest.mark.slow
def test_concurrent_writers_lose_nothing_and_a_second_run_of_a_model_is_refused(tmp_path):
    folder = tmp_path / "store"
    requests = _requests(60)
    folder.mkdir()
    legacy_lines = [_legacy_encode(m, r.key, _ll(i)) for m in ("m0", "m2") for i, r in enumerate(requests[:50])]
    (folder / "results.jsonl").write_text("\n".join(legacy_lines) + "\n")  # all four race to migrate it
    workers = [("m0", "w0"), ("m1", "w1"), ("m2", "w2"), ("m2", "w3")]
    go, stop = tmp_path / "go", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    processes = [subprocess.Popen([sys.executable, "-m", "tests.engine._store_worker", str(folder), model, tag, str(go),
                                   str(stop), str(tmp_path / f"{tag}.json")], cwd=REPO_ROOT, env=env)
                 for model, tag in workers]

    def all_have(suffix: str) -> bool:
        return all((tmp_path / f"{tag}.json{suffix}").exists() for _, tag in workers)

    deadline = time.monotonic() + 60
    while not all_have(".ready") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.write_text("")  # all open at once; the writers write until every open is over and 2 s more have passed
    seen, stop_at = [], None
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        with ResultStore(folder, fingerprint="m0", writer=False) as reader:  # readers work during it all
            seen.append(len(reader))
        if stop_at is None and all_have(".opened"):
            stop_at = time.monotonic() + 2.0
        if stop_at is not None and time.monotonic() > stop_at:
            stop.write_text("")
        time.sleep(0.05)
    assert all(p.wait(timeout=60) == 0 for p in processes)
    reports = {tag: json.loads((tmp_path / f"{tag}.json").read_text()) for _, tag in workers}
    assert seen == sorted(seen) and seen[0] >= 50  # the old file's results are found before, during, after migration
    assert sum(len(r["migrated"]) for r in reports.values()) == 1  # migrated once, by whichever came first
    refused = [tag for tag in ("w2", "w3") if reports[tag]["refused"]]
    assert len(refused) == 1  # the same model twice: the second run is refused at open
    message = reports[refused[0]]["refused"]
    assert "\n" not in message and repr(str(folder)) in message and "another flasheval run holds the shard of model 'm2'" in message
    assert reports[refused[0]]["written"] == []
    counts = collections.Counter((r.fingerprint, r.key) for r in iter_store(folder))
    assert set(counts.values()) == {1}  # nothing written twice
    expected = {(m, r.key) for m in ("m0", "m2") for r in requests[:50]}
    for model, tag in workers:
        assert len(reports[tag]["written"]) > 0 or tag in refused
        expected |= {(model, key) for key in reports[tag]["written"]}
    assert set(counts) == expected  # every reported write is there, exactly once, with a valid checksum
    assert not (folder / "results.jsonl").exists() and (folder / "results.jsonl.migrated").exists()
    for model in ("m0", "m1", "m2"):
        with ResultStore(folder, fingerprint=model) as store:
            assert len(store) == sum(fp == model for fp, _ in expected)


def test_the_float_check_of_stored_values_survives_migration(tmp_path):
    # a NaN log-likelihood (an overflow upstream) is stored, migrated and read back as NaN, not refused as corrupt
    nan = LoglikelihoodResult(task_name="t", example_id="0", choice_index=0, logprob_sum=float("nan"), n_tokens=1,
                              is_greedy=False)
    (tmp_path / "results.jsonl").write_text(_legacy_encode("a", "k", nan) + "\n")
    with ResultStore(tmp_path, fingerprint="a") as store:
        assert math.isnan(store.get("k").logprob_sum)
