"""``flasheval.rank_intervals`` and ``flasheval reference show NAME --intervals`` on real and synthetic references."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import flasheval
from flasheval.cli import main
from flasheval.analysis.simulation import synthetic_reference
from flasheval.reference import load_reference
from flasheval.reference.intervals import interval_neighbours


@pytest.fixture(scope="module")
def helm():
    return load_reference("helm_lite")


def test_every_helm_lite_model_gets_an_interval_around_its_rank_and_a_group(helm):
    res = flasheval.rank_intervals(helm, n_resamples=300)
    assert [m.model_id for m in res.models] == [r.model_id for r in helm.ranking()]
    assert all(m.interval[0] <= m.rank <= m.interval[1] for m in res.models)
    assert [m for g in res.groups for m in g] == [m.model_id for m in res.models]  # a partition, in order
    for g, members in enumerate(res.groups, start=1):  # each group's intervals stay within its own ranks
        rows = [res.row(m) for m in members]
        first = min(r.rank for r in rows) if g == 1 else sum(len(x) for x in res.groups[:g - 1]) + 1
        assert all(first <= r.interval[0] and r.interval[1] <= first + len(members) - 1 for r in rows)
    assert 0 <= res.n_separable_adjacent < res.n_models - 1 and res.widest.width >= 5
    again = flasheval.rank_intervals(helm, n_resamples=300)
    assert again == res  # seeded: the same intervals every call
    by_generator = flasheval.rank_intervals(helm, n_resamples=300, seed=np.random.default_rng(0))
    assert by_generator == flasheval.rank_intervals(helm, n_resamples=300, seed=np.random.default_rng(0))
    assert by_generator != flasheval.rank_intervals(helm, n_resamples=300, seed=np.random.default_rng(1))
    own = flasheval.rank_intervals(helm, n_resamples=300, simultaneous=False)
    assert all(a.interval[0] >= b.interval[0] and a.interval[1] <= b.interval[1] for a, b in zip(own.models, res.models))
    assert sum(m.width for m in own.models) < sum(m.width for m in res.models)


def test_neighbours_are_separable_exactly_when_their_score_intervals_do_not_overlap(helm):
    res = flasheval.rank_intervals(helm, n_resamples=300)
    n_apart = sum(u.score_interval[0] > low.score_interval[1] for u, low in zip(res.models[:-1], res.models[1:]))
    assert n_apart == res.n_separable_adjacent > 0
    top = res.models[0]  # the best model's interval ends at 1 + the models whose score intervals overlap its own
    assert top.interval[1] == 1 + sum(m.score_interval[1] >= top.score_interval[0] for m in res.models[1:])


def test_the_centered_aggregate_with_equal_baselines_gives_the_mean_aggregates_intervals():
    ref = synthetic_reference(15, [200, 300, 250], rng=1, ability_spread=1.5)
    baselines = {d: 0.25 for d in ref.dataset_names}
    centered = replace(ref, manifest=replace(ref.manifest, random_baselines=baselines))
    by_mean = flasheval.rank_intervals(ref, n_resamples=300)
    by_centered = flasheval.rank_intervals(centered, aggregate="centered", n_resamples=300)
    assert [(m.model_id, m.interval) for m in by_mean.models] == [(m.model_id, m.interval) for m in by_centered.models]
    np.testing.assert_allclose([m.value for m in by_centered.models], [(m.value - 0.25) / 0.75 for m in by_mean.models])


@pytest.mark.parametrize("kwargs, message", [
    ({"aggregate": "win_rate"}, "win_rate depends on the whole pool"),
    ({"confidence_level": 1.0}, "field '--level': must be a number in [0.5, 1), got 1.0"),
    ({"n_resamples": 50}, "field '--n-resamples': must be an integer from 100 to 100000"),
    ({"seed": -1}, "field '--seed': must be an integer >= 0"),
])
def test_bad_values_are_refused_in_one_line_by_the_api_and_the_command(helm, capsys, kwargs, message):
    with pytest.raises(flasheval.InputError, match=None) as info:
        flasheval.rank_intervals(helm, **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    flags = {"aggregate": "--aggregate", "confidence_level": "--level", "n_resamples": "--n-resamples", "seed": "--seed"}
    (key, value), = kwargs.items()
    assert main(["reference", "show", "helm_lite", "--intervals", flags[key], str(value)]) == 1
    assert message in capsys.readouterr().err


def test_show_intervals_prints_every_model_the_groups_and_a_summary(helm, capsys):
    assert main(["reference", "show", "helm_lite", "--intervals", "--n-resamples", "300"]) == 0
    lines = capsys.readouterr().out.splitlines()
    res = flasheval.rank_intervals(helm, n_resamples=300)
    assert "simultaneous over all models" in lines[0] and len(lines) == 2 + 69 + 1 + res.n_groups + 1
    assert lines[2].split()[:4] == ["1", f"[{res.models[0].interval[0]},", f"{res.models[0].interval[1]}]", "1"]
    assert lines[-1].startswith(f"adjacent pairs separable: {res.n_separable_adjacent} of 68; groups: {res.n_groups}")
    assert main(["reference", "show", "helm_lite", "--per-model"]) == 1
    assert "field '--per-model': only with --intervals" in capsys.readouterr().err


def test_a_placement_names_the_reference_models_its_interval_cannot_tell_it_from(tmp_path, capsys):
    ref = synthetic_reference(14, [150, 200], rng=3, ability_spread=0.6)
    run = flasheval.place("replay:m005", ref, output=tmp_path)
    pool = ref.without("m005")
    assert run.neighbours == interval_neighbours(pool, run.interval)
    assert len(run.neighbours) == run.interval[1] - run.interval[0]
    from flasheval.records.run_record import read_record

    assert read_record(run.record_path).payload["neighbours"] == list(run.neighbours)
    from flasheval.cli.place import format_neighbours

    line = format_neighbours(run.neighbours, run.interval)
    assert (f"cannot be told from {len(run.neighbours)} reference model" in line) if run.neighbours \
        else line.startswith("told apart from every reference model")
