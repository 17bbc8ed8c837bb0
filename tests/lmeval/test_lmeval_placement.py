"""End to end on lm-eval tasks: lm-eval's HF backend scores two tiny random Llamas on two synthetic local tasks
(0-shot and 3-shot multiple choice) with ``--log_samples``: one through lm-eval's own command line (``lm_eval run``,
in this process), one through what that command runs (``simple_evaluate`` and its ``EvaluationTracker``, on the
include path's task index alone). The claims here are not about a real model: lm-eval's HF backend on the real
SmolLM2 is compared with the bridge request by request in ``test_lmeval_bridge.py``.
``reference import --format lm-eval-samples`` records the task settings (from the command line's logs, which
indexed every installed task); a
third model is placed live through the bridge, stage by stage, on only the new doc ids. Its
scores must equal lm-eval's HF backend's on the same docs (an independent run), and a changed
task config, few-shot count or lm-eval version must be refused in one line.
``reference build --engine lm-eval`` builds the same kind of reference itself, with the same files and fields as a
DCLM-format build (token counts included, so a sweep under a token budget runs on it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flasheval
from flasheval.cli import main
from flasheval.reference.building import EXAMPLE_FIELDS
from flasheval.placement.results import Budget
from flasheval.records.run_record import read_record
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
    """``lm_eval run`` (lm-eval's own command line) in this process: torch and lm-eval are imported already."""
    from lm_eval._cli import HarnessCLI

    cli = HarnessCLI()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["lm_eval", "run", "--model", "hf", "--model_args", model_args, "--tasks",
                                    ",".join(TASKS), "--include_path", str(tasks), "--log_samples", "--output_path",
                                    str(out), "--device", "cpu", "--batch_size", "16"])
        cli.execute(cli.parse_args())
    assert list(out.glob("*/samples_synth_story_*.jsonl"))


def _lm_eval_run(model_args: str, tasks: Path, out: Path) -> None:
    """What ``lm_eval run`` runs and writes (lm-eval's ``simple_evaluate``, then its ``EvaluationTracker``), with the
    task index of the include path alone (``make_task_manager``): indexing every installed task costs 15-20 s."""
    import lm_eval
    from lm_eval.loggers import EvaluationTracker

    from flasheval.lmeval.tasks import make_task_manager

    tracker = EvaluationTracker(output_path=str(out))
    results = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=list(TASKS), device="cpu",
                                      batch_size=16, task_manager=make_task_manager(str(tasks), TASKS),
                                      log_samples=True, evaluation_tracker=tracker)
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])


@pytest.fixture(scope="module")
def world(tmp_path_factory, lmeval_tasks, lm_eval):
    root = tmp_path_factory.mktemp("lmeval_e2e")
    tiny = save_tiny_models(root / "models", seeds=(0, 1, 2))  # m0 and m2: the reference; m1: placed
    logs = root / "logs"
    _lm_eval_cli(f"pretrained={tiny['m2']},dtype=float32", lmeval_tasks, logs)
    _lm_eval_run(f"pretrained={tiny['m0']},dtype=float32", lmeval_tasks, logs)
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


@pytest.fixture(scope="module")
def lm_built(world) -> Path:
    """``reference build --engine lm-eval`` of the tiny m0 and m1 on 6 docs of each task (one build, three tests)."""
    out, tiny = world["root"] / "built", world["tiny"]
    assert main(["reference", "build", "--engine", "lm-eval", "--models", f"m0=hf:{tiny['m0']}", f"m1=hf:{tiny['m1']}",
                 "--tasks", ",".join(TASKS), "--include_path", str(world["tasks"]), "--n-examples", "6",
                 "--name", "built", "--output-root", str(out), "--work-dir", str(world["root"] / "work"),
                 "--device", "cpu"]) == 0
    return out / "built"


def test_reference_build_engine_lm_eval(world, lm_built, capsys):
    tiny = world["tiny"]
    built = load_reference(lm_built)
    assert built.manifest.build["kind"] == "lm-eval" and all(len(ids) == 6 for ids in built.example_ids)
    assert built.manifest.build["dtype"] == "float32"  # pinned: a placement in another dtype is refused
    capsys.readouterr()
    assert main(["place", "--model", f"third=hf:{tiny['m1']}", "--reference", str(lm_built), "--dtype",
                 "bfloat16", "--device", "cpu", "--output", str(world["root"] / "bf16")]) == 1
    assert "was built in float32; placing in bfloat16 would not be comparable" in capsys.readouterr().err
    assert not (world["root"] / "bf16").exists()  # refused before the model loaded
    # m0 through the bridge equals m0 through lm-eval's HF backend (the imported reference), doc for doc.
    imported = load_reference(world["ref"])
    m0 = next(m for m in imported.model_ids if m.endswith("m0"))
    for d in range(len(TASKS)):
        cols = [imported.example_ids[d].index(i) for i in built.example_ids[d]]
        assert list(built.scores[d][built.index("m0")]) == list(imported.scores[d][imported.index(m0)][cols])


