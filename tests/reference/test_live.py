"""Live reference build and live placement on tiny seeded Llamas saved as ``hf:`` folders (fast).

The models are random, so the scores mean nothing; what is checked is the path: the examples a
placement asks for, that its prompts are the reference's, resumable builds and the refusals.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.engine import check_model_files, parse_named_models
from flasheval.errors import InputError
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference
from flasheval.reference.live import BuildSettings
from flasheval.stats.sampling import example_order
from flasheval.tasks import load_live_tasks, resolve_task_file, task_spec
from tests._tiny_models import save_tiny_models

TASKS = ("copa", "winograd")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("models"))


@pytest.fixture()
def small_task_dir(task_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the two task files (so tests may change or delete them)."""
    out = tmp_path / "tasks"
    for name in TASKS:
        source = resolve_task_file(task_spec(name), task_dir)
        rel = source.path.relative_to(task_dir)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.path, out / rel)
    return out


def _build(models: dict[str, Path], names: list[str], task_dir: Path, tmp_path: Path, name: str = "tiny",
           n_examples: int = 30) -> int:
    return main(["reference", "build", "--models", *[f"{m}=hf:{models[m]}" for m in names], "--suite", "dclm-core",
                 "--task-dir", str(task_dir), "--tasks", ",".join(TASKS), "--n-examples", str(n_examples),
                 "--seed", "7", "--device", "cpu", "--name", name, "--output-root", str(tmp_path / "refs"),
                 "--work-dir", str(tmp_path / "work")])


@pytest.mark.slow
def test_build_then_place_live_asks_nested_prefixes_with_the_references_prompts(tiny_models, small_task_dir,
                                                                                  tmp_path, capsys):
    assert _build(tiny_models, ["m0", "m1"], small_task_dir, tmp_path) == 0
    ref = load_reference(tmp_path / "refs" / "tiny")
    build = BuildSettings.from_json(ref.manifest.build, where="tiny")
    assert ref.model_ids == ("m0", "m1") and build.seed == 7 and build.dtype == "float32"
    assert all(t is not None and (t > 0).all() for t in ref.n_tokens)
    # the reference's examples are the first 30 of each task's seeded order
    tasks = {t.name: t for t in load_live_tasks(TASKS, small_task_dir)}
    for d, ids in zip(ref.dataset_names, ref.example_ids):
        assert sorted(example_order(tasks[d].example_ids, seed=7, task_name=d)[:30]) == list(ids)
    out = tmp_path / "place"
    assert main(["place", "--model", f"m2=hf:{tiny_models['m2']}", "--reference", str(tmp_path / "refs" / "tiny"),
                 "--output", str(out), "--device", "cpu"]) == 0
    assert "m2 on tiny (2 reference models" in capsys.readouterr().out
    payload = read_record(out / "place.json").payload
    live = payload["live"]
    n_final = dict(zip(ref.dataset_names, payload["stages"][-1]["n_examples"]))
    for d, ids in zip(ref.dataset_names, ref.example_ids):
        order = example_order(ids, seed=7, task_name=d)
        asked = [a["example_ids"] for a in live["asked"] if a["task_name"] == d]
        assert [i for batch in asked for i in batch] == list(order[:n_final[d]])  # nested prefixes, each once
        assert [len(b) for b in asked] == [min(s["n_examples"][ref.dataset_names.index(d)], 30) - prev
                                           for s, prev in zip(payload["stages"], [0] + [
                                               st["n_examples"][ref.dataset_names.index(d)]
                                               for st in payload["stages"][:-1]])]
    # paired with the reference: same ids, same few-shot ids, same prompt digests
    logged = {(e["task_name"], e["example_id"]): e for e in read_record(tmp_path / "work" / "build.json").payload[
        "examples"]["m0"]}
    for e in live["examples"]:
        ref_e = logged[(e["task_name"], e["example_id"])]
        assert (e["prompt_digest"], e["fewshot_ids"]) == (ref_e["prompt_digest"], ref_e["fewshot_ids"])
    # copa: 2 requests per example; winograd: 2 (one per option); nothing else was computed
    assert live["requests_computed"] == 2 * len(live["examples"])
    assert payload["compute"]["n_examples"] == len(live["examples"])
    assert payload["compute"]["n_tokens"] == sum(e["n_tokens"] for e in live["examples"])
    # a second placement is served from its store
    assert main(["place", "--model", f"m2=hf:{tiny_models['m2']}", "--reference", str(tmp_path / "refs" / "tiny"),
                 "--output", str(out), "--device", "cpu"]) == 0
    assert read_record(out / "place.json").payload["live"]["requests_computed"] == 0


