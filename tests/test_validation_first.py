"""Every argument checked before any I/O: a refused ``place_checkpoint`` or ``watch`` leaves the run folder as it was.

A bad aggregate, seed, budget or keyword used to reach ``place()`` only after ``run.json`` was written: the bad
value became the run's setting and every later correct call was refused. Replayed reference models stand in for
checkpoints (seconds per placement), as in ``tests/runs/test_run_folder.py``; the watcher is handed them by a stand-in
for its folder scan.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import numpy as np
import pytest

import flasheval
from flasheval.api.resolve import PLACE_KEYWORDS
from flasheval.runs.checkpoint_scan import FoundCheckpoint

A = "replay:meta/llama-3-70b"

BAD = [  # (keywords, the field the one line names)
    ({"aggregate": "bogus"}, "--aggregate"),
    ({"seed": -1}, "--seed"),
    ({"seed": 1.5}, "--seed"),
    ({"budget": flasheval.Budget(max_examples=1)}, "--max-examples"),  # below the plan's first look
    ({"budget": 100}, "budget"),
    ({"sede": 1}, "sede"),  # a keyword place() does not take: was a TypeError after run.json was written
    ({"missing": "none"}, "--missing"),
]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} \
        if folder.exists() else {}


def _refused_in_one_line(call, field: str) -> None:
    with pytest.raises(flasheval.InputError) as caught:
        call()
    assert caught.value.field == field, str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("bad", "field"), BAD)
def test_a_refused_first_placement_writes_nothing_and_a_correct_one_then_places(tmp_path, bad, field):
    run = tmp_path / "my-run"
    _refused_in_one_line(lambda: flasheval.place_checkpoint(A, run=run, step=1, reference="helm_lite", **bad), field)
    assert not run.exists()  # no run.json, no lock, no folder
    placed = flasheval.place_checkpoint(A, run=run, step=1, reference="helm_lite")
    assert placed.placement.rank is not None
    settings = json.loads((run / "run.json").read_text())["payload"]["settings"]
    assert settings["aggregate"] is None and settings["seed"] == 0 and settings["missing"] == "complete-models"


@pytest.mark.parametrize(("bad", "field"), BAD)
def test_a_refused_later_placement_leaves_the_run_folder_byte_for_byte(tmp_path, bad, field):
    run = tmp_path / "my-run"
    flasheval.place_checkpoint(A, run=run, step=1, reference="helm_lite")
    before = _files(run)
    _refused_in_one_line(lambda: flasheval.place_checkpoint(A, run=run, step=2, **bad), field)
    assert _files(run) == before
    flasheval.place_checkpoint(A, run=run, step=2)
    assert [c.step for c in flasheval.read_run(run).checkpoints] == [1, 2]


def test_place_keywords_are_place_s_signature():
    assert set(PLACE_KEYWORDS) == set(inspect.signature(flasheval.place).parameters) - {"model"}


def test_place_refuses_before_it_writes(tmp_path):
    out = tmp_path / "out"
    for bad, field in BAD:
        if field == "sede":  # place's own signature refuses it (TypeError, as any Python function)
            continue
        _refused_in_one_line(lambda: flasheval.place(A, "helm_lite", output=out, **bad), field)
        assert not out.exists()


@pytest.fixture
def replayed_checkpoints(monkeypatch, tmp_path):
    """A watched folder whose scan finds step 10, a replayed model (the watcher's scan is the stand-in)."""
    folder = tmp_path / "ckpts"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "meta" / "llama-3-70b").mkdir(parents=True)  # the stand-in checkpoint's path exists (not gone)

    def scan(where, *, settle_seconds, skip=None, skip_steps=()):
        found = FoundCheckpoint(step=10, path=Path("meta/llama-3-70b"), kind="replay")  # spec: replay:meta/...
        return [] if 10 in skip_steps else [found]

    monkeypatch.setattr(importlib.import_module("flasheval.api.watch"), "find_checkpoints", scan)
    return folder


@pytest.mark.parametrize(("bad", "field"), [
    *BAD[:-2],
    ({"sede": 1}, "sede"),
    ({"identity": "x"}, "identity"),  # the watcher's checkpoints are saved ones
    ({"simultaneous": 0}, "simultaneous"),
])
def test_a_refused_watch_writes_nothing_and_a_correct_one_then_places(replayed_checkpoints, tmp_path, bad, field):
    run = tmp_path / "run"
    _refused_in_one_line(lambda: flasheval.watch(replayed_checkpoints, reference="helm_lite", run=run, once=True,
                                                 **bad), field)
    assert not run.exists()
    history = flasheval.watch(replayed_checkpoints, reference="helm_lite", run=run, once=True)
    assert [c.step for c in history.checkpoints] == [10]


def test_one_rule_and_one_message_per_kind_of_value(tmp_path):
    from flasheval.checks import check_confidence_level, check_seed
    from flasheval.scaling.fit import ScalingFitOptions

    level = "field '--level': must be a number in [0.5, 1), got 1.0"
    with pytest.raises(flasheval.InputError, match=level.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        flasheval.rank_intervals("helm_lite", confidence_level=1.0)
    for entry in (lambda: flasheval.dior("helm_lite", confidence_level=0.3),
                  lambda: ScalingFitOptions(loss_column="loss", confidence_level=0.3),  # was accepted: (0, 1) before
                  lambda: check_confidence_level(0.3)):
        with pytest.raises(flasheval.InputError, match=r"must be a number in \[0.5, 1\), got 0.3"):
            entry()
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(flasheval.InputError, match="must be an integer >= 0 or a numpy Generator"):
            flasheval.rank_intervals("helm_lite", seed=bad)
        with pytest.raises(flasheval.InputError, match="must be an integer >= 0, got"):
            check_seed(bad)
    gen = np.random.default_rng(0)
    assert check_seed(gen, generator=True) is gen
    for entry in (lambda: flasheval.rank_intervals("helm_lite", n_resamples=50),
                  lambda: flasheval.dior("helm_lite", n_instantiations=5)):
        with pytest.raises(flasheval.InputError, match="must be an integer from (100|20) to 100000"):
            entry()
    with pytest.raises(flasheval.InputError, match="unknown aggregate 'bogus'"):  # before the reference is read
        flasheval.rank_intervals(tmp_path / "no-such-reference", aggregate="bogus")


def test_write_record_checks_the_payload_against_its_schema_before_writing(tmp_path):
    from flasheval.records.run_record import read_record, write_record
    from flasheval.records.schemas import PAYLOAD_SCHEMAS

    placed = flasheval.place(A, "helm_lite", output=tmp_path / "ok")
    good = read_record(placed.record_path).payload
    bad = {**good, "rank": "3"}
    with pytest.raises(flasheval.InputError, match=r"field 'payload.rank': '3' is not an integer \(or null\)"):
        write_record(tmp_path / "bad" / "place.json", kind="place", payload=bad)
    assert not (tmp_path / "bad" / "place.json").exists()
    with pytest.raises(flasheval.InputError, match="payload.stages\\[0\\].rank"):  # a rank outside its interval
        write_record(tmp_path / "bad" / "place.json", kind="place",
                     payload={**good, "stages": [{**good["stages"][0], "rank": good["stages"][0]["interval"][1] + 1}]})
    with pytest.raises(ValueError, match="no schema"):
        write_record(tmp_path / "bad" / "x.json", kind="note", payload={})
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
    assert "reference-build" in PAYLOAD_SCHEMAS  # every kind written has one (reference/building.py writes it)
