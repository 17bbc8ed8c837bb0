"""``flasheval watch DIR --once``: three checkpoints saved with ``save_pretrained`` placed in step order into one
run folder, a rerun places nothing, a crash or a kill midway and a rerun place only what is left, and each
placement equals ``flasheval place`` of the same checkpoint (an independent path: its own store, the CLI).

The checkpoints are the tiny Llama of ``docs/examples/train_and_place.py`` (three seeds) on its small live
reference (2 tasks x 12 examples): seconds per placement.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import flasheval
from flasheval.api.watch import unplaced_checkpoints
from flasheval.cli import main
from flasheval.records.run_record import read_record

ROOT = Path(__file__).resolve().parents[2]
STEPS = {"checkpoint-10": 10, "step-20": 20, "global_step30": 30}
SEEDS = {"checkpoint-10": 20, "step-20": 21, "global_step30": 22}

pytestmark = pytest.mark.slow  # a live reference built and ~10 tiny placements: about 30 s on 2 busy cores


def _example(name: str = "train_and_place"):
    examples = str(ROOT / "docs" / "examples")
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, examples)  # the Trainer example imports its sibling train_and_place, as a script does
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(examples)
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
    assert [(c.step, c.model_id) for c in history.checkpoints] == [(10, "checkpoint-10"), (20, "step-20"),
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
        assert f"| {c.step} | {c.model_id} | {c.rank} | [{c.interval[0]}, {c.interval[1]}] |" in text
        assert f"| {c.n_tokens:,} | {c.full_tokens:,.0f} | {c.full_tokens / c.n_tokens:.1f}x | {c.seconds:.1f} |" in text
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


# What a training run does to the watched folder: rotation (``save_total_limit``) removes checkpoints under the
# watcher, writers pause mid-file, a checkpoint is corrupt. The watcher goes on placing the others.

def _copies(saved, folder: Path, names: dict[str, str]) -> None:
    """Checkpoints under ``folder``: copies of the fixture's saved ones (new name -> saved name)."""
    for new, old in names.items():
        shutil.copytree(saved["dir"] / old, folder / new)


