"""``benchmarks/_scale_store.py`` at a toy size: every row is there, well formed, and the sharded open of an
absent model beats the single-file one (the figures themselves come from the full run, not from here)."""

from __future__ import annotations

import math

import pytest

from benchmarks._scale_store import measure_store


@pytest.mark.slow
def test_measure_store_returns_one_row_per_figure(tmp_path):
    rows = measure_store(20_000, tmp=tmp_path)
    assert [row["unit"] for row in rows] == ["s", "s", "MiB", "results/s"]
    for row in rows:
        assert set(row) == {"figure", "value", "unit", "peer", "peer_value"}
        assert all(math.isfinite(row[k]) and row[k] >= 0 for k in ("value", "peer_value"))
    assert "20,000 results of others" in rows[0]["figure"] and "6,000 results" in rows[1]["figure"]
    assert rows[0]["value"] < rows[0]["peer_value"]  # one stat against 20,000 lines read and checksummed
    assert rows[3]["value"] > 0 and rows[3]["peer_value"] > 0
    assert not (tmp_path / "scale_store").exists()  # 500 MB at the full size: removed after
