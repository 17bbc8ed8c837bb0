"""``flasheval watch DIR --once``: three checkpoints saved with ``save_pretrained`` placed in step order into one
run folder, a rerun places nothing, a crash or a kill midway and a rerun place only what is left, and each
placement equals ``flasheval place`` of the same checkpoint (an independent path: its own store, the CLI).

The checkpoints are the tiny Llama of ``docs/examples/train_and_place.py`` (three seeds) on its small live
reference (2 tasks x 12 examples): seconds per placement.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flasheval
from flasheval.cli import main
from flasheval.records import read_record

ROOT = Path(__file__).resolve().parents[1]
STEPS = {"checkpoint-10": 10, "step-20": 20, "global_step30": 30}
SEEDS = {"checkpoint-10": 20, "step-20": 21, "global_step30": 22}

pytestmark = pytest.mark.slow  # a live reference built and ~10 tiny placements: about 30 s on 2 busy cores


def _example():
    spec = importlib.util.spec_from_file_location("train_and_place", ROOT / "docs" / "examples" / "train_and_place.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def saved(tmp_path_factory, task_dir):
    """The reference, the plan file and a folder of three saved checkpoints (+ one still being written)."""
    root = tmp_path_factory.mktemp("watch")
    example = _example()
    reference = example.build_small_reference(task_dir, root)
    plan = root / "plan.yaml"
    plan.write_text(example.PLAN, encoding="utf-8")
    checkpoints = root / "ckpts"
    tokenizer = example.byte_tokenizer()
    for name, seed in SEEDS.items():
        example.tiny_llama(seed).save_pretrained(checkpoints / name)
        tokenizer.save_pretrained(checkpoints / name)
    (checkpoints / "checkpoint-10" / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    partial = checkpoints / "checkpoint-40"  # the Trainer writes trainer_state.json last: not complete yet
    example.tiny_llama(23).save_pretrained(partial)
    return {"root": root, "reference": reference, "plan": plan, "dir": checkpoints}


def _options(saved) -> list[str]:
    return ["--reference", str(saved["reference"]), "--tiers", str(saved["plan"]), "--device", "cpu"]


def _records(run: Path) -> dict[int, bytes]:
    return {int(p.parent.name.split("-")[1]): p.read_bytes() for p in (run / "checkpoints").glob("step-*/place.json")}


@pytest.fixture(scope="module")
def watched(saved):
    """``flasheval watch DIR --once`` into the run folder ``run-a``: its output and the folder."""
    import contextlib
    import io

    run = saved["root"] / "run-a"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["watch", str(saved["dir"]), *_options(saved), "--run", str(run), "--once", "--settle", "0"]) == 0
    return run, out.getvalue()


def test_watch_once_places_every_complete_checkpoint_in_step_order_and_a_rerun_places_nothing(saved, watched,
                                                                                               capsys):
    run, out = watched
    placing = [line for line in out.splitlines() if ": placing " in line]
    assert [line.split()[1] for line in placing] == ["10", "20", "30"]  # in step order
    assert "step 40 (checkpoint-40): not complete yet, waiting for trainer_state.json" in out
    history = flasheval.read_run(run)
    assert [(c.step, c.model) for c in history.checkpoints] == [(10, "checkpoint-10"), (20, "step-20"),
                                                                (30, "global_step30")]
    assert len({c.fingerprint for c in history.checkpoints}) == 3
    before = _records(run)
    assert main(["watch", str(saved["dir"]), *_options(saved), "--run", str(run), "--once", "--settle", "0"]) == 0
    assert ": placing " not in capsys.readouterr().out and _records(run) == before  # nothing placed again

    # Each equals `flasheval place` of the same checkpoint: its own folder and store, the CLI's path.
    for name, step in (("step-20", 20), ("global_step30", 30)):
        alone = saved["root"] / f"alone-{step}"
        assert main(["place", "--model", f"hf:{saved['dir'] / name}", *_options(saved), "--output", str(alone)]) == 0
        cli = read_record(alone / "place.json").payload
        record = read_record(history.checkpoints[step // 10 - 1].record_path).payload
        for key in ("rank", "interval", "tier", "status", "stages", "compute"):
            assert record[key] == cli[key], key
        assert record["live"]["examples"] == cli["live"]["examples"]
        assert record["live"]["fingerprint"] == cli["live"]["fingerprint"]
    capsys.readouterr()

    # The run's report: rank against step, one row per checkpoint.
    report = flasheval.render_report(run)
    text = report.markdown.read_text()
    for c in history.checkpoints:  # live checkpoints: tokens and seconds against the full run's
        assert f"| {c.step} | {c.model} | {c.rank} | [{c.interval[0]}, {c.interval[1]}] |" in text
        assert f"| {c.tokens:,} | {c.full_tokens:,.0f} | {c.full_tokens / c.tokens:.1f}x | {c.seconds:.1f} |" in text
    assert report.figures == (run / "figures" / "run-ranks.png",)


class _Crash(Exception):
    pass


def test_a_crash_midway_then_a_rerun_places_only_what_is_left_and_resumes_the_interrupted_one(saved, watched):
    run = saved["root"] / "run-b"
    started: list[int] = []

    def crash_on_second(progress):
        if progress.step == "checkpoint" and ": placing " in progress.message:
            started.append(int(progress.message.split()[1]))
        if progress.step == "stage" and len(started) == 2:
            raise _Crash  # after the second checkpoint's first stage is scored and stored

    kwargs = {"reference": saved["reference"], "plan": saved["plan"], "once": True, "settle_seconds": 0,
              "engine": flasheval.EngineOptions(device="cpu")}
    with pytest.raises(_Crash):
        flasheval.watch(saved["dir"], run=run, progress=crash_on_second, **kwargs)
    assert sorted(_records(run)) == [10]
    first = _records(run)[10]
    events = []
    history = flasheval.watch(saved["dir"], run=run, progress=events.append, **kwargs)
    placing = [e.message.split()[1] for e in events if e.step == "checkpoint" and ": placing " in e.message]
    assert placing == ["20", "30"] and _records(run)[10] == first
    fresh = {c.step: read_record(c.record_path).payload for c in flasheval.read_run(watched[0]).checkpoints}
    resumed = read_record(history.checkpoints[1].record_path).payload
    assert resumed["stages"] == fresh[20]["stages"] and resumed["rank"] == fresh[20]["rank"]
    # Only what the crash left unscored was computed: fewer requests than placing step 20 from nothing.
    assert resumed["live"]["requests_computed"] < fresh[20]["live"]["requests_computed"]
    assert read_record(history.checkpoints[2].record_path).payload["live"]["requests_computed"] == \
        fresh[30]["live"]["requests_computed"]


def test_a_watcher_killed_after_its_first_record_resumes_with_what_is_left(saved):
    run = saved["root"] / "run-c"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "flasheval", "watch", str(saved["dir"]), *_options(saved),
                                "--run", str(run), "--settle", "0", "--poll", "0.2", "-q"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not _records(run) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert _records(run), process.stderr.read().decode() if process.poll() is not None else "no record in 120 s"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    kept = _records(run)
    events = []
    flasheval.watch(saved["dir"], run=run, reference=saved["reference"], plan=saved["plan"], once=True,
                    settle_seconds=0, engine=flasheval.EngineOptions(device="cpu"), progress=events.append)
    placing = [int(e.message.split()[1]) for e in events if e.step == "checkpoint" and ": placing " in e.message]
    assert placing == [s for s in (10, 20, 30) if s not in kept]
    after = _records(run)
    assert sorted(after) == [10, 20, 30] and all(after[s] == kept[s] for s in kept)


def _interruptible() -> None:
    """Ctrl-C as a terminal delivers it, even when the tests run where SIGINT is ignored (a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_watcher_in_one_line_with_exit_code_130(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "flasheval", "watch", str(empty), "--reference", "helm_lite",
                                "--poll", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_interruptible)
    assert "watching" in process.stdout.readline()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.strip().splitlines() == [f"flasheval: stopped watching; the 0 checkpoints placed are kept in "
                                        f"{empty / 'flasheval-run'} (run the same command to go on)"]
