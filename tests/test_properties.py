"""Property-based checks of every entry and every reader: generated bad values end in ONE line or a result.

Each test replaces one option of an API entry (or one field of a file a reader reads) by a generated value
(``None``, booleans, huge or negative integers, NaN and infinities, short strings, lists, objects) and asserts
that the call either refuses it with a :class:`~flasheval.errors.FlashevalError` of one line (an
:class:`~flasheval.errors.InputError` naming its field or file) or returns normally; never another exception,
and never a hang (hypothesis's ``deadline`` bounds each example).

Seed policy: ``derandomize=True`` and no example database, so every run tries the same examples (a failure
reproduces on any machine, and the suite's time is stable); ``max_examples`` is modest (the file runs in
about 20 s on one core). Replayed models and a tiny written reference (4 models x 2 datasets x 30 examples),
so nothing loads a real model.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flasheval
from flasheval.errors import FlashevalError, InputError
from flasheval.placement.calibration_cache import CALIBRATION_VERSION, check_entry
from flasheval.placement.results import Budget
from flasheval.placement.tiers import load_tier_plan, resolve_tier_plan
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference, write_reference

BAD = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**62, max_value=2**62),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-2, 2), max_size=2),
)
"""Values of every JSON/Python kind a user (or a hand-edited file) might put where another was wanted."""

FAST = settings(max_examples=15, deadline=timedelta(seconds=10), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _one_line_or_result(call) -> object:
    """Run ``call``: its result, or ``None`` after a refusal in one line (an InputError names field or file)."""
    try:
        return call()
    except FlashevalError as exc:
        text = str(exc)
        assert text and "\n" not in text, text
        if isinstance(exc, InputError):
            assert exc.field is not None or exc.path is not None, text
        return None


def _long(n_models: int = 4, n: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"model": f"m{m}", "dataset": d, "example_id": str(e),
                          "score": float(rng.random() < 0.2 + 0.2 * m)}
                         for d in ("a", "b") for m in range(n_models) for e in range(n)])


def _scaling_runs() -> pd.DataFrame:
    """Runs on Gadre et al.'s laws (loss from compute and tokens per parameter, error from loss), 1% noise."""
    from flasheval.stats.scaling import error_law, loss_law

    rng = np.random.default_rng(0)
    rows = []
    for i, (n, m) in enumerate([(1e7, 20), (8e7, 20), (1.5e8, 20), (4e8, 20), (1e7, 320), (8e7, 80), (1.4e9, 20),
                                (7e9, 20)]):
        loss = float(loss_law(6 * n * n * m, m, E=1.8, a=200.0, b=350.0, eta=0.13)) * (1 + 0.01 * rng.standard_normal())
        rows.append({"model_id": f"r{i}", "params": n, "tokens": n * m, "loss": loss,
                     "err_avg17": float(error_law(loss, epsilon=0.85, k=2.1, gamma=0.75))})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("props")
    write_reference(root / "refs" / "tiny", _long(), name="tiny", source="test", licence="none",
                    metric="per-example 0/1")
    _long().to_parquet(root / "long.parquet")
    _scaling_runs().to_csv(root / "runs.csv", index=False)
    return root


@pytest.fixture
def in_tmp(tiny, monkeypatch) -> Path:
    """The working folder and the default references folder (``output=None``) both in the temporary one."""
    monkeypatch.chdir(tiny)
    monkeypatch.setenv("FLASHEVAL_REFERENCES", str(tiny / "default-references"))
    return tiny


