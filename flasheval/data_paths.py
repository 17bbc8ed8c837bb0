"""Where the embedded data lives: the tier plans (``tiers/``) and the reference leaderboards
(``reference_rankings/``).

Both folders sit at the root of the checkout, next to ``flasheval/``. A built wheel carries them
as package data under ``flasheval/_data/`` (``pyproject.toml`` maps the packages
``flasheval._data.tiers`` and ``flasheval._data.reference_rankings`` onto the root folders), so

- from a checkout (``python -m flasheval``, pytest, or an editable install, whose package folder
  *is* the checkout's) the root folders are used, and what is edited there is what runs;
- from an installed wheel the copies inside the installed package are used.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from flasheval.errors import UnknownNameError

__all__ = ["EMBEDDED_FOLDERS", "CACHE_ENV", "cache_root", "embedded_data_dir", "running_from_checkout"]

EMBEDDED_FOLDERS: tuple[str, ...] = ("tiers", "reference_rankings")
CACHE_ENV = "FLASHEVAL_CACHE"
"""Environment variable: the folder flasheval keeps its caches in (``off`` or empty: no disk caches)."""


def cache_root() -> Path | None:
    """flasheval's cache folder: ``$FLASHEVAL_CACHE`` when set (``off``, ``0``, ``none`` or empty: ``None``,
    no disk cache), else ``$XDG_CACHE_HOME/flasheval`` or ``~/.cache/flasheval``. Each cache has a subfolder
    (``calibration/``, ``gguf/``)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flasheval"


def embedded_data_dir(name: str) -> Path:
    """The folder of one kind of embedded data.

    Parameters
    ----------
    name : str
        ``"tiers"`` or ``"reference_rankings"``.

    Returns
    -------
    Path
        ``<checkout>/NAME`` when the package runs from a checkout (the folder holding ``flasheval/``
        also holds ``pyproject.toml`` and ``NAME/``), else ``<installed flasheval>/_data/NAME``.

    Examples
    --------
    >>> (embedded_data_dir("tiers") / "default.yaml").is_file()
    True
    """
    if name not in EMBEDDED_FOLDERS:
        raise UnknownNameError("embedded data folder", name, EMBEDDED_FOLDERS)
    package = Path(str(files("flasheval")))
    if running_from_checkout():
        return package.parent / name
    # An installed wheel: files("flasheval") is the unpacked package folder (wheels install unzipped).
    return package / "_data" / name


def running_from_checkout() -> bool:
    """Whether the package runs from a checkout (the folder holding ``flasheval/`` also holds
    ``pyproject.toml`` and the embedded data folders), not from an installed wheel."""
    checkout = Path(str(files("flasheval"))).parent
    return (checkout / "pyproject.toml").is_file() and all((checkout / n).is_dir() for n in EMBEDDED_FOLDERS)
