"""``flasheval scaling fit`` end to end on synthetic runs, and its one-line errors on bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flasheval import cli
from flasheval.records.run_record import read_record
from flasheval.stats.scaling import error_law, loss_law

LAWS = {"x": ({"E": 1.8, "a": 200.0, "b": 350.0, "eta": 0.13}, {"epsilon": 0.85, "k": 2.1, "gamma": 0.75}),
        "y": ({"E": 1.6, "a": 150.0, "b": 250.0, "eta": 0.12}, {"epsilon": 0.86, "k": 2.2, "gamma": 0.7})}
SMALL = [(1.06e7, 20), (7.89e7, 20), (1.54e8, 20), (4.12e8, 20), (1.06e7, 320), (7.89e7, 80), (1.4e9, 20)]
BIG = [(1.4e9, 640), (6.9e9, 20)]


def _table(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for dataset, (loss_p, err_p) in LAWS.items():
        for i, (n, m) in enumerate(SMALL + BIG):
            loss = float(loss_law(6 * n * n * m, m, **loss_p)) * (1 + 0.003 * rng.standard_normal())
            err = float(error_law(loss, **err_p)) + 0.003 * rng.standard_normal()
            rows.append({"model_id": f"{dataset}{i}", "params": n, "tokens": n * m, "dataset": dataset,
                         "loss": loss, "err_avg17": err})
    return pd.DataFrame(rows)


@pytest.fixture()
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    _table(np.random.default_rng(0)).to_csv(path, index=False)
    return path


def _fit(runs, out, *extra):
    return cli.main(["scaling", "fit", "--runs", str(runs), "--n-resamples", "30", "--output", str(out), *extra])


def test_fit_predicts_big_runs_with_interval_and_relative_error(runs_csv, tmp_path, capsys):
    out = tmp_path / "rec" / "fit.json"
    # The 0.4B-and-below runs (compute <= 2.1e19) fit the loss law; adding the 1.4B M=20 run fits the error law.
    rc = _fit(runs_csv, out, "--fit-max-compute", "2.1e19", "--error-fit-max-compute", "3e20",
              "--predict", "x7", "x8", "y8", "hypo=3e9:6e10", "--dataset", "x", "--plot")
    captured = capsys.readouterr()
    assert rc == 1 and "trained on 'y', not on 'x'" in captured.err  # y8 is not in --dataset x
    rc = _fit(runs_csv, out, "--fit-max-compute", "2.1e19", "--error-fit-max-compute", "3e20",
              "--predict", "x7", "x8", "y8", "--plot")
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "rel. error" in captured.out and "nan" not in captured.out.lower()
    record = read_record(out)
    assert record.kind == "scaling" and out.with_suffix(".png").stat().st_size > 10_000
    payload = record.payload
    assert [f["dataset"] for f in payload["fits"]] == ["x", "y"]
    assert len(payload["fits"][0]["loss_law"]["fit_runs"]) == 6 and len(payload["fits"][0]["error_law"]["fit_runs"]) == 7
    for law, names in (("loss_law", ("E", "a", "b", "eta")), ("error_law", ("epsilon", "k", "gamma"))):
        intervals = payload["fits"][0][law]["bootstrap"]["parameter_intervals"]
        assert tuple(intervals) == names and all(lo <= hi for lo, hi in intervals.values())
    table = _table(np.random.default_rng(0)).set_index("model_id")
    for p in payload["predictions"]:
        actual = table.loc[p["model_id"], "loss" if p["quantity"] == "loss" else "err_avg17"]
        assert p["actual"] == pytest.approx(actual)
        assert p["relative_error"] == pytest.approx(abs(p["predicted"] - actual) / actual)
        assert p["low"] <= p["predicted"] <= p["high"]
        assert p["relative_error"] < 0.05  # synthetic runs follow the laws up to 0.3% noise
    assert "NaN" not in out.read_text()


def test_hypothetical_run_and_determinism(runs_csv, tmp_path, capsys):
    args = ("--fit-max-compute", "2e19", "--predict", "hypo=3e9:6e10", "--dataset", "y", "--no-error")
    assert _fit(runs_csv, tmp_path / "a.json", *args) == 0
    assert _fit(runs_csv, tmp_path / "b.json", *args) == 0
    first, second = (read_record(tmp_path / f).payload for f in ("a.json", "b.json"))
    assert first["predictions"] == second["predictions"]
    (pred,) = first["predictions"]
    assert pred["actual"] is None and pred["relative_error"] is None and pred["dataset"] == "y"
    assert pred["predicted"] == pytest.approx(loss_law(6 * 3e9 * 6e10, 20.0, **LAWS["y"][0]), rel=0.02)


def _bad(tmp_path, capsys, frame, *args):
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    rc = _fit(path, tmp_path / "o.json", *args)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("flasheval: error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fit-max-compute", "1e17", "--predict", "x8", "--dataset", "x"), "too few runs to fit: 1 given"),
        (("--fit-max-compute", "-1", "--predict", "x8"), "must be a positive number of FLOPs"),
        (("--loss-column", "nope", "--predict", "x8"), "no column 'nope'"),
        (("--error-column", "err_avg17,err_nope", "--predict", "x8"), "no column 'err_nope'"),
        (("--fit-column", "nope", "--predict", "x8"), "no boolean column 'nope'"),
        (("--predict", "zz"), "unknown run 'zz'"),
        (("--predict", "hypo=3e9:6e10"), "the table has several datasets"),
        (("--predict", "hypo=3e9:-1"), "positive PARAMS and TOKENS"),
        (("--dataset", "z", "--predict", "x8"), "unknown dataset 'z'"),
    ],
)
def test_bad_options_one_line(tmp_path, capsys, args, message):
    assert message in _bad(tmp_path, capsys, _table(np.random.default_rng(0)), *args)


def test_bad_table_values_one_line(tmp_path, capsys):
    frame = _table(np.random.default_rng(0))
    frame.loc[2, "tokens"] = 0
    assert "bad.csv:4: field 'tokens': run 'x2': must be a positive number, got 0" in _bad(tmp_path, capsys, frame, "--predict", "x8")
    frame = _table(np.random.default_rng(0))
    frame.loc[1, "loss"] = np.nan
    msg = _bad(tmp_path, capsys, frame, "--fit-max-compute", "2e19", "--predict", "x8", "--dataset", "x")
    assert "bad.csv:3: field 'loss': run 'x1' is in the loss-law fit set but has no value" in msg


def test_fit_that_does_not_converge_one_line(tmp_path, capsys):
    frame = _table(np.random.default_rng(0))
    frame["err_avg17"] = np.where(frame["dataset"] == "x", frame["err_avg17"], np.nan)
    frame["loss"] = -1000.0 * np.arange(1, len(frame) + 1)  # exp(-gamma * loss) overflows: no error-law fit
    msg = _bad(tmp_path, capsys, frame, "--fit-max-compute", "2e19", "--predict", "x8", "--dataset", "x")
    assert "dataset 'x'" in msg and "did not converge" in msg


def test_fit_reads_losses_and_errors_from_evaluate_records(tmp_path, capsys, caplog):
    """N and D from a CSV, loss and Gadre-17 error from one ``evaluate`` record per run: the same fit as
    the one table holding everything; a partial suite's error is not fitted unless named."""
    from flasheval.records.run_record import write_record

    table = _table(np.random.default_rng(0))
    table = table[table["dataset"] == "x"].rename(columns={"err_avg17": "gadre-17"})
    table.to_csv(tmp_path / "all.csv", index=False)
    table[["model_id", "params", "tokens", "dataset"]].to_csv(tmp_path / "scale.csv", index=False)
    records = []
    for row in table.to_dict("records"):
        records.append(tmp_path / f"{row['model_id']}.json")
        write_record(records[-1], kind="evaluate", payload={
            "model_id": row["model_id"], "n_examples": 100, "metrics": {"loss": row["loss"], "gadre-17": row["gadre-17"]}})
    options = ["--fit-max-compute", "2.1e19", "--error-fit-max-compute", "3e20", "--predict", "x7", "x8"]
    assert _fit(tmp_path / "all.csv", tmp_path / "a.json", *options) == 0
    rc = cli.main(["scaling", "fit", "--runs", str(tmp_path / "scale.csv"), *map(str, records), "--n-resamples", "30",
                   "--output", str(tmp_path / "b.json"), *options])
    assert rc == 0, capsys.readouterr().err
    expected, got = read_record(tmp_path / "a.json").payload, read_record(tmp_path / "b.json").payload
    assert [(p["quantity"], p["predicted"]) for p in got["predictions"]] == [
        (p["quantity"], p["predicted"]) for p in expected["predictions"]]
    assert {p["quantity"] for p in got["predictions"]} == {"loss", "error"}
    for path in records:  # the same runs, their suite now partial
        record = read_record(path)
        metrics = record.payload["metrics"]
        metrics["gadre-17_partial"] = metrics.pop("gadre-17")
        write_record(path, kind="evaluate", payload=record.payload)
    rc = cli.main(["scaling", "fit", "--runs", str(tmp_path / "scale.csv"), *map(str, records), "--n-resamples", "30",
                   "--output", str(tmp_path / "c.json"), *options])
    assert rc == 0
    assert {p["quantity"] for p in read_record(tmp_path / "c.json").payload["predictions"]} == {"loss"}
    assert "partial suite aggregates gadre-17_partial are not fitted unless named with --error-column" in caplog.text
