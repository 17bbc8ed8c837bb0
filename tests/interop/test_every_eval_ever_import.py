"""Every Eval Ever records in: the coalition's worked example (``../shared/data/every_eval_ever``, read as it is)
reads as the format says. Its one model alone is refused as a pool in one line; with a second model's records for
the same sample (an edited copy, made here) it imports, each score the one its instance line holds. Records that
cannot make a pool (samples that differ between models, no instance-level data) are refused in one line naming the
file, the model and the dataset, or, for the latter, left out under the missing-data policy the user names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import flasheval
from flasheval.cli import main
from flasheval.errors import InputError

MODEL, DATASET = "demo-org/demo-model", "demo-source.demo_bench"


def _model_copy(eee_dir: Path, root: Path, model: str, *, score: float | None = None, samples: bool = True,
                edit=None) -> Path:
    """The worked example's log (and its lines, unless ``samples`` is false) as model ``model``'s, in ``root``."""
    log = json.loads((eee_dir / "example_aggregate.json").read_text(encoding="utf-8"))
    lines = [json.loads(x) for x in (eee_dir / "example_samples.jsonl").read_text(encoding="utf-8").splitlines()]
    eid = f"demo-source/{model.replace('/', '_')}/1750000000"
    log["model_info"].update(id=model, name=model.rsplit("/", 1)[-1])
    log["evaluation_id"] = eid
    for line in lines:
        line.update(model_id=model, evaluation_id=eid)
        if score is not None:
            line["evaluation"].update(score=score, is_correct=score == 1.0)
    if edit is not None:
        edit(log, lines)
    folder = root / model.replace("/", "_")
    folder.mkdir(parents=True)
    (folder / "log.json").write_text(json.dumps(log), encoding="utf-8")
    if samples:
        (folder / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return folder


@pytest.fixture()
def two_models(eee_dir, tmp_path) -> Path:
    """The worked example as it is, and a second model's records for the same sample (scored 0)."""
    root = tmp_path / "records"
    shutil.copytree(eee_dir, root / "demo")  # the coalition's files untouched, schemas and all
    _model_copy(eee_dir, root, "demo-org/second-model", score=0.0)
    return root


def test_the_worked_example_alone_is_refused_as_a_pool_in_one_line(eee_dir, tmp_path):
    for given in (eee_dir, eee_dir / "example_aggregate.json"):  # the folder, or the one log
        with pytest.raises(InputError) as err:
            flasheval.import_reference(given, format="every-eval-ever", name="demo", output=tmp_path)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{given}: ")
        assert f"model {MODEL!r}" in message and repr(DATASET) in message and "at least 2 models" in message
    assert not list(tmp_path.iterdir())  # nothing written


def test_with_a_second_models_records_for_the_same_sample_it_imports(two_models, tmp_path, capsys):
    assert main(["reference", "import", str(two_models), "--format", "every-eval-ever", "--name", "demo",
                 "--output", str(tmp_path / "refs"), "--licence", "MIT (EvalEval worked example)"]) == 0
    assert "2 models, 1 datasets, 1 examples" in capsys.readouterr().out
    ref = flasheval.load_reference(tmp_path / "refs" / "demo")
    assert ref.dataset_names == (DATASET,) and ref.example_ids == (("demo_0001",),)
    # each score is the one its instance line holds (read here with json, not the importer)
    expected = {}
    for path in two_models.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            expected[record["model_id"]] = record["evaluation"]["score"]
    assert expected == {MODEL: 1.0, "demo-org/second-model": 0.0}
    assert {m: float(ref.scores[0][ref.index(m)][0]) for m in ref.model_ids} == expected
    assert ref.n_tokens[0] is not None and list(ref.n_tokens[0][:, 0]) == [17, 17]  # token_usage.total_tokens
    m = ref.manifest
    assert m.metric.startswith("accuracy") and m.higher_is_better is True and m.licence.startswith("MIT")
    assert "Every Eval Ever records (2 evaluation logs) from <Aggregator org> (<Platform>)" in m.source
    assert "every-eval-ever" in m.built_with


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


def test_samples_that_differ_between_models_are_refused_naming_file_model_and_dataset(eee_dir, tmp_path, capsys):
    root = tmp_path / "records"
    _model_copy(eee_dir, root, MODEL)
    other = _model_copy(eee_dir, root, "demo-org/other", edit=lambda log, lines: lines[0].update(sample_id="demo_0002"))
    assert main(["reference", "import", str(root), "--format", "every-eval-ever", "--name", "x", "--output",
                 str(tmp_path / "refs")]) == 1
    err = _error(capsys)
    assert f"{other / 'samples.jsonl'}: model 'demo-org/other', dataset {DATASET!r}" in err
    assert "has sample demo_0002" in err and "same samples" in err


