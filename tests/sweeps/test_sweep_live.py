"""``flasheval sweep`` with live checkpoints: tiny seeded Llamas (``hf:`` folders) on a tiny built reference.

The models are random, so the ranks mean nothing; what is checked is the path: every checkpoint
is placed, only nested prefixes of the reference's seeded order are asked, a rerun computes
nothing, and the refusals; at most ``--max-loaded`` checkpoints in memory without changing a
result; and 2 data-parallel processes (``accelerate launch``, gloo) giving the results of one,
for the sweep and for the ``reference build`` it runs against.
"""

from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path

import numpy as np
import pytest

from flasheval.cli import main
from flasheval.reference.scoring.live import LiveOptions, prepare_scoring
from flasheval.placement.results import Budget
from flasheval.sweeps.schedule import sweep
from flasheval.sweeps.models import CheckpointPool
from flasheval.sweeps.folder import STORE_FORMAT, open_run_folder
from flasheval.placement.tiers import load_tier_plan
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference
from flasheval.stats.sampling import example_order
from flasheval.tasks import resolve_task_file, task_spec
from tests._tiny_models import save_tiny_models
from tests.engine.test_distributed import launch, one_thread

TASKS = ("copa", "winograd")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("models"), seeds=(0, 1, 2, 3, 4))


def _build_args(tiny_models: dict[str, Path], root: Path, name: str) -> list[str]:
    return ["reference", "build", "--models", *[f"{m}=hf:{tiny_models[m]}" for m in ("m0", "m1")],
            "--suite", "dclm-core", "--task-dir", str(root / "tasks"), "--tasks", ",".join(TASKS),
            "--n-examples", "12", "--seed", "7", "--device", "cpu", "--name", name,
            "--output-root", str(root / "refs"), "--work-dir", str(root / f"work-{name}")]


@pytest.fixture(scope="module")
def built(tiny_models, task_dir: Path, tmp_path_factory) -> Path:
    """A reference of m0 and m1 on 12 examples of copa and winograd (seed 7), built by one process."""
    root = tmp_path_factory.mktemp("built")
    for name in TASKS:
        source = resolve_task_file(task_spec(name), task_dir)
        rel = source.path.relative_to(task_dir)
        (root / "tasks" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.path, root / "tasks" / rel)
    # one torch thread, as the launched processes of the 2-process tests run
    assert one_thread(lambda: main(_build_args(tiny_models, root, "tiny"))) == 0
    return root / "refs" / "tiny"


def _sweep(models: dict[str, Path], reference: Path, out: Path, *extra: str) -> int:
    return main(["sweep", "--models", f"a=hf:{models['m2']}", f"b=hf:{models['m3']}", "--reference", str(reference),
                 "--budget-examples", "60", "--output", str(out), "--device", "cpu", *extra])


