"""``flasheval report``: Markdown + self-contained HTML from run records, bad records refused in one line."""

import base64
import json
import re
import shutil
import subprocess
import tempfile

import pytest

from flasheval import cli
from flasheval.analysis.dior import run_dior
from flasheval.records.run_record import write_record
from flasheval.reference import load_reference
from flasheval.report import render_report

PNG = b"\x89PNG\r\n\x1a\n"


def _place_payload(reference):
    # the fields flasheval.placement.results.PlacementResult.to_json writes
    stage = {"stage": 0, "stage_size": 20, "n_examples": [20] * 6, "rank": 5, "mid_rank": 5.0, "interval": [2, 9],
             "confidence_level": 0.99, "tier": "5-9", "resolution": 2, "decision": "escalate", "reason": "wide"}
    last = dict(stage, stage=1, stage_size=100, n_examples=[100] * 6, rank=6, interval=[5, 7], decision="stop")
    return {"model_id": reference.model_ids[3], "reference": reference.name, "plan": "default", "seed": 0,
            "status": "resolved", "reason": "interval within", "rank": 6, "interval": [5, 7], "confidence_level": 0.95,
            "tier": "5-9", "resolution": 2, "n_models": reference.n_models - 1, "stages": [stage, last],
            "compute": {"n_examples": 600, "full_examples": 5551, "n_tokens": None, "full_tokens": None, "flops": None,
                        "full_flops": None, "saving": 9.25}}


def _backtest_payload():
    # the fields flasheval.analysis.backtest.BacktestResult.to_json writes
    rows = [{"model_id": f"m{i}", "full_rank": i, "placed_rank": i + (i % 3 == 0), "interval": [max(1, i - 2), i + 2],
             "tier": "1" if i == 1 else "2-4" if i <= 4 else "5+", "resolution": 0 if i == 1 else 1 if i <= 4 else 2,
             "within": True, "covered": True, "n_examples": 100 * i, "saving": 5.0, "status": "resolved"}
            for i in range(1, 13)]
    summary = {"method": "adaptive", "n_models": 12, "share_within": 1.0, "coverage": 1.0, "median_saving": 5.0,
               "mean_saving": 5.0, "total_saving": 4.0, "mean_examples": 650.0}
    return {"reference": "toy", "plan": "default", "seed": 0, "confidence_level": 0.95, "summaries": [summary],
            "rows": {"adaptive": rows}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    reference = load_reference("helm_lite")
    report = run_dior(reference, sizes=(20, 100), n_instantiations=50)
    write_record(folder / "dior.json", kind="dior", payload=report.to_json())
    write_record(folder / "place.json", kind="place", payload=_place_payload(reference))
    write_record(folder / "backtest.json", kind="backtest", payload=_backtest_payload())
    assert cli.main(["sweep", "--backtest", "3", "--budget-examples", "3000", "--output", str(folder)]) == 0
    (folder / "notes.json").write_text('{"not": "a record"}')  # ignored in a folder
    return folder


@pytest.mark.slow
def test_report_writes_markdown_figures_and_one_self_contained_page(run_dir):
    files = render_report(run_dir)
    assert files.kinds == ("backtest", "dior", "place", "sweep")
    names = sorted(p.name for p in files.figures)
    assert names == ["backtest-adaptive.png", "dior-reliability.png", "place-intervals.svg", "place-leaderboard.png",
                     "place-stages.png", "sweep-intervals.png"]
    for path in files.figures:
        assert path.read_bytes().startswith(b"<svg" if path.suffix == ".svg" else PNG) and path.stat().st_size > 5000
    md = files.markdown.read_text()
    assert all(f"(figures/{n})" in md for n in names)
    assert "| adaptive | 12 | 100.0% |" in md and "| examples | 20 | mean |" in md
    assert "Sweep of 3 checkpoints on helm_lite" in md and "budget 3000 examples" in md
    page = files.html.read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == 5 and all(base64.b64decode(e).startswith(PNG) for e in embedded)
    assert "http://" not in page and "https://" not in page  # nothing fetched from the network


def test_report_command_prints_one_line(run_dir, capsys):
    assert cli.main(["report", str(run_dir / "place.json")]) == 0
    assert "rendered 1 record(s) (place)" in capsys.readouterr().out


def _record(path, **changes):
    data = {"schema": "flasheval.run", "schema_version": 1, "kind": "dior", "payload": {}}
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"schema_version": 99}, "schema_version 99"),
    ({"kind": "mystery"}, "record kind 'mystery' is not one this report renders (allowed: backtest, dior, evaluate"),
    ({"kind": "place", "payload": {"model_id": "x"}}, "field 'payload.reference': missing field"),
])
def test_bad_records_are_refused_in_one_line(tmp_path, capsys, changes, message):
    path = _record(tmp_path / "r.json", **changes)
    assert cli.main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and len(err.splitlines()) == 1


