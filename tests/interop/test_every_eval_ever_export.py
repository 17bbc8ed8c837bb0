"""Every Eval Ever records out: HELM Lite replay placements (a run's two checkpoints, one place record) and a replayed
evaluation, exported; every record validates against the coalition's two schemas (``../shared``, draft-07), and the
records import back equal to the source: each example's score is the HELM Lite reference's at that example (read
here from the reference, not from the export), and the placement's rank interval, tier and compute are the place
record's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flasheval
from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.placement.results import Budget
from tests.interop.conftest import schema_errors

A, B = "meta/llama-3-70b", "meta/llama-3-8b"


@pytest.fixture(scope="module")
def helm():
    return flasheval.load_reference("helm_lite")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Two checkpoints (replayed HELM Lite models) of one run, capped at the first look: the same examples each."""
    run = tmp_path_factory.mktemp("eee") / "run"
    for step, model in ((100, A), (200, B)):
        flasheval.place_checkpoint(f"replay:{model}", run=run, step=step, reference="helm_lite",
                                   budget=Budget(max_examples=120))
    return run


def _logs(folder: Path) -> dict[str, dict]:
    """Every aggregate log under ``folder``, by model id."""
    return {(log := json.loads(p.read_text(encoding="utf-8")))["model_info"]["id"]: log
            for p in sorted(folder.rglob("*.json"))}


def test_a_runs_checkpoints_export_valid_and_import_back_equal(run_dir, helm, tmp_path, eee_validators):
    done = flasheval.export(run_dir, format="every-eval-ever", output=tmp_path / "eee", organization="test lab")
    assert done.model_ids == (A, B) and len(done.logs) == 2
    assert schema_errors(tmp_path / "eee", eee_validators) == []
    records = {m: json.loads((run_dir / "checkpoints" / f"step-{s}" / "place.json").read_text())["payload"]
               for s, m in ((100, A), (200, B))}
    assert records[A]["stages"][-1]["n_examples"] == records[B]["stages"][-1]["n_examples"]  # one look each
    for model, log in _logs(tmp_path / "eee").items():  # the placement, where the format keeps extra data
        p, extra = records[model], log["eval_library"]["additional_details"]
        assert json.loads(extra["rank_interval"]) == p["interval"] and extra["tier"] == p["tier"]
        assert int(extra["rank"]) == p["rank"] and int(extra["n_examples"]) == p["compute"]["n_examples"] == 120
        assert float(extra["saving"]) == pytest.approx(p["compute"]["saving"])
        assert int(extra["step"]) == (100 if model == A else 200)
        assert log["source_metadata"]["source_organization_name"] == "test lab"
    back = flasheval.import_reference(tmp_path / "eee", format="every-eval-ever", name="back",
                                      output=tmp_path / "refs").written
    ref = flasheval.load_reference(back.path)
    assert ref.model_ids == (A, B) and ref.dataset_names == helm.dataset_names
    assert sum(len(ids) for ids in ref.example_ids) == 120
    for d, ids in enumerate(ref.example_ids):  # every score is the reference's at that example
        cols = [helm.example_ids[d].index(i) for i in ids]
        for model in (A, B):
            np.testing.assert_array_equal(ref.scores[d][ref.index(model)], helm.scores[d][helm.index(model)][cols])


def test_one_place_record_through_the_command_line(run_dir, helm, tmp_path, capsys, eee_validators):
    record = run_dir / "checkpoints" / "step-200" / "place.json"
    assert main(["export", "--format", "every-eval-ever", str(record), "--output", str(tmp_path / "one")]) == 0
    assert "wrote 1 Every Eval Ever log (1 model, 120 instance records)" in capsys.readouterr().out
    assert schema_errors(tmp_path / "one", eee_validators) == []
    lines = [json.loads(x) for p in (tmp_path / "one").rglob("*.jsonl") for x in p.read_text().splitlines()]
    row = helm.index(B)
    for line in lines:
        d = helm.dataset_names.index(line["evaluation_name"])
        assert line["evaluation"]["score"] == helm.scores[d][row][helm.example_ids[d].index(line["sample_id"])]
    # exported again: the same files, replaced (the uuid comes from the evaluation id)
    first = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.*"))
    assert main(["export", "--format", "every-eval-ever", str(record.parent), "--output", str(tmp_path / "one")]) == 0
    assert sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.*")) == first