@pytest.mark.slow
def test_live_sweep_places_each_checkpoint_on_nested_prefixes_and_resumes(tiny_models, built, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert _sweep(tiny_models, built, out) == 0
    text = capsys.readouterr().out
    assert "sweeping 2 live checkpoints (float32" in text and "backtest" not in text
    payload = read_record(out / "sweep.json").payload
    ref = load_reference(built)
    rows = {c["model_id"]: c for c in payload["checkpoints"]}
    assert set(rows) == {"a", "b"} and "backtest" not in payload
    spent = 0
    for model_id, row in rows.items():
        assert 1 <= row["interval"][0] <= row["rank"] <= row["interval"][1] <= ref.n_models + 1
        live = payload["live"]["checkpoints"][model_id]
        n_asked = 0
        for d, ids in zip(ref.dataset_names, ref.example_ids):
            asked = [i for a in live["asked"] if a["task_name"] == d for i in a["example_ids"]]
            assert asked == list(example_order(ids, seed=7, task_name=d)[:len(asked)])  # nested prefix, each once
            n_asked += len(asked)
        assert n_asked == row["n_examples"] > 0
        assert live["requests_computed"] == 2 * n_asked  # two continuations per copa / winograd example
        assert (out / "models" / model_id).is_dir()
        spent += n_asked
    assert spent == payload["compute"]["n_examples"] <= 60
    # a rerun serves every example from the run folder's stores: no request computed, same result
    assert _sweep(tiny_models, built, out) == 0
    assert "already stored: resuming" in capsys.readouterr().out
    again = read_record(out / "sweep.json").payload
    assert again["n_computed"] == 0
    assert all(c["requests_computed"] == 0 and c["asked"] == [] for c in again["live"]["checkpoints"].values())
    assert [(c["model_id"], c["rank"], c["interval"]) for c in again["checkpoints"]] == \
        [(c["model_id"], c["rank"], c["interval"]) for c in payload["checkpoints"]]


def test_live_sweep_refusals(tiny_models, built, tmp_path, capsys):
    assert _sweep(tiny_models, Path("helm_lite"), tmp_path / "s") == 1  # not a built reference
    err = capsys.readouterr().err
    assert "was not built by 'flasheval reference build'" in err and len(err.strip().splitlines()) == 1
    assert _sweep(tiny_models, built, tmp_path / "s", "--seed", "8") == 1
    assert "built with seed 7" in capsys.readouterr().err
    assert _sweep(tiny_models, built, tmp_path / "s", "--dtype", "bfloat16") == 1
    assert "built in float32" in capsys.readouterr().err
    assert _sweep(tiny_models, built, tmp_path / "s", "--max-loaded", "0") == 1
    assert "field '--max-loaded': must be an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["sweep", "--models", "replay:m0", f"hf:{tiny_models['m2']}", "--reference", str(built),
                 "--budget-examples", "60"]) == 1
    assert "replay:MODEL_ID specs or live specs, not both" in capsys.readouterr().err
    assert main(["sweep", "--models", "x=gguf:/nope/x.gguf", "--reference", str(built), "--budget-examples", "60"]) == 1
    assert "model files not found: x" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def _escalating_plan(folder: Path) -> Path:
    """A plan that climbs several small stages (so the sweep has several rounds on 12 examples)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.yaml"
    path.write_text("name: escalating\nstop_rule: interval\nconfidence_level: 0.95\ncorrection: none\n"
                    "estimator: control-variate\nn_resamples: 200\nstages: [3, 6, 9, all]\ntiers:\n"
                    "  - {ranks: [1, 1], resolution: maximal}\n  - {ranks: [2, null], resolution: maximal}\n")
    return path


def _scores(run_folder: Path) -> dict[str, str]:
    """Every checkpoint's shard of per-example scores in a run folder, by file name."""
    return {p.name: p.read_text() for p in sorted((run_folder / "shards").glob("*.jsonl"))}


def _pooled_sweep(tiny_models: dict[str, Path], built: Path, out: Path, max_loaded: int):
    """Sweep m2, m3, m4 through a :class:`CheckpointPool`; also count the models alive at each load.

    The opener is the real loader; it records a weak reference to every loaded model, so the
    count of models still in memory when another loads is an independent check of the eviction.
    """
    options = LiveOptions(device="cpu")
    setup = prepare_scoring(load_reference(built), options)
    alive: list[weakref.ref] = []
    in_memory_at_load: list[int] = []

    def opener(model, store_dir):
        gc.collect()
        in_memory_at_load.append(sum(ref() is not None for ref in alive))
        opened = setup.open(model, store_dir, options=options)
        alive.append(weakref.ref(opened.backend.backend.model))
        return opened

    from flasheval.engine.specs import parse_named_models

    models = parse_named_models([f"{m}=hf:{tiny_models[m]}" for m in ("m2", "m3", "m4")])
    run = open_run_folder(out, {"store_format": STORE_FORMAT}, [m.model_id for m in models])
    with run, CheckpointPool(models, out, opener, max_loaded=max_loaded) as pool:
        scorers = {m: run.scorer(m, live) for m, live in pool.scorers.items()}
        result = sweep(setup.reference, scorers, load_tier_plan(_escalating_plan(out)), budget=Budget(max_examples=90),
                       seed=setup.seed, low_rank=4)
    assert max(len(c.stages) for c in result.checkpoints) > 1  # several rounds, so the pool switches models
    return result, pool, in_memory_at_load


@pytest.mark.slow
def test_at_most_max_loaded_checkpoints_in_memory_same_records(tiny_models, built, tmp_path):
    one, pool_one, at_load_one = _pooled_sweep(tiny_models, built, tmp_path / "one", max_loaded=1)
    every, pool_every, at_load_every = _pooled_sweep(tiny_models, built, tmp_path / "every", max_loaded=3)
    assert one.checkpoints == every.checkpoints and one.order == every.order  # same records
    assert max(at_load_one) == 0 and pool_one.peak_loaded == 1  # the previous model was freed before each load
    assert sum(pool_one.loads.values()) > 3  # checkpoints were evicted and loaded again ...
    computed = {m: pool_one.requests_computed(m) for m in pool_one.loads}
    assert computed == {m: pool_every.requests_computed(m) for m in pool_every.loads}  # ... recomputing nothing
    assert all(n > 0 for n in computed.values())
    assert pool_every.loads == {"m2": 1, "m3": 1, "m4": 1} and max(at_load_every) == 2  # the count sees live models
    assert _scores(tmp_path / "one") == _scores(tmp_path / "every")


