import json
from dataclasses import replace

import numpy as np
import pytest

from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.analysis.backtest import backtest, full_data_ranks, parse_seeds, summarize_seeds, uniform_allocation
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference, write_reference
from flasheval.stats.ranking import competition_ranks


def test_uniform_allocation_caps_small_datasets():
    assert uniform_allocation(300, [50, 1000, 1000]) == [50, 125, 125]
    assert uniform_allocation(10_000, [50, 60]) == [50, 60]
    assert sum(uniform_allocation(601, [437, 1000, 2047])) >= 601


def test_full_data_ranks_agree_with_competition_ranks_without_ties():
    ref = synthetic_reference(12, [200, 300], rng=2)
    ranks = full_data_ranks(ref)
    values = ref.aggregate_values()
    assert len(set(values)) == len(values)
    assert [ranks[m] for m in ref.model_ids] == competition_ranks(values).tolist()


PAPER_TIERS = ((1, 1, 0), (2, 4, 1), (5, 9, 2), (10, 19, 3), (20, 10**9, 4))  # written out, not loaded


def _paper_resolution(rank: int) -> int:
    return next(k for first, last, k in PAPER_TIERS if first <= rank <= last)


@pytest.fixture(scope="module")
def synthetic_backtest():
    ref = synthetic_reference(15, [150, 250, 100], rng=4)
    plan = replace(load_tier_plan("default"), n_resamples=200)
    fixed = replace(load_tier_plan("flash_helm"), n_resamples=200)
    return ref, backtest(ref, plan, fixed, seed=0)


def test_backtest_rows_agree_with_an_independent_scoring(synthetic_backtest):
    ref, result = synthetic_backtest
    assert [s.method for s in result.summaries] == ["adaptive", "flash_helm", "uniform"]
    # full-data ranks by sorting the models' mean-of-dataset-means by hand (pool of 15 < 40: the paper's tiers)
    means = {m: np.mean([s[i].mean() for s in ref.scores]) for i, m in enumerate(ref.model_ids)}
    for method, rows in result.rows.items():
        assert len(rows) == 15
        for row in rows:
            truth = 1 + sum(v > means[row.model_id] for m, v in means.items() if m != row.model_id)
            assert row.full_rank == truth
            assert row.within == (abs(row.placed_rank - truth) <= _paper_resolution(row.placed_rank))
            if method == "adaptive":
                # the window rule reports a rank whose tier window holds the whole interval, so a covering
                # interval implies a placement within resolution
                lo, hi = row.interval
                assert all(abs(row.placed_rank - x) <= _paper_resolution(row.placed_rank) for x in range(lo, hi + 1))
                assert row.within or not row.covered


def test_backtest_summaries_obey_the_means_inequalities_and_equal_cost(synthetic_backtest):
    _, result = synthetic_backtest
    ours, _, uniform = result.summaries
    for s in result.summaries:
        savings = [r.saving for r in result.rows[s.method]]
        # ratio of sums = full / mean examples <= the mean of the ratios (AM-HM); the median lies among the values
        assert s.total_saving <= s.mean_saving + 1e-9
        assert min(savings) <= s.median_saving <= max(savings)
    assert uniform.mean_examples == pytest.approx(ours.mean_examples, abs=3)  # equal cost by construction
    assert json.dumps(result.to_json())


def test_backtest_is_deterministic_and_seeds_summarise_each_seed():
    ref = synthetic_reference(8, [60, 90], rng=1)
    plan = replace(load_tier_plan("default"), n_resamples=200)
    fixed = replace(load_tier_plan("flash_helm"), n_resamples=200)
    runs = [backtest(ref, plan, fixed, seed=s) for s in (3, 5, 3)]
    assert runs[0].to_json() == runs[2].to_json()
    summary = summarize_seeds(runs[:2])
    assert summary[0].seeds == (3, 5)
    assert summary[0].median_saving == (runs[0].summaries[0].median_saving, runs[1].summaries[0].median_saving)
    assert summary[0].min("coverage") == min(r.summaries[0].coverage for r in runs[:2])
    assert parse_seeds("0-4") == (0, 1, 2, 3, 4) and parse_seeds("2,0-1") == (2, 0, 1)
    for bad in ("a-b", "4-1", "-3"):
        with pytest.raises(InputError, match="--seeds"):
            parse_seeds(bad)


