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

import math
import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from flasheval.errors import InputError

__all__ = ["DTYPES", "LOAD_DTYPES", "MAX_RESAMPLES", "MAX_CHECKPOINTS", "is_whole", "is_real",
           "check_dtype", "check_count", "check_seed", "check_n_examples",
           "check_name", "check_model_id", "check_output", "check_confidence_level", "check_positive", "check_n_resamples",
           "check_limit", "check_counts", "check_keywords", "check_flag", "name_list"]

DTYPES = ("float32", "bfloat16", "float16")
"""Concrete dtypes: what a reference can pin and what ``--compare-dtype`` accepts."""

LOAD_DTYPES = ("auto", *DTYPES)
"""What a model may be loaded in (``auto``: float32 on CPU, bfloat16 on a GPU that supports it)."""


def is_whole(value: object) -> bool:
    """Whether ``value`` is an integer: a Python ``int`` or a numpy integer scalar (``np.int64(200)``), not a bool
    (``3.0`` is a float: refused where a count is asked, so a mistyped value is never rounded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number: an integer (:func:`is_whole`) or a Python or numpy float, not a bool."""
    return is_whole(value) or isinstance(value, (float, np.floating))


def _got(value: object, *, kind_ok: bool) -> str:
    """How a refused value is shown: its Python value, and its type where the type is what is wrong."""
    shown = value.item() if isinstance(value, np.generic) else value
    return f"got {shown!r}" if kind_ok else f"got {shown!r} (a {type(value).__name__})"


def check_dtype(value: object, *, field: str = "--dtype", allowed: tuple[str, ...] = DTYPES, why: str = "") -> str:
    """``value`` if it is one of ``allowed``; refused in one line otherwise (``why``: a note after the value)."""
    if not isinstance(value, str) or value not in allowed:
        raise InputError(f"unknown dtype {value!r}{why}", field=field, allowed=allowed)
    return value


def check_count(value: object, *, field: str = "--batch-size") -> int:
    """``value`` as a count (an integer >= 1: a batch size, models in memory); refused in one line naming ``field``."""
    if not is_whole(value) or value < 1:  # type: ignore[operator]
        raise InputError(f"must be an integer >= 1, {_got(value, kind_ok=is_whole(value))}", field=field)
    return int(value)  # type: ignore[arg-type]


def check_seed(value: object, *, field: str = "--seed", generator: bool = False) -> Any:
    """``value`` as a seed: an integer >= 0, or ``None``; with ``generator``, also a ``numpy.random.Generator``
    (where an entry accepts one). The one rule and the one message for every seed.

    >>> check_seed(3)
    3
    >>> check_seed(-1)
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--seed': must be an integer >= 0, got -1
    >>> check_seed(1.5, generator=True)
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--seed': must be an integer >= 0 or a numpy Generator, got 1.5 (a float)
    """
    if value is None or (generator and isinstance(value, np.random.Generator)):
        return value
    if not is_whole(value) or value < 0:  # type: ignore[operator]
        what = "an integer >= 0 or a numpy Generator" if generator else "an integer >= 0"
        raise InputError(f"must be {what}, {_got(value, kind_ok=is_whole(value))}", field=field)
    return int(value)  # type: ignore[arg-type]


def check_n_examples(value: object, *, field: str = "--n-examples") -> None:
    """Refuse an example count that is not an integer >= 1 (``None``, every example, passes)."""
    if value is not None and (not is_whole(value) or value < 1):  # type: ignore[operator]
        raise InputError(f"must be >= 1, {_got(value, kind_ok=is_whole(value))}", field=field)


MAX_RESAMPLES = 100_000
"""Most bootstrap resamples a tier plan or an option may ask for: the bootstrap holds an
``n_resamples x n_models`` score array per look (8 bytes each), so 100,000 resamples of a
1,000-model pool is 0.8 GB; beyond that memory, not precision, is what runs out (a percentile
interval's Monte Carlo error at 10,000 resamples is already well below one rank)."""


MAX_CHECKPOINTS = 10**6
"""Most checkpoints a run may plan to place (``simultaneous``): each is placed at ``1 - alpha / K``, and past a
million checkpoints that level (``1 - 5e-8`` at 95%) is beyond what any bootstrap or simulation resolves; by
``10**15`` it is 1.0 in floating point, where no interval exists."""


def check_name(value: object, *, field: str = "--name", what: str = "name") -> str:
    """``value`` if it can name one folder: a non-empty string with no path separator, not ``.`` or ``..``,
    no leading or trailing space and no control character (the one rule for every name that becomes a folder:
    references built or imported, run names). Model ids (``org/model``) are not folder names: their folders
    are made by :func:`flasheval.records.run_record.default_run_folder`.

    >>> check_name("helm_lite")
    'helm_lite'
    >>> check_name("../x")
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--name': a name must be one folder name (no '/', '\\', '..', empty or spaces around it), got '../x'
    """
    if not isinstance(value, str) or not value.strip() or value != value.strip() or value in (".", "..") \
            or "/" in value or "\\" in value or os.sep in value \
            or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"a {what} must be one folder name (no '/', '\\', '..', empty or spaces around it), "
                         f"got {value!r}", field=field)
    return value


