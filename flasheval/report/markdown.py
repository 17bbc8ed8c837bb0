"""Render report blocks as Markdown; figures are written as PNG (and SVG) files beside ``report.md``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flasheval.atomic import atomic_write_bytes, atomic_write_text
from flasheval.report.blocks import Block, Figure, Heading, Paragraph, Table, VectorFigure

__all__ = ["render_markdown", "render_text"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block], *, figure_dir: str = "figures") -> str:
    """Markdown text for ``blocks``; a figure ``name`` is linked as ``{figure_dir}/{name}.png``.

    Examples
    --------
    >>> print(render_markdown([Heading(text="T", level=1), Table(header=("a", "b"), rows=(("1", "x|y"),))]))
    # T
    <BLANKLINE>
    | a | b |
    | --- | --- |
    | 1 | x\\|y |
    <BLANKLINE>
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"{'#' * block.level} {block.text}\n")
        elif isinstance(block, Paragraph):
            parts.append(block.text + "\n")
        elif isinstance(block, Table):
            lines = ["| " + " | ".join(_cell(h) for h in block.header) + " |",
                     "| " + " | ".join("---" for _ in block.header) + " |"]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
            parts.append("\n".join(lines) + "\n")
        elif isinstance(block, (Figure, VectorFigure)):
            suffix = "svg" if isinstance(block, VectorFigure) else "png"
            parts.append(f"![{_cell(block.caption)}]({figure_dir}/{block.name}.{suffix})\n\n*{block.caption}*\n")
    return "\n".join(parts)


def write_figures(blocks: Sequence[Block], folder: Path) -> list[Path]:
    """Write every figure's PNG (or SVG) into ``folder`` (created); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for block in blocks:
        if isinstance(block, Figure):
            path = folder / f"{block.name}.png"
            atomic_write_bytes(path, block.png)
            out.append(path)
        elif isinstance(block, VectorFigure):
            path = folder / f"{block.name}.svg"
            atomic_write_text(path, block.svg)
            out.append(path)
    return out


def render_text(blocks: Sequence[Block]) -> str:
    """Plain text for a terminal: headings and paragraphs as lines, tables with aligned columns, figures omitted.

    Examples
    --------
    >>> print(render_text([Table(header=("task", "accuracy"), rows=(("copa", "0.5000"),))]))
    task  accuracy
    ----  --------
    copa  0.5000
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, (Heading, Paragraph)):
            parts.append(block.text)
        elif isinstance(block, Table):
            widths = [max(len(cell) for cell in column) for column in zip(block.header, *block.rows)]
            lines = [block.header, tuple("-" * w for w in widths), *block.rows]
            parts.append("\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines))
    return "\n\n".join(parts)
