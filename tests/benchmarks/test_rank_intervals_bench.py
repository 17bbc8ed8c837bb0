"""``benchmarks/rank_intervals.py``: its textbook peer against loops, and its command line."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import rank_intervals as bench

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rank_intervals.py"


def test_the_pairwise_standard_error_peer_equals_loops():
    gen = np.random.default_rng(0)
    values = gen.normal(0, 0.05, 6)
    replicates = values + gen.normal(0, 0.02, (200, 6)) @ np.diag(gen.uniform(0.5, 1.5, 6))
    lo, hi, better = bench._pairwise_se_intervals(values, replicates, 0.9)
    z = replicates - values
    se = {(i, j): np.std(replicates[:, i] - replicates[:, j]) for i, j in itertools.permutations(range(6), 2)}
    stat = [max(abs(zr[i] - zr[j]) / se[i, j] for i, j in se) for zr in z]
    c = np.quantile(stat, 0.9, method="higher")
    expected = [[j != i and values[j] - values[i] > c * se[i, j] for j in range(6)] for i in range(6)]
    assert better.tolist() == expected
    assert lo.tolist() == [1 + sum(row) for row in expected]
    assert hi.tolist() == [6 - sum(expected[j][i] for j in range(6)) for i in range(6)]


def test_the_command_line_refuses_a_bad_count_in_one_line():
    out = subprocess.run([sys.executable, str(SCRIPT), "many"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "N_POOLS must be a whole number, got 'many'" in out.stderr