ENTRIES = {
    "place": (lambda r, kw: flasheval.place("replay:m1", r / "refs" / "tiny", **{"plan": "flash_helm", **kw}),
              ("seed", "budget", "n_parameters", "aggregate", "missing", "output", "plan", "num_fewshot", "force")),
    "sweep": (lambda r, kw: flasheval.sweep(["replay:m1"], r / "refs" / "tiny",
                                            **{"plan": "flash_helm", "budget": Budget(max_examples=400), **kw}),
              ("seed", "budget", "low_rank", "n_parameters", "max_loaded", "datasets", "aggregate", "output")),
    "evaluate": (lambda r, kw: flasheval.evaluate("replay:helm_lite/meta/llama-3-70b",
                                                  **{"tasks": "helm_lite/gsm8k", "n_examples": 5, **kw}),
                 ("tasks", "n_examples", "seed", "format", "baselines", "model_id", "output", "store",
                  "compare_dtype")),
    "backtest": (lambda r, kw: flasheval.backtest(r / "refs" / "tiny", "flash_helm",
                                                  **{"methods": ("adaptive",), "compare_plan": "flash_helm", **kw}),
                 ("seeds", "held_out", "methods", "aggregate", "missing", "output")),
    "build_reference": (lambda r, kw: flasheval.build_reference(**{"models": [f"hf:{r}/no-model", f"hf:{r}/none"],
                                                                   "name": "built", "suite": "core",
                                                                   "task_dir": str(r), **kw}),
                        ("models", "name", "n_examples", "seed", "harness", "output", "work_dir",
                         "num_fewshot")),
    "import_reference": (lambda r, kw: flasheval.import_reference(**{
        "source_path": r / "long.parquet", "format": "long-parquet", "name": "imported",
        "output": r / "imports", "force": True, **kw}),
                         ("name", "format", "suite", "aggregate", "random_baselines", "higher_is_better",
                          "output", "source_path")),
    "dior": (lambda r, kw: flasheval.dior(r / "refs" / "tiny", **{"sizes": (10, 20), "n_instantiations": 20,
                                                                   "decisions": "examples", **kw}),
             ("sizes", "n_instantiations", "confidence_level", "seed", "decisions", "dataset_counts", "aggregate")),
    "aggregate": (lambda r, kw: flasheval.aggregate(**{"scores": r / "long.parquet", "suites": "core", **kw}),
                  ("scores", "suites", "baselines", "output")),
    "lm_eval": (lambda r, kw: flasheval.lm_eval(**{"model": f"hf:{r}/no-model", "tasks": "piqa", **kw}),
                ("model", "tasks", "limit", "num_fewshot", "fewshot_seed", "output", "store")),
    "render_report": (lambda r, kw: flasheval.render_report(**{"path": r / "nothing-here", **kw}), ("path",)),
    "export": (lambda r, kw: flasheval.export(**{"source": r / "nothing-here", "format": "every-eval-ever",
                                                  "output": r / "eee", **kw}),
               ("source", "format", "output", "reference", "organization")),
    "fit_scaling": (lambda r, kw: flasheval.fit_scaling(r / "runs.csv", **{
        "predict": "r7", "fit_max_compute": 1e20, "n_resamples": 20, "error": False, **kw}),
                    ("predict", "fit_max_compute", "error_fit_max_compute", "loss_column", "error_column", "dataset",
                     "method", "n_resamples", "confidence_level", "seed", "output", "error")),
}


RUNS_AS_GIVEN = {"place", "sweep", "evaluate", "backtest", "import_reference", "dior", "fit_scaling"}
"""Entries whose call without a generated value returns a result (the others need a model or a file that is
not there, so their calls without one are refused: the generated value is then checked first or not at all)."""


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_every_entry_refuses_a_bad_value_in_one_line(entry, in_tmp):
    call, options = ENTRIES[entry]
    ran = _one_line_or_result(lambda: call(in_tmp, {}))
    assert (ran is not None) == (entry in RUNS_AS_GIVEN), ran  # a refusal comes from the value, not the set-up

    @FAST
    @given(option=st.sampled_from(options), value=BAD)
    def check(option, value):
        _one_line_or_result(lambda: call(in_tmp, {option: value}))

    check()


def _mutations(data: dict) -> st.SearchStrategy:
    """``data`` with one key replaced by a bad value, deleted, or an unknown key added."""
    keys = sorted(data)
    return st.one_of(
        st.tuples(st.sampled_from(keys), BAD).map(lambda kv: {**data, kv[0]: kv[1]}),
        st.sampled_from(keys).map(lambda k: {key: v for key, v in data.items() if key != k}),
        st.tuples(st.text(min_size=1, max_size=4), BAD).map(lambda kv: {**data, kv[0]: kv[1]}),
    )