def test_records_without_instance_data_are_refused_or_left_out_under_a_named_policy(eee_dir, tmp_path, capsys):
    root = tmp_path / "records"
    for model in (MODEL, "demo-org/second"):
        _model_copy(eee_dir, root, model, score=1.0 if model == MODEL else 0.0)
    bare = _model_copy(eee_dir, root, "demo-org/aggregate-only", samples=False,
                       edit=lambda log, lines: log.pop("detailed_evaluation_results"))
    args = ["reference", "import", str(root), "--format", "every-eval-ever", "--name", "x", "--output",
            str(tmp_path / "refs")]
    assert main(args) == 1
    err = _error(capsys)
    assert err.startswith(f"flasheval: error: {bare / 'log.json'}: model 'demo-org/aggregate-only', dataset {DATASET!r}")
    assert "no instance-level data" in err and "--missing" in err
    assert not (tmp_path / "refs").exists()
    assert main([*args, "--missing", "complete-models"]) == 0
    ref = flasheval.load_reference(tmp_path / "refs" / "x")
    assert ref.model_ids == ("demo-org/demo-model", "demo-org/second")
    assert "demo-org/aggregate-only / demo-source.demo_bench" in ref.manifest.notes  # named, not lost silently
    assert main(["reference", "import", str(tmp_path / "x.parquet"), "--format", "long-parquet", "--name", "x",
                 "--missing", "complete-models"]) == 1
    assert "field '--missing': applies to --format every-eval-ever only" in _error(capsys)


def test_the_records_direction_and_fields_are_checked(eee_dir, tmp_path):
    root = tmp_path / "records"

    def lower(log, lines):
        log["evaluation_results"][0]["metric_config"]["lower_is_better"] = True

    for model in (MODEL, "demo-org/second"):
        _model_copy(eee_dir, root, model, score=0.5 if model == MODEL else 0.25, edit=lower)
    with pytest.raises(InputError, match=r"the records say lower is better .*pass --lower-is-better"):
        flasheval.import_reference(root, format="every-eval-ever", name="x", output=tmp_path / "refs")
    written = flasheval.import_reference(root, format="every-eval-ever", name="x", output=tmp_path / "refs",
                                         higher_is_better=False).written
    ref = flasheval.load_reference(written.path)
    assert ref.manifest.higher_is_better is False
    np.testing.assert_array_equal(ref.scores[0][:, 0], [0.5, 0.25])  # model order: demo-org/demo-model, second
    broken = _model_copy(eee_dir, root, "demo-org/broken", edit=lambda log, lines: lines[0]["evaluation"].pop("score"))
    with pytest.raises(InputError) as err:
        flasheval.import_reference(root, format="every-eval-ever", name="y", output=tmp_path / "refs")
    assert str(err.value) == f"{broken / 'samples.jsonl'}:1: field 'evaluation.score': missing field"


def test_a_malformed_log_or_instance_line_is_refused_in_one_line(eee_dir, tmp_path):
    """Generated bad values in any field of the log or of an instance line (property-based, as
    ``tests/test_properties.py`` checks the other readers): one line naming the file, or an import."""
    from hypothesis import given
    from hypothesis import strategies as st

    from tests.test_properties import BAD, FAST, _mutations, _one_line_or_result

    root = tmp_path / "records"
    _model_copy(eee_dir, root, "demo-org/second-model", score=0.0)
    mine = _model_copy(eee_dir, root, MODEL)
    log = json.loads((mine / "log.json").read_text(encoding="utf-8"))
    line = json.loads((mine / "samples.jsonl").read_text(encoding="utf-8"))
    nested = st.sampled_from([("model_info", "id"), ("evaluation", "score"), ("metric_config", "lower_is_better")])

    @FAST
    @given(which=st.sampled_from(["log", "line"]), data=st.data(), inner=st.tuples(nested, BAD))
    def check(which, data, inner):
        (path, name) = (mine / "log.json", log) if which == "log" else (mine / "samples.jsonl", line)
        changed = data.draw(st.one_of(_mutations(name), st.just(_nested(name, *inner))))
        path.write_text(json.dumps(changed) + ("\n" if which == "line" else ""), encoding="utf-8")
        done = _one_line_or_result(lambda: flasheval.import_reference(
            root, format="every-eval-ever", name="x", output=tmp_path / "refs", force=True))
        if done is not None:
            assert done.written.n_models == 2
        (mine / "log.json").write_text(json.dumps(log), encoding="utf-8")
        (mine / "samples.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")

    check()


def _nested(data: dict, where: tuple[str, str], value: object) -> dict:
    """``data`` with ``where[0].where[1]`` (for a log: inside its first result) set to ``value``."""
    out = json.loads(json.dumps(data))
    holder = out.get(where[0]) or (out.get("evaluation_results") or [{}])[0].get(where[0])
    if isinstance(holder, dict):
        holder[where[1]] = value
    return out
