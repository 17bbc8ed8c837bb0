"""A placement's result read back from its record: ``PlacementResult.from_json`` is the exact inverse of ``to_json``
(every stage and the compute rebuilt, derived keys ignored), on a real placement and on its record file; a payload
the ``place`` schema refuses is refused in one line naming the field."""

import json

import pytest

import flasheval
from flasheval.errors import InputError
from flasheval.placement.results import Compute, PlacementResult, StageRecord
from flasheval.records.run_record import read_record


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """A replayed reference model placed on the embedded default reference, and its record's payload."""
    out = tmp_path_factory.mktemp("place")
    run = flasheval.place("replay:meta/llama-3-8b", "helm_lite", output=out)
    return run.placement, read_record(out / "place.json", kind="place").payload


def test_from_json_inverts_to_json_on_a_real_placement(placed):
    result, _ = placed
    assert len(result.stages) > 1 and result.compute.n_examples > 0  # several looks: every stage is rebuilt
    back = PlacementResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back == result
    assert all(isinstance(s, StageRecord) and isinstance(s.n_examples, tuple) and isinstance(s.interval, tuple)
               for s in back.stages) and isinstance(back.compute, Compute) and isinstance(back.interval, tuple)
    assert json.dumps(back.to_json()) == json.dumps(result.to_json())  # and back again, byte for byte


def test_from_json_reads_the_place_record_and_ignores_what_the_record_adds(placed):
    result, payload = placed
    assert {"aggregate", "leaderboard", "neighbours"} & set(payload)  # the record holds more than the result
    assert payload["compute"]["saving"] == result.compute.saving  # derived: not a field, ignored
    assert PlacementResult.from_json(payload) == result


def test_compute_counts_the_schema_leaves_out_read_as_unknown(placed):
    _, payload = placed
    bare = {**payload, "compute": {"n_examples": 120, "full_examples": 5551}}
    compute = PlacementResult.from_json(bare).compute
    assert (compute.n_tokens, compute.full_tokens, compute.flops, compute.full_flops) == (None, None, None, None)
    assert compute.example_saving == 5551 / 120


@pytest.mark.parametrize("edit, field", [
    (lambda p: p["stages"][0].pop("mid_rank"), "payload.stages[0].mid_rank"),
    (lambda p: p["stages"][-1].update(tier=None), "payload.stages[1].tier"),
    (lambda p: p.update(interval=[5, 2]), "payload.interval"),
    (lambda p: p["compute"].pop("full_examples"), "payload.compute.full_examples"),
])
def test_a_payload_the_place_schema_refuses_is_one_line(placed, edit, field):
    _, payload = placed
    bad = json.loads(json.dumps(payload))
    bad["stages"] = bad["stages"][:2]
    edit(bad)
    with pytest.raises(InputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        PlacementResult.from_json(bad)
