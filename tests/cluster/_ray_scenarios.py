"""The Ray scenarios of ``test_ray_cluster``, run in ONE child process on ONE two-node cluster.

``python -m tests.cluster._ray_scenarios SPEC.json`` (inside a network namespace that holds only loopback, so that
Ray binds to 127.0.0.1): starts a ``ray.cluster_utils.Cluster`` (a head and a second node, 1 CPU each, a small
object store), runs every scenario the spec names through the CLI or the API exactly as a user would, writes
``results.json`` (what each scenario returned or the one line it refused with) into the spec's ``out`` and stops
the cluster. The parent test compares the folders written here with the same runs in its own process.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

MB = 2**20


def _start_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 80 * MB, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    worker = cluster.add_node(num_cpus=1, object_store_memory=80 * MB)
    cluster.wait_for_nodes()
    return cluster, worker


def _sweep_args(spec: dict, out: str, *extra: str) -> list[str]:
    models = spec["models"]
    return ["sweep", "--models", *[f"{n}=hf:{models[m]}" for n, m in (("a", "m2"), ("b", "m3"), ("c", "m4"))],
            "--reference", spec["reference"], "--budget-examples", str(spec["budget"]), "--output", out,
            "--tiers", spec["plan"], "--device", "cpu", "-q", *extra]


def _node_removed_sweep(spec: dict, out: str, cluster, worker, address: str) -> dict:
    """The sweep through the API, the second node removed once the first round is served."""
    import flasheval
    from flasheval.api.options import EngineOptions
    from flasheval.cluster.executor import RayExecutor
    from flasheval.placement.results import Budget

    import logging

    removed, retried = [], []

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            retried.append(record.getMessage())

    pool_log = logging.getLogger("flasheval.cluster.pool")
    pool_log.addHandler(Retries(logging.WARNING))
    pool_log.setLevel(logging.WARNING)  # whatever an earlier command's --quiet set

    def progress(event) -> None:
        if event.step == "round" and event.done == 1 and not removed:
            cluster.remove_node(worker)
            removed.append(time.time())

    models = spec["models"]
    flasheval.sweep([f"{n}=hf:{models[m]}" for n, m in (("a", "m2"), ("b", "m3"), ("c", "m4"))], spec["reference"],
                    budget=Budget(max_examples=spec["budget"]), output=out, engine=EngineOptions(device="cpu"),
                    plan=spec["plan"],
                    progress=progress, executor=RayExecutor(address=address, max_models=2, progress=False))
    return {"removed": bool(removed), "retried": retried}


KILLED_DRIVER = """
import os, signal, sys
import flasheval
from flasheval.api.options import EngineOptions
from flasheval.cluster.executor import RayExecutor

address, m0, m1, task_dir = sys.argv[1:]


def killed(event):  # the driver killed (kill -9) as the first model is scored: its results are in the store
    if event.step == "model":
        os.kill(os.getpid(), signal.SIGKILL)


flasheval.build_reference([f"m0=hf:{m0}", f"m1=hf:{m1}"], name="tiny", suite="dclm-core", task_dir=task_dir,
                          tasks="copa,winograd", n_examples=12, seed=7, engine=EngineOptions(device="cpu"),
                          output="refs", work_dir="work", progress=killed,
                          executor=RayExecutor(address=address, max_models=1, progress=False))
