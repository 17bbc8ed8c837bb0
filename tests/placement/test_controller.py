from dataclasses import replace

import numpy as np
import pytest

from flasheval.placement.backtest import full_data_ranks
from flasheval.placement.controller import Budget, decide, place
from flasheval.placement.replay import ReplayScorer
from flasheval.placement.simulation import synthetic_reference
from flasheval.placement.tiers import Tier, load_tier_plan
from flasheval.stats.sampling import example_order


@pytest.fixture(scope="module")
def reference():
    return synthetic_reference(25, [120, 300, 80], rng=11)


@pytest.fixture(scope="module")
def plan():
    return replace(load_tier_plan("default"), n_resamples=300)


@pytest.mark.parametrize("rank, interval, stop", [
    (30, (26, 34), True), (30, (25, 33), False), (12, (9, 15), True), (12, (9, 16), False),
    (3, (2, 4), True), (3, (1, 3), False), (3, (3, 3), True), (1, (1, 1), False), (1, (1, 2), False),
])
def test_interval_rule_table(plan, rank, interval, stop):
    assert decide(plan=plan, stage_size=50, rank=rank, interval=interval, is_last=False).stop is stop


def test_first_place_needs_min_stage(plan):
    early = decide(plan=plan, stage_size=200, rank=1, interval=(1, 1), is_last=False)
    assert not early.stop and "from 500/dataset on" in early.reason
    assert decide(plan=plan, stage_size=500, rank=1, interval=(1, 1), is_last=False).stop
    assert not decide(plan=plan, stage_size=500, rank=1, interval=(1, 2), is_last=False).stop


def test_flash_helm_rule_is_the_papers_schedule():
    fh = load_tier_plan("flash_helm")
    cases = [(20, 25, True), (20, 12, False), (50, 12, True), (50, 6, False), (200, 6, True), (200, 3, False),
             (1000, 3, True), (1000, 1, False)]
    for stage, rank, stop in cases:
        assert decide(plan=fh, stage_size=stage, rank=rank, interval=(1, 60), is_last=False).stop is stop, (stage, rank)
    assert decide(plan=fh, stage_size=None, rank=1, interval=(1, 1), is_last=True).stop


def test_controller_asks_only_for_new_ids_in_nested_order(reference, plan):
    model = reference.model_ids[12]
    scorer = ReplayScorer(reference, model)
    result = place(reference.without(model), scorer, plan, seed=5)
    asked: dict[str, list[str]] = {}
    for task, ids in scorer.requests:
        asked.setdefault(task, []).extend(ids)
    for name, ids in zip(reference.dataset_names, reference.example_ids):
        got = asked.get(name, [])
        assert len(got) == len(set(got)), "an example was scored twice"
        assert tuple(got) == example_order(ids, seed=5, task_name=name)[:len(got)]
    assert sum(len(v) for v in asked.values()) == result.compute.n_examples == sum(result.stages[-1].n_examples)
    sizes = [r.n_examples for r in result.stages]
    assert all(all(a <= b for a, b in zip(x, y)) for x, y in zip(sizes, sizes[1:]))


def test_full_data_stage_gives_the_full_data_rank(reference, plan):
    exact = replace(plan, tiers=(Tier(first=1, last=None, resolution=0),))  # only the single rank will do
    ranks = full_data_ranks(reference)
    for model in reference.model_ids[::6]:
        result = place(reference.without(model), ReplayScorer(reference, model), exact, seed=1)
        if result.stages[-1].stage_size is None:
            assert result.rank == ranks[model] and result.interval == (ranks[model], ranks[model])
        assert result.interval[0] <= ranks[model] <= result.interval[1]


def test_budget_stops_with_best_interval_so_far(reference, plan):
    model = reference.model_ids[12]
    free = place(reference.without(model), ReplayScorer(reference, model), plan, seed=2)
    assert free.status == "resolved" and len(free.stages) >= 2, "needs a model that escalates"
    capped = place(reference.without(model), ReplayScorer(reference, model), plan, seed=2,
                   budget=Budget(max_examples=sum(free.stages[0].n_examples)))
    assert capped.status == "unresolved at budget" and "examples > budget" in capped.reason
    assert capped.interval == free.stages[0].interval and capped.compute.n_examples == sum(free.stages[0].n_examples)
    none = place(reference.without(model), ReplayScorer(reference, model), plan, budget=Budget(max_examples=10))
    assert none.rank is None and none.interval == (1, reference.n_models) and none.compute.n_examples == 0


def test_tokens_and_flops_are_accounted(reference, plan):
    tokens = tuple(np.full(s.shape, 7, dtype=np.int64) for s in reference.scores)
    ref = replace(reference, n_tokens=tokens)
    model = ref.model_ids[3]
    result = place(ref.without(model), ReplayScorer(ref, model, n_parameters=1000), plan, seed=0)
    c = result.compute
    assert c.n_tokens == 7 * c.n_examples and c.flops == 2 * 1000 * c.n_tokens
    assert c.full_tokens == pytest.approx(7 * c.full_examples)
    assert c.saving == pytest.approx(c.full_examples / c.n_examples)
    capped = place(ref.without(model), ReplayScorer(ref, model, n_parameters=1000), plan, seed=0,
                   budget=Budget(max_flops=2 * 1000 * 7 * 100))
    assert capped.compute.flops <= 2 * 1000 * 7 * 100 and "FLOPs > budget" in capped.reason


def test_same_seed_same_placement(reference, plan):
    model = reference.model_ids[8]
    runs = [place(reference.without(model), ReplayScorer(reference, model), plan, seed=s).to_json() for s in (4, 4, 9)]
    assert runs[0] == runs[1]
    assert runs[0]["stages"] != runs[2]["stages"]
