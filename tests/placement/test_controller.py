from dataclasses import replace

import numpy as np
import pytest

from flasheval.analysis.backtest import full_data_ranks
from flasheval.placement.controller import place
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.placement.results import Budget
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.stop_rule import decide
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
    (3, (2, 4), True), (3, (1, 3), False), (3, (3, 3), True), (1, (1, 1), True), (1, (1, 2), False),
])
def test_interval_rule_table(plan, rank, interval, stop):
    centred = replace(plan, stop_rule="interval", correction="pocock")  # the previous rule: a centred window
    assert decide(plan=centred, stage_size=50, rank=rank, interval=interval, is_last=False).stop is stop


# (point rank, interval, reported rank or None = escalate), worked by hand on the paper's tiers
# 1 | 2-4 +-1 | 5-9 +-2 | 10-19 +-3 | 20+ +-4
@pytest.mark.parametrize("rank, interval, placed", [
    (10, (9, 14), 11),   # the llama-3-70b case: lopsided, width 5 <= 6, the centred rule escalated
    (10, (9, 15), 12),   # width 6 fits only 12 +-3
    (10, (9, 16), None),
    (30, (25, 33), 29),  # nearest admissible rank to 30
    (3, (2, 4), 3), (2, (2, 3), 2), (3, (1, 4), None),
    (5, (4, 7), 5),      # straddles tiers 2-4 and 5-9: 5 +-2 holds it, 4 +-1 does not
    (1, (1, 1), 1), (1, (1, 2), None),
    (21, (16, 23), 20),  # no rank of tier 10-19 (+-3) holds it; 20 +-4 = [16, 24] does
])
def test_window_rule_table(plan, rank, interval, placed):
    d = decide(plan=plan.for_pool(40), stage_size=50, rank=rank, interval=interval, is_last=False)
    assert d.stop is (placed is not None) and d.rank == placed


def test_window_rule_reports_a_rank_within_resolution_of_every_rank_of_its_interval(plan):
    """Brute force over every interval of a 60-rank pool: a stop is claimed exactly when some rank's
    window holds the interval, and the rank reported is within its tier's resolution of every rank in it."""
    paper = plan.for_pool(60)
    resolution = {r: next(t.resolution for t in paper.tiers if t.first <= r and (t.last is None or r <= t.last))
                  for r in range(1, 61)}
    for lo in range(1, 61):
        for hi in range(lo, 61):
            d = decide(plan=paper, stage_size=50, rank=lo, interval=(lo, hi), is_last=False)
            admissible = [r for r in range(lo, hi + 1) if all(abs(r - x) <= resolution[r] for x in range(lo, hi + 1))]
            if lo == 1 < hi:
                admissible = []  # rank 1 (maximal) is claimed, or ruled out, only by a single-rank interval
            assert d.stop is bool(admissible)
            if d.stop:
                assert d.rank in admissible