def test_a_checkpoint_rotated_away_after_the_scan_is_skipped_in_one_line_and_the_others_placed(saved, tmp_path,
                                                                                              monkeypatch, capsys):
    watch_module = importlib.import_module("flasheval.api.watch")  # the module (flasheval.api.watch is the function)
    folder = tmp_path / "ckpts"
    _copies(saved, folder, {"step-10": "step-20", "step-20": "global_step30", "step-30": "step-20"})
    scan = watch_module.find_checkpoints

    def scan_then_rotate(*args, **kwargs):
        found = scan(*args, **kwargs)
        shutil.rmtree(folder / "step-20", ignore_errors=True)  # the run's rotation, once the scan has listed it
        return found

    monkeypatch.setattr(watch_module, "find_checkpoints", scan_then_rotate)
    monkeypatch.chdir(tmp_path)  # a relative DIR: the vanished folder must not be taken for a hub id
    started = time.monotonic()
    code = main(["watch", "ckpts", *_options(saved), "--run", "run", "--once", "--settle", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "step 20 (step-20): gone before it was placed (removed by the run's rotation?): skipped" in out
    assert f"placing hf:{folder / 'step-20'}" in out  # the spec is absolute (a relative one reads as a hub id)
    assert [c.step for c in flasheval.read_run(tmp_path / "run").checkpoints] == [10, 30]
    assert "checkpoints placed (steps 10, 30); skipped, gone before placed: steps 20; record:" in out
    assert [(u.step, u.gone) for u in unplaced_checkpoints(tmp_path / "run")] == [(20, True)]
    assert time.monotonic() - started < 25  # no retries against the hub for a folder that is gone


def test_a_corrupt_checkpoint_is_recorded_with_its_reason_retried_and_never_stops_the_others(saved, tmp_path,
                                                                                            capsys):
    folder = tmp_path / "ckpts"
    _copies(saved, folder, {"step-10": "step-20", "step-20": "step-20", "step-30": "global_step30"})
    weights = folder / "step-10" / "model.safetensors"
    weights.write_bytes(os.urandom(weights.stat().st_size))  # corrupt weights, as long as the real ones
    (folder / "step-20" / "config.json").write_text("{not json", encoding="utf-8")  # a bad config
    run = tmp_path / "run"
    assert main(["watch", str(folder), *_options(saved), "--run", str(run), "--once", "--settle", "0"]) == 1
    out, err = capsys.readouterr()
    assert [c.step for c in flasheval.read_run(run).checkpoints] == [30]
    failed = unplaced_checkpoints(run)
    assert [(u.step, u.gone, u.tries, u.retrying) for u in failed] == [(10, False, 1, False), (20, False, 1, False)]
    assert all(u.reason and "\n" not in u.reason for u in failed)
    assert "step 10 (step-10): failed (try 1 of 1): " in out and "; failed: steps 10, 20; record:" in out
    lines = [line for line in err.splitlines() if line.startswith("flasheval")]  # not the loaders' progress bars
    assert len(lines) == 1 and lines[0].startswith("flasheval: error: 2 checkpoints not placed: step 10 (step-10): ")
    assert f"step 20 (step-20): {failed[1].reason} (recorded in {run / 'failed.json'})" in lines[0]

    # Without --once: tried again at the next looks, --retries times, then left; the placed one is not placed again.
    events = []

    def stop_when_given_up(progress):
        events.append(progress.message)
        if "not tried again (" in progress.message and "step 20" in progress.message:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        flasheval.watch(folder, run=run, reference=saved["reference"], plan=saved["plan"], poll_seconds=0.01,
                        settle_seconds=0, retries=1, engine=flasheval.EngineOptions(device="cpu"),
                        progress=stop_when_given_up)
    tries = [m.split("(try ")[1].split(")")[0] for m in events if m.startswith("step 10 (step-10): failed")]
    assert tries == ["1 of 2", "2 of 2"] and not any("step 30" in m for m in events)
    assert [(u.step, u.tries, u.retrying) for u in unplaced_checkpoints(run)] == [(10, 2, False), (20, 2, False)]

    # Other settings than the run's still stop the watcher in one line: every checkpoint would fail alike.
    assert main(["watch", str(folder), *_options(saved), "--run", str(run), "--once", "--settle", "0",
                 "--simultaneous", "3"]) == 1
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("flasheval")]
    assert lines == [f"flasheval: error: {run / 'run.json'}: field 'simultaneous': this run's checkpoints are placed "
                     "with simultaneous None, this one with 3; a run keeps the settings of its first placement (give "
                     "the same, or place into a new run folder)"]
    assert out.count(": placing ") == 1  # stopped at the first checkpoint it tried


def _rotating_trainer(output: Path, callback):
    """A real ``transformers.Trainer``: the tiny Llama, 8 steps, a save every 2, ``save_total_limit=2``."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    example = _example()
    tokenizer = example.byte_tokenizer()
    arguments = TrainingArguments(output_dir=str(output), per_device_train_batch_size=2, learning_rate=3e-3,
                                  use_cpu=True, disable_tqdm=True, seed=0, save_only_model=True, report_to="none",
                                  max_steps=8, save_strategy="steps", save_steps=2, save_total_limit=2)
    return Trainer(model=example.tiny_llama(0), args=arguments, processing_class=tokenizer,
                   train_dataset=_example("trainer_placement").training_data(tokenizer),
                   data_collator=default_data_collator, callbacks=[callback])


def test_a_watcher_beside_a_trainer_rotating_its_checkpoints_never_crashes_and_places_what_is_kept(saved, tmp_path,
                                                                                                  monkeypatch):
    """The watcher in a thread (poll 0.05 s, settle 0) beside a Trainer that keeps at most two saves ahead of it, so
    it rotates each old checkpoint away while the watcher may be placing it: placed or skipped in one line, never a
    crash. Checkpoint 2 is held between the watcher's scan and its load until the Trainer's rotation has removed it
    (the vanishing is certain once); checkpoint 4's removal races its placement as it comes."""
    import threading

    from transformers import TrainerCallback

    output, run = tmp_path / "trainer", tmp_path / "run"
    started = {step: threading.Event() for step in range(0, 9, 2)}
    started[0].set()
    events: list[str] = []
    stop, outcome = threading.Event(), []
    options = {"reference": saved["reference"], "plan": saved["plan"], "run": run, "settle_seconds": 0,
               "engine": flasheval.EngineOptions(device="cpu")}

    def seen(progress):
        events.append(progress.message)
        if progress.step == "checkpoint" and ": placing " in progress.message:
            step = int(progress.message.split()[1])
            started[step].set()
            deadline = time.monotonic() + 60
            while step == 2 and (output / "checkpoint-2").exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # listed by the scan, not loaded yet: the Trainer rotates it away at its save 6

    def stoppable(seconds):
        if stop.is_set():
            raise KeyboardInterrupt  # Ctrl-C, between two looks
        time.sleep(seconds)

    def watcher():
        try:
            flasheval.watch(output, poll_seconds=0.05, progress=seen, **options)
        except BaseException as exc:  # noqa: BLE001 - the test reads what stopped it
            outcome.append(exc)

    class AtMostTwoSavesAhead(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            deadline = time.monotonic() + 60
            while not started[state.global_step - 2].wait(0.05) and thread.is_alive() and time.monotonic() < deadline:
                pass

    trainer = _rotating_trainer(output, AtMostTwoSavesAhead())
    output.mkdir(exist_ok=True)
    monkeypatch.setattr(importlib.import_module("flasheval.api.watch"), "time", types.SimpleNamespace(sleep=stoppable))
    thread = threading.Thread(target=watcher)
    try:
        thread.start()
        trainer.train()
    finally:
        stop.set()
        thread.join(120)
    assert not thread.is_alive() and [type(e) for e in outcome] == [KeyboardInterrupt], outcome

    kept = sorted(int(p.name.split("-")[1]) for p in output.glob("checkpoint-*"))
    assert kept == [6, 8]  # save_total_limit=2 rotated checkpoints 2 and 4 away
    placed = {c.step for c in flasheval.watch(output, once=True, progress=seen, **options).checkpoints}
    unplaced = unplaced_checkpoints(run)
    assert set(kept) <= placed and all(u.gone for u in unplaced) and 2 not in placed
    assert {u.step for u in unplaced} == {2, 4} - placed
    for step in (2, 4):  # each rotated one: placed before it went, or skipped in one line
        line = f"step {step} (checkpoint-{step}): gone before it was placed (removed by the run's rotation?): skipped"
        assert (step in placed) != (line in events), (step, placed, events)