def test_a_malformed_manifest_is_refused_in_one_line(tiny, tmp_path):
    source = tiny / "refs" / "tiny"
    manifest = json.loads((source / "manifest.json").read_text())
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / "scores.parquet").write_bytes((source / "scores.parquet").read_bytes())

    @FAST
    @given(data=_mutations(manifest))
    def check(data):
        (folder / "manifest.json").write_text(json.dumps(data))
        ref = _one_line_or_result(lambda: load_reference(folder))
        if ref is not None:  # a value the manifest may hold: the reference is the same data
            assert ref.model_ids == ("m0", "m1", "m2", "m3") and ref.dataset_names == ("a", "b")

    check()


def test_a_malformed_tier_plan_is_refused_in_one_line(tmp_path):
    plan = yaml.safe_load(resolve_tier_plan("flash_helm").read_text())
    path = tmp_path / "plan.yaml"

    @FAST
    @given(data=st.one_of(_mutations(plan), st.tuples(st.integers(0, len(plan["tiers"]) - 1),
                                                      st.sampled_from(sorted(plan["tiers"][0])), BAD).map(
        lambda t: {**plan, "tiers": [dict(tier, **({t[1]: t[2]} if i == t[0] else {}))
                                     for i, tier in enumerate(plan["tiers"])]})))
    def check(data):
        path.write_text(yaml.safe_dump(data))
        _one_line_or_result(lambda: load_tier_plan(path))

    check()


def test_a_malformed_record_is_refused_in_one_line(tiny, tmp_path):
    path = flasheval.place("replay:m1", tiny / "refs" / "tiny", plan="flash_helm", output=tmp_path).record_path
    record = json.loads(path.read_text())  # a valid place record (write_record refuses an invalid payload)

    @FAST
    @given(data=st.one_of(_mutations(record), BAD))
    def check(data):
        path.write_text(json.dumps(data))
        found = _one_line_or_result(lambda: read_record(path))
        if found is not None:
            assert isinstance(found.kind, str) and isinstance(found.payload, dict)
            assert all(isinstance(a, str) for a in found.argv)

    check()


def test_a_malformed_calibration_entry_is_never_trusted():
    entry = {"key": "k", "version": CALIBRATION_VERSION, "constant": 2.085, "pocock": 2.4, "lower_bound": 1.96,
             "worst_miss": 0.04}

    @FAST
    @given(data=st.one_of(_mutations(entry), BAD))
    def check(data):
        try:
            fields = check_entry(data, "k", pocock=2.4, lower_bound=1.96, step=0.025)
        except ValueError as exc:
            assert "\n" not in str(exc)
            return
        assert fields["lower_bound"] <= fields["constant"] <= fields["pocock"]
        assert all(np.isfinite(fields[k]) for k in ("constant", "pocock", "lower_bound"))

    check()


def test_a_record_with_a_malformed_payload_is_reported_in_one_line(tiny, tmp_path):
    """``flasheval report`` over a place record whose payload has one field replaced, removed or added."""
    run = flasheval.place("replay:m1", tiny / "refs" / "tiny", plan="flash_helm", output=tmp_path / "run")
    record = json.loads(run.record_path.read_text())
    folder = tmp_path / "edited"
    folder.mkdir()

    @settings(FAST, max_examples=8)  # each example renders a report with its figure
    @given(payload=_mutations(record["payload"]))
    def check(payload):
        (folder / "place.json").write_text(json.dumps({**record, "payload": payload}))
        _one_line_or_result(lambda: flasheval.render_report(folder))

    check()