def check_model_id(value: object, *, field: str = "--model-id") -> str:
    """``value`` if it can name a model: :func:`check_name`'s rule for each ``/``-separated part (``org/model``
    is a model id; ``../x``, ``/x``, ``org//m``, ``""`` and names with spaces around are not).

    >>> check_model_id("meta/llama-3-70b")
    'meta/llama-3-70b'
    >>> check_model_id("../m")
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--model-id': a model name is one name or ORG/NAME, each part a folder name (no '\\', '..', empty part or spaces around it), got '../m'
    """
    parts = value.split("/") if isinstance(value, str) else [None]
    try:
        for part in parts:
            check_name(part, field=field)
    except InputError:
        raise InputError(f"a model name is one name or ORG/NAME, each part a folder name (no '\\', '..', empty "
                         f"part or spaces around it), got {value!r}", field=field) from None
    return value  # type: ignore[return-value]


def check_output(value: object, *, field: str = "--output") -> None:
    """Refuse an output path that is empty (``""`` would silently mean the working folder) or not a path
    (``None``, no output, passes)."""
    if value is None:
        return
    if not isinstance(value, (str, os.PathLike)):
        raise InputError(f"expected a path, got {type(value).__name__}", field=field)
    if not os.fspath(value).strip():
        raise InputError("empty path; name a folder or file", field=field)


def check_confidence_level(value: object, *, field: str = "--confidence-level") -> float:
    """``value`` as a confidence level: a number in [0.5, 1) (below one half an interval misses more often than
    it covers). The one rule and the one message for every confidence level (options, tier plans, fits).

    >>> check_confidence_level(0.95)
    0.95
    >>> check_confidence_level(1.0)
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--confidence-level': must be a number in [0.5, 1), got 1.0
    """
    if not is_real(value) or not 0.5 <= value < 1:  # type: ignore[operator]
        raise InputError(f"must be a number in [0.5, 1), {_got(value, kind_ok=is_real(value))}", field=field)
    return float(value)  # type: ignore[arg-type]


def check_positive(value: object, *, field: str) -> None:
    """Refuse a number that is not finite and > 0 (``None`` passes): sizes, parameter counts, and the one rule
    for a budget's caps (examples, tokens, FLOPs, seconds)."""
    if value is not None and (not is_real(value) or not (math.isfinite(value) and value > 0)):  # type: ignore
        raise InputError(f"must be a positive number, {_got(value, kind_ok=is_real(value))}", field=field)


def check_n_resamples(value: object, *, field: str = "n_resamples", minimum: int = 100) -> int:
    """``value`` as a bootstrap resample count: an integer in [``minimum``, :data:`MAX_RESAMPLES`] (100 by default:
    enough for a tail quantile). The one rule and the one message for every count of resamples or instantiations."""
    if not is_whole(value) or not minimum <= value <= MAX_RESAMPLES:  # type: ignore[operator]
        raise InputError(f"must be an integer from {minimum} to {MAX_RESAMPLES} (the ceiling keeps the bootstrap's "
                         f"memory sane), {_got(value, kind_ok=is_whole(value))}", field=field)
    return int(value)  # type: ignore[arg-type]


def check_keywords(given: Mapping[str, object], allowed: Collection[str], *, where: str) -> None:
    """Refuse, in one line naming it, the first keyword of ``given`` not in ``allowed`` (``where``: whose keywords,
    for the message), before anything is forwarded, opened or written.

    >>> check_keywords({"seed": 1, "sede": 2}, ("seed",), where="flasheval.place")
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field 'sede': not a keyword of flasheval.place (allowed: seed)
    """
    for name in given:
        if name not in allowed:
            raise InputError(f"not a keyword of {where}", field=name, allowed=sorted(allowed))


def check_flag(value: object, *, field: str) -> bool:
    """``value`` as a yes-or-no option (``force``, ``partial``, ``log_samples``, ...): ``True`` or ``False`` only
    (``"no"`` or ``0`` would otherwise pass as a truth value). The one rule and the one message for every flag."""
    if not isinstance(value, bool):
        raise InputError(f"must be True or False, got {value!r}", field=field)
    return value


def check_limit(value: object, *, field: str = "--limit") -> None:
    """Refuse an lm-eval ``limit`` that is not an integer >= 1 (examples per task) or a fraction in (0, 1]
    (``None``, every example, passes)."""
    if value is None:
        return
    if not is_real(value) or not math.isfinite(value) or value <= 0 \
            or (value > 1 and value != int(value)):  # type: ignore[operator, arg-type]
        raise InputError(f"must be an integer >= 1 (examples per task) or a fraction in (0, 1], "
                         f"{_got(value, kind_ok=is_real(value))}", field=field)


def check_counts(values: object, *, field: str, what: str, maximum: int | None = None,
                 why: str = "") -> tuple[int, ...]:
    """``values`` as a non-empty list of distinct integers >= 1 (at most ``maximum``, ``why`` its reason): sizes,
    dataset counts; refused in one line naming ``field``, the value and what is allowed.

    >>> check_counts([10, 20], field="--sizes", what="sizes")
    (10, 20)
    >>> check_counts([10, 10], field="--sizes", what="sizes")
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--sizes': 10 listed twice in [10, 10]
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InputError(f"give a non-empty list of {what}, got {values!r}", field=field)
    top = "" if maximum is None else f" and <= {maximum}{why}"
    if any(not is_whole(v) or v < 1 or (maximum is not None and v > maximum) for v in values):
        raise InputError(f"{what} must be integers >= 1{top}, got {str(list(values))[:80]}", field=field)
    twice = sorted(v for v, n in Counter(values).items() if n > 1)
    if twice:
        raise InputError(f"{twice[0]} listed twice in {str(list(values))[:80]}", field=field)
    return tuple(int(v) for v in values)


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