@pytest.mark.slow
def test_a_live_sweep_of_three_checkpoints_calls_each_model_once_per_look(tiny_models, built, tmp_path, monkeypatch):
    # count the engine calls (score_requests: one batch-first pass over a list of requests) of each model; with at
    # most one model in memory, the model a call runs is the one opened last
    from flasheval.reference.scoring import scorers as scoring

    options = LiveOptions(device="cpu")
    setup = prepare_scoring(load_reference(built), options)
    opened: list[str] = []
    calls: dict[str, int] = {}
    real = scoring.score_requests

    def counting(backend, requests, **kwargs):
        calls[opened[-1]] = calls.get(opened[-1], 0) + 1
        return real(backend, requests, **kwargs)

    def opener(model, store_dir):
        opened.append(model.model_id)
        return setup.open(model, store_dir, options=options)

    monkeypatch.setattr(scoring, "score_requests", counting)
    from flasheval.engine.specs import parse_named_models

    models = parse_named_models([f"{m}=hf:{tiny_models[m]}" for m in ("m2", "m3", "m4")])
    out = tmp_path / "sweep"
    with open_run_folder(out, {"store_format": STORE_FORMAT}, [m.model_id for m in models]) as run, \
            CheckpointPool(models, out, opener, max_loaded=1) as pool:
        result = sweep(setup.reference, {m: run.scorer(m, live) for m, live in pool.scorers.items()},
                       load_tier_plan(_escalating_plan(out)), budget=Budget(max_examples=90), seed=setup.seed, low_rank=4)
    looks = {c.model_id: len(c.stages) for c in result.checkpoints}
    assert len(looks) == 3 and max(looks.values()) > 1  # several looks: the pool switched models between rounds
    assert calls == looks  # one call per look, with both tasks' requests (not one per task)
    asked = {m: [a["task_name"] for a in pool.checkpoint_json(m)["asked"]] for m in looks}
    assert all(set(a) == set(TASKS) for a in asked.values())


@pytest.mark.slow
def test_reference_build_and_live_sweep_on_two_processes_equal_one(tiny_models, built, tmp_path):
    root = built.parent.parent
    launch("-m flasheval", *_build_args(tiny_models, root, "tiny2"), timeout=400)
    for name in ("tiny", "tiny2"):
        assert (root / f"work-{name}" / "store").is_dir()
    one_ref, two_ref = load_reference(built), load_reference(root / "refs" / "tiny2")
    assert one_ref.model_ids == two_ref.model_ids and one_ref.example_ids == two_ref.example_ids
    for a, b in zip(one_ref.scores + one_ref.n_tokens, two_ref.scores + two_ref.n_tokens):
        np.testing.assert_array_equal(a, b)
    logs = [read_record(root / f"work-{name}" / "build.json").payload for name in ("tiny", "tiny2")]
    assert logs[0]["examples"] == logs[1]["examples"]  # every example's score, tokens, few-shot ids, prompt digest

    single = tmp_path / "single"
    assert one_thread(lambda: _sweep(tiny_models, built, single, "--max-loaded", "1")) == 0
    launch("-m flasheval", "sweep", "--models", f"a=hf:{tiny_models['m2']}", f"b=hf:{tiny_models['m3']}",
           "--reference", str(built), "--budget-examples", "60", "--output", str(tmp_path / "two"), "--device", "cpu",
           "--max-loaded", "1", timeout=400)
    one, two = read_record(single / "sweep.json").payload, read_record(tmp_path / "two" / "sweep.json").payload
    assert two["live"]["world_size"] == 2 and one["live"]["world_size"] == 1
    for key in ("checkpoints", "order", "compute"):
        assert two[key] == one[key]
    for model_id in ("a", "b"):
        for field in ("asked", "requests_computed", "fingerprint"):
            assert two["live"]["checkpoints"][model_id][field] == one["live"]["checkpoints"][model_id][field]
    assert _scores(tmp_path / "two") == _scores(single)