"""


def _killed_build(spec: dict, out: Path, address: str) -> dict:
    """A Ray build whose driver is killed (``kill -9``) once its first model is scored (one actor: the second has not
    started), then the same command as the local build run again in its folder, then once more: what each computed,
    the actors each started."""
    import subprocess

    from flasheval.cli import main as cli
    from flasheval.cluster.pool import ModelPool
    from flasheval.records.run_record import read_record

    folder = out / "killed"
    (folder / "rerun").mkdir(parents=True)
    args = spec["build_args"]
    began = time.perf_counter()
    killed = subprocess.run([sys.executable, "-c", KILLED_DRIVER, address, spec["models"]["m0"], spec["models"]["m1"],
                             args[args.index("--task-dir") + 1]], cwd=folder, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    killed_seconds = time.perf_counter() - began
    shards = sum(p.stat().st_size > 0 for p in (folder / "work" / "store" / "shards").glob("*.jsonl"))
    started = []
    start = ModelPool._start
    ModelPool._start = lambda self: started.append(1) or start(self)  # counts the actors started
    argv = [*args, "--executor", "ray", "--ray-address", address]
    sys.argv = ["flasheval", *argv]  # what the manifest records (less the executor's options)
    os.chdir(folder)
    try:
        rerun = cli(argv)
        actors, rerun_seconds = len(started), time.perf_counter() - began - killed_seconds
        shutil.move(folder / "refs", folder / "rerun" / "refs")  # the same command again: nothing left to compute
        shutil.move(folder / "work" / "build.json", folder / "rerun" / "build.json")
        again = cli(argv)
    finally:
        ModelPool._start = start
    return {"killed": killed.returncode, "killed_stderr": killed.stderr[-2000:], "shards_after_kill": shards,
            "rerun": rerun, "rerun_actors": actors, "again": again,
            "again_computed": read_record(folder / "work" / "build.json").payload["computed_requests"],
            "again_actors": len(started) - actors, "killed_seconds": killed_seconds, "rerun_seconds": rerun_seconds}


def _refusal(run) -> str:
    """The one line a CLI call prints on stderr (or an API call raises) when it refuses."""
    import contextlib
    import io

    from flasheval.errors import FlashevalError

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = run()
    except FlashevalError as exc:
        return str(exc)
    return err.getvalue().strip() if code else "no error"


def _refusals(spec: dict, address: str) -> dict:
    from flasheval.cli import main

    out = spec["out"]
    models = spec["models"]

    def sweep_with(*extra: str):
        return lambda: main(["sweep", "--models", f"a=hf:{models['m2']}", "--reference", spec["reference"],
                             "--budget-examples", "30", "--output", f"{out}/refused", "--device", "cpu", "-q",
                             "--executor", "ray", *extra])

    import flasheval
    from flasheval.cluster.executor import RayExecutor
    from flasheval.placement.results import Budget

    def memory():
        flasheval.sweep([f"a=hf:{models['m2']}"], spec["reference"], budget=Budget(max_examples=30),
                        output=f"{out}/refused-memory", executor=RayExecutor(address=address, memory_gb=4096))

    return {"unreachable": _refusal(sweep_with("--ray-address", "127.0.0.1:9")),
            "gpu": _refusal(sweep_with("--ray-address", address, "--gpus-per-model", "1")),
            "memory": _refusal(memory)}


def main(path: str) -> int:
    spec = json.loads(Path(path).read_text())
    out = Path(spec["out"])
    results: dict = {}
    start = time.perf_counter()
    cluster, worker = _start_cluster()
    results["cluster_seconds"] = time.perf_counter() - start
    try:
        import ray

        ray.init(address=cluster.address, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
        results["node_ips"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
        from flasheval.cli import main as cli

        address = cluster.address
        for name in spec["scenarios"]:
            while name not in ("build", "killed_build") and not Path(spec["ready"]).exists():  # the parent's build of the reference
                time.sleep(0.2)
            began = time.perf_counter()
            try:
                if name == "sweep":
                    results[name] = cli(_sweep_args(spec, str(out / "sweep"), "--executor", "ray", "--ray-address",
                                                    address, "--max-models", "2"))
                elif name == "resume":  # the sweep run again in a copy of its folder: everything is stored
                    shutil.copytree(out / "sweep", out / "sweep-again")
                    results[name] = cli(_sweep_args(spec, str(out / "sweep-again"), "--executor", "ray",
                                                    "--ray-address", address, "--max-models", "2"))
                elif name == "build":
                    argv = [*spec["build_args"], "--executor", "ray", "--ray-address", address]
                    sys.argv = ["flasheval", *argv]  # what the manifest records (less the executor's options)
                    os.chdir(out)  # the build's relative --output-root and --work-dir, as the local build's
                    results[name] = cli(argv)
                elif name == "killed_build":
                    results[name] = _killed_build(spec, out, address)
                elif name == "watch":
                    results[name] = cli([*spec["watch_args"], "--run", str(out / "run"), "--executor", "ray",
                                         "--ray-address", address])
                elif name == "refusals":
                    results[name] = _refusals(spec, address)
                elif name == "node_removed":
                    results[name] = _node_removed_sweep(spec, str(out / "node-removed"), cluster, worker, address)
            except Exception:  # noqa: BLE001 - reported to the parent test, which fails with it
                results[name] = {"error": traceback.format_exc()}
            results[f"{name}_seconds"] = time.perf_counter() - began
    finally:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        import ray

        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
