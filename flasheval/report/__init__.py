"""Reports: render run records (``*.json`` in a run folder) as Markdown and one self-contained HTML page.

``render_report(path)`` reads one record or every record of a folder, builds the blocks of
each (:mod:`~flasheval.report.sections`; a training run's folder: :mod:`~flasheval.report.run_section`),
and writes ``report.md`` (+ ``figures/*.png``) and ``report.html`` (figures embedded) into the folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flasheval.errors import InputError
from flasheval.runs.folder import RUN_FILE, is_run_folder, read_run
from flasheval.atomic import atomic_write_text
from flasheval.records.run_record import SCHEMA, RunRecord, read_record
from flasheval.report.blocks import Block, Heading, Paragraph
from flasheval.report.html import render_html
from flasheval.report.markdown import render_markdown, write_figures
from flasheval.report.run_section import run_blocks
from flasheval.report.sections import KNOWN_KINDS, record_blocks

__all__ = ["KNOWN_KINDS", "ReportFiles", "find_records", "render_report"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportFiles:
    """What :func:`render_report` wrote."""

    markdown: Path
    html: Path
    figures: tuple[Path, ...]
    kinds: tuple[str, ...]
    """Kind of each record rendered, in order."""


def find_records(path: str | os.PathLike[str]) -> list[RunRecord]:
    """The run records at ``path`` (a record file, or every ``*.json`` record directly in a folder).

    JSON files that are not flasheval run records are skipped in a folder; a record from an
    incompatible version or of a kind the report does not know is refused in one line.
    """
    p = Path(path)
    if not p.exists():
        raise InputError("no such run folder or record", path=p)
    files = [p] if p.is_file() else sorted(f for f in p.glob("*.json") if f.is_file())
    records = []
    for f in files:
        if p.is_dir() and not _looks_like_record(f):
            continue
        record = read_record(f)
        if record.kind not in KNOWN_KINDS:
            raise InputError(f"record kind {record.kind!r} is not one this report renders", path=f, field="kind",
                             allowed=KNOWN_KINDS)
        records.append(record)
    if not records:
        raise InputError("no flasheval run records (*.json) here", path=p)
    return records


def _looks_like_record(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:200]
    except OSError:
        return False
    return f'"{SCHEMA}"' in head


def _run_folder_blocks(folder: Path) -> tuple[list[Block], tuple[str, ...]]:
    """A training run's folder: rank against step and every checkpoint's cost (:mod:`~flasheval.report.run_section`)."""
    history = read_run(folder)
    return [Heading(text=f'flasheval report: training run "{history.name}"', level=1),
            Paragraph(text=f"{RUN_FILE} and {len(history.checkpoints)} checkpoint record(s) in the folder {folder}"),
            *run_blocks(history)], ("run",)


def render_report(path: str | os.PathLike[str]) -> ReportFiles:
    """Render the records at ``path`` into ``report.md``, ``figures/`` and ``report.html`` beside them.

    A training run's folder (one holding ``run.json``, :mod:`flasheval.runs.folder`) is rendered as
    one run: rank against step and a table of its checkpoints.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
        raise InputError(f"expected a run folder or record, got {path!r}", field="PATH")
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    if p.is_dir() and is_run_folder(p):
        blocks, kinds = _run_folder_blocks(p)
    else:
        records = find_records(path)
        blocks = [Heading(text=f"flasheval report: {folder.resolve().name}", level=1),
                  Paragraph(text=f"{len(records)} run record(s): " + ", ".join(r.path.name for r in records))]
        for record in records:
            blocks += record_blocks(record, stem=record.path.stem)
        kinds = tuple(r.kind for r in records)
    figures = write_figures(blocks, folder / "figures")
    md = atomic_write_text(folder / "report.md", render_markdown(blocks))
    page = atomic_write_text(folder / "report.html", render_html(blocks, title=f"flasheval report: {folder.name}"))
    return ReportFiles(markdown=md, html=page, figures=tuple(figures), kinds=kinds)
