"""A live placement's timing: wall, load, forward-pass and outside-the-model seconds, and a full run's projected time.

The record's ``timing`` entry is checked against figures recomputed here from the record's other
entries: the tokens per example the placement saw (``live.examples``) give the full run's tokens, the
tokens the placement ran over the forward-pass seconds give the rate. Tiny seeded Llamas
(``tests/_tiny_models.py``) on two small task subsets: meaningless scores, real paths.
"""

from __future__ import annotations

import math

import pytest

import flasheval
from flasheval.cli.place import format_timing
from flasheval.placement.results import Timing
from flasheval.records.run_record import read_record
from tests._tiny_models import save_tiny_models

PLAN = """name: two-looks
description: 4 -> all (test plan)
stop_rule: interval
confidence_level: 0.95
correction: none
estimator: control-variate
n_resamples: 100
stages: [4, all]
tiers:
  - {ranks: [1, null], resolution: maximal}
"""

SIZES = {"copa": 10, "winograd": 10}


@pytest.fixture(scope="module")
def world(tmp_path_factory, task_dir):
    root = tmp_path_factory.mktemp("timing")
    models = save_tiny_models(root / "models")
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    flasheval.build_reference([f"m0=hf:{models['m0']}", f"m1=hf:{models['m1']}"], name="tiny", suite="dclm-core",
                              tasks=",".join(SIZES), task_dir=task_dir, n_examples=10, seed=7, engine=flasheval.EngineOptions(device="cpu"),
                              output=root / "refs", work_dir=root / "work")
    return {"root": root, "models": models, "ref": root / "refs" / "tiny", "plan": root / "plan.yaml"}


def _place(world, output):
    return flasheval.place(f"m2=hf:{world['models']['m2']}", world["ref"], plan=world["plan"],
                           engine=flasheval.EngineOptions(device="cpu"),
                           output=output)


@pytest.mark.parametrize(("fields", "expected"), [
    # (wall, load, scoring, tokens, full tokens) -> (outside, rate, full scoring, full wall, saving)
    ((60.0, 40.0, 18.0, 1800, 9000.0), (2.0, 100.0, 90.0, 130.0, 130.0 / 60.0)),
    ((10.0, 0.0, 5.0, 50, 500.0), (5.0, 10.0, 50.0, 50.0, 5.0)),
    ((3.0, 1.0, 0.0, 0, 500.0), (2.0, None, None, None, None)),  # every request from the store: no rate
    ((30.0, 10.0, 10.0, 100, None), (10.0, 10.0, None, None, None)),  # a scorer without token counts
])
def test_timing_derives_the_outside_time_the_rate_and_the_full_run(fields, expected):
    wall, load, scoring, tokens, full = fields
    t = Timing(wall_seconds=wall, load_seconds=load, scoring_seconds=scoring, scored_tokens=tokens,
               looks_seconds=0.0, full_tokens=full)
    got = (t.outside_model_seconds, t.tokens_per_second, t.full_scoring_seconds, t.full_wall_seconds, t.time_saving)
    assert got == pytest.approx(expected)
    assert t.to_json()["time_saving"] == got[-1]


def test_the_full_run_is_projected_in_the_tokens_it_runs():
    t = Timing(wall_seconds=60.0, load_seconds=40.0, scoring_seconds=18.0, scored_tokens=1800, looks_seconds=0.0,
               full_tokens=9000.0, shared_tokens=900)  # a tenth of the full run's count is contexts shared
    assert (t.full_run_tokens, t.full_scoring_seconds, t.full_wall_seconds) == (8100.0, 81.0, 121.0)
    assert t.time_saving == pytest.approx(121.0 / 60.0) and t.to_json()["shared_tokens"] == 900
    assert Timing(wall_seconds=1.0, load_seconds=0.0, scoring_seconds=1.0, scored_tokens=10, looks_seconds=0.0,
                  full_tokens=50.0, shared_tokens=80).full_run_tokens == 0.0  # an extrapolation under the exact count


