"""``flasheval aggregate``: reproduces DCLM's published CORE / EXTENDED; refuses bad or incomplete input."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from flasheval import cli
from flasheval.tasks import load_suite

CORE = "CORE(low_variance_datasets_centered)"
EXTENDED = "EXTENDED(aggregated_centered)"


@pytest.fixture(scope="module")
def dclm_dir(shared_dir: Path) -> Path:
    path = shared_dir / "data" / "reference" / "aggregate" / "dclm"
    if not (path / "dclm_icl_wide.csv.gz").is_file():
        pytest.skip(f"DCLM aggregate results not found under {path}")
    return path


@pytest.fixture(scope="module")
def published(dclm_dir: Path) -> pd.DataFrame:
    long = pd.read_csv(dclm_dir / "dclm_evals_long.csv.gz")
    summary = long[long["metric_group"] == "summary"].copy()
    summary["score"] = pd.to_numeric(summary["score"], errors="coerce")  # "N/A due to missing tasks: ..."
    return summary.pivot(index="eval_file", columns="task", values="score")


def _aggregate(tmp_path: Path, *argv: str) -> pd.DataFrame:
    out = tmp_path / "agg.csv"
    assert cli.main(["aggregate", *argv, "--output", str(out)]) == 0
    return pd.read_csv(out, keep_default_na=False).set_index("eval_file")


def test_reproduces_published_core_and_extended(tmp_path: Path, dclm_dir: Path, published: pd.DataFrame) -> None:
    scores = str(dclm_dir / "dclm_icl_wide.csv.gz")
    ours = _aggregate(tmp_path, "--suite", "dclm-core", "--suite", "dclm-extended", "--baselines", "v2",
                      "--scores", scores, "--partial")
    assert len(ours) == 156 and published[CORE].notna().sum() == 156
    diff = (ours["dclm-core"] - published[CORE].reindex(ours.index)).abs()
    assert diff.max() < 1e-9
    assert (ours["dclm-core_missing"] == "").all()
    complete = ours["dclm-extended_missing"] == ""
    assert complete.sum() == published[EXTENDED].notna().sum() == 149
    diff = (ours.loc[complete, "dclm-extended"] - published[EXTENDED].reindex(ours.index[complete])).abs()
    assert diff.max() < 1e-9
    assert published[EXTENDED].reindex(ours.index[~complete]).isna().all()  # DCLM also refused those
    # The v1 (paper) baselines give different numbers: the version matters and is not ignored.
    v1 = _aggregate(tmp_path, "--suite", "dclm-core", "--baselines", "v1", "--scores", scores)
    assert (v1["dclm-core"] - published[CORE].reindex(v1.index)).abs().min() > 1e-3


def test_gadre_and_mmlu_from_scores(tmp_path: Path) -> None:
    gadre = load_suite("gadre-17")
    row = {"model": "m1", **{t: 0.6 for t in gadre.task_names}}
    other = {"model": "m2", **{t: 0.2 for t in gadre.task_names}, "mmlu_fewshot": 0.31}
    path = tmp_path / "scores.csv.gz"
    with gzip.open(path, "wt") as handle:
        pd.DataFrame([row, other]).to_csv(handle, index=False)
    out = tmp_path / "out.csv"
    assert cli.main(["aggregate", "--suite", "gadre-17", "--suite", "dclm-mmlu", "--scores", str(path),
                     "--output", str(out), "--partial"]) == 0
    table = pd.read_csv(out).set_index("model")
    assert table.loc["m1", "gadre-17"] == pytest.approx(0.4)
    assert table.loc["m2", "gadre-17"] == pytest.approx(0.8)
    assert table.loc["m2", "dclm-mmlu"] == pytest.approx(0.31)
    assert pd.isna(table.loc["m2", "dclm-mmlu_missing"])
    assert pd.isna(table.loc["m1", "dclm-mmlu"])  # no score at all: no value, and labelled missing
    assert (table.loc["m1", "dclm-mmlu_n_tasks"], table.loc["m1", "dclm-mmlu_missing"]) == (0, "mmlu_fewshot")


def _write_csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.csv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("who,copa\nm,0.5\n", "no model id column (allowed: model, model_id, eval_file, name, model_name)"),
    ("model,copa\nm,high\n", "2: field 'copa': not a number: 'high'"),
    ("model,copa\nm,0.5\nn,55\n", "3: field 'copa': accuracy 55.0 outside [0, 1] (give fractions, not percent)"),
    ("model,copa\nm,0.5\nm,0.6\n", "3: field 'model': duplicate model id 'm'"),
    ("model,copa\n", "no rows"),
])
def test_bad_score_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    path = _write_csv(tmp_path, text)
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(path), "--partial"]) == 1
    err = capsys.readouterr().err
    separator = ":" if message[0].isdigit() else ": "
    assert err == f"flasheval: error: {path}{separator}{message}\n"


def test_incomplete_suite_is_refused_without_partial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_csv(tmp_path, "model,copa,piqa\nm,0.5,0.6\n")
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(path)]) == 1
    err = capsys.readouterr().err
    assert "suite 'dclm-core' is incomplete for 1 of 1 models (first: 'm' lacks hellaswag_zeroshot" in err
    assert err.rstrip().endswith("pass --partial for aggregates over the tasks present, labelled partial")
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(path), "--partial"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model,baselines,dclm-core,dclm-core_n_tasks,dclm-core_missing,dclm-core_partial\nm,v2,")
    assert ",2,hellaswag_zeroshot;jeopardy;" in out


def test_missing_scores_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(tmp_path / "no.csv")]) == 1
    assert capsys.readouterr().err == f"flasheval: error: {tmp_path / 'no.csv'}: file not found\n"


@pytest.mark.parametrize(("name", "content", "message"), [
    ("s.csv", b"model,copa\nm\xe9,0.5\n", "cannot read as CSV: 'utf-8' codec can't decode byte 0xe9"),
    ("s.csv.gz", b"not gzip", "cannot read as CSV: Not a gzipped file"),
    ("s.csv", b"", "cannot read as CSV: No columns to parse from file"),
])
def test_unreadable_score_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes,
                                message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"flasheval: error: {path}: {message}") and err.count("\n") == 1
