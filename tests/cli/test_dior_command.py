"""``flasheval dior`` on the shipped helm_lite reference: the three findings and bad input."""

import numpy as np
import pytest

from flasheval import cli
from flasheval.analysis.dior import run_dior
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference
from flasheval.stats.ranking import aggregate


@pytest.fixture(scope="module")
def helm_lite():
    return load_reference("helm_lite")


@pytest.mark.slow
def test_dior_command_shows_the_three_findings_on_helm_lite(tmp_path, capsys):
    code = cli.main(["dior", "--reference", "helm_lite", "--sizes", "20", "100", "300", "500",
                     "--n-instantiations", "200", "--output", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    for text in ("finding 1", "finding 2", "finding 3", "win_rate"):
        assert text in out
    payload = read_record(tmp_path / "dior.json").payload
    examples = {s["size"]: s["tau_lower"] for s in payload["examples"]}
    datasets = payload["datasets"][0]["tau_lower"]
    # examples are far more reliable than datasets: 100 examples per dataset beat a dataset resample
    assert examples[100] > datasets + 0.05
    assert examples[20] < examples[100] < examples[300] < examples[500]
    assert payload["findings"]["flattening_size"] in (100, 300)
    pool = {s["aggregate"]: s["tau_lower"] for s in payload["pool"]}
    assert pool["mean"] == 1.0 and pool["win_rate"] < 1.0


def test_the_reported_leader_change_is_real(helm_lite):
    report = run_dior(helm_lite, decisions=("aggregate",), n_instantiations=50)
    assert report.findings["win_rate_leader_change_found"]
    change = report.leader_changes[0]
    means = helm_lite.dataset_means()
    before = np.array(change.pool)
    after = np.sort(np.append(before, change.added))
    wr_before = aggregate(means[before], kind="win_rate")
    wr_after = aggregate(means[after], kind="win_rate")
    assert before[np.argmax(wr_before)] == change.leader_before
    assert after[np.argmax(wr_after)] == change.leader_after != change.leader_before
    # the added model is weak: bottom half by the mean
    assert report.findings["weak_rank"][helm_lite.model_ids[change.added]] > helm_lite.n_models // 2


def test_dior_is_deterministic_given_the_seed(helm_lite):
    a = run_dior(helm_lite, decisions=("examples", "datasets"), sizes=(20,), n_instantiations=50, seed=3)
    b = run_dior(helm_lite, decisions=("examples", "datasets"), sizes=(20,), n_instantiations=50, seed=3)
    assert a.to_json() == b.to_json()


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0"], "field '--sizes'"),
    (["--n-instantiations", "5"], "field '--n-instantiations': must be an integer from 20 to 100000"),
    (["--reference", "no_such_reference"], "unknown reference 'no_such_reference'"),
])
def test_bad_input_is_one_line(argv, message, capsys, tmp_path):
    assert cli.main(["dior", "--output", str(tmp_path), *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
