"""``flasheval report RUN``: a training run's folder rendered as rank against step and a table of its checkpoints.

Replayed reference models stand in for the run's checkpoints (seconds, no weights); a live run's report
(tokens and seconds) is rendered in ``tests/runs/test_watch.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import pytest

import flasheval
from flasheval import cli

MODELS = {100: "replay:meta/llama-3-8b", 200: "replay:meta/llama-3-70b", 300: "replay:meta/llama-3-8b"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("report") / "pretrain-7"
    for step, model in MODELS.items():
        flasheval.place_checkpoint(model, run=run, step=step, reference="helm_lite", simultaneous=3)
    return run


def test_the_run_report_tabulates_every_checkpoint_against_its_record(run_dir, capsys):
    assert cli.main(["report", str(run_dir)]) == 0
    assert "rendered 1 record(s) (run) with 1 figure(s)" in capsys.readouterr().out
    text = (run_dir / "report.md").read_text()
    history = flasheval.read_run(run_dir)
    for c in history.checkpoints:  # each row says what the checkpoint's own record says
        saving = f"{c.full_examples / c.n_examples:.1f}x"
        assert c.status == "resolved"  # its tier is its record's, an open one ending at the pool's last rank
        tier = f"{c.tier[:-1]}-{c.n_models + 1}" if c.tier.endswith("+") else c.tier
        row = f"| {c.step} | {c.model_id} | {c.rank} | [{c.interval[0]}, {c.interval[1]}] | {tier} | {c.status} | " \
              f"{c.n_examples} | {c.full_examples} | {saving} |"
        assert row in text, row
    spent = sum(c.n_examples for c in history.checkpoints)
    assert f"| all | 3 checkpoints |  |  |  |  | {spent} | {3 * history.checkpoints[0].full_examples} |" in text
    assert "the run's level 95% split over 3 planned checkpoints" in text
    assert "![Rank against step" in text and (run_dir / "figures" / "run-ranks.png").stat().st_size > 1000


def test_a_run_folder_with_a_broken_record_is_one_line(run_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    (broken / "checkpoints" / "step-200" / "place.json").write_text("{")
    assert cli.main(["report", str(broken)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("flasheval: error: ") and "step-200/place.json: not a JSON run record" in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_the_run_report_loads_in_headless_chromium_with_its_figure(run_dir):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    page = flasheval.render_report(run_dir).html
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body is not None and 'data-images-ok="yes"' in body.group(0) and 'data-image-count="1"' in body.group(0)
    text = re.sub(r"<[^>]+>", " ", re.sub(r"src=\"data:[^\"]+\"", "", proc.stdout))
    assert "Training run \"pretrain-7\"" in text and "Traceback" not in text and "NaN" not in text and "None" not in text
    rows = re.findall(r"<tr><td>(\d+)</td>", proc.stdout)
    assert rows == ["100", "200", "300"]
