"""Reading the runs table: CSV / parquet / JSON / run records, column aliases, file:line:field errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from flasheval.errors import InputError, UnknownNameError
from flasheval.records.run_record import write_record
from flasheval.scaling.runs import read_runs, read_runs_files

CSV = "model_id,params_N,tokens_D,dataset,loss,err_avg17,fit\na,1e7,2e8,x,5.1,0.8,True\nb,1e8,2e9,x,4.0,0.7,False\n"


def test_csv_with_aliases(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(CSV)
    table = read_runs(path)
    assert table.model_ids == ("a", "b") and table.datasets == ("x", "x")
    np.testing.assert_allclose(table.compute, [6 * 1e7 * 2e8, 6 * 1e8 * 2e9])
    np.testing.assert_allclose(table.multiplier, [20.0, 20.0])
    np.testing.assert_allclose(table.values["loss"], [5.1, 4.0])
    np.testing.assert_array_equal(table.flags["fit"], [True, False])
    assert table.sources[1] == (str(path), 3)


def test_parquet_and_json_record_and_list_concatenate(tmp_path):
    pd.DataFrame({"model": ["p"], "params": [3e8], "tokens": [6e9], "loss": [3.3]}).to_parquet(tmp_path / "r.parquet")
    write_record(tmp_path / "eval.json", kind="evaluate",
                 payload={"model_id": "r", "params": 1e9, "tokens": 2e10, "metrics": {"loss": 2.9, "err_avg17": 0.6}})
    (tmp_path / "list.json").write_text(json.dumps([{"name": "s", "n_params": 2e9, "n_tokens": 4e10}]))
    table = read_runs_files([tmp_path / "r.parquet", tmp_path / "eval.json", tmp_path / "list.json"])
    assert table.model_ids == ("p", "r", "s")
    np.testing.assert_allclose(table.values["loss"][:2], [3.3, 2.9])
    assert np.isnan(table.values["loss"][2]) and table.values["err_avg17"][1] == 0.6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_id,tokens\na,1e9\n", "runs.csv:2: field 'params': run 'a': must be a positive number, no value"),
        ("model_id,params,tokens\na,1e7,2e8\nb,1e8,0\n", "runs.csv:3: field 'tokens': run 'b': must be a positive number, got 0"),
        ("model_id,params,tokens\na,-1e7,2e8\n", "runs.csv:2: field 'params': run 'a': must be a positive number, got -1"),
        ("model_id,params,tokens\na,1e7,2e8\na,1e8,2e9\n", "runs.csv:3: field 'model_id': duplicate run 'a'"),
    ],
)
def test_bad_tables_name_file_line_field(tmp_path, text, message):
    path = tmp_path / "runs.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_runs(path)


def test_missing_file_unknown_type_and_unknown_run(tmp_path):
    with pytest.raises(InputError, match="runs file not found"):
        read_runs(tmp_path / "nope.csv")
    (tmp_path / "runs.txt").write_text("x")
    with pytest.raises(InputError, match="unknown runs file type"):
        read_runs(tmp_path / "runs.txt")
    (tmp_path / "runs.csv").write_text(CSV)
    with pytest.raises(UnknownNameError, match="unknown run 'zz'"):
        read_runs(tmp_path / "runs.csv").index_of("zz")


def test_runs_spread_over_files_are_merged_by_model_id(tmp_path):
    (tmp_path / "scale.csv").write_text("model_id,params,tokens,dataset\na,1e7,2e8,x\nb,1e8,2e9,x\n")
    (tmp_path / "agg.csv").write_text("model,gadre-17\nb,0.61\na,0.72\n")  # `flasheval aggregate` style
    write_record(tmp_path / "a.json", kind="evaluate", payload={"model_id": "a", "params": 1e7,
                                                                 "metrics": {"loss_c4_val": 4.1}})
    table = read_runs_files([tmp_path / "scale.csv", tmp_path / "agg.csv", tmp_path / "a.json"])
    assert table.model_ids == ("a", "b")
    np.testing.assert_allclose(table.values["gadre-17"], [0.72, 0.61])
    assert table.values["loss_c4_val"][0] == 4.1 and np.isnan(table.values["loss_c4_val"][1])
    write_record(tmp_path / "bad.json", kind="evaluate", payload={"model_id": "a", "params": 2e7})
    with pytest.raises(InputError, match="field 'params': run 'a': 20000000.0 contradicts 10000000.0"):
        read_runs_files([tmp_path / "scale.csv", tmp_path / "bad.json"])
    with pytest.raises(InputError, match="agg.csv:2: field 'params': run 'b': must be a positive number, no value"):
        read_runs_files([tmp_path / "agg.csv"])


def test_evaluate_records_give_their_model_id_and_metrics_only(tmp_path):
    """Two ``evaluate`` records of one model (tasks in one, held-out loss in the other) merge with a scale table;
    their counts and timings never become run columns, and a partial suite keeps its ``_partial`` name."""
    (tmp_path / "scale.csv").write_text("model_id,params,tokens\nm,1e8,2e9\n")
    write_record(tmp_path / "tasks.json", kind="evaluate", payload={
        "model_id": "m", "model": "gguf:/x/m.gguf", "n_examples": 40, "seed": 1, "compute": {"n_examples": 40, "n_tokens": 999},
        "metrics": {"gadre-17": 0.61, "gadre-46_partial": 0.64}})
    write_record(tmp_path / "loss.json", kind="evaluate", payload={
        "model_id": "m", "model": "gguf:/x/m.gguf", "n_examples": 0, "seed": 2,
        "metrics": {"loss_c4_val": 3.2, "bpb_c4_val": 1.1, "loss": 3.2, "bits_per_byte": 1.1}})
    table = read_runs_files([tmp_path / "scale.csv", tmp_path / "tasks.json", tmp_path / "loss.json"])
    assert (table.model_ids, float(table.tokens[0])) == (("m",), 2e9)
    assert set(table.values) == {"gadre-17", "gadre-46_partial", "loss_c4_val", "bpb_c4_val", "loss", "bits_per_byte"}
    old = json.loads((tmp_path / "loss.json").read_text())  # a record written before model_id was kept:
    old["payload"] = {"model": "gguf:/x/m.gguf", "tasks": {}}  # write_record would refuse it, so by hand
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(InputError, match="old.json: field 'payload.model_id': missing field"):
        read_runs_files([tmp_path / "scale.csv", tmp_path / "old.json"])
