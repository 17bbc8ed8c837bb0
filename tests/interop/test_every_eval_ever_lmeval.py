"""An lm-eval bridge evaluation of two tiny models (``flasheval.lm_eval`` with ``log_samples``, one output folder),
exported as Every Eval Ever records: valid under the coalition's schemas, and imported back equal to the same folder
imported as lm-eval sample logs (``--format lm-eval-samples``, the independent path): the same models, tasks, doc
ids and scores, doc for doc."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flasheval
from tests._tiny_models import save_tiny_models
from tests.interop.conftest import schema_errors
from tests.lmeval._tasks import write_tasks

pytestmark = pytest.mark.slow


def test_an_lm_eval_bridge_evaluation_round_trips(tmp_path, eee_validators):
    pytest.importorskip("lm_eval", reason='lm-eval not installed: pip install -e ".[lm-eval]"')
    lmeval_tasks = write_tasks(tmp_path / "tasks")
    tiny = save_tiny_models(tmp_path / "models", seeds=(0, 1))
    out = tmp_path / "lm-eval"
    for name, folder in tiny.items():
        flasheval.lm_eval(f"{name}=hf:{folder}", tasks=["synth_arith"], include_path=lmeval_tasks,
                          log_samples=True, output=out, engine=flasheval.EngineOptions(device="cpu"), progress=False)
    done = flasheval.export(out, format="every-eval-ever", output=tmp_path / "eee")
    assert sorted(done.model_ids) == ["m0", "m1"] and done.n_examples == 2 * 8
    assert schema_errors(tmp_path / "eee", eee_validators) == []
    log = json.loads(done.logs[0].read_text(encoding="utf-8"))
    assert log["eval_library"]["name"] == "lm_eval" and {r["metric_config"]["metric_id"]
                                                         for r in log["evaluation_results"]} == {"acc"}
    back = flasheval.import_reference(tmp_path / "eee", format="every-eval-ever", name="back", output=tmp_path / "r")
    direct = flasheval.import_reference(out, format="lm-eval-samples", name="direct", output=tmp_path / "r")
    a, b = (flasheval.load_reference(x.written.path) for x in (back, direct))
    assert (a.model_ids, a.dataset_names, a.example_ids) == (b.model_ids, b.dataset_names, b.example_ids)
    for x, y in zip(a.scores, b.scores):
        np.testing.assert_array_equal(x, y)
    assert any(s.min() < s.max() for s in a.scores)  # the scores are not all alike (a mix-up would show)