def test_an_evaluation_exports_every_example_with_its_score(tmp_path, eee_validators):
    run = flasheval.evaluate(f"replay:helm_lite/{A}", tasks=["helm_lite/mmlu", "helm_lite/gsm8k"], n_examples=12,
                             output=tmp_path / "eval")
    done = flasheval.export(tmp_path / "eval", format="every-eval-ever", output=tmp_path / "eee")
    assert done.n_examples == 24 and schema_errors(tmp_path / "eee", eee_validators) == []
    source = pd.read_parquet(run.examples_path)
    lines = pd.DataFrame([{"task_name": x["evaluation_name"], "example_id": x["sample_id"],
                           "score": x["evaluation"]["score"], "correct": x["evaluation"]["is_correct"]}
                          for p in (tmp_path / "eee").rglob("*.jsonl") for x in map(json.loads, p.read_text().splitlines())])
    key = ["task_name", "example_id"]
    pd.testing.assert_frame_equal(lines.sort_values(key).reset_index(drop=True),
                                  source[[*key, "score", "correct"]].sort_values(key).reset_index(drop=True))
    (log,) = _logs(tmp_path / "eee").values()
    means = {r["evaluation_name"]: r["score_details"]["score"] for r in log["evaluation_results"]}
    assert means == pytest.approx(source.groupby("task_name")["score"].mean().to_dict())


def test_what_cannot_be_exported_is_refused_in_one_line(run_dir, tmp_path, capsys):
    with pytest.raises(InputError, match="required: the folder the records go to"):
        flasheval.export(run_dir, format="every-eval-ever", output=None)
    with pytest.raises(InputError, match="unknown export format 'helm'"):
        flasheval.export(run_dir, format="helm", output=tmp_path)
    assert main(["export", "--format", "every-eval-ever", str(tmp_path), "--output", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a place or evaluate record's folder, a run folder" in err
    record = json.loads((run_dir / "checkpoints" / "step-100" / "place.json").read_text())
    record["payload"]["reference"] = "no-such-reference"
    (tmp_path / "place.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="reference 'no-such-reference'.*give its folder"):
        flasheval.export(tmp_path / "place.json", format="every-eval-ever", output=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    # two evaluations that would land in one file (the same model placed twice within a second): nothing written
    from flasheval.interop.every_eval_ever import DatasetScores, ModelScores, write_records

    one = ModelScores(model_id="org/m", benchmark="b", metric="acc", created=1.0, datasets=(
        DatasetScores(dataset="d", example_ids=("x",), scores=np.array([1.0])),))
    with pytest.raises(InputError, match="two evaluations would be written as data/b/org/m/"):
        write_records([one, one], tmp_path / "o", organization="o")
    assert not (tmp_path / "o").exists()


def test_a_live_placement_exports_the_examples_its_record_holds(run_dir, tmp_path, eee_validators):
    # A live record's examples are its own (live.examples: task, id, score, tokens), not the reference's: here a copy
    # of a replayed record given such an entry, with scores and tokens no reference holds.
    record = json.loads((run_dir / "checkpoints" / "step-100" / "place.json").read_text())
    rows = [{"task_name": t, "example_id": f"e{i}", "score": s, "n_tokens": 10 + i}
            for i, (t, s) in enumerate([("alpha", 1.0), ("alpha", 0.0), ("beta", 0.5)])]
    record["payload"]["live"] = {"fingerprint": "sha256:abc", "seconds": 1.0, "examples": rows}
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "place.json").write_text(json.dumps(record))
    flasheval.export(tmp_path / "live", format="every-eval-ever", output=tmp_path / "eee")
    assert schema_errors(tmp_path / "eee", eee_validators) == []
    lines = [json.loads(x) for p in (tmp_path / "eee").rglob("*.jsonl") for x in p.read_text().splitlines()]
    assert [(x["evaluation_name"], x["sample_id"], x["evaluation"]["score"], x["token_usage"]["total_tokens"])
            for x in lines] == [(r["task_name"], r["example_id"], r["score"], r["n_tokens"]) for r in rows]
    (log,) = _logs(tmp_path / "eee").values()
    assert {r["evaluation_name"]: r["metric_config"]["score_type"] for r in log["evaluation_results"]} == {
        "alpha": "binary", "beta": "continuous"}
