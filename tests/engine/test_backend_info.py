"""The backend contract: the methods plus one BackendInfo, stated by every backend and read without defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flasheval.engine.base import BackendInfo
from flasheval.engine.coordination.distributed import DistributedBackend
from flasheval.engine.loading import behind_store, n_parameters, open_model
from flasheval.engine.specs import parse_named_models
from flasheval.types import LoglikelihoodRequest

PACKAGE = Path(__file__).resolve().parents[2] / "flasheval"
REQUESTS = [LoglikelihoodRequest(task_name="t", example_id="0", choice_index=c, context="question:",
                                 continuation=f" answer {c}") for c in range(2)]


def test_a_deferred_backend_reports_before_and_after_its_weights_load(tiny_folder, tmp_path):
    (model,) = parse_named_models([f"m=hf:{tiny_folder}"])
    backend = open_model(model, dtype="float32", device="cpu", batch_size=4)
    before = backend.info
    assert (before.is_loaded, before.load_seconds, before.forward_tokens) == (False, 0.0, 0)
    assert (before.dtype, before.device, before.batch_size, before.prefix_space) == ("float32", "cpu", 4, False)
    cached, store = behind_store(backend, tmp_path)
    try:
        cached.loglikelihood(REQUESTS)
    finally:
        store.close()
    after = backend.info
    assert after.is_loaded and after.load_seconds > 0 and after.forward_tokens > 0 and after.forward_seconds > 0
    # counted on an empty copy before the load, on the loaded model after: the same number, tied weights once
    assert after.n_parameters == before.n_parameters == sum(p.numel() for p in backend.backend.model.parameters())
    assert cached.info == after == DistributedBackend(backend).info  # wrappers report the wrapped backend's
    assert n_parameters(cached) == after.n_parameters
    assert backend.backend.info.previous_fingerprint == after.previous_fingerprint != backend.fingerprint
    cached.release()  # through the wrapper: the weights go, the report says so
    assert not backend.info.is_loaded


def test_backend_info_refuses_impossible_values():
    with pytest.raises(ValueError, match="batch_size"):
        BackendInfo(prefix_space=True, batch_size=0, is_loaded=True, load_seconds=0.0, n_parameters=1, dtype=None,
                    device=None)
    with pytest.raises(ValueError, match="seconds"):
        BackendInfo(prefix_space=True, batch_size=1, is_loaded=True, load_seconds=-1.0, n_parameters=1, dtype=None,
                    device=None)


def test_no_backend_attribute_is_guessed_or_forwarded_in_the_package():
    """``getattr`` / ``hasattr`` on a backend (a default standing in for what it does not say), ``__getattr__``
    forwarding, or a backend's private parts read from another module: the contract is BackendInfo."""
    probe = re.compile(r"(getattr|hasattr)\((self\.)?_?(backend|cached|engine|opened|hf)\b")
    private = re.compile(r"\b(backend|_backend|cached|hf)\.(_model|_pass|_limits|_tokenizer|_plan)\b")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if probe.search(line) or private.search(line) or "def __getattr__" in line and "engine" in path.relative_to(PACKAGE).parts:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert found == []
