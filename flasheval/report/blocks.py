"""The neutral document model both renderers share: headings, paragraphs, tables, figures.

Sections are built once per record (:mod:`flasheval.report.sections`) and rendered twice,
as Markdown (:mod:`flasheval.report.markdown`) and as one self-contained HTML page
(:mod:`flasheval.report.html`), so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Heading", "Paragraph", "Table", "Figure", "VectorFigure", "Block"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Heading:
    """A section title."""

    text: str
    level: int = 2
    """1 = page title, 2 = one record, 3 = a part of it."""

    def __post_init__(self) -> None:
        if not 1 <= self.level <= 4:
            raise ValueError(f"heading level must be 1..4, got {self.level}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Paragraph:
    """Plain text (no markup; renderers escape it)."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table of already-formatted cells."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.header):
                raise ValueError(f"row {row} has {len(row)} cells for {len(self.header)} columns")


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """A PNG picture with a caption."""

    name: str
    """File stem (unique within a report), e.g. ``place-stages``."""
    png: bytes
    caption: str

    def __post_init__(self) -> None:
        if not self.png.startswith(b"\x89PNG"):
            raise ValueError(f"figure {self.name!r} is not a PNG")


@dataclass(frozen=True, slots=True, kw_only=True)
class VectorFigure:
    """An SVG picture with a caption: inline in the HTML page (its text is text: found, selected, read by a
    screen reader), a ``.svg`` file beside the Markdown."""

    name: str
    """File stem (unique within a report)."""
    svg: str
    caption: str

    def __post_init__(self) -> None:
        if not self.svg.lstrip().startswith("<svg"):
            raise ValueError(f"figure {self.name!r} is not an SVG document")


Block = Heading | Paragraph | Table | Figure | VectorFigure
