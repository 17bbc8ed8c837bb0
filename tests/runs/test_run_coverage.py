"""Coverage over a run: the level split's arithmetic, its refusals, and simultaneous coverage by simulation."""

from dataclasses import asdict, replace

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.placement.calibration import calibrated_constant, rank_function
from flasheval.placement.controller import place, plan_looks
from flasheval.placement.looks import look_plan
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.runs.coverage import check_n_checkpoints, simultaneous_level, split_level
from flasheval.analysis.simulation import run_subset, synthetic_reference, synthetic_run
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import load_tier_plan


@pytest.mark.parametrize("name", ["default", "lean", "flash_helm"])
def test_split_level_is_alpha_over_k_and_changes_nothing_else(name):
    plan = load_tier_plan(name)
    alpha = 1 - plan.confidence_level  # e.g. 0.05
    assert split_level(plan, 1) is plan
    for k in (2, 3, 7, 10, 20, 1000):
        split = split_level(plan, k)
        # independent computation: the K per-checkpoint errors sum to the run's alpha
        assert k * (1 - split.confidence_level) == pytest.approx(alpha, rel=1e-12)
        assert {f: v for f, v in asdict(split).items() if f != "confidence_level"} == \
               {f: v for f, v in asdict(plan).items() if f != "confidence_level"}
    assert split_level(plan, np.int64(4)).confidence_level == pytest.approx(1 - alpha / 4)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, False, "3", None, 2.0])
def test_bad_numbers_of_checkpoints_are_refused_in_one_line(bad):
    with pytest.raises(InputError) as err:
        split_level(load_tier_plan("default"), bad)
    message = str(err.value)
    assert "simultaneous" in message and repr(bad) in message and "\n" not in message
    with pytest.raises(InputError):
        check_n_checkpoints(bad)


def test_simultaneous_level_is_the_union_bound():
    for level in (0.8, 0.95, 0.995):
        for n in (1, 2, 9, 10, 11, 30):
            assert simultaneous_level(level, n) == pytest.approx(max(0.0, 1 - sum(1 - level for _ in range(n))))
    k = 10
    per = split_level(load_tier_plan("default"), k).confidence_level
    assert simultaneous_level(per, k) == pytest.approx(0.95)
    assert simultaneous_level(per, k + 1) == pytest.approx(0.945)  # beyond K the promise falls by alpha / K each
    with pytest.raises(InputError, match="n_placed"):
        simultaneous_level(0.95, 0)


def _stop_covers(c: float, values: np.ndarray, se: np.ndarray, fits: np.ndarray, theta: float, truth: int,
                 z: np.ndarray) -> np.ndarray:
    """Per path, whether the interval at the window rule's stop covers ``truth`` (written out look by look)."""
    rank = rank_function(values)
    covered = np.ones(z.shape[0], dtype=bool)
    going = np.ones(z.shape[0], dtype=bool)
    for k in range(len(se)):
        est = theta + se[k] * z[:, k]
        lo, hi = rank(est + c * se[k]), rank(est - c * se[k])
        stop = going & fits[lo, hi]
        covered[stop] = (lo[stop] <= truth) & (truth <= hi[stop])
        going &= ~stop
    return covered  # a path that never stops scores everything at the last look: it covers


def test_split_gives_simultaneous_coverage_where_per_checkpoint_levels_do_not():
    """K checkpoints at the worst position (just below the best pool model, small spread), with independent
    errors (the case where misses add up): each at the plan's level, all K cover with probability well
    under 95%; each at the split level, all K cover with probability at least 95% (minus 3 SE)."""
    ref = synthetic_reference(20, [300, 500], rng=7)
    plan = load_tier_plan("default").for_pool(21)
    values = ref.aggregate_values(None)
    variances = look_plan(ref, replace(plan, correction="pocock")).variances  # the looks' variances, not calibrated
    se = np.sqrt([v for v in variances if v > 0]) / len(ref.dataset_names)  # of the mean over datasets
    fits = window_fits(plan, 21)
    best = float(values.max())
    theta, truth = best - 1e-9 * float(np.ptp(values)), 2
    k, n_paths, scale = 10, 4000, 0.25
    info = 1.0 / (scale * se) ** 2
    gen = np.random.default_rng(2024)  # fresh paths, not the calibration's
    z = np.stack([np.cumsum(gen.standard_normal((n_paths, len(info))) * np.sqrt(np.diff(np.r_[0.0, info])), axis=1)
                  / np.sqrt(info) for _ in range(k)])
    for split, expect_all in ((1, "below"), (k, "at least")):
        level = split_level(plan, split).confidence_level
        c = calibrated_constant(values, se, fits, level).constant
        covers = np.stack([_stop_covers(c, values, scale * se, fits, theta, truth, z[j]) for j in range(k)])
        every = covers.all(axis=0).mean()
        sd = np.sqrt(0.95 * 0.05 / n_paths)
        assert covers.mean() >= level - 3 * np.sqrt(level * (1 - level) / n_paths / k)  # each checkpoint keeps its level
        if expect_all == "below":
            assert every < 0.95 - 3 * sd, every  # about (1 - 0.05)^10 = 0.60: per-checkpoint levels do not add up
        else:
            assert every >= 0.95 - 3 * sd, every


def test_a_split_run_by_replay_covers_and_never_stops_earlier():
    """Real placements of a run's checkpoints (one seed per run, shared by its checkpoints): at the split level
    each interval holds its per-checkpoint interval's stop or a later one (the looks' intervals are nested)."""
    plan = load_tier_plan("default")
    ref, ids = synthetic_run(15, 4, [200, 300], rng=3, dataset_spread=1.0)
    pool = ref.without(*ids)
    k = len(ids)
    split = split_level(plan, k)
    looks = {1: plan_looks(pool, plan), k: plan_looks(pool, split)}
    assert looks[k].levels[0] > looks[1].levels[0]
    gen = np.random.default_rng(11)
    from flasheval.analysis.backtest import full_data_ranks

    full = full_data_ranks(ref, held_out=ids)
    for _ in range(3):
        seed = int(gen.integers(2**31))
        for i in run_subset(k, k):
            one = place(pool, ReplayScorer(ref, ids[i]), plan, seed=seed, looks=looks[1])
            both = place(pool, ReplayScorer(ref, ids[i]), split, seed=seed, looks=looks[k])
            assert both.confidence_level == pytest.approx(1 - 0.05 / k)
            assert both.compute.n_examples >= one.compute.n_examples
            assert both.interval[0] <= full[ids[i]] <= both.interval[1]
