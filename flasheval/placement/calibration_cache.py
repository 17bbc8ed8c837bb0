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
``pocock`` and ``lower_bound`` equal to what the code computes for the inputs (Pocock's constants at ``alpha``
and ``2 alpha``: the bounds come from the code, never from the file), ``constant`` one the search can return
(``lower_bound + j step`` for a whole ``j >= 0`` below ``pocock``, or ``pocock`` itself), ``worst_miss`` a
number in [0, 1] or NaN (no simulation). An entry that fails (unreadable, a list, a string, NaN, bounds
other than the code's, a constant off the search's grid) is recomputed and rewritten, with a warning naming
the file and the field; an unwritable folder gives one warning and the run goes on without the disk cache.
The cache is a cache: the key names the inputs, not a secret, so an entry rewritten on the grid with the
code's bounds is used (delete the folder, or set ``FLASHEVAL_CACHE=off``, to recompute everything).
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


def read_cached(key: str, *, pocock: float, lower_bound: float, step: float) -> dict[str, float] | None:
    """The stored fields of calibration ``key`` (``constant``, ``pocock``, ``lower_bound``, ``worst_miss``), or
    ``None``; ``pocock``, ``lower_bound`` and ``step``: what the code computes for its inputs (:func:`check_entry`)."""
    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        return check_entry(json.loads(path.read_text(encoding="utf-8")), key, pocock=pocock, lower_bound=lower_bound,
                           step=step)
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        logger.warning("%s: unusable cached calibration (%s); recomputing it", path, exc)
        return None


def _number(data: dict, name: str, *, nan: bool = False) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (math.isnan(value) and not nan) \
            or math.isinf(value):
        raise ValueError(f"field {name!r}: {value!r} is not a finite number")
    return float(value)


def check_entry(data: object, key: str, *, pocock: float, lower_bound: float, step: float) -> dict[str, float]:
    """The fields of a cache entry read as ``data``, or :class:`ValueError` naming the field that fails.

    ``pocock`` and ``lower_bound`` are the code's, for the entry's inputs: the entry's must equal them, and its
    ``constant`` must be one the search returns (``lower_bound + j step`` below ``pocock``, or ``pocock``).

    >>> check_entry({"key": "k", "version": CALIBRATION_VERSION, "constant": 2.085, "pocock": 2.4,
    ...              "lower_bound": 1.96, "worst_miss": 0.04}, "k", pocock=2.4, lower_bound=1.96, step=0.025)["constant"]
    2.085
    >>> check_entry({"key": "k", "version": CALIBRATION_VERSION, "constant": 0.01, "pocock": 0.02,
    ...              "lower_bound": 0.0, "worst_miss": 0.04}, "k", pocock=2.4, lower_bound=1.96, step=0.025)
    Traceback (most recent call last):
    ...
    ValueError: field 'pocock': 0.02 is not the code's 2.4 for these inputs (an edited or foreign entry)
    """
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    if data.get("key") != key or data.get("version") != CALIBRATION_VERSION:
        raise ValueError(f"field 'key'/'version': another key or version ({data.get('version')!r}, this flasheval "
                         f"writes {CALIBRATION_VERSION!r})")
    fields = {name: _number(data, name, nan=name == "worst_miss") for name in _FIELDS}
    tol = 1e-9 * max(1.0, pocock)
    for name, code in (("pocock", pocock), ("lower_bound", lower_bound)):
        if abs(fields[name] - code) > tol:
            raise ValueError(f"field {name!r}: {fields[name]!r} is not the code's {code!r} for these inputs (an "
                             "edited or foreign entry)")
    constant = fields["constant"]
    j = round((constant - lower_bound) / step) if step > 0 else 0
    on_grid = j >= 0 and abs(constant - (lower_bound + step * j)) <= tol and constant <= pocock + tol
    if not (on_grid or abs(constant - pocock) <= tol):
        raise ValueError(f"field 'constant': {constant!r} is not a constant the search returns (lower_bound "
                         f"{lower_bound!r} + j x {step!r} below pocock {pocock!r}, or pocock)")
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
