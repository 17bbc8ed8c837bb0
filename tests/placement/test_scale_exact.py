"""The placement's large-pool shortcuts return exactly what the straightforward computations return.

Each shortcut (the calibration simulating only paths that can miss, the look's bootstrap reading the pool's
per-example summaries kept once per course, the residual spreads computed in place, the leave-one-out
full-data ranks counted in sorted values) is compared bit for bit with an independent, direct computation
on a small pool with fractional scores and ties.
"""

from __future__ import annotations

import math

import numpy as np

from flasheval.hashing import derive_seed
from flasheval.placement.allocation import residual_spreads
from flasheval.analysis.backtest import full_data_ranks
from flasheval.placement.calibration import brownian_paths, limit_positions, miss_looks, rank_function, stop_misses
from flasheval.placement.controller import Controller, course, place, plan_looks, score_request, stage_rank
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import load_tier_plan
from flasheval.stats.bootstrap import pool_examples, rank_distribution
from flasheval.stats.ranking import rank_among


def _walk(c, values, se, z, fits, thetas, truths):
    """Every path walked look by look to its stop, in Python: misses per position and true rank."""
    misses = np.zeros(truths.shape, dtype=np.int64)
    for i, theta in enumerate(thetas):
        for path in z:
            for k in range(len(se)):
                est = theta + se[k] * path[k]
                lo, hi = 1 + int((values > est + c * se[k]).sum()), 1 + int((values > est - c * se[k]).sum())
                if fits[lo, hi]:
                    misses[i] += (truths[i] < lo) | (truths[i] > hi)
                    break
    return misses


def test_simulating_only_the_paths_that_can_miss_counts_every_miss():
    gen = np.random.default_rng(8)
    values = np.r_[np.round(gen.normal(size=14), 1), 0.3, 0.3]  # ties: both limits of a shared value
    se = np.array([0.9, 0.6, 0.4, 0.25, 0.12])
    z = brownian_paths(1.0 / se ** 2, 400, gen)
    fits = window_fits(load_tier_plan("default").for_pool(17), 17)
    thetas, truths = limit_positions(values, n_grid=5)
    c = 2.0  # small, so that many paths cross and the pruned walk still has misses to find
    last = miss_looks(c, se, np.ascontiguousarray(z.T), thetas, rank_function(values), values, truths)
    assert 0 < (last >= 0).sum() < len(z) and (last < len(se) - 1).sum() > (last < 0).sum()  # it prunes
    expected = _walk(c, values, se, z, fits, thetas, truths)
    got = stop_misses(c, values, se, z, fits, thetas, truths=truths)
    assert expected.sum() > 0 and np.array_equal(got, expected)
    # a true rank outside the limits of its position is not covered by the proof: every path is walked
    far = truths.copy()
    far[0] += 3
    assert (miss_looks(c, se, np.ascontiguousarray(z.T), thetas, rank_function(values), values, far)
            == len(se) - 1).all()
    assert np.array_equal(stop_misses(c, values, se, z, fits, thetas, truths=far),
                          _walk(c, values, se, z, fits, thetas, far))


def _fractional_pool(gen, n_models=30, sizes=(40, 25)):
    return [np.round(gen.random((n_models, n)), 2) for n in sizes]  # fractional scores, many ties


def test_the_looks_bootstrap_on_kept_pool_summaries_equals_the_gathered_pool():
    gen = np.random.default_rng(2)
    pool = [3.0 * s - 1.0 for s in _fractional_pool(gen)]  # scores beyond [0, 1]: the floor reads the pool's range
    full_means = np.stack([s.mean(axis=1) for s in pool], axis=1)
    kept = pool_examples(pool)
    for n in (3, 10, 25):
        columns = [gen.permutation(s.shape[1])[:n] for s in pool]
        new = [np.round(gen.random(n), 2) for _ in pool]  # inside the pool's range
        gathered = [s[:, c] for s, c in zip(pool, columns)]
        a = rank_distribution(new, gathered, population_sizes=[40, 25], n_resamples=300, rng=5,
                              estimator="control-variate", pool_full_means=full_means)
        b = rank_distribution(new, kept.at(columns), population_sizes=[40, 25], n_resamples=300, rng=5,
                              estimator="control-variate", pool_full_means=full_means)
        assert (a.mid_rank, a.interval) == (b.mid_rank, b.interval)
        assert np.array_equal(a.replicates, b.replicates)


def test_a_placement_keeping_the_pool_summaries_takes_the_same_looks_as_one_gathering_them():
    ref = synthetic_reference(41, [120, 90], rng=4)
    held = ref.model_ids[13]
    pool, plan = ref.without(held), load_tier_plan("default")
    looks = plan_looks(pool, plan)
    kept = place(pool, ReplayScorer(ref, held), plan, model_id=held, looks=looks, seed=3)
    # the same looks, each ranked by gathering the pool's scores on the look's examples
    controller = Controller(course(pool, plan, seed=3, looks=looks), model_id=held)
    for record in kept.stages:
        request = controller.next_stage()
        taken = controller.take(request, score_request(ReplayScorer(ref, held), pool.dataset_names, request))
        direct = stage_rank(pool, controller.joined(), controller.columns(), aggregate=None,
                            n_resamples=plan.n_resamples, confidence_level=record.confidence_level,
                            rng=derive_seed(3, "bootstrap", request.look))
        assert (taken.interval, taken.mid_rank, taken.decision) == (record.interval, record.mid_rank, record.decision)
        assert (direct.interval, direct.mid_rank) == (record.interval, record.mid_rank)
    assert controller.next_stage() is None


def test_residual_spreads_in_place_equal_the_direct_formula_bit_for_bit():
    gen = np.random.default_rng(6)
    pool = _fractional_pool(gen, n_models=600, sizes=(200, 5))  # the first: more rows than one block in cache
    direct = []
    for s in pool:
        cov = s.mean(axis=0)
        cc = cov - cov.mean()
        yc = s - s.mean(axis=1, keepdims=True)
        slope = (yc @ cc) / float(cc @ cc)
        direct.append(float(np.sqrt(np.mean((yc - slope[:, None] * cc[None, :]) ** 2))))
    assert residual_spreads(pool) == direct


def test_leave_one_out_full_data_ranks_equal_a_pass_over_the_others():
    ref = synthetic_reference(60, [7, 5], rng=1)  # few examples: many tied aggregates
    values = ref.aggregate_values()
    assert len(np.unique(values)) < len(values)
    direct = {m: int(math.floor(float(rank_among(values[i], np.delete(values, i))) + 0.5))
              for i, m in enumerate(ref.model_ids)}
    assert full_data_ranks(ref) == direct
