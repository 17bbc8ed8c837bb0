import json
import shutil

import numpy as np
import pandas as pd
import pytest

from flasheval.cli import main
from flasheval.errors import InputError, UnknownNameError
from flasheval.reference import load_reference, reference_folder, write_reference


def _frame(n_models=4, datasets=(("a", 5), ("b", 3)), seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for d, n in datasets:
        for m in range(n_models):
            for e in range(n):
                rows.append({"model": f"m{m}", "dataset": d, "example_id": f"{e}", "score": float(rng.random() < 0.3 + 0.15 * m)})
    return pd.DataFrame(rows)


def _write(tmp_path, frame, **kw):
    return write_reference(tmp_path / "ref", frame, name="ref", source="test", licence="none", metric="acc", **kw)


def test_roundtrip_keeps_every_score(tmp_path):
    frame = _frame()
    ref = load_reference(_write(tmp_path, frame))
    assert ref.model_ids == ("m0", "m1", "m2", "m3") and ref.dataset_names == ("a", "b")
    means = frame.groupby(["model", "dataset"])["score"].mean().unstack().to_numpy()
    np.testing.assert_allclose(ref.dataset_means(), means)
    ranking = ref.ranking()
    assert [r.rank for r in ranking] == sorted(r.rank for r in ranking)
    assert ranking[0].value == pytest.approx(means.mean(axis=1).max())


def test_duplicates_are_refused(tmp_path):
    frame = _frame()
    frame = pd.concat([frame, frame.iloc[[3]]])
    with pytest.raises(InputError, match="duplicate row for model 'm0', dataset 'a', example '3'"):
        _write(tmp_path, frame)


def test_partial_dataset_is_refused_as_missing_cells(tmp_path):
    frame = _frame().iloc[1:]
    with pytest.raises(InputError, match="model 'm0' has 4 of the 5 examples of dataset 'a'"):
        _write(tmp_path, frame)


def test_model_missing_a_dataset_policy(tmp_path):
    frame = _frame()
    frame = frame[~((frame.model == "m3") & (frame.dataset == "b"))]
    folder = _write(tmp_path, frame)
    ref = load_reference(folder)
    assert ref.model_ids == ("m0", "m1", "m2") and ref.excluded == (("m3", "no scores on b"),)
    alt = load_reference(folder, missing="common-datasets")
    assert alt.model_ids == ("m0", "m1", "m2", "m3") and alt.dataset_names == ("a",)
    assert alt.excluded == (("b", "only 3 of 4 models"),)
    with pytest.raises(UnknownNameError, match="missing-data policy"):
        load_reference(folder, missing="fill-zero")


def test_checksum_mismatch_is_refused(tmp_path):
    folder = _write(tmp_path, _frame())
    other = _write(tmp_path / "x", _frame(seed=1))
    shutil.copy(other / "scores.parquet", folder / "scores.parquet")
    with pytest.raises(InputError, match="checksum mismatch"):
        load_reference(folder)


def test_manifest_unknown_key_and_bad_counts(tmp_path):
    folder = _write(tmp_path, _frame())
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "colour": "red"}))
    with pytest.raises(InputError, match="field 'colour': unknown key"):
        load_reference(folder)
    manifest["example_counts"]["a"] = 6
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="dataset 'a' has 5 examples, manifest says 6"):
        load_reference(folder)


def test_non_finite_score_is_refused(tmp_path):
    frame = _frame()
    frame.loc[2, "score"] = np.nan
    with pytest.raises(InputError, match="non-finite score for m0 / a / 2"):
        _write(tmp_path, frame)


def test_unknown_reference_name_lists_known(tmp_path, monkeypatch):
    _write(tmp_path, _frame())
    monkeypatch.setenv("FLASHEVAL_REFERENCES", str(tmp_path))
    assert reference_folder("ref") == tmp_path / "ref"
    with pytest.raises(UnknownNameError, match="unknown reference 'nope'.*helm_lite.*ref"):
        reference_folder("nope")


def test_without_removes_one_model(tmp_path):
    ref = load_reference(_write(tmp_path, _frame()))
    smaller = ref.without("m2")
    assert smaller.model_ids == ("m0", "m1", "m3")
    np.testing.assert_array_equal(smaller.scores[0], ref.scores[0][[0, 1, 3]])
    with pytest.raises(UnknownNameError):
        ref.without("m9")