def test_min_stage_holds_a_tier_back(plan):
    guarded = replace(plan, correction="pocock", tiers=(replace(plan.tiers[0], min_stage=500), *plan.tiers[1:]))
    early = decide(plan=guarded, stage_size=200, rank=1, interval=(1, 1), is_last=False)
    assert not early.stop and "from 500/dataset on" in early.reason
    assert decide(plan=guarded, stage_size=500, rank=1, interval=(1, 1), is_last=False).stop
    assert not decide(plan=guarded, stage_size=500, rank=1, interval=(1, 2), is_last=False).stop


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
    sizes, full = tuple(len(ids) for ids in reference.example_ids), 0
    for model in reference.model_ids[::6]:
        result = place(reference.without(model), ReplayScorer(reference, model), exact, seed=1)
        if result.stages[-1].n_examples == sizes:  # every example scored (a stage at least the largest dataset)
            assert result.rank == ranks[model] and result.interval == (ranks[model], ranks[model])
            full += 1
        assert result.interval[0] <= ranks[model] <= result.interval[1]
    assert full > 0, "no placement reached the full data"


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
    # Each dataset its own known cost per example, so tokens and examples give different savings. Model 12
    # (placed by other tests too): its pool's calibration is already in the memo.
    per_example = (3, 8, 20)
    tokens = tuple(np.full(s.shape, t, dtype=np.int64) for s, t in zip(reference.scores, per_example))
    ref = replace(reference, n_tokens=tokens)
    model, n_parameters = ref.model_ids[12], 1000
    result = place(ref.without(model), ReplayScorer(ref, model, n_parameters=n_parameters), plan, seed=0)
    used = result.stages[-1].n_examples
    sizes = [s.shape[1] for s in ref.scores]
    assert len(result.stages) >= 2 and used != tuple(sizes)  # it escalated and stopped before the full data
    spent = sum(n * t for n, t in zip(used, per_example))
    full = sum(n * t for n, t in zip(sizes, per_example))
    expected = {"n_examples": sum(used), "full_examples": sum(sizes), "n_tokens": spent, "full_tokens": full,
                "flops": 2 * n_parameters * spent, "full_flops": 2 * n_parameters * full,
                "example_saving": sum(sizes) / sum(used), "token_saving": full / spent, "saving": full / spent}
    c = result.compute
    assert {k: getattr(c, k) for k in expected} == pytest.approx(expected, rel=1e-12)
    assert result.to_json()["compute"] == pytest.approx(expected, rel=1e-12)
    assert abs(c.token_saving - c.example_saving) > 0.01 * c.example_saving
    # a FLOP budget below the free run's: the run ends at the cap, its FLOPs those of the examples it scored
    max_flops = 2 * n_parameters * 1500
    assert c.flops > max_flops
    capped = place(ref.without(model), ReplayScorer(ref, model, n_parameters=n_parameters), plan, seed=0,
                   budget=Budget(max_flops=max_flops))
    capped_spent = sum(n * t for n, t in zip(capped.stages[-1].n_examples, per_example))
    assert capped.compute.flops == 2 * n_parameters * capped_spent
    assert capped.compute.flops <= max_flops and "FLOPs > budget" in capped.reason


def test_same_seed_same_placement(reference, plan):
    model = reference.model_ids[8]
    runs = [place(reference.without(model), ReplayScorer(reference, model), plan, seed=s).to_json() for s in (4, 4, 9)]
    assert runs[0] == runs[1]
    assert runs[0]["stages"] != runs[2]["stages"]


def test_placements_report_a_rank_whose_window_holds_the_interval(reference, plan):
    """Whatever the stop, the reported rank is within its tier's resolution of every rank of the interval,
    so if the interval covers the full-data rank the placement is within resolution."""
    ranks = full_data_ranks(reference)
    for model in reference.model_ids[::4]:
        result = place(reference.without(model), ReplayScorer(reference, model), plan, seed=3)
        lo, hi = result.interval
        assert result.status == "resolved" and lo <= result.rank <= hi
        assert all(abs(result.rank - x) <= result.resolution for x in range(lo, hi + 1))
        if lo <= ranks[model] <= hi:
            assert abs(result.rank - ranks[model]) <= result.resolution


def test_every_look_uses_the_repeated_confidence_level_of_the_references_look_schedule(reference):
    from scipy import stats

    from flasheval.placement.looks import look_plan

    plan = replace(load_tier_plan("default"), correction="pocock", stop_rule="interval",
                   tiers=(Tier(first=1, last=None, resolution=0),))
    pool = reference.without("m003")
    looks = look_plan(pool, plan.for_pool(pool.n_models + 1))
    sizes = [len(e) for e in reference.example_ids]
    # the looks are the stages that add examples, each dataset capped at its size
    expected = []
    for s in plan.stages:
        t = tuple(n if s is None else min(s, n) for n in sizes)
        if not expected or t != expected[-1]:
            expected.append(t)
    assert looks.targets == tuple(expected)
    assert looks.variances[-1] == 0.0 and all(a > b for a, b in zip(looks.variances, looks.variances[1:]))
    z = stats.norm.isf((1 - looks.levels[0]) / 2)
    erring = sum(v > 0 for v in looks.variances)
    assert stats.norm.isf(0.025) < z < stats.norm.isf(0.025 / erring)  # tighter than the union bound, wider than one look
    # a model that never resolves (maximal everywhere) is looked at once per look, every look at that level
    result = place(pool, ReplayScorer(reference, "m003"), plan, seed=1)
    assert [s.confidence_level for s in result.stages] == list(looks.levels[:len(result.stages)])
    assert result.confidence_level == plan.confidence_level
