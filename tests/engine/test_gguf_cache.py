"""A GGUF file is parsed once: later loads read its converted folder, with the same tensors, tokenizer,
logits and fingerprint (flasheval/engine/hf/gguf_cache.py)."""

from __future__ import annotations

import time

import pytest

from flasheval.engine.hf import gguf_cache
from flasheval.engine.hf.loading import load_planned, plan_hf_load

pytestmark = pytest.mark.slow  # two real SmolLM2 loads (one from the GGUF file)

TEXT = "The cat sat on the mat. Ünïcödé, 123 <|im_end|>"


def _load(path):
    start = time.perf_counter()
    plan = plan_hf_load(str(path.parent), gguf_file=path.name, dtype="float32", device="cpu")
    backend = load_planned(plan, batch_size=4)
    return plan, backend, time.perf_counter() - start


def test_second_load_reads_the_converted_folder_and_gives_the_same_model(smollm_path, tmp_path, monkeypatch):
    import hashlib

    import torch

    monkeypatch.setenv(gguf_cache.GGUF_CACHE_ENV, str(tmp_path))
    first_plan, first, first_s = _load(smollm_path)
    assert first_plan.converted is None
    with open(smollm_path, "rb") as fh:  # the key is the whole file's SHA-256, computed independently here
        key = hashlib.sha256(fh.read()).hexdigest()
    assert [p.name for p in tmp_path.iterdir()] == [f"{key}-float32"]
    second_plan, second, second_s = _load(smollm_path)
    assert second_plan.converted == str(tmp_path / f"{key}-float32")
    assert second_plan.fingerprint == first_plan.fingerprint  # stored results keep their keys
    a, b = first.model.state_dict(), second.model.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    ids = first.tokenizer(TEXT)["input_ids"]
    assert second.tokenizer(TEXT)["input_ids"] == ids and len(second.tokenizer) == len(first.tokenizer)
    assert (second.tokenizer.bos_token, second.tokenizer.eos_token) == (first.tokenizer.bos_token,
                                                                       first.tokenizer.eos_token)
    with torch.inference_mode():
        x = torch.tensor([ids])
        assert torch.equal(first.model(x).logits, second.model(x).logits)
    assert second_s <= first_s / 3, f"second load {second_s:.1f} s, first {first_s:.1f} s"


def test_cache_off_reads_nothing_and_writes_nothing(smollm_path, tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_cache.GGUF_CACHE_ENV, "off")
    assert gguf_cache.content_key(smollm_path) is None
    plan = plan_hf_load(str(smollm_path.parent), gguf_file=smollm_path.name, dtype="float32", device="cpu")
    assert plan.converted is None and plan.gguf_key is None


def test_a_half_written_folder_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_cache.GGUF_CACHE_ENV, str(tmp_path))
    (tmp_path / "abc-float32").mkdir()  # a write killed before its completion marker
    (tmp_path / "abc-float32" / "config.json").write_text("{}")
    assert gguf_cache.converted_folder("abc", "float32") is None
    monkeypatch.setenv(gguf_cache.GGUF_CACHE_ENV, "off")
    assert gguf_cache.gguf_cache_folder() is None
