"""The constant calibrated to the window rule, checked against theory and independent simulations."""

from collections import OrderedDict
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from flasheval.placement import calibration
from flasheval.analysis.backtest import backtest
from flasheval.placement.calibration import (Calibration, brownian_paths, calibrated_constant, stop_miss_rates,
                                             top_limit_miss, true_positions)
from flasheval.placement.looks import look_plan
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import load_tier_plan
from flasheval.stats.sequential import pocock_constant


def test_brownian_paths_have_the_nested_looks_correlation():
    info = np.array([1.0, 2.0, 8.0])
    z = brownian_paths(info, 400_000, np.random.default_rng(1))
    expected = np.sqrt(np.minimum.outer(info, info) / np.maximum.outer(info, info))
    assert np.abs(np.corrcoef(z.T) - expected).max() < 0.01
    assert np.abs(z.std(axis=0) - 1).max() < 0.01


def test_one_look_that_always_stops_misses_at_the_normal_upper_tail():
    n_paths = 200_000
    z = np.random.default_rng(3).standard_normal((n_paths, 1))
    fits = np.ones((4, 4), dtype=bool)
    rates = stop_miss_rates(2.0, np.array([0.0]), np.array([1.0]), z, fits, np.array([-1e-9, 1e-9, -3.0]))
    tail = stats.norm.sf(2.0)
    assert rates[:2] == pytest.approx([tail, tail], abs=4 * np.sqrt(tail / n_paths))
    assert rates[2] < 1e-3


def test_a_rule_that_never_stops_never_misses():
    z = np.random.default_rng(4).standard_normal((1000, 3))
    rates = stop_miss_rates(1.0, np.array([0.3, -0.2]), np.array([1.0, 0.5, 0.2]), z, np.zeros((5, 5), dtype=bool),
                            np.linspace(-1, 1, 21))
    assert rates.max() == 0.0


def test_the_top_limit_matches_the_real_window_rule_far_from_the_pool():
    # Truth just below the best of widely spaced pool models, a spread far below the gaps: the rule runs
    # until |Z| >= c and misses on the upper exits only. Simulated with the real window rule, against half
    # the two-sided crossing probability by recursive integration (an independent method).
    plan = load_tier_plan("default").for_pool(11)
    values = -np.arange(10, dtype=float)
    info = np.array([20.0, 25, 32, 40, 50, 63, 80, 100])
    n_paths = 40_000
    z = brownian_paths(info, n_paths, np.random.default_rng(7))
    rate = stop_miss_rates(2.4, values, 1e-4 / np.sqrt(info), z, window_fits(plan, 11), np.array([-1e-9]))[0]
    expected = top_limit_miss(2.4, info)
    assert 0.03 < expected < 0.06
    assert rate == pytest.approx(expected, abs=4 * np.sqrt(expected / n_paths))


def test_the_limit_at_pococks_constant_for_twice_alpha_is_alpha():
    info = (1.0, 2.0, 4.0, 8.0)
    assert top_limit_miss(pocock_constant(info, 0.10), info) == pytest.approx(0.05, abs=1e-6)


def test_one_always_stopping_look_calibrates_to_the_one_sided_quantile():
    # one pool model, every interval stops at once: the worst miss is 1 - Phi(c) (truth next to the model)
    cal = calibrated_constant([0.0], [1.0], np.ones((4, 4), dtype=bool), 0.95, n_paths=20_000)
    assert cal.lower_bound == pytest.approx(stats.norm.isf(0.05), abs=1e-4)
    assert stats.norm.isf(0.05) - 1e-9 <= cal.constant <= stats.norm.isf(0.05) + 0.05
    assert cal.worst_miss <= 0.05 + 1e-12 and cal.pocock == pytest.approx(stats.norm.isf(0.025), abs=1e-4)


@pytest.fixture(scope="module")
def pool_and_plan():
    ref = synthetic_reference(25, [300, 500, 400], rng=11)
    pool = ref.without(ref.model_ids[0])
    return pool, replace(load_tier_plan("default"), correction="calibrated").for_pool(pool.n_models + 1)


