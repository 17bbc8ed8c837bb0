"""The reference drawn with rank intervals: valid SVG, the right rows, and laid out by a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import pytest

from flasheval.records.run_record import write_record
from flasheval.reference import load_reference
from flasheval.reference.intervals import reference_rank_intervals
from flasheval.report import render_report
from flasheval.report.rank_figure import MAX_ROWS, reference_intervals_svg

SVG = "{http://www.w3.org/2000/svg}"


def _rows(n: int) -> list[dict]:
    return [{"model_id": f"m{i:04d}", "rank": i, "interval": [max(1, i - 2), min(n, i + 2)], "group": 1 + i // 10}
            for i in range(1, n + 1)]


def test_the_svg_parses_and_draws_one_row_per_model_with_the_placed_one_at_its_rank():
    svg = reference_intervals_svg(_rows(12), title="toy <pool>", confidence_level=0.9,
                                  placed={"model_id": "new & shiny", "rank": 4, "interval": [3, 6]})
    root = ET.fromstring(svg)  # well-formed XML: names are escaped
    rows = root.findall(f"{SVG}g")
    assert len(rows) == 13
    titles = [g.find(f"{SVG}title").text for g in rows]
    assert titles[3] == "new & shiny: rank 4, interval [3, 6]" and titles[4].startswith("m0004: rank 4")
    groups = [t.text for t in root.iter(f"{SVG}text") if t.text and t.text.startswith("group ")]
    assert groups == ["group 1", "group 2"]  # ranks 1-9 group 1, 10-12 group 2 (the placed row has none)
    assert "90% rank intervals" in svg and "toy &lt;pool&gt;" in svg


def test_a_large_pool_is_drawn_around_the_placed_model():
    svg = reference_intervals_svg(_rows(500), title="t", confidence_level=0.95,
                                  placed={"model_id": "new", "rank": 300, "interval": [290, 310]})
    titles = [g.find(f"{SVG}title").text for g in ET.fromstring(svg).findall(f"{SVG}g")]
    assert len(titles) == MAX_ROWS and "new: rank 300, interval [290, 310]" in titles
    assert f"rows 260-{259 + MAX_ROWS} of 501" in svg  # centred on the interval's middle, rank 300


@pytest.mark.slow  # starts a headless browser (10-30 s on a busy machine)
def test_a_place_report_shows_the_reference_with_intervals_in_a_headless_browser(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    from flasheval.api.place import place

    reference = load_reference("helm_lite")
    run = place("replay:meta/llama-3-70b", reference, output=tmp_path)
    assert run.neighbours  # a mid-table model: its interval spans several reference models
    page = render_report(tmp_path).html
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", proc.stdout).group(0)
    assert 'data-vector-count="1"' in body and 'data-vectors-ok="yes"' in body and 'data-images-ok="yes"' in body
    assert "http://" not in page.read_text() and "https://" not in page.read_text()  # names no address
    figure = re.search(r'<figure id="place-intervals".*?</figure>', proc.stdout, re.S).group(0)
    pool = reference_rank_intervals(reference.without("meta/llama-3-70b"))
    drawn = re.findall(r"<title>([^<]+): rank (\d+), interval \[(\d+), (\d+)\]", figure)
    assert len(drawn) == pool.n_models + 1
    expected = {m.model_id: (m.rank, m.interval) for m in pool.models}
    for name, rank, lo, hi in drawn:  # every pool row as the intervals say
        if name != "meta/llama-3-70b":
            assert expected[name.replace("&amp;", "&")] == (int(rank), (int(lo), int(hi)))
    text = re.sub(r"<[^>]+>", " ", proc.stdout)
    assert "Cannot be told from" in text and all(n in text for n in run.neighbours)
