"""Bad input on the training side (issue 47, round 3), one row per case, grouped by cause: the Trainer callback,
the checkpoint watcher, a run folder's lock, the launcher's environment, a sharded model under ``"main"``, and the
names a command makes. Each row is ONE line (``InputError`` / ``FlashevalError``, or ``flasheval: error: ...`` from
the command line) with nothing written, or the correct result; none waits more than a few seconds.

References: ``helm_lite`` (replayed scores) wherever the refusal comes before any scoring, so no live reference is
built here (each would cost seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flasheval
from flasheval.cli import main
from flasheval.errors import FlashevalError, InputError
from flasheval.placement.results import Budget
from tests.conftest import REPO_ROOT

MODEL = "01-ai/yi-34b"
"""A model of helm_lite: a replayed placement takes well under a second."""


def _line(call) -> str:
    """The one line ``call()`` is refused with."""
    with pytest.raises(FlashevalError) as caught:
        call()
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """``flasheval ARGV``: its exit code and its one error line (``""`` when it succeeded)."""
    code = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) <= 1 and "Traceback" not in "".join(err), err
    return code, err[0] if err else ""


# --- cause: the Trainer callback checked its options only at its first placement ---------------------------------

@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    pytest.importorskip("transformers")
    from transformers import Trainer, TrainingArguments

    from tests.engine.conftest import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    arguments = TrainingArguments(output_dir=str(tmp_path_factory.mktemp("trainer")), use_cpu=True, report_to="none",
                                  max_steps=2, disable_tqdm=True)
    return Trainer(model=model, args=arguments, processing_class=tokenizer)


@pytest.mark.parametrize(("options", "message"), [
    ({"seed": -3}, "field '--seed': must be an integer >= 0, got -3"),
    ({"progress": 5}, "field 'progress': must be a callable taking a Progress, got int"),
    ({"aggregate": "meen"}, "field '--aggregate': unknown aggregate 'meen' (allowed: centered, mean, win_rate)"),
    ({"tokenizer": 42}, "field 'tokenizer': expected LlamaForCausalLM's tokenizer (a transformers tokenizer, callable "
                        "on text), got int"),
    ({"run": ""}, "field 'run': expected a run folder (str or Path), got ''"),
    ({"plan": "nosuchplan"}, "unknown tier plan 'nosuchplan' (allowed: "),
    ({"plan": 42}, "field '--tiers': expected a tier plan name, file or TierPlan, got int"),
    ({"budget": 3}, "field 'budget': expected a Budget, got int"),
    ({"reference": "nosuchref"}, "field '--reference': unknown reference 'nosuchref'"),
    ({"reference": 42}, "field '--reference': expected a reference name, folder or ReferenceLeaderboard, got int"),
    ({"simultaneous": 0}, "field 'simultaneous': the planned number of checkpoints must be a whole number >= 1, got 0"),
    ({"simultaneous": 10**21}, "field 'simultaneous': the planned number of checkpoints must be at most 1,000,000"),
    ({"engine": 3}, "field 'engine': expected EngineOptions, got int"),
    ({}, "field '--reference': reference 'helm_lite' was not built by 'flasheval reference build'"),  # it is read
    ({"distributed": "all"}, "field 'distributed': 'all' needs the caller's torch.distributed process group"),
])
def test_the_trainer_callback_refuses_when_made_what_its_first_placement_would(trainer, tmp_path, options, message):
    from flasheval.integrations.transformers import PlacementCallback

    options = {"run": tmp_path / "run", "every": 1, "reference": "helm_lite", **options}
    reference = options.pop("reference")
    assert _line(lambda: PlacementCallback(reference, trainer=trainer, **options)).startswith(message)
    assert not (tmp_path / "run").exists()


def test_a_trainer_without_a_tokenizer_is_refused_when_the_callback_is_made(trainer, tmp_path):
    from flasheval.integrations.transformers import PlacementCallback

    trainer.processing_class, tokenizer = None, trainer.processing_class
    try:
        assert _line(lambda: PlacementCallback("helm_lite", trainer=trainer, run=tmp_path / "run", every=1)) == (
            "field 'tokenizer': the Trainer has no processing_class: give the callback tokenizer=")
    finally:
        trainer.processing_class = tokenizer


def test_the_trainer_callback_refuses_a_run_folder_its_first_placement_could_not_write(trainer, tmp_path):
    # Found by this round's own hostile pass: accepted when made, then the first placement stopped training.
    from flasheval.integrations.transformers import PlacementCallback

    (tmp_path / "file").write_text("x")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep-config.json").write_text("{}")
    for run, message in ((tmp_path / "file", "field 'run': is a file, not a folder"),
                         (tmp_path / "file" / "run", f"field 'run': {tmp_path / 'file'} is a file, not a folder"),
                         (tmp_path / ("r" * 300), "field 'run': a folder name is at most 255 bytes, this one has 300"),
                         (tmp_path / "sweep", "field 'run': is a sweep's folder (flasheval sweep)")):
        assert message in _line(lambda: PlacementCallback("helm_lite", trainer=trainer, run=run, every=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "sweep"]


def test_check_hook_reads_the_reference_and_the_run_as_the_first_placement_would(tmp_path):
    # The function both callbacks call when made: the budget against the plan's first look, and another seed than
    # the run's (its first placement fixed it), both refused with nothing written.
    from flasheval.api.runs import check_hook

    run = tmp_path / "run"
    below = _line(lambda: check_hook(f"replay:{MODEL}", run=run, reference="helm_lite", tokenizer=None,
                                     place_kwargs={"budget": Budget(max_examples=1)}))
    assert below.startswith("field '--max-examples': 1 is below the first stage of plan default") and not run.exists()
    flasheval.place_checkpoint(f"replay:{MODEL}", run=run, step=1, reference="helm_lite")
    before = (run / "run.json").read_bytes()
    assert "placed with seed 0, this one with 3" in _line(lambda: check_hook(
        f"replay:{MODEL}", run=run, reference=None, tokenizer=None, place_kwargs={"seed": 3}))
    check_hook(f"replay:{MODEL}", run=run, reference=None, tokenizer=None, place_kwargs={})  # the run's: fine
    assert (run / "run.json").read_bytes() == before


# --- cause: a refused first placement wrote run.json (lost work: every later, correct call refused) ---------------

@pytest.mark.parametrize("bad", [{"aggregate": "meen"}, {"seed": -1}, {"seed": True}, {"seed": 1.5},
                                 {"simultaneous": 10**30}, {"bogus": 3}])
def test_a_refused_first_placement_leaves_the_run_folder_unwritten(tmp_path, bad):
    run = tmp_path / "run"
    assert "\n" not in _line(lambda: flasheval.place_checkpoint(f"replay:{MODEL}", run=run, step=1,
                                                                reference="helm_lite", **bad))
    assert not run.exists()
    placed = flasheval.place_checkpoint(f"replay:{MODEL}", run=run, step=1, reference="helm_lite")  # the script fixed
    assert placed.record_path.is_file()


def test_the_command_line_leaves_no_run_behind_a_refused_seed_or_count(tmp_path, capsys):
    run, folder = tmp_path / "run", tmp_path / "ckpts"
    folder.mkdir()
    place = ["place", "--model", f"replay:{MODEL}", "--reference", "helm_lite", "--run", str(run), "--step", "1"]
    assert _cli([*place, "--seed", "-1"], capsys) == (1, "flasheval: error: field '--seed': must be an integer >= 0, "
                                                         "got -1")
    assert _cli(place, capsys) == (0, "")
    code, line = _cli(["watch", str(folder), "--reference", "helm_lite", "--once", "--simultaneous", "10" * 11], capsys)
    assert code == 1 and "the planned number of checkpoints must be at most 1,000,000" in line
    assert not (folder / "flasheval-run").exists()
    with pytest.raises(SystemExit):  # argparse: an int is asked for
        main(["watch", str(folder), "--reference", "helm_lite", "--once", "--simultaneous", "1e21"])
    assert "argument --simultaneous: invalid int value: '1e21'" in capsys.readouterr().err
    step = _cli([*place[:-1], "100000000000000000000"], capsys)
    assert step[0] == 1 and "field 'step': must be at most 9223372036854775807" in step[1]


# --- cause: the watcher's scan (names, links, files) ---------------------------------------------------------------

def _checkpoint(folder: Path, *, tokenizer: bool = True, trainer_state: int | None = None) -> Path:
    """A checkpoint folder's files (the scan reads names and headers only: a 1-byte weights file states no length)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"w")
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    if trainer_state is not None:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": trainer_state}))
    return folder


