"""An in-memory model's identity never serves other weights' results (issue 31, item 2).

The same identity with other weights (an optimizer step on the same object, a restarted run) is scored
afresh, with one warning; the same weights under it resume from the store. Checked against an
independent evaluation of the changed weights under an identity of their own.
"""

from __future__ import annotations

import logging

import pytest

from tests.engine.conftest import tiny_model_and_tokenizer

pytest.importorskip("torch")

TEXT = "The quick brown fox jumps over the lazy dog.\nA second line, so the loss has something to average.\n"


def _loss(model, tokenizer, identity, tmp_path, *, output="out"):
    """Held-out loss of ``model`` under ``identity`` (results stored in ``tmp_path/output/store``), requests computed."""
    import flasheval

    (tmp_path / "held.txt").write_text(TEXT)
    run = flasheval.evaluate(model, tokenizer=tokenizer, identity=identity, heldout=[tmp_path / "held.txt"],
                             output=tmp_path / output, progress=False)
    summary = run.summary.to_json()
    return summary["metrics"]["loss"], summary["n_requests_computed"], summary["fingerprint"]


def _optimizer_step(model) -> None:
    """One SGD step on a language-modelling loss: what a training loop does between two placements."""
    import torch

    model.train()
    ids = torch.tensor([[256, 84, 104, 101, 32, 113, 117, 105, 99, 107, 257]])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()


def test_the_same_identity_with_other_weights_is_scored_afresh_never_served(tmp_path, caplog):
    model, tokenizer = tiny_model_and_tokenizer(seed=5)
    before, computed, key = _loss(model, tokenizer, "run/step-3", tmp_path)
    assert computed == 1
    assert _loss(model, tokenizer, "run/step-3", tmp_path)[1:] == (0, key)  # same weights: resumed from the store

    _optimizer_step(model)  # the same object, other weights, the same identity
    with caplog.at_level(logging.WARNING, logger="flasheval.engine.hf.weights_digest"):
        after, computed, other_key = _loss(model, tokenizer, "run/step-3", tmp_path)
    assert computed == 1 and other_key != key
    fresh, _, _ = _loss(model, tokenizer, "fresh-identity", tmp_path, output="independent")
    assert after == pytest.approx(fresh, abs=1e-9) and abs(after - before) > 1e-3  # the new weights' numbers
    warnings = [r.getMessage() for r in caplog.records if "weights differ" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("identity 'run/step-3': weights differ from those stored "
                                                        "under it (digest ") and warnings[0].endswith("scored afresh")
    # Back to the first weights (a restart from the same checkpoint): their stored results serve, no warning.
    restored, _ = tiny_model_and_tokenizer(seed=5)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flasheval.engine.hf.weights_digest"):
        assert _loss(restored, tokenizer, "run/step-3", tmp_path) == (before, 0, key)
    assert not [r for r in caplog.records if r.name == "flasheval.engine.hf.weights_digest"]


def test_a_one_element_change_changes_the_digest_and_the_same_weights_keep_it():
    import torch

    from flasheval.engine.hf.weights_digest import weights_digest

    model, _ = tiny_model_and_tokenizer(seed=1)
    twin, _ = tiny_model_and_tokenizer(seed=1)
    digest = weights_digest(model)
    assert weights_digest(twin) == digest
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the integer sums do not depend on how the reduction is split
    try:
        assert weights_digest(model) == digest
    finally:
        torch.set_num_threads(threads)
    layer = model.model.layers[1].mlp.down_proj.weight
    position = layer.numel() // 2 + 7  # not one of the sampled positions: only the sum can see it
    with torch.no_grad():
        layer.view(-1)[position] = torch.nextafter(layer.view(-1)[position], torch.tensor(1.0))  # one ulp
    assert weights_digest(model) != digest
    assert weights_digest(twin.to(torch.bfloat16)) != digest


def test_the_identity_record_is_kept_by_the_process_that_writes_the_store(tmp_path):
    from flasheval.engine.hf.in_memory import LoadedModel
    from flasheval.engine.loading import open_cached_backend

    model, tokenizer = tiny_model_and_tokenizer(seed=2)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, identity="run/step-1")
    cached, store, backend = open_cached_backend(loaded, tmp_path, dtype="auto", state=None)  # place's, sweep's way
    store.close()
    assert backend.info.previous_fingerprint is None  # a key without the digest cannot vouch for the weights
    records = list((tmp_path / "identities").glob("*.json"))
    assert len(records) == 1 and "run/step-1" in records[0].read_text()
    one_call = LoadedModel(model=model, tokenizer=tokenizer)  # no identity: nothing kept, nothing digested
    _, store, _ = open_cached_backend(one_call, tmp_path, dtype="auto", state=None)
    store.close()
    assert len(list((tmp_path / "identities").glob("*.json"))) == 1
