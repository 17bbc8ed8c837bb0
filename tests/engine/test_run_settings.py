"""Fingerprints cover the run settings (device type, attention, torch / transformers versions, padding): a result
computed under other settings is never served; a store of the previous release is adopted once, then kept apart."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from flasheval.engine.base import SCORING_VERSION
from flasheval.engine.hf.fingerprint import RunSettings, model_fingerprint, path_digest
from flasheval.engine.loading import behind_store, open_model
from flasheval.engine.specs import parse_named_models
from flasheval.engine.store.results import ResultStore, shard_path
from flasheval.hashing import stable_hash
from flasheval.types import LoglikelihoodRequest, LoglikelihoodResult
from tests.engine.conftest import tiny_model_and_tokenizer

CPU = RunSettings(device_type="cpu", attn_implementation="sdpa", torch_version="2.13.0",
                  transformers_version="5.24.0", pad_multiple=16)
REQUESTS = [LoglikelihoodRequest(task_name="t", example_id=str(i), choice_index=c, context=f"question {i}:",
                                 continuation=f" answer {c}") for i in range(2) for c in range(2)]


@pytest.mark.parametrize("change", [dict(device_type="cuda"), dict(attn_implementation="eager"),
                                    dict(torch_version="2.14.0"), dict(transformers_version="5.25.0"),
                                    dict(pad_multiple=512)], ids=lambda c: next(iter(c)))
def test_every_run_setting_changes_the_fingerprint(change):
    key = dict(source="local", content_digest="x", revision=None, dtype="float32", max_length=64, scoring_version="3")
    cpu = model_fingerprint(**key, settings=CPU)
    assert model_fingerprint(**key, settings=dataclasses.replace(CPU, **change)) != cpu
    assert model_fingerprint(**key, settings=CPU) == cpu != model_fingerprint(**key)  # stable; not the old key


def _score(folder: Path, store_dir: Path) -> tuple[list[float], int, str]:
    """Open the model as every command does (weights deferred) behind the store; scores, requests computed, key."""
    (model,) = parse_named_models([f"m=hf:{folder}"])
    backend = open_model(model, dtype="float32", device="cpu", batch_size=4)
    cached, store = behind_store(backend, store_dir)
    try:
        scores = [r.logprob_sum for r in cached.loglikelihood(REQUESTS)]
    finally:
        store.close()
    return scores, cached.n_computed, cached.fingerprint


def test_a_result_stored_under_another_library_version_is_not_served(tiny_folder, tmp_path, monkeypatch):
    import torch

    first, computed, key = _score(tiny_folder, tmp_path)
    assert computed == len(REQUESTS)
    assert _score(tiny_folder, tmp_path)[1:] == (0, key)  # the same settings: served
    monkeypatch.setattr(torch, "__version__", "2.99.0+faked")  # the version this process reports
    again, computed, other_key = _score(tiny_folder, tmp_path)
    assert other_key != key and computed == len(REQUESTS)  # computed again, not served from the CPU run of 2.13
    assert again == pytest.approx(first, abs=1e-5)  # (the same kernels here, of course)
    monkeypatch.undo()
    assert _score(tiny_folder, tmp_path)[1:] == (0, key)  # each setting keeps its own results


def test_an_in_memory_model_is_keyed_by_its_attention_implementation():
    pytest.importorskip("torch")
    from flasheval.engine.hf.in_memory import LoadedModel

    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, identity="run-7/step-1")
    sdpa = open_model(loaded, dtype="auto")
    model.set_attn_implementation("eager")
    eager = open_model(loaded, dtype="auto")
    assert eager.fingerprint != sdpa.fingerprint
    # No earlier key to adopt from: it held no digest of the weights, so it cannot say which weights computed it.
    assert eager.info.previous_fingerprint is None and sdpa.info.previous_fingerprint is None


def _previous_release_key(folder: Path, scoring_version: str = SCORING_VERSION) -> str:
    """The fingerprint the release before run settings gave this model (its formula, verbatim)."""
    return stable_hash({"source": "local", "content": path_digest(folder), "revision": None, "dtype": "float32",
                        "max_length": 64, "scoring_version": scoring_version})


def test_a_store_of_the_previous_release_is_adopted_once_then_kept_to_its_settings(tiny_folder, tmp_path,
                                                                                   monkeypatch, caplog):
    import torch

    old_key = _previous_release_key(tiny_folder)
    marked = [LoglikelihoodResult(task_name=r.task_name, example_id=r.example_id, choice_index=r.choice_index,
                                  logprob_sum=7.0 + i, n_tokens=2, is_greedy=False)  # > 0: no model computes these
              for i, r in enumerate(REQUESTS)]
    with ResultStore(tmp_path, fingerprint=old_key) as store:  # what the previous release wrote
        store.put_many([(r.key, result) for r, result in zip(REQUESTS, marked)])
    with caplog.at_level(logging.WARNING):
        served, computed, key = _score(tiny_folder, tmp_path)
    assert (served, computed) == ([m.logprob_sum for m in marked], 0)  # the stored results, nothing computed
    assert "adopted 4 results stored by an earlier flasheval release" in caplog.text
    old_shard = shard_path(tmp_path, old_key)
    assert not old_shard.exists() and old_shard.with_name(old_shard.name + ".adopted").exists()
    monkeypatch.setattr(torch, "__version__", "2.99.0+faked")  # another setting opens the store afterwards
    other, computed, _ = _score(tiny_folder, tmp_path)
    assert computed == len(REQUESTS) and max(other) < 0  # computed, not the adopted (impossible) results
    monkeypatch.undo()
    assert _score(tiny_folder, tmp_path)[:2] == ([m.logprob_sum for m in marked], 0)  # the adopting settings keep them


def test_a_store_of_an_older_scoring_version_is_not_adopted(tiny_folder, tmp_path):
    """Version 3's results (one row per choice) differ from version 4's in the last bits: computed again."""
    old_key = _previous_release_key(tiny_folder, scoring_version=str(int(SCORING_VERSION) - 1))
    marked = [LoglikelihoodResult(task_name=r.task_name, example_id=r.example_id, choice_index=r.choice_index,
                                  logprob_sum=7.0, n_tokens=2, is_greedy=False) for r in REQUESTS]
    with ResultStore(tmp_path, fingerprint=old_key) as store:
        store.put_many([(r.key, result) for r, result in zip(REQUESTS, marked)])
    served, computed, _ = _score(tiny_folder, tmp_path)
    assert computed == len(REQUESTS) and max(served) < 0
    assert shard_path(tmp_path, old_key).exists()  # left where it was, not renamed as adopted


def test_lm_evals_convention_key_carries_the_previous_key_as_the_previous_release_combined_it():
    pytest.importorskip("torch")
    from flasheval.engine.hf.backend import HFBackend
    from flasheval.lmeval.conventions import CONVENTION_VERSION, LmEvalConventionBackend

    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    inner = HFBackend(model, tokenizer, fingerprint="with-settings", previous_fingerprint="old-key")
    convention = LmEvalConventionBackend(inner, max_length=32)
    assert convention.info.previous_fingerprint == stable_hash(("old-key", CONVENTION_VERSION, 32))
    assert convention.fingerprint == stable_hash(("with-settings", CONVENTION_VERSION, 32))
    assert dataclasses.replace(convention.info, previous_fingerprint="old-key") == inner.info


def test_an_old_shard_another_run_writes_is_left_to_a_later_run(tmp_path, caplog):
    import os

    from flasheval.engine.store.adoption import adopt_shard
    from flasheval.engine.store.shards import lock_shard

    with ResultStore(tmp_path, fingerprint="old") as store:
        store.put_many([("k", LoglikelihoodResult(task_name="t", example_id="0", choice_index=0, logprob_sum=1.0,
                                                  n_tokens=1, is_greedy=True))])
    held = lock_shard(tmp_path, "old")  # as a run of the earlier release writing it holds it
    try:
        with caplog.at_level(logging.WARNING):
            assert adopt_shard(tmp_path, previous="old", fingerprint="new") == 0
        assert "not adopted now" in caplog.text
    finally:
        os.close(held)
    assert adopt_shard(tmp_path, previous="old", fingerprint="new") == 1


def test_the_pad_multiple_follows_the_dtype_and_keys_the_results(tiny_folder):
    """No rounding in float32, 16 in a 2-byte type: planned from the dtype before any weight loads."""
    from flasheval.engine.hf.loading import plan_hf_load

    plans = {dtype: plan_hf_load(str(tiny_folder), dtype=dtype, device="cpu") for dtype in ("float32", "bfloat16")}
    assert {d: p.settings.pad_multiple for d, p in plans.items()} == {"float32": 1, "bfloat16": 16}
    assert plan_hf_load(str(tiny_folder), dtype="float32", device="cpu", pad_multiple=16).fingerprint != \
        plans["float32"].fingerprint
