"""``benchmarks/scale.py`` at toy sizes: the placement part's screened constant equals the full simulation's,
the sweep part's rows are well formed, and a bad ``--only`` is one line."""

from __future__ import annotations

import pytest

from benchmarks import scale


def test_placement_rows_compare_sizes_and_the_screen_with_the_full_simulation(monkeypatch):
    monkeypatch.setattr(scale, "SIZES", (60, 80, 50))
    rows = scale.measure_placement((20, 40))
    constants = [r for r in rows if r["figure"].startswith("calibrated constant")]
    assert len(constants) == 2 and all(r["value"] == r["peer_value"] for r in constants)
    overhead = [r for r in rows if "overhead outside the scorer" in r["figure"]]
    assert overhead[0]["peer_value"] is None and overhead[1]["peer"] == "20-model pool"
    assert all(r["value"] > 0 for r in rows)
    assert "rank" in overhead[1]["note"]
    assert scale.format_rows(rows).count("\n") == len(rows)


def test_pool_rows_compare_each_pool_at_both_sizes_and_name_the_worst_ratio(monkeypatch):
    monkeypatch.setattr(scale, "POOL_SIZES", (60, 80, 50))
    rows = scale.measure_pools((20, 40), pools=(0, 1), repeats=1)
    per_pool, worst = rows[:2], rows[2]
    assert [r["peer"] for r in per_pool] == ["20 models", "20 models"] and all(r["value"] > 0 for r in per_pool)
    assert worst["value"] == max(r["value"] / r["peer_value"] for r in per_pool) and worst["unit"] == "x"
    assert all("placed" in r["note"] and "load" in r["note"] for r in per_pool)


def test_sweep_rows_report_rounds_and_the_bookkeeping_ratio(monkeypatch):
    monkeypatch.setattr(scale, "SIZES", (60, 80, 50))
    rows = scale.measure_sweep(n_pool=15, sizes=(4, 8), budget=120)
    assert [r["unit"] for r in rows] == ["s", "x", "s", "x"]
    assert rows[2]["peer"] == "4 checkpoints" and rows[2]["peer_value"] == rows[0]["value"]
    assert rows[1]["value"] > 0 and "per example scored" in rows[1]["note"]


def test_an_unknown_part_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        scale.main(["--only", "placement,nonsense"])
    assert exc.value.code == 2 and "unknown part(s) nonsense" in capsys.readouterr().err
