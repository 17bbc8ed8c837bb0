"""One calibrated constant pinned to its exact value: a change of the algorithm must bump CALIBRATION_VERSION.

Calibrations are kept on disk keyed by their inputs and :data:`~flasheval.placement.calibration_cache.
CALIBRATION_VERSION` (:mod:`flasheval.placement.calibration_cache`); nothing else tells an old entry from a new
one. If this test fails, the algorithm now returns another constant for the same inputs: every calibration
stored on users' disks is stale. Bump ``CALIBRATION_VERSION`` AND update the pinned version and numbers here,
in the same commit. (Changing only the numbers here would serve the stale entries.)
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from flasheval.placement import calibration
from flasheval.placement.calibration import calibrated_constant
from flasheval.placement.calibration_cache import CALIBRATION_VERSION
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import load_tier_plan

# A small fixed pool (12 models' full-data aggregates, best first) and the default plan's seven looks.
VALUES = (0.118121, 0.078732, 0.06879, 0.051093, 0.037164, 0.019639, 0.006159, -0.000139, -0.0106, -0.014336,
          -0.047161, -0.048494)
SE = tuple(0.05 * f for f in (0.9, 0.6, 0.45, 0.3, 0.2, 0.12, 0.06))

PINNED_VERSION = "2"
PINNED = {"constant": 2.376753291707746, "lower_bound": 2.351753291707746, "pocock": 2.619452603582991,
          "worst_miss": 0.0495}


def test_a_calibrated_constant_is_pinned_to_the_algorithm_version(monkeypatch):
    monkeypatch.setenv("FLASHEVAL_CACHE", "off")  # computed now, never read from a disk cache
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    n_models = len(VALUES)
    fits = window_fits(load_tier_plan("default").for_pool(n_models + 1), n_models + 1)
    cal = calibrated_constant(np.array(VALUES), np.array(SE), fits, 0.95)
    got = {"constant": cal.constant, "lower_bound": cal.lower_bound, "pocock": cal.pocock,
           "worst_miss": cal.worst_miss}
    assert (CALIBRATION_VERSION, got) == (PINNED_VERSION, PINNED), (
        "the calibration algorithm returns another constant for the same inputs (or its version changed): "
        "bump CALIBRATION_VERSION in flasheval/placement/calibration_cache.py and pin the new version and "
        "numbers here in the same commit, so calibrations cached on disk by the old algorithm are not served")
