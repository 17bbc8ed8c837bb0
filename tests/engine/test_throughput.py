"""Throughput figures against hand-computed values (2 FLOPs per parameter per token)."""

from __future__ import annotations

import pytest

from flasheval.engine.throughput import throughput


def test_figures_match_hand_computation():
    # 135M parameters, 12,000 tokens in 4 s: 3,000 tokens/s and 2 * 135e6 * 3,000 = 8.1e11 FLOP/s.
    figures = throughput(n_examples=40, n_tokens=12_000, seconds=4.0, n_parameters=135_000_000, peak_flops=1.62e12)
    assert figures["examples_per_second"] == pytest.approx(10.0)
    assert figures["tokens_per_second"] == pytest.approx(3_000.0)
    assert figures["flops_per_second"] == pytest.approx(8.1e11)
    assert figures["fraction_of_peak"] == pytest.approx(0.5)
    assert "fraction_of_peak" not in throughput(n_examples=1, n_tokens=1, seconds=1.0, n_parameters=1)


def test_unknown_parameters_or_no_time_give_no_rates():
    assert throughput(n_examples=3, n_tokens=10, seconds=1.0, n_parameters=None)["flops_per_second"] is None
    zero = throughput(n_examples=3, n_tokens=10, seconds=0.0, n_parameters=100, peak_flops=1e9)
    assert zero["examples_per_second"] is None and zero["flops_per_second"] is None and zero["fraction_of_peak"] is None


def test_forward_flops_is_the_hand_formula():
    from flasheval.engine.throughput import forward_flops

    # 2 FLOPs (one multiply, one add) per parameter per token: 135M parameters x 12,000 tokens = 3.24e12.
    assert forward_flops(135_000_000, 12_000) == 3.24e12
    assert forward_flops(7, 3.5) == 49.0
    assert forward_flops(None, 10) is None and forward_flops(10, None) is None

