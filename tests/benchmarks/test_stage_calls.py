"""The stage-call replay cuts a placement record's asks into the calls the placement made (benchmarks/stage_calls.py)."""

from __future__ import annotations

import pytest

from benchmarks.stage_calls import stage_asks

NAMES = ("lambada_openai", "openbook_qa", "winograd", "winogrande")
SIZES = (1000, 500, 273, 1000)
STEPS = (20, 25, 32, 40, 50, 63, 80, 100, 125, 160, 200, 250, 320, 400, 500, 630, 800, 1000)


def _record() -> dict:
    """A placement that scores every example of four datasets in 18 stages, as noise 0.075's in
    ``benchmarks/seconds_saved.py`` did: Winograd runs out at stage 13, OpenBookQA at stage 15."""
    stages, asked, before = [], [], [0] * 4
    for step in STEPS:
        counts = [min(step, size) for size in SIZES]
        asked += [{"task_name": name, "example_ids": [str(i) for i in range(b, n)]}
                  for name, b, n in zip(NAMES, before, counts) if n > b]
        stages.append({"n_examples": counts})
        before = counts
    return {"stages": stages, "live": {"asked": asked}}


def test_a_stage_call_holds_the_datasets_that_grew_in_it():
    record = _record()
    calls = stage_asks(record, where="place.json")
    assert [len(c) for c in calls] == [4] * 13 + [3] * 2 + [2] * 3  # 64 asks, not 16 calls of four
    assert [a for c in calls for a in c] == record["live"]["asked"]
    for call, stage, before in zip(calls, record["stages"], [{"n_examples": [0] * 4}] + record["stages"]):
        grown = [name for name, n, b in zip(NAMES, stage["n_examples"], before["n_examples"]) if n > b]
        assert [a["task_name"] for a in call] == grown
        assert all(int(a["example_ids"][-1]) + 1 == stage["n_examples"][NAMES.index(a["task_name"])] for a in call)


def test_a_record_whose_stages_do_not_account_for_its_asks_is_refused():
    record = _record()
    record["live"]["asked"].append({"task_name": "winograd", "example_ids": ["273"]})
    with pytest.raises(SystemExit, match="place.json: its stages grow 64 datasets in all, it asked 65 times"):
        stage_asks(record, where="place.json")