def test_a_folder_without_records_is_refused(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 1
    assert "no flasheval run records" in capsys.readouterr().err


@pytest.mark.slow
def test_html_loads_in_headless_chromium_with_every_image_decoded(run_dir):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    page = render_report(run_dir).html
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None, dom[:500]
    assert 'data-images-ok="yes"' in body.group(0) and 'data-image-count="5"' in body.group(0)
    text = re.sub(r"<[^>]+>", " ", re.sub(r"src=\"data:[^\"]+\"", "", dom))
    assert "Traceback" not in text and "NaN" not in text and "None" not in text
    assert "DIoR on helm_lite" in text and "placed at rank" not in text  # figure titles are pixels, not text


def test_place_without_a_loadable_reference_and_evaluate_records_still_render(tmp_path):
    payload = _place_payload(load_reference("helm_lite"))
    payload["reference"] = "no_such_reference"
    write_record(tmp_path / "place.json", kind="place", payload=payload)
    write_record(tmp_path / "evaluate.json", kind="evaluate", payload={"model_id": "tiny", "accuracy": 0.4321, "per_task": {}})
    files = render_report(tmp_path)
    assert sorted(p.name for p in files.figures) == ["place-stages.png"]  # no leaderboard without the reference
    md = files.markdown.read_text()
    assert "| accuracy | 0.432 |" in md and "| model_id | tiny |" in md


def test_multi_seed_backtest_record_shows_every_seed_its_mean_and_min(tmp_path):
    runs = []
    for seed, (within, median) in enumerate(((1.0, 6.0), (0.5, 3.0))):
        payload = _backtest_payload()
        payload["seed"] = seed
        payload["summaries"] = [dict(payload["summaries"][0], share_within=within, median_saving=median)]
        runs.append(payload)
    write_record(tmp_path / "bt.json", kind="backtest", payload={"seeds": runs})
    md = render_report(tmp_path).markdown.read_text()
    assert "| adaptive | within resolution | 100.0% | 50.0% | 75.0% | 50.0% |" in md  # seeds 0, 1, mean, min
    assert "| adaptive | median saving | 6.0x | 3.0x | 4.5x | 3.0x |" in md
    assert md.count("Leave-one-out backtest on toy (plan default, seed") == 2  # one section per seed


def test_a_live_place_record_shows_its_time_and_a_full_runs_projected_time(tmp_path):
    from flasheval.placement.results import Timing

    payload = _place_payload(load_reference("helm_lite"))
    payload["reference"] = "no_such_reference"  # no leaderboard figure: the text is what is checked
    payload["timing"] = Timing(wall_seconds=60.5, load_seconds=44.4, scoring_seconds=15.2, scored_tokens=1300,
                               looks_seconds=0.2, full_tokens=6500.0).to_json()
    write_record(tmp_path / "place.json", kind="place", payload=payload)
    md = render_report(tmp_path).markdown.read_text()
    assert ("Time 60.5 s: opening and loading the model 44.4 s, forward passes 15.2 s, outside the model 0.9 s "
            "(of it fixing the looks 0.2 s).") in md
    # 6,500 tokens at 1300 / 15.2 = 85.5 tokens/s: 76.0 s of forward passes, + 44.4 s of loading = 120 s
    assert ("A full run of these datasets: ~120 s (loading 44 s + 6,500 tokens at the measured 86 tokens/s), "
            "2.0x the placement's time.") in md


def test_a_live_place_record_says_its_one_time_start_up_apart_from_its_time(tmp_path):
    from flasheval.placement.results import Timing

    payload = _place_payload(load_reference("helm_lite"))
    payload["reference"] = "no_such_reference"
    payload["timing"] = Timing(wall_seconds=0.5, load_seconds=0.1, scoring_seconds=0.3, scored_tokens=100,
                               looks_seconds=0.0, full_tokens=500.0, import_seconds=4.4).to_json()
    write_record(tmp_path / "place.json", kind="place", payload=payload)
    md = render_report(tmp_path).markdown.read_text()
    assert "Time 0.5 s: opening and loading the model 0.1 s" in md
    assert "Not counted: 4.4 s of the process's one-time start-up" in md