def _watch(folder: Path, *extra: str) -> list[str]:
    return ["watch", str(folder), "--reference", "helm_lite", "--once", "--settle", "0", *extra]


@pytest.mark.parametrize(("names", "expected"), [
    (("step-5", "global_step5"), "2 checkpoints hold step 5 (global_step5 and step-5): none is placed until one is "
                                 "left (rename or move the others)"),
    (("step-02", "step-2"), "2 checkpoints hold step 2 (step-02 and step-2): none is placed until one is left"),
    (("checkpoint-99999999999999999999",), "its step 99999999999999999999 is beyond 9223372036854775807 (2**63 - 1)"),
])
def test_checkpoints_that_name_one_step_twice_or_no_step_are_never_placed(tmp_path, capsys, names, expected):
    for name in names:
        _checkpoint(tmp_path / "ckpts" / name, trainer_state=7)
    code, line = _cli(_watch(tmp_path / "ckpts"), capsys)
    assert code == 1 and line.startswith(f"flasheval: error: {tmp_path / 'ckpts'}: no checkpoint placed: ")
    assert expected in line and not (tmp_path / "ckpts" / "flasheval-run" / "checkpoints").exists()


def test_a_symlink_loop_in_the_watched_folder_or_on_the_run_path_is_one_line(tmp_path, capsys):
    from flasheval.runs.checkpoint_scan import find_checkpoints

    folder = tmp_path / "ckpts"
    folder.mkdir()
    os.symlink(folder / "step-1", folder / "step-2")
    os.symlink(folder / "step-2", folder / "step-1")
    assert find_checkpoints(folder) == ()  # a loop is no checkpoint (was RuntimeError)
    assert _cli(_watch(folder), capsys)[1].endswith("no complete checkpoint to place yet (nothing is in the run "
                                                    "folder)")
    code, line = _cli(_watch(folder, "--run", str(folder / "step-1" / "run")), capsys)
    assert code == 1 and "field 'run': cannot be a folder (Symlink loop from" in line


