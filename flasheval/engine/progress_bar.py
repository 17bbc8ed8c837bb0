"""The one progress bar of the engine: per forward batch, on stderr, on the main process only.

A long call's *steps* (a placement stage, a sweep round, a built model) are reported as
:class:`~flasheval.api.progress.Progress` events; the bar shows the requests inside one backend
call as its batches finish. ``enabled`` follows tqdm's convention for ``disable=None``: ``None``
shows the bar when stderr is a terminal (and in a notebook, where ``tqdm.auto`` draws a widget),
``True`` always, ``False`` never.
"""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: int, *, desc: str, enabled: bool | None = None, unit: str = "req") -> Any:
    """A tqdm bar over ``total`` items, or ``None`` when ``enabled`` is ``False`` or there is nothing to do.

    Call ``update(n)`` as items finish and ``close()`` at the end. tqdm is imported only here, when a
    bar is made.
    """
    if enabled is False or total <= 0:
        return None
    return _tqdm()(total=total, desc=desc, unit=unit, disable=None if enabled is None else False)


def _tqdm() -> Any:
    from tqdm.auto import tqdm

    return tqdm
