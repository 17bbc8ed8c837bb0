"""End to end on lm-eval tasks: lm-eval's own CLI and HF backend score two models (the real SmolLM2 and a
tiny random Llama) on two synthetic local tasks (0-shot and 3-shot multiple choice) with
``--log_samples``; ``reference import --format lm-eval-samples`` records the task settings; a
third model is placed live through the bridge, stage by stage, on only the new doc ids. Its
scores must equal lm-eval's HF backend's on the same docs (an independent run), and a changed
task config, few-shot count or lm-eval version must be refused in one line.
``reference build --engine lm-eval`` builds the same kind of reference itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.records import read_record
from flasheval.reference import load_reference
from tests._tiny_models import save_tiny_models

pytestmark = pytest.mark.slow

TASKS = ("synth_arith", "synth_story")
PLAN = """name: e2e
description: escalate 2 -> 4 -> all (test plan)
stop_rule: interval
confidence_level: 0.95
correction: none
estimator: control-variate
n_resamples: 200
stages: [2, 4, all]
tiers:
  - {ranks: [1, null], resolution: maximal}
"""


def _lm_eval_cli(model_args: str, tasks: Path, out: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args", model_args,
                           "--tasks", ",".join(TASKS), "--include_path", str(tasks), "--log_samples",
                           "--output_path", str(out), "--device", "cpu", "--batch_size", "16"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def world(tmp_path_factory, lmeval_tasks, smollm_hf, lm_eval):
    root = tmp_path_factory.mktemp("lmeval_e2e")
    tiny = save_tiny_models(root / "models", seeds=(0, 1))
    logs = root / "logs"
    _lm_eval_cli(f"pretrained={smollm_hf},dtype=float32", lmeval_tasks, logs)
    _lm_eval_cli(f"pretrained={tiny['m0']},dtype=float32", lmeval_tasks, logs)
    assert main(["reference", "import", str(logs), "--format", "lm-eval-samples", "--name", "lmref",
                 "--include-path", str(lmeval_tasks), "--output-dir", str(root / "refs")]) == 0
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    return {"root": root, "tiny": tiny, "ref": root / "refs" / "lmref", "plan": root / "plan.yaml",
            "tasks": lmeval_tasks}


def _place(world, *extra: str, output: str = "place") -> int:
    return main(["place", "--model", f"third=hf:{world['tiny']['m1']}", "--reference", str(world["ref"]),
                 "--tiers", str(world["plan"]), "--output", str(world["root"] / output), "--device", "cpu", *extra])


def test_import_records_what_a_live_placement_needs(world):
    ref = load_reference(world["ref"])
    assert ref.n_models == 2 and ref.dataset_names == TASKS
    build = ref.manifest.build
    assert build["kind"] == "lm-eval" and build["lm_eval_version"] == "0.4.13"
    story = build["tasks"]["synth_story"]
    assert story["num_fewshot"] == 3 and story["fewshot_seed"] == 1234 and story["metric"] == "acc"
    assert story["config"]["task"] == "synth_story" and len(story["config_digest"]) == 16
    assert build["tasks"]["synth_arith"]["num_fewshot"] == 0


def test_live_placement_scores_only_new_docs_through_lm_eval(world, lm_eval):
    from lm_eval.models.huggingface import HFLM

    from flasheval.lmeval.tasks import example_scores, run_tasks

    assert _place(world) == 0
    live = read_record(world["root"] / "place" / "place.json").payload["live"]
    ref = load_reference(world["ref"])
    for d, task in enumerate(ref.dataset_names):
        asked = [i for a in live["asked"] if a["task_name"] == task for i in a["example_ids"]]
        assert len(asked) == len(set(asked)) == len(ref.example_ids[d])  # each doc once, every stage only new ones
        assert set(asked) == set(ref.example_ids[d])  # paired with the reference's docs
    # Independent: lm-eval's own HF backend on the placed model gives the same per-doc scores.
    truth = run_tasks(HFLM(pretrained=str(world["tiny"]["m1"]), dtype="float32", device="cpu", batch_size=16), TASKS,
                      include_path=str(world["tasks"]))
    expected = {(t, i): s for t in TASKS for i, s in example_scores(truth, t, "acc").items()}
    assert {(e["task_name"], e["example_id"]): e["score"] for e in live["examples"]} == expected
    # Each doc's tokens are reported (a token budget can bind: the next test), and add up to the compute.
    placed = read_record(world["root"] / "place" / "place.json").payload
    tokens = [e["n_tokens"] for e in live["examples"]]
    assert all(n > 0 for n in tokens) and placed["compute"]["n_tokens"] == sum(tokens)
    assert len(placed["stages"]) > 1


def test_lm_eval_placement_reports_tokens_so_a_token_budget_binds(world, capsys):
    # A cap of 10 tokens lets the first stage run (nothing to project from yet) and stops the next one,
    # projected from the first stage's tokens; it was ignored when the lm-eval scorer reported no tokens.
    assert _place(world, "--max-tokens", "10", output="place-capped") == 0
    capped = read_record(world["root"] / "place-capped" / "place.json").payload
    assert capped["status"] == "unresolved at budget" and len(capped["stages"]) == 1
    assert "tokens > budget 10" in capped["reason"]


def test_placing_again_computes_nothing(world, capsys):
    assert _place(world) == 0
    assert read_record(world["root"] / "place" / "place.json").payload["live"]["requests_computed"] == 0


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flasheval: error:")
    return err[0]


def test_a_changed_task_config_is_refused_in_one_line(world, capsys, tmp_path):
    changed = tmp_path / "tasks"
    changed.mkdir()
    for f in world["tasks"].iterdir():
        text = f.read_text(encoding="utf-8")
        (changed / f.name).write_text(text.replace("Answer:", "Reply:") if f.suffix == ".yaml" else text)
    capsys.readouterr()
    assert _place(world, "--include-path", str(changed), output="changed") == 1
    assert "synth_arith: the installed task config differs" in _error_line(capsys)


def test_another_few_shot_count_is_refused(world, capsys):
    capsys.readouterr()
    assert _place(world, "--num_fewshot", "2", output="shots") == 1
    assert "scored synth_arith 0-shot" in _error_line(capsys)


def test_another_lm_eval_version_is_refused(world, capsys, tmp_path):
    import shutil

    copy = tmp_path / "lmref"
    shutil.copytree(world["ref"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["build"]["lm_eval_version"] = "0.4.12"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    world = dict(world, ref=copy)
    capsys.readouterr()
    assert _place(world, output="version") == 1
    assert "scored with lm-eval 0.4.12; installed is 0.4.13" in _error_line(capsys)


def test_reference_build_engine_lm_eval(world, capsys):
    out = world["root"] / "built"
    tiny = world["tiny"]
    assert main(["reference", "build", "--engine", "lm-eval", "--models", f"m0=hf:{tiny['m0']}", f"m1=hf:{tiny['m1']}",
                 "--tasks", ",".join(TASKS), "--include_path", str(world["tasks"]), "--n-examples", "6",
                 "--name", "built", "--output-root", str(out), "--work-dir", str(world["root"] / "work"),
                 "--device", "cpu"]) == 0
    built = load_reference(out / "built")
    assert built.manifest.build["kind"] == "lm-eval" and all(len(ids) == 6 for ids in built.example_ids)
    assert built.manifest.build["dtype"] == "float32"  # pinned: a placement in another dtype is refused
    capsys.readouterr()
    assert main(["place", "--model", f"third=hf:{tiny['m1']}", "--reference", str(out / "built"), "--dtype",
                 "bfloat16", "--device", "cpu", "--output", str(world["root"] / "bf16")]) == 1
    assert "was built in float32; placing in bfloat16 would not be comparable" in capsys.readouterr().err
    assert not (world["root"] / "bf16").exists()  # refused before the model loaded
    # m0 through the bridge equals m0 through lm-eval's HF backend (the imported reference), doc for doc.
    imported = load_reference(world["ref"])
    m0 = next(m for m in imported.model_ids if m.endswith("m0"))
    for d in range(len(TASKS)):
        cols = [imported.example_ids[d].index(i) for i in built.example_ids[d]]
        assert list(built.scores[d][built.index("m0")]) == list(imported.scores[d][imported.index(m0)][cols])


def test_sweep_on_an_lm_eval_reference(world):
    out = world["root"] / "sweep"
    assert main(["sweep", "--models", f"third=hf:{world['tiny']['m1']}", f"fourth=hf:{world['tiny']['m0']}",
                 "--reference", str(world["ref"]), "--tiers", str(world["plan"]), "--output", str(out), "--device",
                 "cpu", "--budget-examples", "32", "--max-loaded", "1"]) == 0
    record = read_record(out / "sweep.json").payload
    assert record["live"]["engine"] == "lm-eval" and record["live"]["max_loaded"] == 1
    for name in ("third", "fourth"):
        checkpoint = record["live"]["checkpoints"][name]
        assert checkpoint["asked"] and checkpoint["loads"] >= 1  # loaded on demand by the pool (--max-loaded holds)
        ids = [(a["task_name"], i) for a in checkpoint["asked"] for i in a["example_ids"]]
        assert len(ids) == len(set(ids))  # never the same doc twice