def test_shipped_helm_lite_matches_shared_source(shared_dir):
    ref = load_reference("helm_lite")
    assert ref.n_models == 69 and len(ref.dataset_names) == 6 and len(ref.excluded) == 14
    assert all(why == "no scores on helm_lite/legalbench" for _, why in ref.excluded)
    src = pd.read_csv(shared_dir / "data/reference/helm_lite_glue/per_model_dataset_accuracy.csv")
    src = src[src.suite == "helm_lite"].pivot(index="model", columns="dataset", values="accuracy")
    np.testing.assert_allclose(ref.dataset_means(), src.loc[list(ref.model_ids), list(ref.dataset_names)], atol=1e-6)
    full = load_reference("helm_lite", missing="common-datasets")
    assert full.n_models == 83 and "helm_lite/legalbench" not in full.dataset_names


def test_import_long_parquet_and_show_via_cli(tmp_path, capsys):
    frame = _frame()
    frame["suite"] = "s1"
    extra = _frame(n_models=2).assign(suite="s2", model=lambda d: "other" + d.model)
    src = tmp_path / "long.parquet"
    pd.concat([frame, extra]).to_parquet(src)
    assert main(["reference", "import", "--format", "long-parquet", str(src), "--suite", "s1", "--name", "mine",
                 "--output-dir", str(tmp_path)]) == 0
    assert load_reference(tmp_path / "mine").model_ids == ("m0", "m1", "m2", "m3")
    assert main(["reference", "show", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n   ") >= 4 and "m3" in out
    assert main(["reference", "import", "--format", "long-parquet", str(src), "--suite", "s3", "--name", "x",
                 "--output-dir", str(tmp_path)]) == 1
    assert "unknown suite 's3'" in capsys.readouterr().err


def test_import_lm_eval_samples(tmp_path):
    # the shape lm-evaluation-harness writes with --log_samples: one folder per model
    for model, correct in (("org__small", [1, 0, 0]), ("org__big", [1, 1, 0])):
        d = tmp_path / "out" / model
        d.mkdir(parents=True)
        (d / "results_2024-05-01T10-00-00.123.json").write_text(json.dumps({"model_name": model.replace("__", "/")}))
        for task in ("arc_easy", "piqa"):
            lines = [json.dumps({"doc_id": i, "doc": {}, "target": 0, "acc": float(c), "acc_norm": 0.0})
                     for i, c in enumerate(correct)]
            (d / f"samples_{task}_2024-05-01T10-00-00.123.jsonl").write_text("\n".join(lines) + "\n")
        # an older duplicate log of one task is ignored
        (d / "samples_piqa_2023-01-01T00-00-00.000.jsonl").write_text(json.dumps({"doc_id": 0, "acc": 0.0}) + "\n")
    assert main(["reference", "import", "--format", "lm-eval-samples", str(tmp_path / "out"), "--name", "lm",
                 "--output-dir", str(tmp_path)]) == 0
    ref = load_reference(tmp_path / "lm")
    assert ref.model_ids == ("org/big", "org/small") and ref.dataset_names == ("arc_easy", "piqa")
    np.testing.assert_allclose(ref.dataset_means(), [[2 / 3, 2 / 3], [1 / 3, 1 / 3]])
    (tmp_path / "out" / "org__big" / "samples_piqa_2024-05-01T10-00-00.123.jsonl").write_text('{"doc_id": 0, "f1": 1}\n')
    with pytest.raises(InputError, match=r"samples_piqa_2024.*:1: field 'metric': no metric acc"):
        from flasheval.reference.importing import read_lm_eval_samples

        read_lm_eval_samples(tmp_path / "out")


def test_token_counts_roundtrip_and_replay(tmp_path):
    from flasheval.reference.scoring.replay import ReplayScorer

    frame = _frame()
    frame["n_tokens"] = np.arange(len(frame)) % 11 + 1
    ref = load_reference(_write(tmp_path, frame))
    got = ReplayScorer(ref, "m2").score("b", ["2", "0"])
    expected = frame.set_index(["model", "dataset", "example_id"]).loc[[("m2", "b", "2"), ("m2", "b", "0")]]
    np.testing.assert_array_equal(got.n_tokens, expected["n_tokens"].to_numpy())
    np.testing.assert_array_equal(got.scores, expected["score"].to_numpy())