@pytest.fixture(scope="module")
def synthetic_folder(tmp_path_factory):
    """A written 10-model synthetic reference, as ``reference import`` would leave one."""
    import pandas as pd

    ref = synthetic_reference(10, [100, 150], rng=6)
    rows = [{"model": m, "dataset": d, "example_id": e, "score": float(s)}
            for d, ids, mat in zip(ref.dataset_names, ref.example_ids, ref.scores)
            for i, m in enumerate(ref.model_ids) for e, s in zip(ids, mat[i])]
    folder = write_reference(tmp_path_factory.mktemp("refs") / "syn", pd.DataFrame(rows), name="syn", source="test",
                             licence="none", metric="acc")
    assert load_reference(folder).n_models == 10
    return folder


def test_backtest_cli_writes_records(synthetic_folder, tmp_path, capsys):
    folder = synthetic_folder
    out = tmp_path / "bt.json"
    assert main(["backtest", "--reference", str(folder), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "adaptive" in printed and "flash_helm" in printed and "uniform" in printed
    record = read_record(out)
    assert record.kind == "backtest" and len(record.payload["rows"]["adaptive"]) == 10
    capsys.readouterr()
    assert main(["backtest", "--reference", str(folder), "--seeds", "0-1", "--output", str(out)]) == 1  # other seeds
    assert "written with seeds [0], not [0, 1]" in capsys.readouterr().err
    assert main(["backtest", "--reference", str(folder), "--seeds", "0-1", "--output", str(out), "--force"]) == 0
    printed = capsys.readouterr().out
    assert "over seeds 0, 1:" in printed and "seed 0" in printed and "total saving" in printed
    assert [s["seed"] for s in read_record(out).payload["seeds"]] == [0, 1]


def test_place_cli_refuses_bad_options_in_one_line_and_writes_a_record(synthetic_folder, tmp_path, capsys,
                                                                      monkeypatch):
    folder = synthetic_folder
    for option, value in (("--max-examples", "-5"), ("--max-tokens", "0"), ("--max-flops", "nan"),
                          ("--n-parameters", "-1"), ("--seed", "-2")):
        assert main(["place", "--reference", str(folder), "--model", "replay:m003", option, value]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"field '{option}'" in err  # one line naming the option, no traceback
    monkeypatch.chdir(tmp_path)
    assert main(["place", "--reference", str(folder), "--model", "replay:m003", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "stage 1/19 (20/dataset)" in printed and "m003 on syn (9 reference models" in printed
    (path,) = (tmp_path / "runs").glob("place-syn-m003-*/place.json")  # --seed 3: the settings' own folder
    record = read_record(path)
    assert record.kind == "place" and record.payload["model_id"] == "m003" and record.settings["seed"] == 3
    assert main(["place", "--reference", str(folder), "--model", "hf:gpt2"]) == 1
    assert "was not built by 'flasheval reference build'" in capsys.readouterr().err  # live specs need a built reference


def test_place_with_no_arguments_places_the_default_helm_lite_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["place"]) == 0
    out = capsys.readouterr().out
    assert "meta/llama-3-70b on helm_lite (68 reference models" in out
    payload = read_record(tmp_path / "runs" / "place-helm_lite-meta-llama-3-70b-e1f3e635" / "place.json").payload
    assert payload["status"] == "resolved" and payload["compute"]["saving"] > 1
    lo, hi = payload["interval"]
    assert lo <= payload["rank"] <= hi
    # The held-out model's full-data rank is known: it is reported and equals the backtest's answer.
    assert payload["full_data_rank"] == full_data_ranks(load_reference("helm_lite"))["meta/llama-3-70b"]
    assert f"full-data rank (every example scored): {payload['full_data_rank']}" in out


@pytest.mark.slow
def test_helm_lite_backtest_meets_the_issue_targets():
    ref = load_reference("helm_lite")
    result = backtest(ref, load_tier_plan("default"), load_tier_plan("flash_helm"), seed=0)
    ours, fixed, _ = result.summaries
    assert ours.share_within >= 0.95 and ours.coverage >= 0.93  # the issue's floors, at this seed
    # regression guards below the measured seed-0 figures (median 9.3x, total 6.9x; docs/placement.md);
    # the issue's 8x median and 5.5x total are means over seeds 0-4 (measured 9.3x, 6.5x), too slow to run here
    assert ours.median_saving >= 8.0 and ours.total_saving >= 6.0
    # at every stop with every example scored, the placed rank is the full-data rank
    assert all(r.placed_rank == r.full_rank for r in result.rows["adaptive"] if r.n_examples == 5551)
    assert fixed.share_within < ours.share_within
