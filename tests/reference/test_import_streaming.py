"""``reference import`` through the streamed path: lm-eval logs read model by model, a long parquet read in
record batches (a few rows per batch here, so every check crosses batch boundaries), each compared with an
independent pivot of the same rows; the models dropped for missing results named in the manifest and in
the command's summary line; manifests from before ``dropped_models`` still load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.reference import load_reference, read_lm_eval_samples
from flasheval.reference import long_table

TASKS = ("arc_easy", "piqa", "boolq")
STAMP = "2025-01-15T10-00-00.000000"


def _rows(n_models: int, n_docs: int, *, lacking: dict[str, str], seed: int = 0) -> pd.DataFrame:
    """0/1 scores of models ``org/m{i}`` on TASKS; ``lacking`` maps a model to the task it has no scores on."""
    rng = np.random.default_rng(seed)
    rows = [{"model": f"org/m{m}", "dataset": t, "example_id": str(d), "score": float(rng.random() < 0.2 + 0.1 * m)}
            for m in range(n_models) for t in TASKS for d in range(n_docs) if lacking.get(f"org/m{m}") != t]
    return pd.DataFrame(rows)


def _write_logs(root: Path, rows: pd.DataFrame) -> Path:
    """lm-eval 0.4's layout: a folder per model (sanitized name), results_<date>.json, samples_<task>_<date>.jsonl."""
    for model, part in rows.groupby("model"):
        mdir = root / model.replace("/", "__")
        mdir.mkdir(parents=True)
        tasks = sorted(part["dataset"].unique())
        results = {"model_name": model, "lm_eval_version": "0.4.13", "versions": {t: 1.0 for t in tasks},
                   "n-shot": {t: 0 for t in tasks}, "config": {"model": "hf", "fewshot_seed": 1234},
                   "configs": {t: {"task": t, "num_fewshot": 0} for t in tasks},
                   "n-samples": {t: {"original": int((part.dataset == t).sum()),
                                     "effective": int((part.dataset == t).sum())} for t in tasks}}
        (mdir / f"results_{STAMP}.json").write_text(json.dumps(results), encoding="utf-8")
        for task, log in part.groupby("dataset"):
            lines = [json.dumps({"doc_id": int(r.example_id), "doc": {"q": r.example_id}, "target": "0",
                                 "filter": "none", "metrics": ["acc"], "prompt_hash": f"{task}{r.example_id}" * 4,
                                 "acc": r.score, "acc_norm": 1.0 - r.score}) for r in log.itertuples()]
            (mdir / f"samples_{task}_{STAMP}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _expected(rows: pd.DataFrame, models: tuple[str, ...], dataset: str, ids: tuple[str, ...]) -> np.ndarray:
    wide = rows[rows.dataset == dataset].pivot_table(index="model", columns="example_id", values="score")
    return wide.loc[list(models), list(ids)].to_numpy()


def _import(source: Path, fmt: str, out: Path, capsys) -> list[str]:
    capsys.readouterr()
    assert main(["reference", "import", str(source), "--format", fmt, "--name", "pool", "--output-dir", str(out)]) == 0
    return capsys.readouterr().out.strip().splitlines()


@pytest.fixture
def small_batches(monkeypatch):
    """Read 7 rows per batch and write row groups of about 7 rows, so every check crosses batch boundaries."""
    monkeypatch.setattr(long_table, "BATCH_ROWS", 7)


def test_lm_eval_logs_stream_into_the_same_matrices_and_name_the_dropped_model(tmp_path, capsys, small_batches):
    rows = _rows(5, 9, lacking={"org/m3": "piqa"})
    logs = _write_logs(tmp_path / "logs", rows)
    lines = _import(logs, "lm-eval-samples", tmp_path / "refs", capsys)
    assert lines[0].startswith(f"wrote {tmp_path / 'refs' / 'pool'}: 4 models, 3 datasets, 27 examples; excluded 1")
    assert lines[1] == "dropped 1 model with missing results: org/m3"
    ref = load_reference(tmp_path / "refs" / "pool")
    assert ref.model_ids == ("org/m0", "org/m1", "org/m2", "org/m4") and ref.dataset_names == tuple(sorted(TASKS))
    for d, dataset in enumerate(ref.dataset_names):
        np.testing.assert_array_equal(ref.scores[d], _expected(rows, ref.model_ids, dataset, ref.example_ids[d]))
    manifest = json.loads((tmp_path / "refs" / "pool" / "manifest.json").read_text())
    assert manifest["dropped_models"] == [{"model": "org/m3", "missing": 9, "first_missing": "piqa/0"}]
    assert set(manifest["build"]["tasks"]) == set(TASKS)  # the model lacking piqa does not void the settings
    # the data-frame API reads the same rows, through the same checks
    frame = read_lm_eval_samples(logs).sort_values(["dataset", "model", "example_id"], ignore_index=True)
    pd.testing.assert_frame_equal(frame[["model", "dataset", "example_id", "score"]],
                                  rows.sort_values(["dataset", "model", "example_id"], ignore_index=True))
    # the common-datasets policy keeps the dropped model on the datasets every model has
    alt = load_reference(tmp_path / "refs" / "pool", missing="common-datasets")
    assert alt.model_ids == tuple(f"org/m{i}" for i in range(5)) and "piqa" not in alt.dataset_names
    d = alt.dataset_names.index("arc_easy")
    np.testing.assert_array_equal(alt.scores[d], _expected(rows, alt.model_ids, "arc_easy", alt.example_ids[d]))


def test_long_parquet_streams_in_batches_and_lists_many_dropped_models(tmp_path, capsys, small_batches):
    lacking = {f"org/m{i}": TASKS[i % 3] for i in range(3, 16)}
    rows = _rows(16, 5, lacking=lacking, seed=1)
    shuffled = rows.sample(frac=1.0, random_state=0).reset_index(drop=True)  # batches mix models and datasets
    shuffled.assign(metric="acc").to_parquet(tmp_path / "long.parquet")
    lines = _import(tmp_path / "long.parquet", "long-parquet", tmp_path / "refs", capsys)
    assert lines[0].startswith(f"wrote {tmp_path / 'refs' / 'pool'}: 3 models, 3 datasets, 15 examples; excluded 13")
    names = sorted(lacking)
    assert lines[1] == (f"dropped 13 models with missing results: {', '.join(names[:10])} ... and 3 more "
                        "(all listed in manifest.json)")
    ref = load_reference(tmp_path / "refs" / "pool")
    assert ref.model_ids == ("org/m0", "org/m1", "org/m2")
    for d, dataset in enumerate(ref.dataset_names):
        np.testing.assert_array_equal(ref.scores[d], _expected(rows, ref.model_ids, dataset, ref.example_ids[d]))
    dropped = json.loads((tmp_path / "refs" / "pool" / "manifest.json").read_text())["dropped_models"]
    assert [d["model"] for d in dropped] == names
    assert all(d["missing"] == 5 and d["first_missing"] == f"{lacking[d['model']]}/0" for d in dropped)
    # the written scores.parquet has several row groups, each read as its own batches
    import pyarrow.parquet as pq

    assert pq.ParquetFile(tmp_path / "refs" / "pool" / "scores.parquet").metadata.num_row_groups > 3


def test_a_row_twice_in_other_batches_is_refused_by_its_row(tmp_path, small_batches):
    rows = _rows(3, 5, lacking={})
    doubled = pd.concat([rows, rows.iloc[[2]]], ignore_index=True)  # row 46 repeats row 3, six batches later
    doubled.to_parquet(tmp_path / "dup.parquet")
    with pytest.raises(InputError, match=r"dup\.parquet: row 46: duplicate row for model 'org/m0', dataset "
                                         r"'arc_easy', example '2' \(1 duplicates\)$"):
        long_table.scan_long_table(tmp_path / "dup.parquet")
    rows.loc[30, "score"] = np.inf
    rows.to_parquet(tmp_path / "inf.parquet")
    with pytest.raises(InputError, match=r"field 'score': row 31: non-numeric or non-finite score for org/m2 / "
                                         r"arc_easy / 0: inf \(1 such row\)$"):
        long_table.scan_long_table(tmp_path / "inf.parquet")


def test_manifests_without_dropped_models_still_load_and_a_bad_entry_is_refused(tmp_path, capsys):
    rows = _rows(3, 4, lacking={"org/m2": "boolq"})
    rows.to_parquet(tmp_path / "long.parquet")
    _import(tmp_path / "long.parquet", "long-parquet", tmp_path / "refs", capsys)
    folder = tmp_path / "refs" / "pool"
    manifest = json.loads((folder / "manifest.json").read_text())
    old = {k: v for k, v in manifest.items() if k != "dropped_models"}
    (folder / "manifest.json").write_text(json.dumps(old))
    ref = load_reference(folder)
    assert ref.manifest.dropped_models is None and ref.excluded == (("org/m2", "no scores on boolq"),)
    (folder / "manifest.json").write_text(json.dumps({**old, "dropped_models": [{"model": "org/m2"}]}))
    with pytest.raises(InputError, match=r"manifest\.json: field 'dropped_models': entry 1 must be an object with "
                                         r"model, missing, first_missing"):
        load_reference(folder)