def test_look_plans_calibrated_constant_is_above_the_bound_below_pocock_and_holds_alpha_on_fresh_paths(
        pool_and_plan, monkeypatch):
    pool, plan = pool_and_plan
    looks = look_plan(pool, plan)
    pocock = look_plan(pool, replace(plan, correction="pocock"))
    assert looks.targets == pocock.targets and looks.variances == pocock.variances
    assert looks.levels[0] < pocock.levels[0]
    assert len(set(looks.levels)) == 1  # one constant for every look
    c = float(stats.norm.isf((1.0 - looks.levels[0]) / 2.0))
    se = np.sqrt([v for v in looks.variances if v > 0]) / len(pool.dataset_names)
    info = 1.0 / se ** 2
    # theory: no valid constant is below Pocock's at 2 alpha (the exact top limit), and it saves on Pocock's
    bound = pocock_constant(tuple(info), 0.10)
    assert bound - 1e-9 <= c < pocock_constant(tuple(info), 0.05)
    assert top_limit_miss(bound - 0.05, info) > 0.05  # a constant just below the bound already fails
    # an independent simulation: 40,000 fresh paths (another seed) at every true position and spread
    assert pool.ranking_higher_is_better()
    values, fits = pool.aggregate_values(), window_fits(plan, pool.n_models + 1)
    n_paths = 40_000
    z = brownian_paths(info, n_paths, np.random.default_rng(12345))
    thetas = true_positions(values)
    worst = max(float(np.concatenate([stop_miss_rates(c, values, s * se, z, fits, thetas[i:i + 4])
                                      for i in range(0, len(thetas), 4)]).max()) for s in (0.25, 0.5, 1.0, 2.0))
    assert worst <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 4000)  # the calibration's own Monte Carlo error
    # deterministic: recomputed from scratch (an empty memo), the same looks
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    assert look_plan(pool, plan) == looks


def test_a_backtest_reuses_each_pools_looks_across_seeds(monkeypatch):
    from flasheval.analysis import backtest as backtest_module

    ref = synthetic_reference(5, [80, 100], rng=5)
    plan = replace(load_tier_plan("default"), correction="calibrated", n_resamples=200)
    fixed = replace(load_tier_plan("flash_helm"), n_resamples=200)
    computed = []
    real = backtest_module.look_plan
    monkeypatch.setattr(backtest_module, "look_plan",
                        lambda pool, *a, **k: computed.append(pool) or real(pool, *a, **k))
    looks: dict = {}
    # an empty cache: every pool's looks are computed, as without a cache, and stored per held-out model
    first = backtest(ref, plan, fixed, seed=1, methods=("adaptive",), looks=looks)
    assert len(computed) == ref.n_models
    assert sorted(model_id for model_id, _ in looks) == sorted(ref.model_ids)
    assert len({looks[key].variances for key in looks}) == ref.n_models  # each pool its own looks
    stored = dict(looks)
    # a full cache: nothing is computed, nothing changes, and the rows are the same
    again = backtest(ref, plan, fixed, seed=1, methods=("adaptive",), looks=looks)
    assert len(computed) == ref.n_models
    assert looks == stored
    assert first.rows == again.rows


def test_stop_miss_rates_agree_with_a_path_by_path_loop():
    # brute force: walk every path look by look in Python, stop at the first fitting interval
    gen = np.random.default_rng(21)
    values = np.sort(gen.normal(size=12))[::-1]
    se = np.array([0.8, 0.5, 0.3, 0.15])
    z = brownian_paths(1.0 / se ** 2, 300, gen)
    plan = load_tier_plan("default").for_pool(13)
    fits = window_fits(plan, 13)
    thetas = true_positions(values, n_grid=7)
    expected = []
    for theta in thetas:
        true = 1 + int((values > theta).sum())
        misses = 0
        for path in z:
            for k in range(len(se)):
                est = theta + se[k] * path[k]
                lo, hi = 1 + int((values > est + 2.3 * se[k]).sum()), 1 + int((values > est - 2.3 * se[k]).sum())
                if fits[lo, hi]:
                    misses += not (lo <= true <= hi)
                    break
        expected.append(misses / len(z))
    assert stop_miss_rates(2.3, values, se, z, fits, thetas) == pytest.approx(expected, abs=1e-12)


