"""``benchmarks/oracle_bound.py`` against a brute-force oracle on a tiny synthetic reference."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import optimize

from benchmarks import oracle_bound as ob
from flasheval.analysis.backtest import full_data_ranks
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan


def _brute_force_chance(ref, model_id, full_rank, plan, keys, n, neighbours=None, unequal=False, floor=0.1):
    """Share of draws placing the model within resolution at ``n`` per dataset: one (weighted) lstsq fit per draw."""
    pool = ref.without(model_id)
    i = ref.index(model_id)
    pool_values = pool.dataset_means().mean(axis=1)
    hits = 0
    for r in range(keys[0].shape[0]):
        means = []
        for d, s in enumerate(ref.scores):
            near = None if neighbours is None else pool.scores[d][neighbours].mean(axis=0)
            x_full = [pool.scores[d].mean(axis=0)] + ([] if near is None else [near])
            n_d = min(n, s.shape[1])
            if unequal:
                size = np.maximum(np.sqrt(near * (1 - near)), floor)
                if n_d >= len(size):
                    pi = np.ones(len(size))
                else:
                    kappa = optimize.brentq(lambda k: np.minimum(1, k * size).sum() - n_d, 0, 1 / size.min())
                    pi = np.minimum(1, kappa * size)
                take = np.flatnonzero(keys[d][r] < pi)
                w = 1 / pi[take]
            else:
                take = np.argsort(keys[d][r], kind="stable")[:n_d]
                w = np.ones(len(take))
            design = np.column_stack([np.ones(len(take))] + [v[take] for v in x_full])
            y = s[i, take]
            root = np.sqrt(w)
            if len(take) == 0:  # an empty Poisson sample: the pool's mean is the prediction
                means.append(x_full[0].mean())
            elif np.linalg.matrix_rank(design * root[:, None], tol=1e-6) == design.shape[1]:
                beta = np.linalg.lstsq(design * root[:, None], y * root, rcond=None)[0]
                means.append(beta[0] + beta[1:] @ np.array([v.mean() for v in x_full]))
            else:  # a singular fit: no slope, the weighted mean
                means.append(np.sum(w * y) / np.sum(w))
        value = float(np.mean(means))
        mid = 1 + sum(v > value for v in pool_values) + 0.5 * sum(v == value for v in pool_values)
        placed = math.floor(mid + 0.5)
        hits += abs(placed - full_rank) <= plan.tier_for(placed).resolution
    return hits / keys[0].shape[0]


@pytest.mark.parametrize("estimator", ["control-variate", "greg-neighbours", "unequal-neighbours"])
def test_oracle_size_matches_a_brute_force_search(estimator):
    ref = synthetic_reference(9, [60, 35], rng=5)
    plan = load_tier_plan("default")
    keys = ob.draw_keys([60, 35], 40, np.random.default_rng(1))
    orders = ob.draw_orders(keys)
    grid = ob.size_grid(60)
    model = ref.model_ids[3]
    full = full_data_ranks(ref)[model]
    neighbours = None
    if estimator != "control-variate":
        pool = ref.without(model)
        own = ref.aggregate_values()[ref.index(model)]
        neighbours = np.argsort(np.abs(pool.aggregate_values() - own), kind="stable")[:3]
    size, chance = ob.oracle_size(ref, model, full, plan, orders, grid, keys=keys, estimator=estimator, n_neighbours=3,
                                  chunk=4)
    brute = [_brute_force_chance(ref, model, full, plan, keys, int(n), neighbours, estimator == "unequal-neighbours")
             for n in grid]
    assert chance == pytest.approx(brute[:len(chance)])
    assert size == next(int(n) for n, c in zip(grid, brute) if c >= 0.95)
    assert brute[-1] == 1.0  # every example scored: the full-data rank itself
    _, whole = ob.oracle_size(ref, model, full, plan, orders, grid, keys=keys, estimator=estimator, n_neighbours=3,
                              level=1.01)  # never reached: every size is tried
    assert whole == pytest.approx(brute)


def test_oracle_bound_cli_prints_the_oracle_and_the_method_share(capsys, tmp_path, monkeypatch):
    import pandas as pd

    from flasheval.reference import write_reference

    ref = synthetic_reference(8, [50, 40], rng=2)
    rows = [{"model": m, "dataset": d, "example_id": e, "score": float(s)}
            for d, ids, mat in zip(ref.dataset_names, ref.example_ids, ref.scores)
            for i, m in enumerate(ref.model_ids) for e, s in zip(ids, mat[i])]
    folder = write_reference(tmp_path / "syn", pd.DataFrame(rows), name="syn", source="t", licence="n", metric="acc")
    assert ob.main([str(folder), "--draws", "20"]) == 0
    out = capsys.readouterr().out
    assert "oracle (uniform n per dataset)" in out and "method / oracle, seed 0: median saving" in out


def test_method_savings_read_every_seed_of_a_backtest_record(tmp_path):
    import argparse

    from flasheval.analysis.backtest import backtest
    from flasheval.records.run_record import write_record

    # the reader only needs real records: a Pocock-corrected plan with few resamples makes them without
    # the default plan's calibration per held-out model (its looks are tested in tests/placement)
    ref = synthetic_reference(9, [60, 35], rng=5)
    plan = replace(load_tier_plan("flash_helm"), n_resamples=200)
    runs = [backtest(ref, plan, plan, seed=s, methods=("adaptive",)) for s in (0, 3)]
    path = write_record(tmp_path / "bt.json", kind="backtest", payload={"seeds": [r.to_json() for r in runs]})
    args = argparse.Namespace(backtest_record=str(path))
    got = ob._method_savings(args, ref, plan, list(ref.model_ids))
    assert [seed for seed, _ in got] == [0, 3]
    for (_, per_model), run in zip(got, runs):
        assert per_model == {r.model_id: (r.n_examples, r.saving) for r in run.rows["adaptive"]}
    single = write_record(tmp_path / "one.json", kind="backtest", payload=runs[0].to_json())
    assert ob._method_savings(argparse.Namespace(backtest_record=str(single)), ref, plan, list(ref.model_ids))[0][1] \
        == got[0][1]
