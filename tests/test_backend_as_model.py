"""A backend the caller opened, passed as ``model``: the same record as its spec, for ``place`` and ``evaluate``.

The backend is opened with the engine's own function (:func:`flasheval.engine.open_backend`) from the spec the
other call is given; the records are compared whole, with wall-clock seconds and timestamps masked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flasheval
from flasheval.engine import BackendInfo, open_backend, parse_model_spec
from flasheval.errors import InputError
from flasheval.records.run_record import read_record
from tests._tiny_models import save_tiny_models
from tests.placement.test_timing import PLAN  # stages [4, all]: two looks

TASKS = "copa,winograd"
CPU = flasheval.EngineOptions(device="cpu")


@pytest.fixture(scope="module")
def world(tmp_path_factory, task_dir):
    root = tmp_path_factory.mktemp("backend-model")
    models = save_tiny_models(root / "models")
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    flasheval.build_reference([f"m0=hf:{models['m0']}", f"m1=hf:{models['m1']}"], name="tiny", suite="dclm-core",
                              tasks=TASKS, task_dir=task_dir, n_examples=8, seed=7, engine=CPU,
                              output=root / "refs", work_dir=root / "work")
    return {"models": models, "ref": root / "refs" / "tiny", "plan": root / "plan.yaml", "task_dir": task_dir}


def _masked(value: Any, key: str = "") -> Any:
    """``value`` with every wall-clock figure (seconds, rates, timestamps) replaced by a mark."""
    if isinstance(value, dict):
        return {k: _masked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, key) for v in value]
    clock = ("seconds", "per_second", "_per_s", "created", "written", "time", "flops_per")
    return "<clock>" if any(word in key for word in clock) and not isinstance(value, (dict, list)) else value


def _record(path: Path) -> Any:
    record = read_record(path)
    return _masked({"kind": record.kind, "settings": record.settings, "payload": record.payload})


def test_a_backend_placed_gives_the_record_of_its_spec(world, tmp_path):
    spec = f"hf:{world['models']['m2']}"
    by_spec = flasheval.place(spec, world["ref"], plan=world["plan"], engine=CPU, output=tmp_path / "spec")
    backend = open_backend(parse_model_spec(spec), dtype="float32", device="cpu")
    by_backend = flasheval.place(backend, world["ref"], plan=world["plan"], output=tmp_path / "backend")
    assert by_backend.live.spec == spec and by_backend.placement.model_id == "m2"
    assert by_backend.live.requests_computed == by_spec.live.requests_computed > 0
    assert _record(tmp_path / "backend" / "place.json") == _record(tmp_path / "spec" / "place.json")
    with pytest.raises(InputError, match="--device.*backend runs as it was opened|backend runs as it was opened"):
        flasheval.place(backend, world["ref"], plan=world["plan"], engine=CPU)


def test_a_backend_evaluated_gives_the_record_of_its_spec(world, tmp_path):
    spec = f"hf:{world['models']['m2']}"
    options = {"tasks": TASKS, "task_dir": world["task_dir"], "n_examples": 6, "seed": 3}
    flasheval.evaluate(spec, engine=CPU, output=tmp_path / "spec", **options)
    backend = open_backend(parse_model_spec(spec), dtype="float32", device="cpu")
    flasheval.evaluate(backend, output=tmp_path / "backend", **options)
    assert _record(tmp_path / "backend" / "summary.json") == _record(tmp_path / "spec" / "summary.json")
    examples = [(tmp_path / side / "examples.parquet").read_bytes() for side in ("spec", "backend")]
    assert examples[0] == examples[1]
    with pytest.raises(InputError, match="opened backend runs as it is"):
        flasheval.evaluate(backend, engine=flasheval.EngineOptions(batch_size=4), **options)


def test_backends_build_a_reference_and_sweep_as_their_specs(world, tmp_path, task_dir):
    specs = [f"hf:{world['models'][m]}" for m in ("m0", "m1")]
    backends = [open_backend(parse_model_spec(s), dtype="float32", device="cpu") for s in specs]
    options = {"name": "again", "suite": "dclm-core", "tasks": TASKS, "task_dir": task_dir, "n_examples": 8, "seed": 7}
    flasheval.build_reference(backends, **options, output=tmp_path / "refs", work_dir=tmp_path / "work")
    built, again = (flasheval.load_reference(p) for p in (world["ref"], tmp_path / "refs" / "again"))
    assert again.model_ids == built.model_ids == ("m0", "m1")
    for a, b in zip(built.scores, again.scores):
        assert (a == b).all()
    budget = flasheval.Budget(max_examples=200)
    by_spec = flasheval.sweep([f"hf:{world['models']['m2']}"], world["ref"], plan=world["plan"], budget=budget,
                              engine=CPU)
    backend = open_backend(parse_model_spec(f"hf:{world['models']['m2']}"), dtype="float32", device="cpu")
    by_backend = flasheval.sweep([backend], world["ref"], plan=world["plan"], budget=budget)
    assert by_backend.result.checkpoints == by_spec.result.checkpoints


def test_lm_eval_refuses_a_backend_without_token_scoring():
    pytest.importorskip("lm_eval")

    class Plain:  # the protocol's methods, no token-id scoring
        fingerprint = "plain"
        info = BackendInfo(prefix_space=True, batch_size=1, is_loaded=True, load_seconds=0.0, n_parameters=None,
                           dtype=None, device=None)
        plan_batches = loglikelihood = generate = loglikelihood_rolling = staticmethod(lambda *a, **k: [])
        release = notify_load = lockstep = staticmethod(lambda *a, **k: None)

    with pytest.raises(InputError, match="scores no token ids"):
        flasheval.lm_eval(Plain(), tasks="arc_easy")
