"""A training job that calls flasheval between its steps: run by ``test_training_job.py`` under a launcher.

``_training_job_worker.py LAUNCHER ROOT TASK_DIR``: ``LAUNCHER`` ``torchrun`` (the script makes its own gloo
group) or ``accelerate`` (``Accelerator(cpu=True)`` makes it). Every process trains the byte-level tiny Llama
of ``docs/examples/train_and_place.py`` with DDP (gradients all-reduced) on its own text, then, between more
training steps: ``place`` with ``distributed="main"`` by rank 0 only (rank 1 goes on to the next all-reduce and
waits there), ``place``, ``evaluate``, ``sweep`` and ``build_reference`` with ``"all"`` on every rank,
``evaluate`` with ``"main"`` by rank 0, and ``place`` with ``"main"`` by both ranks into one output folder.
After every call the group must still be there and an all-reduce must work. Each rank writes what it got to
``ROOT/LAUNCHER-rank<N>.json``; rank 0 saves the weights it placed to ``ROOT/LAUNCHER-weights`` so that the test
can score them in one process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import flasheval
from flasheval.errors import FlashevalError

ROOT_DIR = Path(__file__).resolve().parents[2]
TASKS = ("copa", "winograd")
N_EXAMPLES = 8
IDENTITY = "job/step-2"


def example():
    """``docs/examples/train_and_place.py`` (its tokenizer, model and plan)."""
    spec = importlib.util.spec_from_file_location("train_and_place", ROOT_DIR / "docs" / "examples" / "train_and_place.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def place_json(run) -> dict:
    """What must agree between modes, ranks and one process: the placement and every example scored."""
    payload = json.loads(json.dumps(run.to_json()))
    out = {key: payload[key] for key in ("rank", "interval", "tier", "status", "stages")}
    out["examples"] = payload["live"]["examples"]
    return out


def evaluate_json(run) -> dict:
    return {"tasks": {name: [t.n_examples, t.accuracy] for name, t in run.summary.tasks.items()},
            "records": [[r.task_name, r.example_id, r.correct, list(r.choice_logprob_sum)] for r in run.records]}


def sweep_json(run) -> list:
    return [{k: v for k, v in c.items() if k != "seconds"} for c in json.loads(json.dumps(run.result.to_json()))["checkpoints"]]


def build_json(built) -> dict | None:
    if built.reference is None:  # the other ranks: the main process wrote it
        return None
    return reference_json(built.reference)


def reference_json(reference) -> dict:
    """A reference's models, datasets, example ids and every score."""
    return {"models": list(reference.model_ids), "datasets": list(reference.dataset_names),
            "examples": [list(ids) for ids in reference.example_ids], "scores": [m.tolist() for m in reference.scores]}


def digest(model) -> str:
    """Of every parameter's bytes: equal weights, equal digest."""
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


def check_group(world: int) -> None:
    """The host's group survived the call: initialised, and an all-reduce still adds every rank's 1."""
    assert dist.is_initialized(), "flasheval tore the training job's process group down"
    one = torch.ones(1)
    dist.all_reduce(one)
    assert int(one.item()) == world, one


def main(launcher: str, root: Path, task_dir: Path) -> int:
    accelerator = None
    if launcher == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ex = example()
    tokenizer, model = ex.byte_tokenizer(), ex.tiny_llama(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if accelerator is not None:
        trained, optimizer = accelerator.prepare(model, optimizer)
    else:
        trained = torch.nn.parallel.DistributedDataParallel(model)
    text = f"Process {rank} reads its own shard of the training text, line after line. " * 4
    batch = torch.tensor([tokenizer(text).input_ids[:96]])

    def train(steps: int) -> None:
        trained.train()
        for _ in range(steps):
            loss = trained(input_ids=batch, labels=batch).loss
            loss.backward()  # DDP all-reduces the gradients
            optimizer.step()
            optimizer.zero_grad()

    reference = flasheval.load_reference(root / "refs" / "tiny")
    plan = flasheval.load_plan(root / "plan.yaml")
    got: dict = {"world": world}
    train(2)
    check_group(world)
    got["weights_placed"] = digest(model)
    if rank == 0:
        model.save_pretrained(root / f"{launcher}-weights")
        got["place_main"] = place_json(flasheval.place(model, reference, tokenizer=tokenizer, identity=IDENTITY,
                                                       plan=plan, output=root / f"{launcher}-main"))
        assert model.training, "handed back in the mode it came in"
    check_group(world)  # rank 1 waited here, in the training job's own all-reduce
    got["place_all"] = place_json(flasheval.place(model, reference, tokenizer=tokenizer, identity=IDENTITY, plan=plan,
                                                  output=root / f"{launcher}-all", distributed="all"))
    check_group(world)
    got["evaluate_all"] = evaluate_json(flasheval.evaluate(model, tokenizer=tokenizer, tasks=list(TASKS),
                                                           task_dir=task_dir, n_examples=N_EXAMPLES,
                                                           distributed="all"))
    check_group(world)
    if rank == 0:
        got["evaluate_main"] = evaluate_json(flasheval.evaluate(model, tokenizer=tokenizer, tasks=list(TASKS),
                                                                task_dir=task_dir, n_examples=N_EXAMPLES))
    check_group(world)
    loaded = flasheval.LoadedModel(model=model, tokenizer=tokenizer, identity=IDENTITY)
    got["sweep_all"] = sweep_json(flasheval.sweep([loaded], reference, budget=flasheval.Budget(max_examples=40),
                                                  plan=plan, output=root / f"{launcher}-sweep", distributed="all"))
    check_group(world)
    pool = [f"m{seed}=hf:{root / 'pool' / f'm{seed}'}" for seed in (10, 11, 12)]
    got["build_all"] = build_json(flasheval.build_reference(
        pool, name="tiny", suite="dclm-core", tasks=list(TASKS), task_dir=task_dir, n_examples=N_EXAMPLES, seed=7,
        engine=flasheval.EngineOptions(device="cpu"), output=root / f"{launcher}-refs",
        work_dir=root / f"{launcher}-build", distributed="all"))
    check_group(world)
    train(2)
    check_group(world)
    try:  # several processes calling with "main" into one output folder: each alone, the store's lock decides
        got["shared_main"] = place_json(flasheval.place(model, reference, tokenizer=tokenizer, identity="job/step-4",
                                                        plan=plan, output=root / f"{launcher}-shared"))
    except FlashevalError as exc:
        got["shared_main"] = {"error": str(exc)}
    check_group(world)
    got["weights"] = digest(model)
    (root / f"{launcher}-rank{rank}.json").write_text(json.dumps(got))
    dist.barrier()
    dist.destroy_process_group()  # the script's own group (or accelerate's), ended by the script
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
