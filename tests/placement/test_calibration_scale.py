"""The calibration at scale: exact bin-table ranks, one simulation for both sides of a pool model, the
screen, and the calibrations kept on disk."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict

import numpy as np
import pytest

from flasheval.placement import calibration, calibration_cache
from flasheval.placement.calibration import (brownian_paths, calibrated_constant, limit_positions, rank_function,
                                             stop_miss_rates, stop_misses, true_positions)
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import load_tier_plan


def _brute_rank(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1 + (values[None, :] > x[:, None]).sum(axis=1)


@pytest.mark.parametrize("case", ["spread", "near ties", "exact ties", "one cluster", "two values"])
def test_rank_function_is_exact_on_crowded_and_tied_pools(case):
    gen = np.random.default_rng(3)
    values = {"spread": gen.normal(size=3000),
              "near ties": np.r_[gen.normal(size=500), gen.normal(size=500) * 1e-15 + 0.25],  # the same aggregate, rounded apart
              "exact ties": np.round(gen.normal(size=2000), 2),
              "one cluster": np.r_[gen.normal(size=50) * 1e-9, [5.0, -5.0]],  # crowded bins: served by searchsorted
              "two values": np.array([0.1, 0.1, 0.9])}[case]
    x = np.r_[gen.normal(size=20_000) * 2, values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf),
              values.min() - 1e-300, values.max() + 1.0, -1e12, 1e12]
    assert (rank_function(values)(x) == _brute_rank(values, x)).all()
    assert (rank_function(values, max_occupancy=1)(x) == _brute_rank(values, x)).all()  # the searchsorted path


def test_limit_positions_are_the_two_sides_of_every_pool_value():
    values = np.array([0.7, 0.2, 0.7, 0.5, 0.9])
    thetas, truths = limit_positions(values, n_grid=6)
    eps = 1e-9
    assert list(thetas) == sorted(thetas, reverse=True)
    for theta, (upper, lower) in zip(thetas, truths):
        if theta in values:  # the ranks of a truth just above and just below the value, counted by hand
            assert upper == 1 + (values > theta + eps).sum() and lower == 1 + (values > theta - eps).sum()
        else:
            assert upper == lower == 1 + (values > theta).sum()
    # the same positions as true_positions' (value +- eps and the grid), each side once
    assert len(thetas) + len(set(values)) == len(true_positions(values, n_grid=6))


def test_one_simulation_per_pool_value_equals_the_two_sides_simulated_apart():
    gen = np.random.default_rng(5)
    values = np.sort(gen.normal(size=40))[::-1]
    se = np.array([0.9, 0.6, 0.35, 0.2, 0.1])
    z = brownian_paths(1.0 / se ** 2, 700, gen)
    fits = window_fits(load_tier_plan("default").for_pool(41), 41)
    thetas, truths = limit_positions(values, n_grid=0)
    both = stop_misses(2.4, values, se, z, fits, thetas, truths=truths)
    eps = 1e-9 * float(np.ptp(values))
    above = stop_miss_rates(2.4, values, se, z, fits, thetas + eps) * len(z)
    below = stop_miss_rates(2.4, values, se, z, fits, thetas - eps) * len(z)
    assert (both[:, 0] == above).all() and (both[:, 1] == below).all()


@pytest.mark.parametrize("n_models, seed", [(60, 1), (150, 2), (400, 3)])
def test_the_screen_returns_the_constant_of_the_full_simulation(n_models, seed, monkeypatch):
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    gen = np.random.default_rng(seed)
    values = np.sort(gen.normal(size=n_models) * 0.05)[::-1]
    se = 0.05 * np.array([0.9, 0.6, 0.45, 0.3, 0.2, 0.12, 0.06])
    fits = window_fits(load_tier_plan("default").for_pool(n_models + 1), n_models + 1)
    simulated = {1000: 0, 3000: 0}
    real = calibration.stop_misses

    def counting(c, values, se, z, *args, **kwargs):
        simulated[z.shape[0]] = simulated.get(z.shape[0], 0) + len(args[1])
        return real(c, values, se, z, *args, **kwargs)

    monkeypatch.setattr(calibration, "stop_misses", counting)
    screened = calibrated_constant(values, se, fits, 0.95)
    assert 0 < simulated[3000] < simulated[1000] / 2  # the screen completed some positions and cleared most
    full = calibrated_constant(values, se, fits, 0.95, screen_paths=4000)  # no screen: every position, every path
    assert screened.constant == full.constant and screened.lower_bound <= screened.constant <= screened.pocock
    assert screened.worst_miss <= full.worst_miss  # the screen leaves out positions, never adds misses


def test_calibrations_are_kept_on_disk_by_content(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FLASHEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    fits = np.ones((5, 5), dtype=bool)
    first = calibrated_constant(np.array([0.1, 0.4]), np.array([1.0, 0.5]), fits, 0.95, n_paths=2000)
    files = list((tmp_path / "cache" / "calibration").rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["constant"] == first.constant
    # another process (an empty memo) computes nothing: the simulation would raise
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    monkeypatch.setattr(calibration, "_calibrate", lambda *a, **k: pytest.fail("simulated again"))
    again = calibrated_constant(np.array([0.1, 0.4]), np.array([1.0, 0.5]), fits, 0.95, n_paths=2000)
    assert again == first
    # other content is another key; a damaged entry is recomputed with a warning naming it
    monkeypatch.undo()
    monkeypatch.setenv("FLASHEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    calibrated_constant(np.array([0.1, 0.41]), np.array([1.0, 0.5]), fits, 0.95, n_paths=2000)
    assert len(list((tmp_path / "cache" / "calibration").rglob("*.json"))) == 2
    files[0].write_text("{not json")
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    with caplog.at_level(logging.WARNING):
        redone = calibrated_constant(np.array([0.1, 0.4]), np.array([1.0, 0.5]), fits, 0.95, n_paths=2000)
    assert redone == first and str(files[0]) in caplog.text and "recomputing" in caplog.text
    assert json.loads(files[0].read_text())["constant"] == first.constant  # rewritten


def test_the_disk_cache_can_be_off_and_an_unwritable_folder_is_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FLASHEVAL_CACHE", "off")
    assert calibration_cache.cache_folder() is None
    monkeypatch.delenv("FLASHEVAL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration_cache.cache_folder() == tmp_path / "xdg" / "flasheval" / "calibration"
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FLASHEVAL_CACHE", str(blocker))
    monkeypatch.setattr(calibration_cache, "_warned", set())
    fits = np.ones((4, 4), dtype=bool)
    with caplog.at_level(logging.WARNING):
        for value in (0.0, 0.5, 0.7):
            monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
            calibrated_constant(np.array([value]), np.array([1.0]), fits, 0.95, n_paths=1000)
    assert caplog.text.count("cannot write the calibration cache") == 1
