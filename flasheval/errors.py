"""The project's error hierarchy.

Every error a user can cause derives from :class:`FlashevalError`; the CLI prints its
message as one line (``flasheval: error: ...``) and exits with code 1, never a traceback.
Messages name the file, line, field, offending value and the allowed values, so the user
can fix the input without reading code.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike

__all__ = [
    "shown_name",
    "FlashevalError",
    "InputError",
    "UnknownNameError",
    "ConfigError",
    "BackendError",
]


class FlashevalError(Exception):
    """Root of every error flasheval raises on purpose (bad input, refused operation)."""


def shown_name(name: str) -> str:
    """``name`` as lists and tables show it: as it is, or escaped (``'m\\u200b2'``) where it holds a character that
    does not print (a zero-width space, a newline), so a look-alike of another name is seen as what it is."""
    return name if name.isprintable() else repr(name)


def _allowed_text(allowed: Iterable[object] | None) -> str:
    if allowed is None:
        return ""
    values = [shown_name(v) for v in map(str, allowed)]  # a look-alike name shown escaped
    if len(values) > 12:
        values = values[:12] + [f"... ({len(values) - 12} more)"]
    return f" (allowed: {', '.join(values)})"


class InputError(FlashevalError):
    """A malformed input file or value.

    Parameters
    ----------
    message
        What is wrong, in plain words.
    path
        The file the bad input came from, if any.
    line
        1-based line number within ``path``, if known.
    field
        The field (column, key, option) holding the bad value, if any.
    allowed
        The allowed values, listed in the message when given.

    Examples
    --------
    >>> str(InputError("not an integer", path="a.jsonl", line=3, field="gold"))
    "a.jsonl:3: field 'gold': not an integer"
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        field: str | None = None,
        allowed: Iterable[object] | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.reason = message
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        elif line is not None:
            where = f"line {line}: "
        if field is not None:
            where += f"field {field!r}: "
        super().__init__(f"{where}{message}{_allowed_text(allowed)}")


class UnknownNameError(InputError):
    """A name (task, suite, model spec prefix, reference, aggregate) that flasheval does not know."""

    def __init__(self, kind: str, name: str, allowed: Iterable[object], **where: object) -> None:
        super().__init__(f"unknown {kind} {name!r}", allowed=sorted(map(str, allowed)), **where)  # type: ignore[arg-type]


class ConfigError(InputError):
    """A configuration file (suite, tier plan, manifest) that does not validate."""


class BackendError(FlashevalError):
    """A model backend could not be created or failed in a way the user must fix (bad path, corrupt weights)."""