def test_a_capped_run_uses_pococks_constant_and_an_uncapped_one_the_calibrated(pool_and_plan):
    from flasheval.placement.controller import place
    from flasheval.placement.looks import for_budget
    from flasheval.reference.scoring.replay import ReplayScorer
    from flasheval.placement.results import Budget

    pool, plan = pool_and_plan
    assert for_budget(plan, Budget()) is plan
    assert for_budget(plan, Budget(max_examples=10_000)).correction == "pocock"
    pocock = replace(plan, correction="pocock")
    assert for_budget(pocock, Budget(max_tokens=5)) is pocock
    ref = synthetic_reference(25, [300, 500, 400], rng=11)
    held_out = ref.model_ids[0]
    fast = replace(plan, n_resamples=200)
    capped = place(pool, ReplayScorer(ref, held_out), fast, budget=Budget(max_examples=400))
    free = place(pool, ReplayScorer(ref, held_out), fast)
    # Pocock's constant: every look of the plan covers at once with the plan's level. Simulated by hand:
    # standardized Brownian motion at the looks' information (the looks that can err, from their variances).
    c = float(stats.norm.isf((1.0 - capped.stages[0].confidence_level) / 2.0))
    assert {s.confidence_level for s in capped.stages} == {capped.stages[0].confidence_level}
    info = 1.0 / np.array(sorted({v for v in look_plan(pool, fast).variances if v > 0}, reverse=True))
    assert len(info) > 1
    n_paths = 200_000
    steps = np.random.default_rng(31).standard_normal((n_paths, len(info))) * np.sqrt(np.diff(np.r_[0.0, info]))
    z = np.cumsum(steps, axis=1) / np.sqrt(info)
    coverage = float(np.mean(np.all(np.abs(z) < c, axis=1)))
    assert coverage == pytest.approx(0.95, abs=4 * np.sqrt(0.05 * 0.95 / n_paths))
    assert free.stages[0].confidence_level < capped.stages[0].confidence_level


def test_window_fits_adds_the_sweeps_clearly_low_stop():
    plan = load_tier_plan("default").for_pool(30)
    plain, racing = window_fits(plan, 30), window_fits(plan, 30, low_rank=20)
    assert not plain[20, 30] and racing[20, 30]  # 11 ranks fit no window of the 20+ tier (+-4), but lie low
    assert (racing[:20] == plain[:20]).all()  # intervals reaching above rank 20 are judged by the window rule only
    assert racing[20:31, 20:31][np.triu_indices(11)].all()


@pytest.mark.parametrize("name, n_ranks, low_rank", [("default", 30, None), ("default", 69, 34), ("default", 200, None),
                                                     ("lean", 45, 20), ("flash_helm", 25, None)])
def test_window_fits_equals_the_window_rule_on_every_interval(name, n_ranks, low_rank):
    from flasheval.placement.stop_rule import window_rank

    plan = load_tier_plan(name).for_pool(n_ranks)
    fits = window_fits(plan, n_ranks, low_rank)
    for lo in range(n_ranks + 2):
        for hi in range(n_ranks + 2):
            expected = 1 <= lo <= hi <= n_ranks and (window_rank(plan, (lo, hi), (lo + hi) / 2) is not None
                                                     or (low_rank is not None and lo >= low_rank))
            assert fits[lo, hi] == expected, (lo, hi)


def test_rank_function_counts_the_values_above_exactly():
    from flasheval.placement.calibration import rank_function

    gen = np.random.default_rng(8)
    for values in (gen.normal(size=50), np.round(gen.normal(size=40), 1), np.array([0.5]), np.array([0.2, 0.2, 0.7])):
        x = np.r_[gen.normal(size=2000) * 2, values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf), -1e9, 1e9]
        assert (rank_function(values)(x) == 1 + (values[None, :] > x[:, None]).sum(axis=1)).all()


def test_calibrated_constant_is_memoised_by_value_with_a_bounded_memo(monkeypatch):
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    monkeypatch.setattr(calibration, "MEMO_SIZE", 2)
    calls = []
    real = calibration.stop_misses
    monkeypatch.setattr(calibration, "stop_misses", lambda *a, **k: calls.append(1) or real(*a, **k))
    fits = np.ones((4, 4), dtype=bool)  # one pool model, every interval stops at once

    def calibrate(value: float = 0.5, confidence_level: float = 0.95, **kwargs) -> Calibration:
        # fresh array objects every call: the memo must key on values, not identity
        cal = calibrated_constant(np.array([value]), np.array([1.0]), fits.copy(), confidence_level, n_paths=2000,
                                  **kwargs)
        assert len(calibration._MEMO) <= 2
        return cal

    first = calibrate()
    assert len(calls) > 0  # the first call simulates
    n = len(calls)
    assert calibrate() is first and len(calls) == n  # equal inputs: the stored result, no simulation
    assert calibrate(chunk=3) is first and len(calls) == n  # the chunk only sets memory
    calibrate(0.5 + 1e-12)  # one value changed: simulated again
    assert len(calls) > n
    n = len(calls)
    assert calibrate() is first and len(calls) == n  # still stored; now the most recently used
    calibrate(confidence_level=0.9)  # another level: simulated again, evicting the least recently used
    assert len(calls) > n
    n = len(calls)
    assert calibrate() is first and len(calls) == n
    calibrate(0.5 + 1e-12)  # evicted: simulated again
    assert len(calls) > n
