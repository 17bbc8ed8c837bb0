"""Fluid Benchmarking baseline: adaptive selection by Fisher information, and its backtest at equal cost."""

from dataclasses import replace

import numpy as np
import pytest

from flasheval.cli import main
from flasheval.analysis.backtest import backtest
from flasheval.analysis.fluid import ABILITY_GRID, adaptive_test, fluid_rank, pool_fits
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan
from flasheval.stats.irt import ability_posterior, fisher_information


def test_each_item_is_the_most_informative_unused_one_at_the_running_estimate():
    ref = synthetic_reference(25, [80], rng=1)
    fit = pool_fits(ref, "m000")[0]
    y = ref.scores[0][0]
    test = adaptive_test(y, fit, 30)
    a, b = fit.discrimination, fit.difficulty
    used: list[int] = []
    for item in test.items:
        eap = ability_posterior(y[used], a[used], b[used], grid=ABILITY_GRID)[0] if used else 0.0
        snapped = ABILITY_GRID[np.argmin(np.abs(ABILITY_GRID - eap))]
        info = fisher_information(snapped, a, b)
        info[used] = -np.inf
        assert item == int(np.argmax(info))
        used.append(int(item))
    assert len(set(used)) == 30
    weights = ability_posterior(y[used], a[used], b[used], grid=ABILITY_GRID)[2]
    assert test.posterior == pytest.approx(weights, abs=1e-12)


def test_fluid_rank_with_every_example_is_close_to_the_full_data_rank():
    ref = synthetic_reference(30, [300, 200], rng=7)
    model = "m011"
    pool = ref.without(model)
    i = ref.index(model)
    dist = fluid_rank(pool, [s[i] for s in ref.scores], [300, 200], pool_fits(ref, model), n_resamples=300, rng=0)
    values = pool.aggregate_values()
    full = 1 + int(np.sum(values > ref.aggregate_values()[i]))
    assert abs(dist.rank - full) <= 2 and dist.interval[0] <= dist.rank <= dist.interval[1]
    again = fluid_rank(pool, [s[i] for s in ref.scores], [300, 200], pool_fits(ref, model), n_resamples=300, rng=0)
    assert again.interval == dist.interval and again.mid_rank == dist.mid_rank


def test_backtest_runs_fluid_at_equal_cost_and_the_cli_selects_methods(tmp_path, capsys):
    ref = synthetic_reference(10, [120, 80], rng=4)
    plan = replace(load_tier_plan("default"), n_resamples=200)
    result = backtest(ref, plan, load_tier_plan("flash_helm"), seed=0, methods=("adaptive", "fluid"))
    assert [s.method for s in result.summaries] == ["adaptive", "fluid"]
    for ours, fluid in zip(result.rows["adaptive"], result.rows["fluid"]):
        assert ours.model_id == fluid.model_id and ours.n_examples == fluid.n_examples  # equal cost, per model
    assert main(["backtest", "--reference", "helm_lite", "--methods", "adaptive,irt"]) == 1
    err = capsys.readouterr().err
    assert "irt" in err and "fluid" in err and len(err.strip().splitlines()) == 1