def test_timing_refuses_negative_or_non_finite_seconds():
    for bad in ({"wall_seconds": -1.0}, {"scoring_seconds": math.nan}, {"scored_tokens": -3}, {"shared_tokens": -1}):
        fields = {"wall_seconds": 1.0, "load_seconds": 0.0, "scoring_seconds": 0.0, "scored_tokens": 0,
                  "looks_seconds": 0.0, "full_tokens": None, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            Timing(**fields)


def test_the_record_times_the_placement_and_projects_a_full_run_at_the_measured_rate(world, tmp_path):
    run = _place(world, tmp_path / "place")
    payload = read_record(run.record_path).payload
    t, c, live = payload["timing"], payload["compute"], payload["live"]
    assert t == run.timing.to_json()
    # the parts: every forward pass ran inside the placement's wall time, after the model opened
    assert t["scoring_seconds"] > 0 and t["load_seconds"] > 0
    assert t["wall_seconds"] >= t["load_seconds"] + t["scoring_seconds"] + t["looks_seconds"]
    assert t["wall_seconds"] >= live["seconds"]
    assert t["outside_model_seconds"] == pytest.approx(t["wall_seconds"] - t["load_seconds"] - t["scoring_seconds"])
    # a fresh store, and no two of these examples share a context (Winograd twins would: the engine runs a shared
    # context once, the scorer counts it per example): the forward passes ran exactly the tokens counted
    per_task: dict[str, list[int]] = {}
    for e in live["examples"]:
        per_task.setdefault(e["task_name"], []).append(e["n_tokens"])
    assert t["scored_tokens"] == c["n_tokens"] == sum(map(sum, per_task.values()))
    # the projection, recomputed: full tokens per dataset from the tokens per example seen, at tokens / seconds
    full_tokens = sum(sum(tokens) / len(tokens) * SIZES[name] for name, tokens in per_task.items())
    rate = sum(map(sum, per_task.values())) / t["scoring_seconds"]
    assert t["full_tokens"] == pytest.approx(full_tokens) and t["tokens_per_second"] == pytest.approx(rate)
    assert t["full_scoring_seconds"] == pytest.approx(full_tokens / rate) and t["full_scoring_seconds"] > 0
    assert t["full_wall_seconds"] == pytest.approx(t["load_seconds"] + full_tokens / rate)
    assert t["time_saving"] == pytest.approx(t["full_wall_seconds"] / t["wall_seconds"])
    line = format_timing(run)
    assert line.startswith(f"time {t['wall_seconds']:.0f} s (opening and loading the model ")
    assert f"a full run of these datasets ~{t['full_wall_seconds']:.0f} s" in line
    assert f"at the measured {rate:.0f} tokens/s): ~{t['time_saving']:.1f}x" in line


def test_a_rerun_from_the_store_runs_no_tokens_and_projects_nothing(world, tmp_path):
    _place(world, tmp_path / "place")
    again = _place(world, tmp_path / "place")
    t = again.timing
    assert t.scored_tokens == 0 and t.scoring_seconds == 0.0 and t.full_wall_seconds is None
    assert t.full_tokens == again.placement.compute.full_tokens  # the saving in tokens is still known
    assert format_timing(again) == f"time {t.wall_seconds:.0f} s (model not loaded: every request was in the store)"


def test_a_full_run_is_projected_in_the_tokens_it_runs_where_twin_examples_share_a_context(tmp_path_factory,
                                                                                             task_dir):
    """Winograd's twin sentences share their option contexts: the records count them per example, a full run's
    passes run each once. The projection takes the full run's tokens as run, checked against the engine's own count
    over one call of every reference example (``forward_tokens``), independent of the scorer's string-level count."""
    from flasheval.engine.loading import open_backend
    from flasheval.engine.specs import parse_model_spec
    from flasheval.evaluation.evaluate import build_example_requests, example_tokens
    from flasheval.reference.live import prepare_live

    root = tmp_path_factory.mktemp("twins")
    models = save_tiny_models(root / "models")
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    flasheval.build_reference([f"m0=hf:{models['m0']}", f"m1=hf:{models['m1']}"], name="twins", suite="dclm-core",
                              tasks="winograd", task_dir=task_dir, n_examples=60, seed=7,
                              engine=flasheval.EngineOptions(device="cpu"), output=root / "refs",
                              work_dir=root / "work")
    run = flasheval.place(f"m2=hf:{models['m2']}", root / "refs" / "twins", plan=root / "plan.yaml",
                          engine=flasheval.EngineOptions(device="cpu"), output=root / "place")
    t = read_record(run.record_path).payload["timing"]

    ref = flasheval.load_reference(root / "refs" / "twins")
    live = prepare_live(ref, seed=None, dtype=None, task_dir=task_dir)
    by_id = build_example_requests(live.tasks[0], list(ref.example_ids[0]), seed=live.seed,
                                   prefix_space=live.settings.prefix_space)
    requests = [r for rs in by_id.values() for r in rs]
    backend = open_backend(parse_model_spec(f"hf:{models['m2']}"), dtype="float32", device="cpu")
    results = backend.loglikelihood(requests)
    per_example, start = 0, 0
    for rs in by_id.values():
        per_example += example_tokens(rs, results[start:start + len(rs)])
        start += len(rs)
    run_tokens = backend.info.forward_tokens

    assert run_tokens < per_example  # the sample holds twins
    assert t["full_tokens"] == pytest.approx(per_example)  # the placement scored every example: no extrapolation
    assert t["shared_tokens"] == per_example - run_tokens and t["full_run_tokens"] == pytest.approx(run_tokens)
    assert t["full_scoring_seconds"] == pytest.approx(run_tokens / t["tokens_per_second"])
    assert t["time_saving"] == pytest.approx((t["load_seconds"] + run_tokens / t["tokens_per_second"])
                                             / t["wall_seconds"])
    assert f"{run_tokens:,.0f} tokens at the measured" in format_timing(run)