def _paths(data: object, prefix: tuple = (), depth: int = 4) -> list[tuple]:
    """Every key path into ``data`` (objects and the first two elements of lists), to ``depth`` levels."""
    out = []
    items = data.items() if isinstance(data, dict) else enumerate(data[:2]) if isinstance(data, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        if depth > 1:
            out += _paths(value, (*prefix, key), depth - 1)
    return out


def _deep_mutations(data: dict) -> st.SearchStrategy:
    """``data`` with one field at any depth replaced by a bad value or removed."""
    def apply(path: tuple, value: object, remove: bool) -> dict:
        copy = json.loads(json.dumps(data))
        parent = copy
        for key in path[:-1]:
            parent = parent[key]
        if remove and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        return copy

    return st.builds(apply, st.sampled_from(_paths(data)), BAD, st.booleans())


@pytest.fixture(scope="module")
def records(tiny, tmp_path_factory) -> dict[str, dict]:
    """One record of every kind the report renders, written by the API on the tiny reference, read as JSON."""
    out = tmp_path_factory.mktemp("records")
    ref = tiny / "refs" / "tiny"
    paths = {
        "place": flasheval.place("replay:m1", ref, plan="flash_helm", output=out / "p").record_path,
        "sweep": flasheval.sweep(["replay:m1", "replay:m2"], ref, plan="flash_helm", budget=Budget(max_examples=400),
                                 output=out / "s").record_path,
        "backtest": flasheval.backtest(ref, "flash_helm", methods=("adaptive",), seeds=(0, 1),
                                       output=out / "b.json").record_path,
        "dior": flasheval.dior(ref, sizes=(10, 20), n_instantiations=20, output=out / "d").record_path,
        "evaluate": flasheval.evaluate("replay:helm_lite/meta/llama-3-70b", tasks="helm_lite/gsm8k", n_examples=5,
                                       output=out / "e").record_path,
    }
    return {kind: json.loads(Path(path).read_text()) for kind, path in paths.items()}


@pytest.mark.parametrize("kind", ["place", "sweep", "backtest", "dior", "evaluate"])
def test_a_record_the_schema_passes_is_rendered(kind, records, tmp_path):
    """A record with one field at any depth replaced or removed: refused by its kind's schema in one line naming
    the field, or rendered by ``flasheval report`` without tripping over a field (its last-resort line)."""
    from flasheval.report.sections import record_blocks

    record = records[kind]
    path = tmp_path / f"{kind}.json"

    @settings(FAST, max_examples=8)
    @given(payload=_deep_mutations(record["payload"]))
    def check(payload):
        path.write_text(json.dumps({**record, "payload": payload}))
        try:
            found = read_record(path)
        except InputError as exc:
            assert "\n" not in str(exc) and exc.field.startswith("payload"), str(exc)
            return
        assert found.kind == kind
        try:
            record_blocks(found, "x")
        except InputError as exc:
            assert "lacks or mangles" not in str(exc), str(exc)  # the schema let through what the report needs

    check()


def test_a_malformed_lm_eval_results_file_is_refused_in_one_line(tmp_path):
    """An lm-eval output folder whose second model's ``results_*.json`` has one field (at any depth) replaced or
    removed: imported, or refused in one line naming the file (``lmeval.settings.RESULTS_SCHEMA``)."""
    from flasheval.reference.lmeval_logs import scan_lm_eval_samples

    results = {"model_name": "org/m", "config": {"fewshot_seed": 1234}, "lm_eval_version": "0.4.5",
               "n-samples": {"piqa": {"original": 3, "effective": 3}}, "n-shot": {"piqa": 0},
               "configs": {"piqa": {"task": "piqa", "num_fewshot": 0}}, "versions": {"piqa": 1.0}}
    for model in ("org__a", "org__b"):
        (tmp_path / model).mkdir()
        (tmp_path / model / "samples_piqa_2024-05-01T10-00-00.jsonl").write_text(
            "".join(json.dumps({"doc_id": i, "acc": float(i % 2), "prompt_hash": "ab"}) + "\n" for i in range(3)))
        (tmp_path / model / "results_2024-05-01T10-00-00.json").write_text(json.dumps({**results, "model_name": model}))

    @settings(FAST, max_examples=30)
    @given(data=_deep_mutations({**results, "model_name": "org__b"}))
    def check(data):
        (tmp_path / "org__b" / "results_2024-05-01T10-00-00.json").write_text(json.dumps(data))
        logs = _one_line_or_result(lambda: scan_lm_eval_samples(tmp_path))
        if logs is not None:  # the scores are the logs' whatever the results file's extra fields say
            assert len(logs.matrices.model_ids) == 2 and logs.matrices.dataset_names == ("piqa",)
            np.testing.assert_array_equal(logs.matrices.scores[0][:, :3], [[0.0, 1.0, 0.0]] * 2)

    check()