def test_a_run_folder_inside_a_checkpoint_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _checkpoint(tmp_path / "d" / "step-5")
    code, line = _cli(_watch(Path("d"), "--run", "d/step-5"), capsys)  # was: "no complete checkpoint" (it skipped it)
    assert code == 1 and line.startswith("flasheval: error: d/step-5: field '--run': is inside checkpoint step-5 of "
                                         "the watched folder")
    assert sorted(os.listdir(tmp_path / "d" / "step-5")) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_a_run_folder_the_watcher_cannot_write_or_lock_stops_it_in_one_line(tmp_path, capsys):
    _checkpoint(tmp_path / "ckpts" / "step-5")
    (tmp_path / "file").write_text("x")
    code, line = _cli(_watch(tmp_path / "ckpts", "--run", str(tmp_path / "file" / "run")), capsys)
    assert code == 1 and line.endswith(f"field '--run': {tmp_path / 'file'} is a file, not a folder; choose another "
                                       "folder")  # was: "failed.json: Not a directory"
    (tmp_path / "run" / "folder.lock").mkdir(parents=True)  # names no file of a checkpoint: a watcher stops on it
    code, line = _cli(["place", "--model", f"replay:{MODEL}", "--reference", "helm_lite", "--run", str(tmp_path / "run"),
                       "--step", "1"], capsys)  # was: IsADirectoryError, recorded against every checkpoint watched
    assert code == 1 and line == (f"flasheval: error: {tmp_path / 'run' / 'folder.lock'}: field 'run': cannot take the "
                                  "run folder's lock (Is a directory); remove it if no placement is running")