def _key_sets(reference: Path, work: Path) -> dict[str, object]:
    """What a build wrote, as names: its files and every field of the manifest, the build log and the scores."""
    manifest = json.loads((reference / "manifest.json").read_text(encoding="utf-8"))
    log = read_record(work / "build.json")
    model_fields = {tuple(sorted(m)) for m in manifest["build"]["models"].values()}
    return {"reference files": sorted(p.name for p in reference.iterdir()),
            "work files": sorted(p.name for p in work.iterdir()),
            # random_baselines: written for a centered suite only (DCLM CORE here), by either engine
            "manifest": sorted(set(manifest) - {"random_baselines"}), "build models": model_fields,
            "build.json": sorted(log.payload), "columns": sorted(pd.read_parquet(reference / "scores.parquet").columns),
            "log models": sorted(log.payload["seconds"]) == sorted(log.payload["computed_requests"])
            == sorted(log.payload["examples"]) == sorted(manifest["build"]["models"])}


def test_both_engines_write_the_same_files_and_fields(world, lm_built, task_dir):
    tiny, root = world["tiny"], world["root"]
    assert main(["reference", "build", "--models", f"m0=hf:{tiny['m0']}", f"m1=hf:{tiny['m1']}", "--suite",
                 "dclm-core", "--task-dir", str(task_dir), "--tasks", "copa", "--n-examples", "2", "--device", "cpu",
                 "--name", "dclm", "--output-root", str(root / "dclm"), "--work-dir", str(root / "work-dclm")]) == 0
    dclm, lmeval = _key_sets(root / "dclm" / "dclm", root / "work-dclm"), _key_sets(lm_built, root / "work")
    assert dclm == lmeval and lmeval["log models"] is True
    assert "n_tokens" in lmeval["columns"] and "build.json" in lmeval["work files"]
    log = read_record(root / "work" / "build.json").payload
    for rows in log["examples"].values():  # every example: task, id, score, tokens (and lm-eval's prompt hash)
        assert len(rows) == 12 and all(set(EXAMPLE_FIELDS) <= set(r) and r["n_tokens"] > 0 for r in rows)
    built = load_reference(lm_built)
    assert all(t is not None and (t > 0).all() for t in built.n_tokens)
    by_doc = {(r["task_name"], r["example_id"]): r["n_tokens"] for r in log["examples"]["m0"]}
    for d, task in enumerate(built.dataset_names):  # the reference's token counts are the log's
        assert [by_doc[(task, i)] for i in built.example_ids[d]] == list(built.n_tokens[d][built.index("m0")])
    # Built again (--force) on the same work folder: everything from the store, nothing loaded, same reference.
    assert main(["reference", "build", "--engine", "lm-eval", "--models", f"m0=hf:{tiny['m0']}", f"m1=hf:{tiny['m1']}",
                 "--tasks", ",".join(TASKS), "--include_path", str(world["tasks"]), "--n-examples", "6",
                 "--name", "again", "--output-root", str(root / "again"), "--work-dir", str(root / "work"),
                 "--device", "cpu"]) == 0
    assert read_record(root / "work" / "build.json").payload["computed_requests"] == {"m0": 0, "m1": 0}
    again = load_reference(root / "again" / "again")
    for a, b in zip(built.scores + built.n_tokens, again.scores + again.n_tokens):
        np.testing.assert_array_equal(a, b)


def test_sweep_with_a_token_budget_on_an_lm_eval_build(world, lm_built):
    # Refused before the lm-eval build recorded n_tokens ("records no token counts, so a token or FLOPs budget
    # cannot be checked"). 1000 tokens pay for one checkpoint's first stage (about 740 tokens), not a second's.
    out = world["root"] / "sweep"
    run = flasheval.sweep([f"third=hf:{world['tiny']['m1']}", f"fourth=hf:{world['tiny']['m0']}"], lm_built,
                          budget=Budget(max_tokens=1000), plan=world["plan"], engine=flasheval.EngineOptions(device="cpu"), output=out, max_loaded=1)
    record = read_record(out / "sweep.json").payload
    assert record["live"]["engine"] == "lm-eval" and record["budget"]["tokens"] == 1000
    scored = [c for c in run.result.checkpoints if c.n_tokens]
    stopped = [c for c in run.result.checkpoints if not c.n_tokens]
    assert len(scored) == len(stopped) == 1 and sum(c.n_tokens for c in scored) <= 1000
    assert stopped[0].status == "unresolved at budget" and "budget" in stopped[0].reason
    live = record["live"]["checkpoints"]
    assert live[stopped[0].model_id]["loads"] == 0  # the budget stopped it before its weights loaded
    ids = [(a["task_name"], i) for a in live[scored[0].model_id]["asked"] for i in a["example_ids"]]
    assert ids and len(ids) == len(set(ids))  # never the same doc twice
