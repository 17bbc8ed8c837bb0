import json
from dataclasses import replace

import pytest

from flasheval.cli import main
from flasheval.placement.backtest import backtest, full_data_ranks, uniform_allocation
from flasheval.placement.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan
from flasheval.records import read_record
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


def test_backtest_on_a_synthetic_reference():
    ref = synthetic_reference(15, [150, 250, 100], rng=4)
    plan = replace(load_tier_plan("default"), n_resamples=200)
    fixed = replace(load_tier_plan("flash_helm"), n_resamples=200)
    result = backtest(ref, plan, fixed, seed=0)
    assert [s.method for s in result.summaries] == ["adaptive", "flash_helm", "uniform"]
    ours, _, uniform = result.summaries
    assert ours.n_models == 15 and 0 <= ours.share_within <= 1
    # equal cost by construction (up to rounding of the per-dataset split)
    assert uniform.mean_examples == pytest.approx(ours.mean_examples, abs=3)
    for row in result.rows["adaptive"]:
        assert row.within == (abs(row.placed_rank - row.full_rank) <= row.resolution)
        assert row.covered == (row.interval[0] <= row.full_rank <= row.interval[1])
    assert json.dumps(result.to_json())


def test_backtest_and_place_cli_write_records(tmp_path, capsys, monkeypatch):
    ref = synthetic_reference(10, [100, 150], rng=6)
    rows = [{"model": m, "dataset": d, "example_id": e, "score": float(s)}
            for d, ids, mat in zip(ref.dataset_names, ref.example_ids, ref.scores)
            for i, m in enumerate(ref.model_ids) for e, s in zip(ids, mat[i])]
    import pandas as pd

    folder = write_reference(tmp_path / "syn", pd.DataFrame(rows), name="syn", source="test", licence="none", metric="acc")
    assert load_reference(folder).n_models == 10
    out = tmp_path / "bt.json"
    assert main(["backtest", "--reference", str(folder), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "adaptive" in printed and "flash_helm" in printed and "uniform" in printed
    record = read_record(out)
    assert record.kind == "backtest" and len(record.payload["rows"]["adaptive"]) == 10
    monkeypatch.chdir(tmp_path)
    assert main(["place", "--reference", str(folder), "--model", "replay:m003", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "stage 1/8 (20/dataset)" in printed and "m003 on syn (9 reference models" in printed
    record = read_record(tmp_path / "runs" / "place-syn-m003" / "place.json")
    assert record.kind == "place" and record.payload["model_id"] == "m003"
    assert main(["place", "--reference", str(folder), "--model", "hf:gpt2"]) == 1
    assert "was not built by 'flasheval reference build'" in capsys.readouterr().err  # live specs need a built reference


def test_place_with_no_arguments_places_the_default_helm_lite_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["place"]) == 0
    out = capsys.readouterr().out
    assert "meta/llama-3-70b on helm_lite (68 reference models" in out
    payload = read_record(tmp_path / "runs" / "place-helm_lite-meta-llama-3-70b" / "place.json").payload
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
    assert ours.share_within >= 0.95
    assert ours.coverage >= result.confidence_level - 0.02
    assert ours.median_saving >= 5.0
    # at every stop with every example scored, the placed rank is the full-data rank
    assert all(r.placed_rank == r.full_rank for r in result.rows["adaptive"] if r.n_examples == 5551)
    assert fixed.share_within < ours.share_within


@pytest.mark.slow
def test_lean_plan_beats_the_flash_helm_schedule_at_equal_within_resolution_share():
    ref = load_reference("helm_lite")
    result = backtest(ref, load_tier_plan("lean"), load_tier_plan("flash_helm"), seed=0)
    ours, fixed, _ = result.summaries
    assert ours.share_within >= fixed.share_within
    assert ours.mean_examples < fixed.mean_examples