def test_a_checkpoint_without_its_tokenizer_waits_for_it_and_its_loader_says_so_whole(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import transformers

    from flasheval.engine.hf.loading import load_tokenizer, plan_hf_load
    from flasheval.runs.checkpoint_scan import find_checkpoints
    from tests.engine.conftest import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    model.save_pretrained(tmp_path / "step-3")  # the weights saved, the tokenizer not (yet)
    (found,) = find_checkpoints(tmp_path)
    assert found.waiting_for.startswith("its tokenizer (tokenizer.json, tokenizer.model, vocab.json")
    assert _line(lambda: load_tokenizer(plan_hf_load(str(tmp_path / "step-3"), device="cpu"))).endswith(
        "it holds no tokenizer (none of tokenizer.json, tokenizer.model, vocab.json, vocab.txt, *.model, *.tiktoken); "
        "save the model's tokenizer beside its weights (tokenizer.save_pretrained(folder))")
    tokenizer.save_pretrained(tmp_path / "step-3")
    assert find_checkpoints(tmp_path)[0].complete

    def refuse(*args, **kwargs):  # transformers' message runs over lines: "... from one of:\n(1) ..."
        raise ValueError("Couldn't instantiate the backend tokenizer from one of:\n(1) a `tokenizers` file,\n(2) ...")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    assert _line(lambda: load_tokenizer(plan_hf_load(str(tmp_path / "step-3"), device="cpu"))).endswith(
        "ValueError: Couldn't instantiate the backend tokenizer from one of: (1) a `tokenizers` file, (2) ...")


def test_a_checkpoint_vanishing_under_a_relative_watch_is_never_read_as_a_hub_id(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from flasheval.engine.hf.loading import plan_hf_load
    from flasheval.errors import BackendError
    from flasheval.runs.checkpoint_scan import find_checkpoints

    monkeypatch.chdir(tmp_path)
    _checkpoint(tmp_path / "d" / "step-3")
    (found,) = find_checkpoints("d")
    assert found.spec == f"hf:{tmp_path / 'd' / 'step-3'}"  # absolute though the watched folder is relative
    (tmp_path / "d" / "step-3" / "config.json").unlink()
    (tmp_path / "d" / "step-3" / "model.safetensors").unlink()
    (tmp_path / "d" / "step-3" / "tokenizer.json").unlink()
    (tmp_path / "d" / "step-3").rmdir()
    start = time.perf_counter()
    with pytest.raises(BackendError, match="does not exist"):  # a local path: no hub retries (they took 28 s)
        plan_hf_load(found.spec.removeprefix("hf:"), device="cpu")
    assert time.perf_counter() - start < 5


def test_watch_checks_distributed_while_no_checkpoint_exists(tmp_path):
    assert _line(lambda: flasheval.watch(tmp_path, reference="helm_lite", once=True, distributed="bogus")) == (
        "field 'distributed': unknown value 'bogus' (allowed: main, all)")


# --- cause: a run folder's lock held by a process that never lets go ----------------------------------------------

HOLDER = ("import fcntl, os, sys, time\n"
          "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX)\n"
          "print('held', flush=True)\n"
          "time.sleep(120)\n")
"""What ``flock r/folder.lock sleep 300 &`` does, without util-linux: a process that holds the lock and sleeps."""


@pytest.fixture
def holder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(run / "folder.lock")], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        yield run, process
    finally:
        process.kill()
        process.wait()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the holder is read from /proc/locks (Linux)")
def test_a_lock_held_by_another_process_is_waited_for_a_bounded_time_and_its_holder_named(holder, capsys):
    from flasheval.runs.folder import hold_run

    run, process = holder
    start = time.perf_counter()
    line = _line(lambda: hold_run(run, poll_seconds=0.05, other_wait_seconds=0.5))
    assert time.perf_counter() - start < 5
    assert line.startswith(f"run folder {run}: process {process.pid} on {socket.gethostname()} (")
    assert "holds its lock (folder.lock) and has held it for over " in line
    assert line.endswith(" s and is no flasheval placement; place again once it is done, or into another run folder")
    os.kill(process.pid, signal.SIGSTOP)  # stopped: refused at once, whatever the bound
    start = time.perf_counter()
    line = _line(lambda: hold_run(run, poll_seconds=0.05))
    assert "is stopped (continue it with kill -CONT, or end it)" in line and time.perf_counter() - start < 5
    code, line = _cli(["place", "--model", f"replay:{MODEL}", "--reference", "helm_lite", "--run", str(run), "--step",
                       "3"], capsys)  # the command line: was a note, then a wait for ever
    assert code == 1 and f"process {process.pid} on" in line and "is stopped" in line


def test_a_placement_writes_its_pid_into_the_lock_it_holds(tmp_path):
    from flasheval.runs.folder import hold_run

    fd = hold_run(tmp_path / "run")
    try:
        assert (tmp_path / "run" / "folder.lock").read_text() == f"pid {os.getpid()} on {socket.gethostname()}\n"
    finally:
        os.close(fd)


# --- cause: the launcher's environment was read piecemeal and trusted ----------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("environ", "message"), [
    ({"WORLD_SIZE": "-3"}, "environment variable WORLD_SIZE: must be a whole number >= 1, got '-3'"),
    ({"WORLD_SIZE": "2"}, "environment variables RANK, MASTER_ADDR, MASTER_PORT: not all set, but WORLD_SIZE=2 says a "
                          "launcher started several processes"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "environment variable RANK: must be a whole number from 0 to 1, got '5'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "99999"},
     "environment variable MASTER_PORT: must be a whole number from 1 to 65535, got '99999'"),
    ({"FLASHEVAL_COLLECTIVE_TIMEOUT": "inf", "WORLD_SIZE": "2"},
     "environment variable FLASHEVAL_COLLECTIVE_TIMEOUT: must be at most 604800 seconds (a week), got 'inf'"),
    ({"FLASHEVAL_COLLECTIVE_TIMEOUT": "1e300", "WORLD_SIZE": "2"},
     "environment variable FLASHEVAL_COLLECTIVE_TIMEOUT: must be at most 604800 seconds (a week), got '1e300'"),
    ({"FLASHEVAL_COLLECTIVE_TIMEOUT": "nan", "WORLD_SIZE": "2"},
     "environment variable FLASHEVAL_COLLECTIVE_TIMEOUT: must be a number of seconds > 0, got 'nan'"),
])
def test_the_launcher_environment_is_checked_once_in_one_line(monkeypatch, environ, message):
    from flasheval.cli.launch import launch

    dist = pytest.importorskip("torch.distributed")
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "FLASHEVAL_COLLECTIVE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    def enter():
        with launch():
            pass

    assert _line(enter).startswith(message) and not dist.is_initialized()


