"""Results store: durable appends, torn-record recovery, fingerprints kept apart, one writer per model, caching wrapper.

Migration of the old single file, concurrent writers and the cost of opening: ``test_store_shards.py``."""

from __future__ import annotations

import logging

import pytest

from flasheval.engine.store.results import CachedBackend, ResultStore, iter_store, shard_path
from flasheval.errors import BackendError
from flasheval.types import LoglikelihoodRequest, LoglikelihoodResult, RollingLoglikelihoodResult
from tests.engine.conftest import tiny_model_and_tokenizer


def _result(i: int) -> LoglikelihoodResult:
    return LoglikelihoodResult(task_name="t", example_id=str(i), choice_index=0, logprob_sum=-0.5 * i, n_tokens=i + 1, is_greedy=i % 2 == 0)


def test_results_survive_reopen_and_fingerprints_never_mix(tmp_path):
    with ResultStore(tmp_path, fingerprint="model-a") as store:
        store.put_many([(f"k{i}", _result(i)) for i in range(5)])
        store.put_many([("roll", RollingLoglikelihoodResult(task_name="v", example_id="0", logprob_sum=-3.0, n_tokens=2, n_bytes=9))])
    with ResultStore(tmp_path, fingerprint="model-b") as other:
        assert len(other) == 0
        other.put_many([("k0", _result(9))])
    with ResultStore(tmp_path, fingerprint="model-a") as again:
        assert len(again) == 6
        assert again.get("k3") == _result(3)
        assert again.get("roll").n_bytes == 9
        assert again.get("missing") is None
    # one shard per model, named by a hash of the fingerprint, the full fingerprint in every record
    assert sorted(p.name for p in (tmp_path / "shards").glob("*.jsonl")) == sorted(
        shard_path(tmp_path, fp).name for fp in ("model-a", "model-b"))
    assert {(r.fingerprint, r.path) for r in iter_store(tmp_path)} == {
        ("model-a", shard_path(tmp_path, "model-a")), ("model-b", shard_path(tmp_path, "model-b"))}
    assert not (tmp_path / "results.jsonl").exists()


def test_torn_last_record_is_dropped_with_warning_and_other_rows_kept(tmp_path, caplog):
    with ResultStore(tmp_path, fingerprint="m") as store:
        store.put_many([(f"k{i}", _result(i)) for i in range(4)])
    path = shard_path(tmp_path, "m")
    intact = path.read_bytes()
    last_line = intact.splitlines(keepends=True)[-1]
    path.write_bytes(intact + last_line[: len(last_line) // 2])  # a write cut short by kill -9
    with caplog.at_level(logging.WARNING), ResultStore(tmp_path, fingerprint="m") as store:
        assert len(store) == 4
        store.put_many([("k9", _result(9))])
    assert f"{path}:5: torn last record" in caplog.text
    with ResultStore(tmp_path, fingerprint="m") as store:
        assert len(store) == 5 and store.get("k9") == _result(9)
    assert path.read_bytes().startswith(intact)


def test_corrupt_line_in_the_middle_is_skipped_not_the_rest(tmp_path, caplog):
    with ResultStore(tmp_path, fingerprint="m") as store:
        store.put_many([(f"k{i}", _result(i)) for i in range(3)])
    path = shard_path(tmp_path, "m")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"logprob_sum":-0.5', b'"logprob_sum":-9.5')  # checksum no longer matches
    path.write_bytes(b"".join(lines))
    with caplog.at_level(logging.WARNING), ResultStore(tmp_path, fingerprint="m") as store:
        assert store.get("k1") is None
        assert store.get("k0") == _result(0) and store.get("k2") == _result(2)
    assert f"{path}:2: corrupt record skipped" in caplog.text


def test_second_writer_of_a_model_is_refused_in_one_line_but_other_models_and_readers_may_open(tmp_path):
    with ResultStore(tmp_path, fingerprint="m") as store:
        store.put_many([("k0", _result(0))])
        with pytest.raises(BackendError) as refused:
            ResultStore(tmp_path, fingerprint="m")
        message = str(refused.value)
        assert "\n" not in message and repr(str(tmp_path)) in message
        assert "another flasheval run holds the shard of model 'm'" in message
        with ResultStore(tmp_path, fingerprint="n") as other:  # another model writes at the same time
            other.put_many([("k0", _result(5))])
        reader = ResultStore(tmp_path, fingerprint="m", writer=False)
        reader.put_many([("k1", _result(1))])  # readers only remember, never write
        assert reader.get("k0") == _result(0)
    with ResultStore(tmp_path, fingerprint="m") as store:  # the lock went with the first store
        assert store.get("k1") is None and len(store) == 1
    with ResultStore(tmp_path, fingerprint="n", writer=False) as other:
        assert other.get("k0") == _result(5)


def test_a_reader_of_an_empty_folder_creates_nothing(tmp_path):
    with ResultStore(tmp_path / "none", fingerprint="m", writer=False) as reader:
        assert len(reader) == 0
    assert not (tmp_path / "none").exists()


@pytest.fixture(scope="module")
def tiny_backend():
    pytest.importorskip("torch")
    from flasheval.engine.hf.backend import HFBackend

    model, tokenizer = tiny_model_and_tokenizer(seed=1)
    return HFBackend(model, tokenizer, fingerprint="tiny-1", batch_size=3)


def _requests(n: int) -> list[LoglikelihoodRequest]:
    return [
        LoglikelihoodRequest(task_name="t", example_id=str(i // 2), choice_index=i % 2, context=f"context {i // 2}", continuation=f" choice {i % 2}")
        for i in range(n)
    ]


def test_cached_backend_computes_each_request_once(tmp_path, tiny_backend):
    requests = _requests(10)
    with ResultStore(tmp_path, fingerprint=tiny_backend.fingerprint) as store:
        cached = CachedBackend(tiny_backend, store)
        first = cached.loglikelihood(requests[:6])
        assert cached.n_computed == 6
        seen = []
        both = cached.loglikelihood(requests, on_results=seen.extend)
        assert cached.n_computed == 10  # only the 4 new ones
        assert sorted(i for i, _ in seen) == list(range(10))
    assert both[:6] == first
    assert both == tiny_backend.loglikelihood(requests)
    with ResultStore(tmp_path, fingerprint=tiny_backend.fingerprint) as store:
        cached = CachedBackend(tiny_backend, store)
        # same content under another task / example id: served from the store, re-labelled
        relabelled = [LoglikelihoodRequest(task_name="u", example_id="x", choice_index=r.choice_index, context=r.context, continuation=r.continuation) for r in requests[:2]]
        served = cached.loglikelihood(relabelled)
        assert cached.n_computed == 0
        assert [(r.task_name, r.example_id) for r in served] == [("u", "x"), ("u", "x")]
        assert [r.logprob_sum for r in served] == [r.logprob_sum for r in both[:2]]


def test_cached_backend_rejects_a_store_of_another_model(tmp_path, tiny_backend):
    with ResultStore(tmp_path, fingerprint="other") as store, pytest.raises(ValueError, match="fingerprints differ"):
        CachedBackend(tiny_backend, store)
