"""``Budget(max_seconds=...)``: a stage projected to end past the time budget is not started; the placement ends
``unresolved at budget`` with its interval so far. The stages it took are those of the same placement without the
time cap (a time cap is a cap: every look uses Pocock's constant, as under any budget)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import flasheval
from flasheval.cli import main as cli
from flasheval.placement.controller import place
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.placement.results import Budget
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan

PER_EXAMPLE_S = 0.004


class SlowScorer(ReplayScorer):
    """Recorded scores, served at a steady ``PER_EXAMPLE_S`` per example (a model's forward passes, in miniature)."""

    def score_many(self, asks):
        time.sleep(PER_EXAMPLE_S * sum(len(ids) for _, ids in asks))
        return super().score_many(asks)


@pytest.fixture(scope="module")
def setting():
    reference = synthetic_reference(25, [120, 300, 80], rng=11)
    plan = replace(load_tier_plan("default"), n_resamples=300)
    model = reference.model_ids[12]
    # never binding, but a cap: the same Pocock looks as under the time budget
    free = place(reference.without(model), ReplayScorer(reference, model), plan, seed=2,
                 budget=Budget(max_examples=10**9))
    assert free.status == "resolved" and len(free.stages) >= 3, "needs a model that escalates"
    return reference, plan, model, free


def test_a_time_budget_stops_before_a_stage_projected_past_it(setting):
    reference, plan, model, free = setting
    first = sum(free.stages[0].n_examples) * PER_EXAMPLE_S
    cap = first + 0.5 * (sum(free.stages[-1].n_examples) - sum(free.stages[0].n_examples)) * PER_EXAMPLE_S
    start = time.perf_counter()
    capped = place(reference.without(model), SlowScorer(reference, model), plan, seed=2, budget=Budget(max_seconds=cap))
    elapsed = time.perf_counter() - start
    assert capped.status == "unresolved at budget" and f"s > budget {cap:.3g} s" in capped.reason
    assert 1 <= len(capped.stages) < len(free.stages)
    assert [s.interval for s in capped.stages] == [s.interval for s in free.stages[:len(capped.stages)]]
    assert capped.interval == free.stages[len(capped.stages) - 1].interval
    assert elapsed < cap + 0.25  # projected from the latest stage's seconds per example: not started past the cap


def test_the_first_stage_always_runs_and_none_after_it_under_a_tiny_budget(setting):
    reference, plan, model, free = setting
    capped = place(reference.without(model), ReplayScorer(reference, model), plan, seed=2,
                   budget=Budget(max_seconds=1e-9))
    assert [s.interval for s in capped.stages] == [free.stages[0].interval]
    assert capped.status == "unresolved at budget"


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), True, "10"])
def test_a_bad_time_budget_is_one_line(value):
    with pytest.raises(flasheval.InputError) as refused:
        Budget(max_seconds=value)
    assert str(refused.value).startswith("field '--max-seconds': must be a positive number") and "\n" not in str(refused.value)


def test_a_time_budget_is_refused_where_it_does_not_apply(capsys):
    # replay serves recorded scores: nothing to time; a sweep's budget is shared by its checkpoints
    assert cli(["place", "--max-seconds", "30"]) == 1
    assert "field '--max-seconds': a time budget caps the scoring of a live model" in capsys.readouterr().err
    with pytest.raises(flasheval.InputError, match="field 'max_seconds': a time budget caps one placement"):
        flasheval.sweep(["replay:meta/llama-3-70b"], "helm_lite", budget=Budget(max_examples=900, max_seconds=5))
    with pytest.raises(flasheval.InputError, match="field '--max-seconds': must be a positive number"):
        flasheval.place_checkpoint("replay:meta/llama-3-70b", run="/nonexistent/run", step=1, reference="helm_lite",
                                   max_seconds=-3)


def test_a_replayed_checkpoint_with_a_time_budget_is_refused_before_the_run_folder_is_touched(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(flasheval.InputError, match="field '--max-seconds': a time budget caps the scoring of a live"):
        flasheval.place_checkpoint("replay:meta/llama-3-70b", run=run, step=1, reference="helm_lite", max_seconds=9)
    assert not run.exists()
    flasheval.place_checkpoint("replay:meta/llama-3-70b", run=run, step=1, reference="helm_lite")  # then it places


def test_a_callback_given_the_time_budget_twice_is_refused_when_it_is_made():
    pytest.importorskip("transformers")
    from flasheval.integrations.transformers import PlacementCallback

    with pytest.raises(flasheval.InputError, match="field 'max_seconds': given twice"):
        PlacementCallback("helm_lite", run="runs/x", every=5, max_seconds=60, budget=Budget(max_seconds=30))