def test_place_refuses_changed_task_files_seed_and_dtype(tiny_models, small_task_dir, tmp_path, capsys):
    assert _build(tiny_models, ["m0", "m1"], small_task_dir, tmp_path, n_examples=5) == 0
    capsys.readouterr()
    place = ["place", "--model", f"m2=hf:{tiny_models['m2']}", "--reference", str(tmp_path / "refs" / "tiny"),
             "--output", str(tmp_path / "place"), "--device", "cpu"]
    assert main([*place, "--seed", "8"]) == 1
    assert "built with seed 7" in capsys.readouterr().err
    assert main([*place, "--dtype", "bfloat16"]) == 1
    assert "built in float32" in capsys.readouterr().err
    copa = resolve_task_file(task_spec("copa"), small_task_dir).path
    lines = copa.read_text(encoding="utf-8").splitlines(keepends=True)
    copa.write_text("".join(lines[:-1]), encoding="utf-8")  # one example fewer
    assert main(place) == 1
    err = capsys.readouterr().err
    assert "task files differ" in err and "copa" in err and "winograd" not in err.split("differ")[1]
    assert not (tmp_path / "place" / "place.json").exists()


def test_killed_build_resumes_from_the_store_and_writes_nothing_before(tiny_models, small_task_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models["m1"], broken)
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    models = {**tiny_models, "m1": broken}
    assert _build(models, ["m0", "m1"], small_task_dir, tmp_path, n_examples=8) == 1
    assert "cannot load model" in capsys.readouterr().err
    assert not (tmp_path / "refs" / "tiny").exists()  # no partial reference
    assert main(["reference", "show", str(tmp_path / "refs" / "tiny")]) == 1
    assert _build(tiny_models, ["m0", "m1"], small_task_dir, tmp_path, n_examples=8) == 0
    computed = read_record(tmp_path / "work" / "build.json").payload["computed_requests"]
    assert computed == {"m0": 0, "m1": 32}  # m0's 16 examples came from the store
    assert _build(tiny_models, ["m0", "m1"], small_task_dir, tmp_path, n_examples=8) == 1
    assert "already exists" in capsys.readouterr().err


def test_missing_tasks_and_model_files_are_listed(tiny_models, small_task_dir, tmp_path, capsys):
    resolve_task_file(task_spec("winograd"), small_task_dir).path.unlink()
    assert _build(tiny_models, ["m0", "m1"], small_task_dir, tmp_path) == 1
    assert "lacks 1 of the 2 tasks: winograd" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"model files not found: a \(.*nope.gguf\), b \(.*gone\)"):
        check_model_files(parse_named_models(["a=gguf:/nope.gguf", f"b=hf:{tmp_path}/gone"]))
    assert main(["place", "--model", "gguf:/nope/x.gguf", "--reference", "helm_lite"]) == 1
    assert "field '--model': model files not found: x" in capsys.readouterr().err


def test_model_names_and_build_settings_validation():
    assert [m.model_id for m in parse_named_models(["gguf:/a/smollm2.gguf", "x=hf:/b/c"])] == ["smollm2", "x"]
    with pytest.raises(InputError, match="appear twice"):
        parse_named_models(["gguf:/a/m.gguf", "gguf:/b/m.gguf"])
    with pytest.raises(InputError, match="replay models have no weights"):
        parse_named_models(["replay:ref/m"])
    with pytest.raises(InputError, match="was not built by 'flasheval reference build'"):
        BuildSettings.from_json(None, where="helm_lite")
    with pytest.raises(InputError, match="malformed build settings"):
        BuildSettings.from_json({"kind": "live", "suite": "dclm-core"}, where="x")
    settings = BuildSettings(suite="s", tasks=("copa",), seed=1, n_examples=None, prefix_space=True,
                             dtype="float32", task_sha256={"copa": "a"}, prompt_digests={"copa": "b"})
    assert BuildSettings.from_json(json.loads(json.dumps(settings.to_json())), where="x") == settings
