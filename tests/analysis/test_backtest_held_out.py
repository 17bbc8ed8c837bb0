"""``backtest --held-out K``: K models spread over the ranking leave the pool together, one pool for every placement."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.analysis import backtest as backtest_module
from flasheval.analysis.backtest import backtest, held_out_models
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan


@pytest.fixture(scope="module")
def ref():
    return synthetic_reference(50, [150, 200, 120], rng=9)


def test_held_out_models_take_one_model_from_each_stratum_of_the_ranking(ref):
    values = ref.aggregate_values()
    position = {m: int((values > values[ref.index(m)]).sum()) for m in ref.model_ids}  # 0 = best, no ties here
    assert len(set(values)) == len(values)
    for k in (1, 5, 7, 48):
        chosen = held_out_models(ref, k, seed=3)
        assert len(set(chosen)) == k
        edges = np.linspace(0, ref.n_models, k + 1).round().astype(int)  # stratum j holds positions edges[j]..edges[j+1]-1
        assert [int(np.searchsorted(edges, position[m], side="right")) - 1 for m in chosen] == list(range(k))
    draws = {held_out_models(ref, 5, seed=s) for s in range(6)}
    assert held_out_models(ref, 5, seed=3) == held_out_models(ref, 5, seed=3) and len(draws) > 1


@pytest.mark.parametrize("k", [0, -1, 49, 2.5, True])
def test_a_held_out_count_the_pool_cannot_afford_is_one_line(ref, k):
    with pytest.raises(InputError, match="--held-out.*from 1 to 48"):
        held_out_models(ref, k)


def test_held_out_placements_share_one_pool_and_one_calibration(ref, monkeypatch):
    plan = replace(load_tier_plan("default"), n_resamples=300)
    pools = []
    real = backtest_module.look_plan
    monkeypatch.setattr(backtest_module, "look_plan", lambda pool, *a, **k: pools.append(pool) or real(pool, *a, **k))
    result = backtest(ref, plan, seed=2, methods=("adaptive", "uniform"), held_out=6, looks={})
    chosen = held_out_models(ref, 6, seed=2)
    assert result.held_out == chosen and result.pool_size == ref.n_models - 6
    assert len(pools) == 1 and set(pools[0].model_ids) == set(ref.model_ids) - set(chosen)
    # every held-out model's full-data rank among the models kept, counted by hand
    values = dict(zip(ref.model_ids, ref.aggregate_values()))
    kept = [values[m] for m in ref.model_ids if m not in chosen]
    for method in ("adaptive", "uniform"):
        rows = result.rows[method]
        assert [r.model_id for r in rows] == list(chosen)
        for r in rows:
            assert r.full_rank == 1 + sum(v > values[r.model_id] for v in kept)
    # the standard errors of the shares, from K
    for s in result.summaries:
        rows = result.rows[s.method]
        p = sum(r.within for r in rows) / len(rows)
        q = sum(r.covered for r in rows) / len(rows)
        assert s.n_models == 6
        assert s.share_within_se == pytest.approx(math.sqrt(p * (1 - p) / 6))
        assert s.coverage_se == pytest.approx(math.sqrt(q * (1 - q) / 6))


def test_backtest_cli_held_out_prints_shares_with_their_standard_errors(tmp_path, capsys):
    out = tmp_path / "bt.json"
    assert main(["backtest", "--held-out", "8", "--methods", "adaptive", "-q", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 models held out together, pool of 61" in text and "within res. (SE)" in text
    payload = json.loads(out.read_text())["payload"]
    assert payload["design"] == "held-out" and len(payload["held_out"]) == 8 and payload["pool_size"] == 61
    assert {"share_within_se", "coverage_se"} <= set(payload["summaries"][0])
    assert main(["backtest", "--held-out", "68", "-q", "--output", str(out)]) == 1
    assert "field '--held-out': must be a whole number from 1 to 67" in capsys.readouterr().err
