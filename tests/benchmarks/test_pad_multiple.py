"""The pad-multiple benchmark's two measurements (benchmarks/pad_multiple.py) on the tiny Llama, where the answer is
known: in bf16 the batch effect is 0 at multiple 16 and visible at 1; rounding never runs fewer columns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import pad_multiple as pm
from tests.engine.conftest import tiny_model_and_tokenizer
from tests.engine.test_batch_invariance import _requests


def test_batch_effect_and_columns_on_the_tiny_llama():
    torch = pytest.importorskip("torch")
    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=2048)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # logits over several nats: bf16 rounding shows
    loaded = SimpleNamespace(model=model.to(torch.bfloat16), tokenizer=tokenizer, max_length=2048, fingerprint="x")
    requests = _requests((1, 12))
    largest, moved = pm.batch_effect(loaded, requests, 16)
    assert (largest, moved) == (0.0, 0)
    largest, moved = pm.batch_effect(loaded, requests, 1)
    assert largest > 1e-4 and 0 < moved <= len(requests)
    rounded, unrounded = (pm.columns_per_token(loaded, requests, m) for m in (16, 1))
    assert rounded > unrounded >= 1.0
