"""The seconds benchmark's verdict: a model's figure is the median of its rounds' ratios, and every round is
counted in the report (benchmarks/seconds_saved.py)."""

from __future__ import annotations

import statistics

from benchmarks import seconds_saved as ss


def _round(place_s: float, evaluate_s: float) -> dict:
    place = {"seconds": place_s, "load_seconds": 1.0, "cpu_seconds": 2 * place_s, "tokens": 500, "examples": 10,
             "rank": 2, "interval": [1, 3]}
    full = {"seconds": evaluate_s, "load_seconds": 1.0, "cpu_seconds": 2 * evaluate_s, "tokens": 1000, "examples": 20,
            "accuracy": {"copa": 0.5}}
    return {"order": ["place", "evaluate"], "place": place, "evaluate": full, **ss._savings(place, full)}


def test_the_verdict_is_each_models_median_ratio_and_every_round_is_reported():
    rounds = [_round(101.0, 123.0), _round(61.0, 107.0), _round(57.0, 101.0)]  # one slow round
    ratios = [(e - 1.0) / (p - 1.0) / 2.0 for p, e in ((101.0, 123.0), (61.0, 107.0), (57.0, 101.0))]
    assert [r["ratio"] for r in rounds] == ratios
    median = ss.median_savings(rounds)
    assert median["ratio"] == statistics.median(ratios) == ratios[1]  # 0.88; their mean (0.795) would miss 0.8
    assert statistics.mean(ratios) < 0.81 and median["token_saving"] == 2.0
    row = {"model": "m", "rounds": rounds, "full_data_rank": 2, "median": median}
    text = ss.report([row, {**row, "model": "n", "rounds": rounds[:1], "median": ss.median_savings(rounds[:1])}])
    assert "met for 1 of 2 models; single rounds: 2 of 4 >= 0.8, worst 0.61" in text
    assert text.count("place ") == 4 and text.count("evaluate ") == 4 and text.count("median/") == 2


def test_rounds_that_place_a_model_differently_are_flagged():
    rounds = [_round(61.0, 107.0), _round(57.0, 101.0)]
    row = {"model": "m", "rounds": rounds, "full_data_rank": 2, "median": ss.median_savings(rounds)}
    assert "NOT DETERMINISTIC" not in ss.report([row])
    rounds[1]["place"] = {**rounds[1]["place"], "interval": [1, 4]}
    assert "NOT DETERMINISTIC" in ss.report([row])
