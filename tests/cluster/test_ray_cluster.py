"""Sweeps, reference builds and the watcher on a real two-node Ray cluster equal the same runs in this process.

Ray binds to the machine's interface address even when told 127.0.0.1 (checked: without a namespace both nodes
report the host's address), so the scenarios run in a child process inside a network namespace that holds only
loopback (``unshare --net``, ``ip link set lo up``: the nodes then report 127.0.0.1). ONE child starts ONE
two-node ``ray.cluster_utils.Cluster`` for every scenario (:mod:`tests.cluster._ray_scenarios`); the tests here
run the same commands in this process and compare: the sweep record (timings and the executor's loads aside) and
every checkpoint's store shard byte for byte, with the second node removed after the first round too; the built
reference's files byte for byte and its build log (seconds and the folder's path aside), also of a Ray build whose
driver was killed after its first model and run again (only the other model computed); the watcher's run folder.
Without ``ray``, or where the namespace cannot be made, they skip with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.records.run_record import read_record
from flasheval.tasks import resolve_task_file, task_spec
from tests._tiny_models import save_tiny_models
from tests.engine.test_distributed import one_thread

TASKS = ("copa", "winograd")
BUDGET = 90
ROOT = Path(__file__).resolve().parents[2]
TIMINGS = {"load_seconds", "seconds", "wall_seconds", "scoring_seconds", "looks_seconds", "import_seconds",
           "elapsed", "created", "created_at", "duration_seconds", "outside_model_seconds", "tokens_per_second",
           "full_scoring_seconds", "full_wall_seconds", "time_saving"}


def _namespace_reason() -> str | None:
    """Why the loopback-only namespace cannot be made here (``None``: it can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing"
    probe = subprocess.run(["unshare", "--net", "--", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace (unshare --net: {probe.stderr.strip() or probe.returncode})"
    return None


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("models"), seeds=(0, 1, 2, 3, 4))


def _build_args(models: dict[str, Path], tasks: Path) -> list[str]:
    """Run in the folder the build writes into (relative paths: the same command, recorded in the manifest)."""
    return ["reference", "build", "--models", *[f"{m}=hf:{models[m]}" for m in ("m0", "m1")], "--suite", "dclm-core",
            "--task-dir", str(tasks), "--tasks", ",".join(TASKS), "--n-examples", "12", "--seed", "7",
            "--device", "cpu", "--name", "tiny", "--output-root", "refs", "--work-dir", "work", "-q"]


@pytest.fixture(scope="module")
def world(tiny_models, task_dir: Path, tmp_path_factory) -> dict:
    """The local runs and the Ray ones (one child, one cluster): their folders, and what the child reported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("ray is not installed (pip install -e '.[ray]')")
    reason = _namespace_reason()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("cluster")
    for name in TASKS:
        source = resolve_task_file(task_spec(name), task_dir)
        (root / "tasks" / source.path.relative_to(task_dir)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.path, root / "tasks" / source.path.relative_to(task_dir))
    local, remote = root / "local", root / "ray"
    remote.mkdir()
    build_args = _build_args(tiny_models, root / "tasks")
    plan = root / "plan.yaml"  # several small stages: several rounds on 12 examples
    plan.write_text("name: escalating\nstop_rule: interval\nconfidence_level: 0.95\ncorrection: none\n"
                    "estimator: control-variate\nn_resamples: 200\nstages: [3, 6, 9, all]\ntiers:\n"
                    "  - {ranks: [1, 1], resolution: maximal}\n  - {ranks: [2, null], resolution: maximal}\n")
    spec = {"models": {k: str(v) for k, v in tiny_models.items()}, "reference": str(local / "refs" / "tiny"),
            "budget": BUDGET, "plan": str(plan), "out": str(remote), "build_args": build_args,
            "ready": str(root / "reference-built"), "watch_args": _watch_args(tiny_models, root, plan),
            "scenarios": ["build", "killed_build", "refusals", "sweep", "resume", "watch", "node_removed"]}
    (root / "spec.json").write_text(json.dumps(spec))
    with open(root / "child.log", "w") as log:
        child = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" -m '
                                  'tests.cluster._ray_scenarios "$1"', sys.executable, str(root / "spec.json")],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        _local_runs(tiny_models, build_args, local, spec, plan)  # while the cluster starts and runs the same
        child.wait(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    stderr = (root / "child.log").read_text()
    results_path = remote / "results.json"
    assert results_path.is_file(), stderr[-4000:]
    results = json.loads(results_path.read_text())
    for name, value in results.items():
        assert not (isinstance(value, dict) and "error" in value), f"{name}: {value['error']}"
    return {"local": local, "ray": remote, "results": results, "stderr": stderr}


def _watch_args(tiny_models: dict[str, Path], root: Path, plan: Path) -> list[str]:
    """``watch --once`` of a folder of two saved checkpoints (steps 20 and 30) on the tiny reference."""
    for name, model in (("step-20", "m2"), ("step-30", "m3")):
        shutil.copytree(tiny_models[model], root / "ckpts" / name)
    return ["watch", str(root / "ckpts"), "--reference", str(root / "local" / "refs" / "tiny"), "--tiers", str(plan),
            "--device", "cpu", "--once", "--settle", "0", "-q"]


def _local_runs(tiny_models: dict[str, Path], build_args: list[str], local: Path, spec: dict, plan: Path) -> None:
    """The build and the sweep in this process, one torch thread as each actor runs."""
    argv, sys.argv, cwd = sys.argv, ["flasheval", *build_args], os.getcwd()  # the manifest records the command
    local.mkdir()
    os.chdir(local)
    try:
        assert one_thread(lambda: main(build_args)) == 0
    finally:
        sys.argv = argv
        os.chdir(cwd)
    Path(spec["ready"]).touch()
    sweep_args = ["sweep", "--models", *[f"{n}=hf:{tiny_models[m]}" for n, m in (("a", "m2"), ("b", "m3"), ("c", "m4"))],
                  "--reference", spec["reference"], "--budget-examples", str(BUDGET), "--output", str(local / "sweep"),
                  "--tiers", str(plan), "--device", "cpu", "-q"]
    assert one_thread(lambda: main(sweep_args)) == 0
    assert one_thread(lambda: main([*spec["watch_args"], "--run", str(local / "run")])) == 0


def _masked(value, drop=frozenset()):
    """``value`` with every timing (and the keys in ``drop``) replaced by a mark."""
    if isinstance(value, dict):
        return {k: "<masked>" if k in TIMINGS or k in drop else _masked(v, drop) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, drop) for v in value]
    return value


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "shards").glob("*.jsonl"))}


def _same_sweep(local: Path, remote: Path) -> None:
    mine, theirs = read_record(local / "sweep.json").payload, read_record(remote / "sweep.json").payload
    drop = {"loads", "max_loaded"}  # how many times a checkpoint was opened depends on the actors, not the result
    assert _masked(theirs, drop) == _masked(mine, drop)
    assert _shards(remote) == _shards(local) and len(_shards(local)) == 3


@pytest.mark.slow
def test_the_cluster_binds_to_loopback_only(world):
    assert world["results"]["node_ips"] == ["127.0.0.1"]


@pytest.mark.slow
def test_a_sweep_on_ray_equals_the_sweep_in_process(world):
    assert world["results"]["sweep"] == 0
    _same_sweep(world["local"] / "sweep", world["ray"] / "sweep")
    payload = read_record(world["ray"] / "sweep" / "sweep.json").payload
    assert payload["live"]["max_loaded"] == 2 and payload["n_rounds"] > 1


@pytest.mark.slow
def test_a_sweep_on_ray_run_again_computes_nothing_and_starts_no_actor(world):
    assert world["results"]["resume"] == 0
    first = read_record(world["ray"] / "sweep" / "sweep.json").payload
    again = read_record(world["ray"] / "sweep-again" / "sweep.json").payload
    assert first["n_computed"] > 0 and again["n_computed"] == 0
    assert all(c["loads"] == 0 and c["requests_computed"] == 0 for c in again["live"]["checkpoints"].values())
    drop = {"n_computed", "loads", "requests_computed", "asked", "fingerprint"}  # nothing asked of the models
    assert _masked(again, drop) == _masked(first, drop)
    assert _shards(world["ray"] / "sweep-again") == _shards(world["ray"] / "sweep")


@pytest.mark.slow
def test_a_node_removed_mid_sweep_loses_nothing(world):
    outcome = world["results"]["node_removed"]
    assert outcome["removed"] and outcome["retried"]  # the dead node's actor had work, served again elsewhere
    assert all("its Ray actor died (ActorDiedError); served again on another actor (retry 1 of 2)" in line
               for line in outcome["retried"])
    _same_sweep(world["local"] / "sweep", world["ray"] / "node-removed")


@pytest.mark.slow
def test_a_reference_built_on_ray_equals_the_build_in_process(world):
    assert world["results"]["build"] == 0
    local, remote = world["local"] / "refs" / "tiny", world["ray"] / "refs" / "tiny"
    files = sorted(p.name for p in local.iterdir())
    assert files == sorted(p.name for p in remote.iterdir()) and "scores.parquet" in files
    for name in files:
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name
    mine = read_record(world["local"] / "work" / "build.json").payload
    theirs = read_record(world["ray"] / "work" / "build.json").payload
    assert _masked(theirs) == _masked(mine)


@pytest.mark.slow
def test_a_ray_build_killed_after_its_first_model_scores_only_the_other_when_run_again(world):
    """The driver killed (``kill -9``) as its first model is scored: that model's results are in the work folder's
    store, and the build run again computes only the other's (one actor started), then, run once more, nothing (no
    actor); the files equal the build in this process each time."""
    outcome, mine = world["results"]["killed_build"], read_record(world["local"] / "work" / "build.json").payload
    assert outcome["killed"] == -9 and outcome["shards_after_kill"] == 1, outcome["killed_stderr"]
    assert outcome["rerun"] == outcome["again"] == 0
    assert outcome["rerun_actors"] == 1 and outcome["again_actors"] == 0
    assert outcome["again_computed"] == {"m0": 0, "m1": 0} and mine["computed_requests"]["m1"] > 0
    folder, local = world["ray"] / "killed", world["local"] / "refs" / "tiny"
    rerun = read_record(folder / "rerun" / "build.json").payload
    assert rerun["computed_requests"] == {"m0": 0, "m1": mine["computed_requests"]["m1"]}
    for built, log in ((folder / "rerun" / "refs" / "tiny", rerun),
                       (folder / "refs" / "tiny", read_record(folder / "work" / "build.json").payload)):
        assert sorted(p.name for p in built.iterdir()) == sorted(p.name for p in local.iterdir())
        for path in local.iterdir():
            assert (built / path.name).read_bytes() == path.read_bytes(), path.name
        assert _masked(log, {"computed_requests"}) == _masked(mine, {"computed_requests"})


@pytest.mark.slow
def test_every_refusal_is_one_line_before_any_work(world):
    refused = world["results"]["refusals"]
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in refused["unreachable"]
    assert "no node of the Ray cluster has the resources one model needs (1 CPUs, 1 GPUs" in refused["gpu"]
    assert "4096.0 GiB memory" in refused["memory"]
    assert all("\n" not in line for line in refused.values())
    assert not any((world["ray"] / name).exists() for name in ("refused", "refused-memory"))  # no folder made


def test_without_ray_the_executor_is_refused_in_one_line(monkeypatch, tmp_path):
    import flasheval
    from flasheval.placement.results import Budget

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(InputError, match=r"needs ray, which is not installed; install it with: pip install"):
        flasheval.build_reference([f"a=hf:{tmp_path}", f"b=hf:{tmp_path}"], name="x", suite="dclm-core",
                                  task_dir=tmp_path, tasks="copa", output=tmp_path / "refs", work_dir=tmp_path / "w",
                                  executor="ray")
    with pytest.raises(InputError, match="field 'executor': unknown executor 'slurm'"):
        flasheval.sweep(["replay:x"], budget=Budget(max_examples=10), executor="slurm")


@pytest.mark.slow
def test_watch_once_on_ray_equals_watch_once_in_process(world):
    assert world["results"]["watch"] == 0
    local, remote = world["local"] / "run", world["ray"] / "run"
    records = sorted(p.relative_to(local) for p in local.glob("checkpoints/*/place.json"))
    assert len(records) == 2 and records == sorted(p.relative_to(remote) for p in remote.glob("checkpoints/*/place.json"))
    for path in records:
        assert _masked(read_record(remote / path).payload) == _masked(read_record(local / path).payload), path
    assert read_record(remote / "run.json").payload == read_record(local / "run.json").payload  # the run's settings


def test_the_executor_options_are_checked_before_anything_runs(tmp_path, capsys):
    from flasheval.cluster.executor import RayExecutor, check_reachable

    for bad, field in (({"num_cpus": 0}, "num_cpus"), ({"num_gpus": -1}, "num_gpus"), ({"max_models": 0}, "max_models"),
                       ({"max_retries": True}, "max_retries"), ({"address": " "}, "--ray-address")):
        with pytest.raises(InputError, match=f"field '{field}'"):
            RayExecutor(**bad)
    with pytest.raises(InputError, match="expected HOST:PORT"):
        check_reachable("nohost")
    assert main(["sweep", "--backtest", "3", "--budget-examples", "100", "--ray-address", "h:1",
                 "--output", str(tmp_path / "s")]) == 1
    assert "field '--ray-address': applies to --executor ray only" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
