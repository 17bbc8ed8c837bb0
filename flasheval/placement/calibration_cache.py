"""Calibrations kept on disk, so repeated placements, sweeps and backtests on one pool pay once.

A calibration (:func:`flasheval.placement.calibration.calibrated_constant`) is a deterministic function
of its inputs: the pool's full-data aggregates, the looks' standard errors, the plan's stop table, the
level and the simulation's settings. Its key is a SHA-256 of those exact bytes and of
:data:`CALIBRATION_VERSION`, so it covers the reference's content (its scores give the aggregates and
spreads), the plan (tiers, stages, allocation, level) and the looks; a budget matters only through the
plan (a capped run uses Pocock's constant and calibrates nothing). Invalidation is by content: any
change of inputs is another key, and a change of the algorithm bumps the version. Nothing is ever
stale; old entries are merely unused (delete the folder to reclaim the space).

Where: ``$FLASHEVAL_CACHE/calibration/`` when the variable is set (``off`` or empty: no disk cache),
else ``$XDG_CACHE_HOME/flasheval/calibration/`` or ``~/.cache/flasheval/calibration/``. One small JSON
file per calibration, written atomically (a temporary file renamed), so concurrent processes can share
the folder. An entry is trusted only after :func:`check_entry`: a JSON object with this key and version,
``constant``, ``pocock`` and ``lower_bound`` finite numbers with ``0 <= lower_bound <= constant <= pocock``
(the calibrated constant always lies between Pocock's lower bound and Pocock's constant), ``worst_miss``
a number in [0, 1] or NaN (no simulation). An entry that fails (unreadable, a list, a string, NaN, a
constant outside its bounds) is recomputed and rewritten, with a warning naming the file and the field;
an unwritable folder gives one warning and the run goes on without the disk cache.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from flasheval.atomic import atomic_write_text
from flasheval.data_paths import cache_root

__all__ = ["CALIBRATION_VERSION", "cache_folder", "read_cached", "write_cached", "check_entry"]

logger = logging.getLogger(__name__)

CALIBRATION_VERSION = "2"
"""Part of every key: bumped whenever the calibration's algorithm changes what it returns."""

_FIELDS = ("constant", "pocock", "lower_bound", "worst_miss")
_warned: set[str] = set()


def cache_folder() -> Path | None:
    """The folder calibrations are kept in, or ``None`` when the disk cache is off (``FLASHEVAL_CACHE=off``)."""
    root = cache_root()
    return None if root is None else root / "calibration"


def _path(key: str) -> Path | None:
    folder = cache_folder()
    return None if folder is None else folder / key[:2] / f"{key}.json"


def read_cached(key: str) -> dict[str, float] | None:
    """The stored fields of calibration ``key`` (``constant``, ``pocock``, ``lower_bound``, ``worst_miss``), or ``None``."""
    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        return check_entry(json.loads(path.read_text(encoding="utf-8")), key)
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        logger.warning("%s: unusable cached calibration (%s); recomputing it", path, exc)
        return None


def _number(data: dict, name: str, *, nan: bool = False) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (math.isnan(value) and not nan) \
            or math.isinf(value):
        raise ValueError(f"field {name!r}: {value!r} is not a finite number")
    return float(value)


def check_entry(data: object, key: str) -> dict[str, float]:
    """The fields of a cache entry read as ``data``, or :class:`ValueError` naming the field that fails.

    >>> check_entry({"key": "k", "version": CALIBRATION_VERSION, "constant": 2.1, "pocock": 2.4,
    ...              "lower_bound": 1.96, "worst_miss": 0.04}, "k")["constant"]
    2.1
    >>> check_entry({"key": "k", "version": CALIBRATION_VERSION, "constant": 0.5, "pocock": 2.4,
    ...              "lower_bound": 1.96, "worst_miss": 0.04}, "k")
    Traceback (most recent call last):
    ...
    ValueError: field 'constant': 0.5 is outside [lower_bound 1.96, pocock 2.4]
    """
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    if data.get("key") != key or data.get("version") != CALIBRATION_VERSION:
        raise ValueError(f"field 'key'/'version': another key or version ({data.get('version')!r}, this flasheval "
                         f"writes {CALIBRATION_VERSION!r})")
    fields = {name: _number(data, name, nan=name == "worst_miss") for name in _FIELDS}
    low, constant, pocock = fields["lower_bound"], fields["constant"], fields["pocock"]
    if low < 0 or pocock < low:
        raise ValueError(f"field 'lower_bound': {low!r} is not in [0, pocock {pocock!r}]")
    tol = 1e-9 * max(1.0, pocock)
    if not low - tol <= constant <= pocock + tol:
        raise ValueError(f"field 'constant': {constant!r} is outside [lower_bound {low!r}, pocock {pocock!r}]")
    miss = fields["worst_miss"]
    if not math.isnan(miss) and not 0 <= miss <= 1:
        raise ValueError(f"field 'worst_miss': {miss!r} is not in [0, 1]")
    return fields


def write_cached(key: str, fields: dict[str, float]) -> None:
    """Store calibration ``key`` atomically; an unwritable cache folder is warned about once, then skipped."""
    path = _path(key)
    if path is None:
        return
    payload = {"key": key, "version": CALIBRATION_VERSION, **{name: float(fields[name]) for name in _FIELDS}}
    try:
        atomic_write_text(path, json.dumps(payload))
    except OSError as exc:
        folder = str(path.parent.parent)
        if folder not in _warned:
            _warned.add(folder)
            logger.warning("%s: cannot write the calibration cache (%s); set FLASHEVAL_CACHE to another folder "
                           "or to off", folder, exc.strerror or exc)
