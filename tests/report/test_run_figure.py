"""The run report draws and tabulates exactly what each checkpoint's record says, and nothing between checkpoints.

A run folder named ``run`` on a 6-rank pool (helm_lite cut to six models, one replayed per step), steps far
apart; two records are then set to the cases the report got wrong: a one-rank interval ``[6, 6]`` and an
unresolved placement with interval ``[1, 5]`` whose point rank's tier is ``1``. The figure is checked on its
artists' data (each carries a ``gid``), the table and the page on their text.
"""

from __future__ import annotations

import doctest
import re

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection

import flasheval
from flasheval.runs.folder import record_path
from flasheval.records.run_record import read_record, write_record
from flasheval.reference import load_reference
from flasheval.report.run_figure import run_ranks_figure
from flasheval.report.run_section import run_figure_data

POOL = ("meta/llama-3-70b", "meta/llama-3-8b", "01-ai/yi-34b", "01-ai/yi-6b", "ai21/j2-jumbo",
        "AlephAlpha/luminous-base")
STEPS = {100: "AlephAlpha/luminous-base", 200: "01-ai/yi-6b", 300: "meta/llama-3-8b", 5000: "meta/llama-3-70b"}
SET = {100: {"rank": 6, "interval": [6, 6], "tier": "5-9", "status": "resolved"},
       200: {"rank": 1, "interval": [1, 5], "tier": "1", "status": "unresolved at budget"}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    full = load_reference("helm_lite")
    small = full.without(*(m for m in full.model_ids if m not in POOL))
    run = tmp_path_factory.mktemp("figure") / "run"
    for step, model in STEPS.items():
        flasheval.place_checkpoint(f"replay:{model}", run=run, step=step, reference=small)
    for step, fields in SET.items():
        path = record_path(run, step)
        write_record(path, kind="place", payload={**read_record(path).payload, **fields})
    return run


@pytest.fixture(scope="module")
def figure(run_dir):
    fig = run_ranks_figure(run_figure_data(flasheval.read_run(run_dir)))
    FigureCanvasAgg(fig).draw()  # lays it out, as saving does
    return fig


def _intervals(ax) -> list[list[tuple[float, float]]]:
    (bars,) = [c for c in ax.collections if c.get_gid() == "interval"]
    assert isinstance(bars, LineCollection)
    return [[tuple(v) for v in seg] for seg in bars.get_segments()]


def test_the_intervals_are_drawn_only_at_placed_steps(figure):
    ax = figure.axes[0]
    segments = _intervals(ax)
    assert [seg[0][0] for seg in segments] == list(STEPS)
    assert all(seg[0][0] == seg[1][0] for seg in segments)  # vertical: no width between steps
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no band filled across steps
    for line in ax.lines:  # points and caps at placed steps; nothing joins one step to the next
        if line.get_gid() != "tier-boundary":
            assert line.get_linestyle() == "None" and set(line.get_xdata()) <= set(STEPS), line


def test_a_one_rank_interval_has_zero_height_and_every_bar_spans_exactly_its_interval(figure, run_dir):
    history = flasheval.read_run(run_dir)
    spans = [(seg[0][1], seg[1][1]) for seg in _intervals(figure.axes[0])]
    assert spans == [(float(c.interval[0]), float(c.interval[1])) for c in history.checkpoints]
    assert spans[0] == (6.0, 6.0)  # step 100: [6, 6], not 5.5-6.5
    caps = [line for line in figure.axes[0].lines if line.get_marker() == "_"]
    assert any(6.0 in line.get_ydata() and 100 in line.get_xdata() for line in caps)  # still marked


def test_the_legend_lies_outside_the_axes_and_their_labels(figure):
    renderer = figure.canvas.get_renderer()
    legends = figure.legends + [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    assert len(legends) == 1
    box = legends[0].get_window_extent(renderer)
    ax = figure.axes[0]
    assert not box.overlaps(ax.get_window_extent(renderer))  # the data region
    assert not box.overlaps(ax.get_tightbbox(renderer))  # nor tick labels, axis labels, tier labels


def test_an_unresolved_placement_is_not_given_its_point_ranks_tier(figure, run_dir):
    flasheval.render_report(run_dir)
    text, page = (run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()
    assert "| 200 | 01-ai/yi-6b | 1 | [1, 5] | 1 to 5-6 (unresolved) | unresolved at budget |" in text
    assert "<td>[1, 5]</td><td>1 to 5-6 (unresolved)</td>" in page
    assert not re.search(r"\| \[1, 5\] \| 1 \|", text) and "<td>[1, 5]</td><td>1</td>" not in page
    ax = figure.axes[0]
    (open_marker,) = [line for line in ax.lines if line.get_gid() == "unresolved"]
    assert list(open_marker.get_xdata()) == [200] and open_marker.get_markerfacecolor() == "white"
    filled = [line for line in ax.lines if line.get_gid() == "rank"]
    assert 200 not in set(filled[0].get_xdata())
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert any("unresolved" in label and "tier not met" in label for label in labels)


def test_tiers_are_clipped_to_the_pool(figure, run_dir):
    ax = figure.axes[0]
    labels = [t.get_text().strip() for t in ax.texts if t.get_gid() == "tier-label"]
    assert labels == ["tier 1", "tier 2-4", "tier 5-6"]  # the plan's 5-9 ends at rank 6; 10-19 and 20+ are gone
    assert sorted(line.get_ydata()[0] for line in ax.lines if line.get_gid() == "tier-boundary") == [1.5, 4.5]
    text = flasheval.render_report(run_dir).markdown.read_text()
    assert "| 100 | AlephAlpha/luminous-base | 6 | [6, 6] | 5-6 | resolved |" in text
    assert "5-9" not in text and "10-19" not in text


def test_the_titles_name_the_run_once_and_quoted(figure, run_dir):
    flasheval.render_report(run_dir)
    text = (run_dir / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings[:2] == ['# flasheval report: training run "run"', '## Training run "run"']
    assert figure.axes[0].get_title().startswith('Training run "run" on helm_lite')
    for title in [*headings, figure.axes[0].get_title()]:
        assert not re.search(r"\b(\w+) \1\b", title, re.IGNORECASE), title  # never "run run"


def test_the_tier_column_examples_hold():
    from flasheval.report import run_section

    result = doctest.testmod(run_section, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 9 and result.failed == 0
