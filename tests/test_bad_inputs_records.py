"""Bad input on the records side (issue 47, "inputs A"): run folders, their records, stores, references and the
shared checks. One table per cause; each row is a case a hostile user tried, and each is ONE line (``flasheval:
error: ...`` on the command line, one :class:`~flasheval.errors.InputError` from the API) naming the file and
field, with nothing lost: a refused first placement leaves its run folder as it was, so a correct call after it
succeeds. The training side (callbacks, the watcher's checkpoints, locks, the launcher's environment) is in the
tests of those modules.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flasheval
from flasheval.cli import main
from flasheval.engine.store.shards import _checksum, decode_record
from flasheval.errors import InputError
from flasheval.placement import calibration, calibration_cache
from flasheval.reference import write_reference

A, B = "replay:meta/llama-3-70b", "replay:meta/llama-3-8b"
ONE_LINE = re.compile(r"^flasheval: error: [^\n]+\n$")


def _cli(argv: list[str], capsys) -> str:
    """Run the command line in-process; the one error line it printed (asserted to be exactly one)."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 1 and ONE_LINE.match(err), err
    return err


def _long(n_models=4, datasets=(("a", 30), ("b", 30)), *, ids=None, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = ids or [f"m{m}" for m in range(n_models)]
    return pd.DataFrame([{"model": mid, "dataset": d, "example_id": str(e), "score": float(rng.random() < .2 + .2 * m)}
                         for d, n in datasets for m, mid in enumerate(ids) for e in range(n)])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run of two checkpoints on helm_lite: steps 1 (model A) and 2 (model B)."""
    run = tmp_path_factory.mktemp("records") / "run"
    flasheval.place_checkpoint(A, run=run, step=1, reference="helm_lite")
    flasheval.place_checkpoint(B, run=run, step=2)
    return run


@pytest.fixture(scope="module")
def small_ref(tmp_path_factory) -> Path:
    """A small reference on disk (six models, two datasets of 40 examples): sweeps over it take a fraction of a second."""
    out = tmp_path_factory.mktemp("small") / "small"
    write_reference(out, _long(6, datasets=(("a", 40), ("b", 40))), name="small", source="t", licence="none",
                    metric="0/1")
    return out


def _sweep(reference: Path, output: Path):
    return flasheval.sweep(["replay:m2", "replay:m3"], reference, output=output, plan="flash_helm",
                           budget=flasheval.Budget(max_examples=100))


# --- lost work: a refused first placement writes nothing, so the correct call after it is not refused -----------

LOST_API = [({"aggregate": "meen"}, "--aggregate"), ({"seed": True}, "--seed"), ({"seed": 1.5}, "--seed"),
            ({"seed": -1}, "--seed"), ({"simultaneous": 10**30}, "simultaneous"), ({"bogus": 3}, "bogus"),
            ({"step": 10**20}, "step")]


@pytest.mark.parametrize(("options", "field"), LOST_API, ids=[f"{f}={o}"[:40] for o, f in LOST_API])
def test_a_refused_first_placement_leaves_the_run_folder_for_the_correct_one(tmp_path, options, field):
    run = tmp_path / "r"
    with pytest.raises(InputError, match=f"field '{re.escape(field)}'") as caught:
        flasheval.place_checkpoint(A, run=run, **{"step": 1, **options}, reference="helm_lite")
    assert "\n" not in str(caught.value) and not run.exists()  # nothing written: the correct call is a first one


@pytest.mark.parametrize(("argv", "field"), [
    (["place", "--run", "{run}", "--step", "1", "--seed", "-1", "--reference", "helm_lite"], "--seed"),
    (["watch", "{dir}", "--simultaneous", str(10**21), "--once", "--reference", "helm_lite", "--run", "{run}"],
     "simultaneous"),
    (["place", "--run", "{run}", "--step", str(10**20), "--reference", "helm_lite"], "step"),
], ids=["place-seed-1", "watch-simultaneous-1e21", "place-step-1e20"])
def test_a_refused_command_leaves_the_run_folder_for_the_correct_one(tmp_path, capsys, argv, field):
    run = tmp_path / "r"
    err = _cli([a.format(run=run, dir=tmp_path) for a in argv], capsys)
    assert f"field '{field}'" in err and not run.exists()


def test_the_correct_placement_after_a_refused_one_is_placed(tmp_path, capsys):
    run = tmp_path / "r"
    _cli(["place", "--run", run, "--step", "1", "--seed", "-1", "--reference", "helm_lite"], capsys)
    assert main(["place", "--run", str(run), "--step", "1", "--reference", "helm_lite", "-q"]) == 0
    assert flasheval.read_run(run).settings["seed"] == 0


def test_argparse_refuses_a_float_where_a_count_is_asked_in_one_line(tmp_path, capsys):
    for argv in (["watch", str(tmp_path), "--simultaneous", "1e21", "--reference", "helm_lite"],
                 ["place", "--run", str(tmp_path / "r"), "--step", "1e20"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        err = capsys.readouterr().err
        assert caught.value.code == 2 and "invalid int value" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


# --- ranges and relations in the record schemas: `flasheval report` refuses the edited record in one line ------------

def _set(path: str, value):
    def edit(payload):
        *parents, key = path.split(".")
        for part in parents:
            payload = payload[int(part)] if part.isdigit() else payload[part]
        payload[key] = value
    return edit


PLACE, RUN = "checkpoints/step-1/place.json", "run.json"
RANGES = [
    ("rank-0", PLACE, _set("rank", 0), r"field 'payload\.rank': rank 0 is outside interval"),
    ("rank-99", PLACE, _set("rank", 99), r"field 'payload\.rank': rank 99 is outside interval"),
    ("interval-2-2", PLACE, _set("interval", [2, 2]), r"field 'payload\.rank': rank \d+ is outside interval \[2, 2\]"),
    ("interval-past-n", PLACE, _set("interval", [8, 99]), r"field 'payload\.interval': interval \[8, 99\] reaches past"),
    ("n-examples--5", PLACE, _set("compute.n_examples", -5), r"'payload\.compute\.n_examples': -5 is not an integer >= 0"),
    ("level-2", PLACE, _set("confidence_level", 2), r"'payload\.confidence_level': 2 is not a finite number in \[0\.5"),
    ("n-models--1", PLACE, _set("n_models", -1), r"'payload\.n_models': -1 is not an integer >= 1"),
    ("full-examples-0", PLACE, _set("compute.full_examples", 0), r"'payload\.compute\.full_examples': 0 is not"),
    ("more-than-full", PLACE, _set("compute.n_examples", 10**9), r"'payload\.compute\.n_examples': \d+ examples scored"),
    ("tiers-empty", RUN, _set("tiers", []), r"'payload\.tiers': \[\] is not a non-empty list"),
    ("simultaneous-0", RUN, _set("settings.simultaneous", 0), r"'payload\.settings\.simultaneous': 0 is not an integ"),
    ("simultaneous-str", RUN, _set("settings.simultaneous", "3"), r"'payload\.settings\.simultaneous': '3' is not"),
    ("simultaneous-huge", RUN, _set("settings.simultaneous", 10**30), r"'payload\.settings\.simultaneous': \d+ plan"),
    ("level-7", RUN, _set("settings.confidence_level", 7), r"'payload\.settings\.confidence_level': 7 is not"),
    ("tier-first--5", RUN, _set("tiers.0.first", -5), r"'payload\.tiers\[0\]\.first': -5 is not an integer >= 1"),
    ("tier-last-before-first", RUN, _set("tiers.1.last", 1), r"'payload\.tiers\[1\]\.last': last 1 is before first"),
    ("no-reference-source", RUN, lambda p: p.pop("reference_source"), r"'payload\.reference_source': missing field"),
]


@pytest.mark.parametrize(("file", "edit", "expected"), [r[1:] for r in RANGES], ids=[r[0] for r in RANGES])
def test_a_record_out_of_range_is_refused_by_report_in_one_line_naming_file_and_field(run_dir, tmp_path, capsys, file,
                                                                                       edit, expected):
    run = shutil.copytree(run_dir, tmp_path / "run")
    record = json.loads((run / file).read_text())
    edit(record["payload"])
    (run / file).write_text(json.dumps(record))
    err = _cli(["report", run], capsys)
    assert re.search(re.escape(str(run / file)) + ": field " + expected.removeprefix("field "), err), err


def test_a_step_past_a_64_bit_integer_is_refused_by_report_and_by_place(run_dir, tmp_path, capsys):
    run = shutil.copytree(run_dir, tmp_path / "run")
    huge = run / "checkpoints" / f"step-{10**20}"
    shutil.copytree(run / "checkpoints" / "step-1", huge)
    assert f"{huge}: field 'step': step {10**20} is past" in _cli(["report", run], capsys)
    with pytest.raises(InputError, match=r"field 'step': must be at most 9223372036854775807"):
        flasheval.place_checkpoint(A, run=run, step=2**63)
    assert flasheval.place_checkpoint(A, run=tmp_path / "big", step=2**63 - 1, reference="helm_lite").rank


# --- digests where names are compared: another reference or plan of the same name is another pool ------------------

def test_a_run_compares_its_reference_by_content_and_its_plan_whole(tmp_path):
    for folder, seed in (("one", 0), ("two", 1)):
        write_reference(tmp_path / folder / "mine", _long(6, datasets=(("a", 40), ("b", 40)), seed=seed), name="mine",
                        source="t", licence="none", metric="0/1")
    run = tmp_path / "run"
    flasheval.place_checkpoint("replay:m2", run=run, step=1, reference=tmp_path / "one" / "mine", plan="flash_helm")
    before = (run / "run.json").read_bytes()
    with pytest.raises(InputError, match=r"run\.json: field 'reference': .*reference 'mine' \(content digest [0-9a-f]{16}"
                                         r"\), this one on a reference of that name with other models or scores"):
        flasheval.place_checkpoint("replay:m3", run=run, step=2, reference=tmp_path / "two" / "mine")
    assert flasheval.place_checkpoint("replay:m3", run=run, step=2).record_path.is_file()  # the run's own: accepted
    text = (Path(flasheval.__file__).parents[1] / "tiers" / "flash_helm.yaml").read_text()
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "flash_helm.yaml").write_text(re.sub(r"(?m)^stages: .*$", "stages: [20, 50, 200, 500, 1000, all]", text))
    with pytest.raises(InputError, match=r"field 'plan': .*another plan of that name"):
        flasheval.place_checkpoint("replay:m4", run=run, step=3, plan=tmp_path / "plans" / "flash_helm.yaml")
    assert (run / "run.json").read_bytes() == before and not (run / "checkpoints" / "step-3").exists()


def test_the_run_reference_that_cannot_be_loaded_is_named_as_run_json_field(run_dir, tmp_path):
    run = shutil.copytree(run_dir, tmp_path / "run")
    record = json.loads((run / "run.json").read_text())
    record["payload"]["reference_source"] = str(tmp_path / "gone")
    (run / "run.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match=r"run\.json: field 'payload\.reference_source': the run's reference .*gone"):
        flasheval.place_checkpoint(A, run=run, step=3)


# --- bounds from code: a calibration entry is checked against Pocock's constants the code computes -----------------

def test_a_calibration_entry_edited_on_disk_is_recomputed_not_trusted(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FLASHEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    values, se, fits = np.array([0.1, 0.4, 0.45]), np.array([1.0, 0.5, 0.25]), np.ones((5, 5), dtype=bool)
    first = calibration.calibrated_constant(values, se, fits, 0.95, n_paths=2000)
    (entry,) = (tmp_path / "cache" / "calibration").rglob("*.json")
    edits = ({"constant": 0.01, "pocock": 0.02, "lower_bound": 0.0},  # the issue's: bounds from the same file
             {"constant": first.lower_bound + 0.01},  # within the code's bounds, off the search's grid
             {"constant": first.lower_bound - 0.025})  # on the grid, below the code's lower bound
    for edit in edits:
        entry.write_text(json.dumps({**json.loads(entry.read_text()), **edit}))
        monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            again = calibration.calibrated_constant(values, se, fits, 0.95, n_paths=2000)
        assert again == first and "unusable cached calibration" in caplog.text and str(entry) in caplog.text
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    monkeypatch.setattr(calibration, "_calibrate", lambda *a, **k: pytest.fail("a valid entry is used as it is"))
    assert calibration.calibrated_constant(values, se, fits, 0.95, n_paths=2000) == first


def test_check_entry_takes_its_bounds_from_the_caller_never_from_the_entry():
    entry = {"key": "k", "version": calibration_cache.CALIBRATION_VERSION, "constant": 0.01, "pocock": 0.02,
             "lower_bound": 0.0, "worst_miss": 0.01}
    with pytest.raises(ValueError, match="field 'pocock': 0.02 is not the code's 2.4"):
        calibration_cache.check_entry(entry, "k", pocock=2.4, lower_bound=1.96, step=0.025)
    ok = {**entry, "pocock": 2.4, "lower_bound": 1.96}
    for constant in (1.96, 1.96 + 0.025 * 7, 2.4):
        assert calibration_cache.check_entry({**ok, "constant": constant}, "k", pocock=2.4, lower_bound=1.96,
                                             step=0.025)["constant"] == constant
    with pytest.raises(ValueError, match="field 'constant'"):
        calibration_cache.check_entry({**ok, "constant": 2.425}, "k", pocock=2.4, lower_bound=1.96, step=0.025)


# --- rank intervals refuse a dataset too small for the bootstrap ----------------------------------------------------

@pytest.mark.parametrize(("per_dataset", "refused"), [(1, True), (9, True), (10, False)])
def test_rank_intervals_need_ten_examples_per_dataset(tmp_path, capsys, per_dataset, refused):
    ref = tmp_path / "refs" / "small"
    write_reference(ref, _long(4, datasets=(("a", per_dataset), ("b", 30))), name="small", source="t", licence="none",
                    metric="0/1")
    argv = ["reference", "show", ref, "--intervals", "--n-resamples", "200"]
    if refused:
        err = _cli(argv, capsys)
        assert f"{ref}: field 'examples': dataset 'a' has {per_dataset} example" in err and "at least 10" in err
    else:
        assert main([str(a) for a in argv]) == 0 and "[" in capsys.readouterr().out


# --- store shards: a line whose checksum matches but whose result is not one is a corrupt line -----------------------

def _line(result: dict, kind: str = "score") -> bytes:
    record = {"fp": "sweep-scores:m", "key": "k", "kind": kind, "result": result}
    record["crc"] = _checksum(record)
    return json.dumps(record).encode()


GOOD_SCORE = {"task_name": "t", "example_id": "1", "score": 1.0, "n_tokens": None}


@pytest.mark.parametrize(("result", "valid"), [
    (GOOD_SCORE, True), ({**GOOD_SCORE, "score": 0.5}, True), ({**GOOD_SCORE, "score": 1}, True),
    ({**GOOD_SCORE, "score": None}, False), ({**GOOD_SCORE, "score": "x"}, False), ({**GOOD_SCORE, "score": True}, False),
    ({**GOOD_SCORE, "n_tokens": 2.5}, False), ({k: v for k, v in GOOD_SCORE.items() if k != "score"}, False),
    ({**GOOD_SCORE, "extra": 1}, False), ([1, 2], False), ({**GOOD_SCORE, "task_name": 3}, False),
    ({**GOOD_SCORE, "score": float("nan")}, False), ({**GOOD_SCORE, "score": float("inf")}, False),
    ({**GOOD_SCORE, "n_tokens": -5}, False), ({**GOOD_SCORE, "n_tokens": 7}, True),
], ids=["good", "half", "int", "null", "x", "bool", "float-tokens", "missing", "extra", "list", "int-name", "nan", "inf",
        "negative-tokens", "tokens"])
def test_a_shard_record_with_a_valid_checksum_must_hold_a_result_of_its_kind(result, valid):
    assert (decode_record(_line(result)) is not None) == valid


def test_a_sweep_skips_a_null_score_with_a_valid_checksum_and_gives_the_same_result(small_ref, tmp_path, caplog):
    first = _sweep(small_ref, tmp_path / "sw")
    shard = sorted((tmp_path / "sw" / "shards").glob("*.jsonl"))[0]
    lines = shard.read_bytes().splitlines()
    record = json.loads(lines[0])
    lines[0] = _line({**record["result"], "score": None})
    shard.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING):
        again = _sweep(small_ref, tmp_path / "sw")
    assert f"{shard}:1: corrupt record skipped" in caplog.text
    assert [(c.rank, c.interval) for c in again.result.checkpoints] == [(c.rank, c.interval)
                                                                       for c in first.result.checkpoints]


# --- run folder kinds: a run folder shares with no sweep or place output -----------------------------------------------

def test_a_run_a_sweep_and_a_placement_output_never_share_a_folder(run_dir, small_ref, tmp_path, capsys):
    _sweep(small_ref, tmp_path / "sweep")
    assert main(["place", "--output", str(tmp_path / "placed"), "--reference", str(small_ref), "--model", "replay:m2",
                 "--tiers", "flash_helm", "-q"]) == 0
    capsys.readouterr()
    rows = [(["place", "--run", tmp_path / "sweep", "--step", "1", "--reference", "helm_lite"], "sweep",
             "field 'run': is a sweep's folder (flasheval sweep): it holds sweep-config.json"),
            (["place", "--run", tmp_path / "placed", "--step", "1", "--reference", "helm_lite"], "placed",
             "field 'run': is a placement's output folder (place --output): it holds place.json"),
            (["place", "--output", run_dir], None, "field '--output': is a training run's folder"),
            (["sweep", "--models", "replay:m2", "replay:m3", "--reference", small_ref, "--tiers", "flash_helm",
              "--budget-examples", "100", "--output", run_dir], None, "field '--output': is a training run's folder"),
            (["watch", tmp_path, "--run", tmp_path / "sweep", "--once", "--reference", "helm_lite"], "sweep",
             "field 'run': is a sweep's folder")]
    for argv, folder, expected in rows:
        before = sorted(p.name for p in (tmp_path / folder if folder else run_dir).iterdir())
        assert expected in _cli(argv, capsys)
        assert sorted(p.name for p in (tmp_path / folder if folder else run_dir).iterdir()) == before


# --- empty and wrong-typed run folders ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["", "  ", None, 5, b"run"], ids=["empty", "spaces", "None", "int", "bytes"])
def test_read_run_and_place_checkpoint_refuse_a_run_that_is_no_folder_name(value):
    for call in (lambda: flasheval.read_run(value),
                 lambda: flasheval.place_checkpoint(A, run=value, step=1, reference="helm_lite")):
        with pytest.raises(InputError, match=r"^field 'run': expected a run folder"):
            call()


def test_an_empty_path_is_the_working_folder_refused_as_a_run_to_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for run in (Path(""), ".", "./", tmp_path, f"{tmp_path}/sub/.."):
        with pytest.raises(InputError, match=r"field 'run': .* is the working folder itself \(an empty Path\(''\)"):
            flasheval.place_checkpoint(A, run=run, step=1, reference="helm_lite")
    with pytest.raises(InputError, match=r"^\.: not a run folder"):
        flasheval.read_run(Path(""))
    assert list(tmp_path.iterdir()) == []


# --- names: refused at import when they cannot be shown; a look-alike is shown escaped -----------------------------

@pytest.mark.parametrize("bad", ["m\n1", "", " m1", "m1\t", "m\u200b1", "m\x001"],
                         ids=["newline", "empty", "leading-space", "tab", "zero-width", "nul"])
def test_a_model_name_that_cannot_be_shown_is_refused_at_import(tmp_path, capsys, bad):
    source = tmp_path / "in.parquet"
    _long(ids=["m0", bad, "m2", "m3"]).to_parquet(source)
    err = _cli(["reference", "import", "--format", "long-parquet", source, "--name", "new", "--output-dir",
                tmp_path / "refs"], capsys)
    assert f"field 'model': model name {bad!r} is empty" in err and not (tmp_path / "refs" / "new").exists()


def test_a_look_alike_model_name_is_shown_escaped_where_names_are_listed(capsys):
    from flasheval.analysis.simulation import synthetic_reference
    from flasheval.cli.reference import format_intervals

    ref = synthetic_reference(4, [40], rng=0)
    ref = replace(ref, model_ids=(*ref.model_ids[:3], "m\u200b2"))
    with pytest.raises(InputError) as caught:
        flasheval.place("replay:m2", ref)
    assert "'m\\u200b2'" in str(caught.value) and "\u200b" not in str(caught.value)
    shown = "\n".join(format_intervals(flasheval.rank_intervals(ref, n_resamples=200)))
    assert "'m\\u200b2'" in shown and "\u200b" not in shown


def test_reference_show_names_its_own_argument(tmp_path, capsys):
    write_reference(tmp_path / "mine", _long(), name="mine", source="t", licence="none", metric="0/1")
    assert "field 'NAME': unknown reference 'nosuchref'" in _cli(["reference", "show", "nosuchref"], capsys)
    err = _cli(["reference", "show", tmp_path / "mine" / "manifest.json", "--intervals"], capsys)
    assert f"manifest.json: field 'NAME': a file, not a reference folder; name the folder that holds manifest.json " \
           f"({tmp_path / 'mine'})" in err and "--reference" not in err


# --- numpy scalars: accepted where their Python kind is; another kind refused naming its type --------------------

def test_numpy_scalars_of_the_right_kind_are_accepted_as_their_python_values():
    plain = flasheval.rank_intervals("helm_lite", n_resamples=200, confidence_level=0.9, seed=3)
    numpy = flasheval.rank_intervals("helm_lite", n_resamples=np.int64(200), confidence_level=np.float64(0.9),
                                     seed=np.int32(3))
    assert [m.interval for m in numpy.models] == [m.interval for m in plain.models]
    assert type(numpy.n_resamples) is int and numpy.seed == 3
    level = flasheval.rank_intervals("helm_lite", n_resamples=200, confidence_level=np.float32(0.9))
    assert level.confidence_level == float(np.float32(0.9)) and type(level.confidence_level) is float


def test_numpy_integers_reach_records_and_hashes_as_python_values(small_ref, tmp_path):
    """A check that accepts np.int64 must not let it reach a JSON record or a stable hash raw (it crashed both)."""
    budget = flasheval.Budget(max_examples=np.int64(10**6))
    assert type(budget.max_examples) is int and budget == flasheval.Budget(max_examples=10**6)
    plain = flasheval.place("replay:m2", small_ref, plan="flash_helm", seed=3, output=tmp_path / "a")
    numpy = flasheval.place("replay:m2", small_ref, plan="flash_helm", seed=np.int64(3), budget=budget,
                            output=tmp_path / "b")
    assert (numpy.rank, numpy.interval) == (plain.rank, plain.interval)
    assert json.loads(numpy.record_path.read_text())["payload"]["seed"] == 3
    flasheval.sweep(["replay:m2", "replay:m3"], small_ref, output=tmp_path / "s", plan="flash_helm", seed=np.int64(2),
                    budget=flasheval.Budget(max_examples=np.int64(100)))
    assert json.loads((tmp_path / "s" / "sweep-config.json").read_text())["seed"] == 2


@pytest.mark.parametrize(("options", "expected"), [
    ({"n_resamples": 500.0}, "field '--n-resamples': must be an integer from 100 to 100000 (the ceiling keeps the "
                             "bootstrap's memory sane), got 500.0 (a float)"),
    ({"n_resamples": np.float64(500)}, "got 500.0 (a float64)"),
    ({"seed": np.bool_(True)}, "field '--seed': must be an integer >= 0 or a numpy Generator, got True (a bool)"),
    ({"confidence_level": "0.9"}, "field '--level': must be a number in [0.5, 1), got '0.9' (a str)"),
    ({"n_resamples": np.int64(50)}, "from 100 to 100000 (the ceiling keeps the bootstrap's memory sane), got 50"),
])
def test_numpy_scalars_of_another_kind_are_refused_naming_the_type(options, expected):
    with pytest.raises(InputError) as caught:
        flasheval.rank_intervals("helm_lite", **options)
    assert str(caught.value).endswith(expected)


# --- a full disk names the file ------------------------------------------------------------------------------------

def test_no_space_left_names_the_file_and_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    import flasheval.atomic as atomic

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    out = tmp_path / "out"
    err = _cli(["place", "--output", out, "-q"], capsys)
    assert err == f"flasheval: error: {out / 'place.json'}: No space left on device (-vv shows where)\n"
    assert list(out.iterdir()) == []


def test_no_space_left_while_appending_to_a_store_names_the_shard(tmp_path, monkeypatch):
    from flasheval.engine.store import journal

    monkeypatch.setattr(journal.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
    with pytest.raises(OSError) as caught:
        journal.append_lines(tmp_path / "shard.jsonl", ["{}"])
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "shard.jsonl")
