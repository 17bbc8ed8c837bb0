"""Input checks shared by every entry: the one place where dtypes, counts, seeds and lists of names are checked.

Each check refuses a bad value with one :class:`~flasheval.errors.InputError` naming the option by its
command-line spelling, the value and what is allowed, so the Python API and the command line refuse
the same values with the same line. Foundation level: no domain imports, so every layer may use it.

>>> name_list("copa, piqa", field="--tasks")
('copa', 'piqa')
>>> name_list(["copa"], field="--tasks")
('copa',)
>>> check_dtype("bogus")
Traceback (most recent call last):
...
flasheval.errors.InputError: field '--dtype': unknown dtype 'bogus' (allowed: float32, bfloat16, float16)
"""

from __future__ import annotations

from collections.abc import Sequence

from flasheval.errors import InputError

__all__ = ["DTYPES", "LOAD_DTYPES", "check_dtype", "check_count", "check_seed", "check_n_examples", "name_list"]

DTYPES = ("float32", "bfloat16", "float16")
"""Concrete dtypes: what a reference can pin and what ``--compare-dtype`` accepts."""

LOAD_DTYPES = ("auto", *DTYPES)
"""What a model may be loaded in (``auto``: float32 on CPU, bfloat16 on a GPU that supports it)."""


def check_dtype(value: object, *, field: str = "--dtype", allowed: tuple[str, ...] = DTYPES, why: str = "") -> str:
    """``value`` if it is one of ``allowed``; refused in one line otherwise (``why``: a note after the value)."""
    if not isinstance(value, str) or value not in allowed:
        raise InputError(f"unknown dtype {value!r}{why}", field=field, allowed=allowed)
    return value


def check_count(value: object, *, field: str = "--batch-size") -> int:
    """``value`` as a count (an integer >= 1: a batch size, models in memory); refused in one line naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"must be an integer >= 1, got {value!r}", field=field)
    return value


def check_seed(value: object, *, field: str = "--seed") -> None:
    """Refuse a seed that is not an integer >= 0 (``None`` passes)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InputError(f"must be an integer >= 0, got {value!r}", field=field)


def check_n_examples(value: object, *, field: str = "--n-examples") -> None:
    """Refuse an example count that is not an integer >= 1 (``None``, every example, passes)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"must be >= 1, got {value}", field=field)


def name_list(value: object, *, field: str, what: str = "", allow_empty: bool = False,
              unique: bool = True) -> tuple[str, ...]:
    """Names given as one string (``"a,b"``: comma-separated) or as a sequence of strings, stripped, empties dropped.

    A string is never iterated character by character. ``None`` or nothing named is refused unless
    ``allow_empty``; a name given twice is refused when ``unique``. ``what``: the kind of name (``task``), for
    the messages.
    """
    if value is None:
        names: list[str] = []
    elif isinstance(value, str):
        names = value.split(",")
    elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise InputError(f"expected a name, 'A,B' or a list of names, got {value!r}", field=field)
    names = [n.strip() for n in names if n.strip()]
    if not names and not allow_empty:
        raise InputError(f"no {what + ' ' if what else ''}names given", field=field)
    if unique and len(set(names)) != len(names):
        raise InputError(f"{what or 'name'} listed twice in {value!r}", field=field)
    return tuple(names)
