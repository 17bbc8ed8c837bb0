"""The distributed contract inside a training job (issue 31): 2 processes train with all-reduce steps and call
flasheval between them, under both launchers teams use.

``torchrun`` with a gloo group the script made itself, and ``accelerate launch`` with ``Accelerator(cpu=True)``:
``place`` with ``distributed="main"`` by rank 0 alone (no hang: rank 1 waits in the job's own all-reduce),
``place``, ``evaluate``, ``sweep`` and ``build_reference`` with ``"all"`` on every rank, then more training
(``_training_job_worker.py``). No call hangs (each launch has a time limit) and none tears the group down (an
all-reduce after each). The results are identical across modes and ranks, and equal to one process scoring the
same weights here (in-process, ``"main"``), and the reference built by 2 processes equals the one built here.
Also: nothing outside the launcher code reads the launcher's environment.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flasheval
from tests.conftest import REPO_ROOT
from tests.engine.test_distributed import _free_port, one_thread

pytest.importorskip("accelerate")

WORKER = Path(__file__).with_name("_training_job_worker.py")
LAUNCH_TIMEOUT_S = 240
"""A hang fails the test instead of stalling CI (a launch takes well under a minute on 2 loaded cores)."""


def _worker():
    sys.path.insert(0, str(WORKER.parent))
    try:
        import _training_job_worker as worker
    finally:
        sys.path.pop(0)
    return worker


@pytest.fixture(scope="module")
def job_root(tmp_path_factory, task_dir) -> Path:
    """The pool's 3 tiny models and the reference ``tiny`` built from them in one process; the plan."""
    worker = _worker()
    root = tmp_path_factory.mktemp("job")
    ex = worker.example()
    tokenizer = ex.byte_tokenizer()
    for seed in (10, 11, 12):
        ex.tiny_llama(seed).save_pretrained(root / "pool" / f"m{seed}")
        tokenizer.save_pretrained(root / "pool" / f"m{seed}")
    pool = [f"m{seed}=hf:{root / 'pool' / f'm{seed}'}" for seed in (10, 11, 12)]
    one_thread(lambda: flasheval.build_reference(
        pool, name="tiny", suite="dclm-core", tasks=list(worker.TASKS), task_dir=task_dir,
        n_examples=worker.N_EXAMPLES, seed=7, engine=flasheval.EngineOptions(device="cpu"),
        output=root / "refs", work_dir=root / "build"))
    (root / "plan.yaml").write_text(ex.PLAN, encoding="utf-8")
    return root


def _command(launcher: str) -> list[str]:
    port = str(_free_port())
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", port]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", port]


_ALONE: dict[str, dict] = {}
"""One process's results per weights digest: both launchers train to the same weights, scored here once."""


def _one_process(root: Path, launcher: str, task_dir: Path, weights: str) -> dict:
    """The same calls on the weights rank 0 placed, in this one process (``distributed="main"``)."""
    if weights not in _ALONE:
        _ALONE[weights] = _score_alone(root, launcher, task_dir)
    return _ALONE[weights]


def _score_alone(root: Path, launcher: str, task_dir: Path) -> dict:
    from transformers import LlamaForCausalLM

    worker = _worker()
    tokenizer, model = worker.example().byte_tokenizer(), LlamaForCausalLM.from_pretrained(root / f"{launcher}-weights")
    reference, plan = flasheval.load_reference(root / "refs" / "tiny"), flasheval.load_plan(root / "plan.yaml")
    loaded = flasheval.LoadedModel(model=model, tokenizer=tokenizer, identity=worker.IDENTITY)

    def run() -> dict:
        return {
            "place": worker.place_json(flasheval.place(loaded, reference, plan=plan)),
            "evaluate": worker.evaluate_json(flasheval.evaluate(loaded, tasks=list(worker.TASKS), task_dir=task_dir,
                                                                n_examples=worker.N_EXAMPLES)),
            "sweep": worker.sweep_json(flasheval.sweep([loaded], reference, budget=flasheval.Budget(max_examples=40),
                                                       plan=plan, output=root / f"{launcher}-sweep-alone")),
            "reference": worker.reference_json(reference),
        }

    return one_thread(run)


