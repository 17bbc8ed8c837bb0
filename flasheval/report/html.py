"""Render report blocks as ONE self-contained HTML page (PNGs embedded as base64 data URIs).

The page needs nothing from the network. A tiny inline script marks, on ``load``, whether
every image decoded (``<body data-images-ok="yes" data-image-count="N">``) and every inline SVG
figure was laid out (``data-vectors-ok``, ``data-vector-count``), so a headless browser test (and a
curious user with the developer tools) can check the page.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from flasheval.report.blocks import Block, Heading, Paragraph, Table, VectorFigure

__all__ = ["render_html"]

_SVG_NAMESPACE = "http://www.w3.org/2000/svg"

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
figure { margin: 1em 0 2em; }
figure img, figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
h2 { border-top: 2px solid #ddd; padding-top: 0.8em; margin-top: 2em; }
"""

_CHECK = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var ok = images.every(function (img) { return img.complete && img.naturalWidth > 0; });
  document.body.setAttribute("data-image-count", String(images.length));
  document.body.setAttribute("data-images-ok", ok ? "yes" : "no");
  var vectors = Array.prototype.slice.call(document.querySelectorAll("figure.vector > svg"));
  var drawn = vectors.every(function (svg) { var box = svg.getBoundingClientRect(); return box.width > 0 && box.height > 0; });
  document.body.setAttribute("data-vector-count", String(vectors.length));
  document.body.setAttribute("data-vectors-ok", drawn ? "yes" : "no");
});
"""


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html.escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{html.escape(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in block.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, VectorFigure):  # drawn by flasheval.report (its text escaped there): inlined as it is,
        # less the namespace URL an HTML parser does not need (the page names no address at all)
        svg = block.svg.replace(f' xmlns="{_SVG_NAMESPACE}"', "", 1)
        return (f'<figure id="{html.escape(block.name)}" class="vector">{svg}'
                f'<figcaption>{html.escape(block.caption)}</figcaption></figure>')
    data = base64.b64encode(block.png).decode("ascii")
    return (f'<figure id="{html.escape(block.name)}"><img alt="{html.escape(block.caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(block.caption)}</figcaption></figure>')


def render_html(blocks: Sequence[Block], *, title: str) -> str:
    """The whole page.

    Examples
    --------
    >>> page = render_html([Paragraph(text="a < b")], title="t")
    >>> "<p>a &lt; b</p>" in page and page.startswith("<!DOCTYPE html>")
    True
    """
    body = "\n".join(_block(b) for b in blocks)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style><script>{_CHECK}</script></head>\n<body>\n{body}\n</body></html>\n")