def test_a_stray_launcher_environment_waits_a_bounded_time_for_peers_that_never_come(monkeypatch, capsys):
    dist = pytest.importorskip("torch.distributed")
    port = _free_port()
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "FLASHEVAL_COLLECTIVE_TIMEOUT": "1"}.items():
        monkeypatch.setenv(name, value)
    start = time.perf_counter()
    code, line = _cli(["place", "--model", f"replay:{MODEL}", "--reference", "helm_lite", "--output", "/nonexistent"],
                      capsys)
    assert time.perf_counter() - start < 20 and code == 1 and not dist.is_initialized()
    assert line.startswith(f"flasheval: error: the launcher's environment (WORLD_SIZE=2, RANK=0, MASTER_ADDR:"
                           f"MASTER_PORT=127.0.0.1:{port}) names 2 processes, but they did not all meet within 1 s (")
    assert line.endswith("a stray launcher environment? Unset WORLD_SIZE to run on this process alone, or start every "
                         "process (torchrun, accelerate launch)")


# --- cause: a sharded model's "main" placement, rank 0 alone, in a real 2-process group ----------------------------

@pytest.mark.slow  # two processes importing torch and transformers: ~10 s on 2 cores
def test_rank_zero_alone_placing_an_fsdp2_model_with_main_is_refused_up_front(tmp_path):
    pytest.importorskip("transformers")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "_sharded_main_worker.py"), str(tmp_path)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((tmp_path / "rank0.json").read_text())
    assert got["error"] == ("field 'distributed': 'main' places on process zero alone, but the model is sharded (FSDP "
                            "or DeepSpeed ZeRO-3: each forward pass runs on every process together): give "
                            "distributed=\"all\" (every process places, in lockstep)")
    assert got["seconds"] < 10 and not got["run_exists"]  # refused before the reference is read: no wait, no folder


# --- cause: names a command makes (a default folder) and notes said before a refusal --------------------------------

def test_a_300_character_model_id_gets_a_default_folder_that_fits(tmp_path, monkeypatch, capsys):
    import numpy as np
    import pandas as pd

    from flasheval.reference import write_reference

    long_id = "org/" + "a" * 296
    rng = np.random.default_rng(0)
    rows = [{"model": m, "dataset": d, "example_id": str(e), "score": float(rng.random() < 0.2 + 0.2 * i)}
            for d in "ab" for i, m in enumerate([long_id, "m1", "m2", "m3"]) for e in range(20)]
    write_reference(tmp_path / "ref", pd.DataFrame(rows), name="long", source="test", licence="none",
                    metric="per-example 0/1")
    monkeypatch.chdir(tmp_path)
    assert _cli(["place", "--model", f"replay:{long_id}", "--reference", str(tmp_path / "ref")], capsys) == (0, "")
    (folder,) = (tmp_path / "runs").iterdir()  # was: "field '--output': ... (File name too long)", --output not given
    assert len(folder.name) <= 255 and (folder / "place.json").is_file()


def test_a_refused_sweep_says_nothing_of_replacing_its_record(tmp_path, caplog):
    out = tmp_path / "sweep"
    options = dict(reference="helm_lite", budget=Budget(max_examples=2000), output=out)
    flasheval.sweep([f"replay:{MODEL}", "replay:01-ai/yi-6b"], **options)
    with caplog.at_level(logging.WARNING):
        refused = _line(lambda: flasheval.sweep([f"replay:{MODEL}", "replay:01-ai/yi-6b"], aggregate="win_rate",
                                                **options))
    assert "holds a sweep with other settings" in refused and "replacing the earlier record" not in caplog.text
    with caplog.at_level(logging.WARNING):
        flasheval.sweep([f"replay:{MODEL}", "replay:01-ai/yi-6b"], **options)
    assert "replacing the earlier record" in caplog.text  # said when it does replace it
