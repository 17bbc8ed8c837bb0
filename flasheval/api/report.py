"""``flasheval.render_report``: run records rendered as Markdown and one self-contained HTML page.

The one path behind ``flasheval report`` (:func:`flasheval.report.render_report` does the rendering).
"""

from __future__ import annotations

from pathlib import Path

from flasheval.errors import InputError
from flasheval.report import ReportFiles
from flasheval.report import render_report as render_records

__all__ = ["render_report", "ReportFiles"]


def render_report(path: str | Path) -> ReportFiles:
    """Render the run records at ``path`` (a run folder's ``*.json`` records, or one record file) as
    ``report.md``, ``figures/`` and one self-contained ``report.html`` beside them.

    Named ``render_report``, not ``report``: ``flasheval.report`` is the report package.
    """
    if not isinstance(path, (str, Path)):
        raise InputError(f"expected a folder or a record file, got {type(path).__name__}", field="RUN_DIR")
    return render_records(path)
