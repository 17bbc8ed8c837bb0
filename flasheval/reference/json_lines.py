"""JSON Lines files read one line at a time: the one loop behind the per-example log readers of a reference
(lm-eval ``--log_samples`` files, Every Eval Ever instance files)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flasheval.errors import InputError

__all__ = ["json_lines"]


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``path``, one line in memory at a time.

    A line that is not JSON (``the file looks cut short`` when the last line has no newline), a file that cannot
    be read or is not UTF-8 text: refused in one line naming the file (and the line).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    cut = "; the file looks cut short" if not line.endswith("\n") else ""
                    raise InputError(f"not valid JSON ({exc.msg}){cut}", path=path, line=n) from None
                yield n, value
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start + 1})", path=path) from None