@pytest.mark.slow  # two processes importing torch and transformers, training and scoring: ~30-60 s per launcher
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_a_training_job_calls_flasheval_between_steps_in_both_modes(job_root, task_dir, launcher):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*_command(launcher), str(WORKER), launcher, str(job_root), str(task_dir)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((job_root / f"{launcher}-rank{r}.json").read_text()) for r in (0, 1)]
    alone = _one_process(job_root, launcher, task_dir, ranks[0]["weights_placed"])
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas equal: the same model on both
    assert ranks[0]["weights_placed"] == ranks[1]["weights_placed"]
    for rank in ranks:  # identical across ranks, across modes, and equal to one process
        assert rank["place_all"] == alone["place"]
        assert rank["evaluate_all"] == alone["evaluate"]
        assert rank["sweep_all"] == alone["sweep"]
    assert ranks[0]["place_main"] == alone["place"] and "place_main" not in ranks[1]
    assert ranks[0]["evaluate_main"] == alone["evaluate"]
    assert ranks[0]["build_all"] == alone["reference"] and ranks[1]["build_all"] is None
    assert len(alone["place"]["stages"]) > 1  # several looks: the comparison covers escalation
    # "main" from both ranks into one output folder: each scores alone; the store's per-model lock refuses a
    # second writer in one line, and a rank that comes after the first one finished is served its results
    shared = [rank["shared_main"] for rank in ranks]
    assert any("error" not in s for s in shared)
    for s in shared:
        assert s == next(x for x in shared if "error" not in x) or "another flasheval run holds the shard" in s["error"]


def _environment_reads(tree: ast.AST) -> list[str]:
    """Names of the launcher's variables read through ``os.environ`` / ``os.getenv`` in a module."""
    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in names:
            found.append(node.value)
    return found


def test_nothing_outside_the_launcher_reads_the_launch_environment():
    """flasheval never guesses who called it from ``WORLD_SIZE``/``RANK``/...: only ``flasheval/cli/launch.py``
    (the command line's launcher code) names them."""
    package = REPO_ROOT / "flasheval"
    readers = {str(p.relative_to(REPO_ROOT)): _environment_reads(ast.parse(p.read_text(encoding="utf-8")))
               for p in sorted(package.rglob("*.py"))}
    assert {p: sorted(set(names)) for p, names in readers.items() if names} == {
        "flasheval/cli/launch.py": ["LOCAL_RANK", "RANK", "WORLD_SIZE"]}  # read once there, and checked
    assert _environment_reads(ast.parse('import os\nos.environ.get("LOCAL_RANK", "0")')) == ["LOCAL_RANK"]


CALLS = {
    "place": lambda d: flasheval.place("m=hf:/nonexistent", "helm_lite", distributed=d),
    "evaluate": lambda d: flasheval.evaluate("hf:/nonexistent", tasks="copa", task_dir="/nonexistent", distributed=d),
    "sweep": lambda d: flasheval.sweep(["m=hf:/nonexistent"], "helm_lite", budget=flasheval.Budget(max_examples=9),
                                       distributed=d),
    "build_reference": lambda d: flasheval.build_reference(["m=hf:/nonexistent"], name="x", distributed=d),
    "lm_eval": lambda d: flasheval.lm_eval("hf:/nonexistent", tasks="arc_easy", distributed=d),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_distributed_is_checked_at_every_entry_in_one_line(call):
    with pytest.raises(flasheval.InputError) as refused:
        CALLS[call]("every")
    assert str(refused.value) == "field 'distributed': unknown value 'every' (allowed: main, all)"
    import torch.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(flasheval.InputError) as alone:  # before anything else is looked at (the paths do not exist)
        CALLS[call]("all")
    message = str(alone.value)
    assert message.startswith("field 'distributed': 'all' needs the caller's torch.distributed process group")
    assert "distributed='main'" in message and "accelerate launch / torchrun" in message and "\n" not in message


def test_main_never_touches_torch_distributed():
    """``distributed="main"`` imports nothing of torch.distributed (so it cannot depend on a group's state)."""
    code = ("import sys; from flasheval.engine.coordination.distributed import check_distributed, processes; "
            "assert processes('main') is None and check_distributed('main') == 'main'; "
            "print(any(m.startswith('torch') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.stdout.strip() == "False", done.stderr[-2000:]


@pytest.mark.slow  # two processes importing torch and transformers; the "all" call waits up to the 10 s timeout
def test_a_time_budget_past_the_groups_timeout_warns_and_all_called_alone_says_so(job_root):
    worker = WORKER.with_name("_group_timeout_worker.py")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*_command("torchrun"), str(worker), str(job_root)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    got = json.loads((job_root / "timeout-rank0.json").read_text())
    assert got["group"] == [2, 10.0], done.stderr[-3000:]  # read from the group the script made
    assert any("max_seconds=20 is not below the process group's timeout" in w and "(10 s)" in w
               for w in got["warnings"]), got["warnings"]
    message = got["all_alone"]
    assert "distributed='all' is collective: every process of the group must make this same call" in message, message
    assert "distributed='main'" in message and "\n" not in message
    assert [c.step for c in flasheval.read_run(job_root / "timeout-run").checkpoints] == [1]  # nothing of step 2
