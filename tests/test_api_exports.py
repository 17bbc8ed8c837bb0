"""Every type the API returns is exported from ``flasheval``: found from the API functions' return annotations and,
recursively, the dataclass fields of what they return (a user can name every value they are handed)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import flasheval


def _classes(annotation: object) -> set[type]:
    """flasheval's own classes named by ``annotation`` (inside tuple[...], X | None, ...)."""
    found: set[type] = set()
    if isinstance(annotation, type) and annotation.__module__.startswith("flasheval"):
        found.add(annotation)
    for arg in typing.get_args(annotation):
        found |= _classes(arg)
    return found


def _resolve(annotation: object, owner: object) -> object:
    """``annotation`` evaluated where ``owner`` was defined (annotations are strings under ``from __future__``)."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, vars(inspect.getmodule(owner)))  # noqa: S307 (the package's own annotations)


def _returned() -> dict[type, str]:
    """Each class an API function returns, with where it was found."""
    out: dict[type, str] = {}
    for name in flasheval.__all__:
        value = getattr(flasheval, name)
        if inspect.isfunction(value):
            for cls in _classes(_resolve(inspect.signature(value).return_annotation, value)):
                out.setdefault(cls, f"{name}() returns it")
    todo = list(out)
    while todo:  # and every value inside them, however deep (a stage of a placement, a row of a backtest)
        cls = todo.pop()
        for field in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
            for inner in _classes(_resolve(field.type, cls)) - set(out):
                out[inner] = f"{cls.__name__}.{field.name}"
                todo.append(inner)
    return out


def test_every_returned_type_is_exported():
    returned = _returned()
    assert len(returned) >= 40  # the walk found the API's results (a broken walk would find none and pass)
    missing = sorted(f"{cls.__module__}.{cls.__qualname__} ({where})" for cls, where in returned.items()
                     if getattr(flasheval, cls.__name__, None) is not cls or cls.__name__ not in flasheval.__all__)
    assert missing == []
