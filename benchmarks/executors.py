"""The same live sweep in this process, on Ray with 1 actor and on Ray with 2 actors (issue 45, item 8).

A reference of two small seeded Llamas (``--hidden``, ``--layers``; byte tokenizer, built once in this process)
on ``--tasks`` (``--n-examples`` each), then ``--checkpoints`` more Llamas swept against it under one example
budget, ``--repeats`` times in each of three modes, alternating (the order rotates every repeat, so a busy
machine slows every mode alike):

* ``in-process``: ``flasheval.sweep`` as it runs by default, with one torch thread;
* ``ray-1``: ``executor=RayExecutor(max_models=1)`` on a Ray started here (one actor, one CPU, one thread);
* ``ray-2``: ``RayExecutor(max_models=2)`` (two actors, one thread each).

Each sweep starts from an empty run folder (nothing from the store), its actors started and its models loaded
inside the time measured: what a user waits for. Every mode's record is checked equal to the in-process one
(timings and loads aside) before any figure is printed. Prints each run, then the medians: Ray's overhead at
one actor against in-process (the goal: at most 15%) and the 2-actor speed-up over 1 actor and over in-process.

Usage::

    .venv/bin/python benchmarks/executors.py     # 4 checkpoints x 2 tasks x 100 examples, medians of 3: about 18 min
                                                 # on 2 busy cores (one run of each mode: 113 s, 130 s, 107 s)
    .venv/bin/python benchmarks/executors.py --repeats 1 --checkpoints 2 --n-examples 12   # a quick check
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import flasheval  # noqa: E402
from flasheval.cluster.executor import RayExecutor  # noqa: E402
from flasheval.placement.results import Budget  # noqa: E402
from flasheval.records.run_record import read_record  # noqa: E402

from benchmarks.seconds_saved import byte_tokenizer  # noqa: E402  (the byte-level tokenizer, built in code)

MODES = ("in-process", "ray-1", "ray-2")
TIMINGS = {"load_seconds", "seconds", "loads", "max_loaded"}
PLAN = ("name: escalating\nstop_rule: interval\nconfidence_level: 0.95\ncorrection: none\nestimator: control-variate\n"
        "n_resamples: 200\nstages: [{}, {}, {}, all]\ntiers:\n  - {{ranks: [1, 1], resolution: maximal}}\n"
        "  - {{ranks: [2, null], resolution: maximal}}\n")
"""Four looks per checkpoint (a quarter of the examples per task, a half, three quarters, all): several rounds."""


def _save_llama(folder: Path, seed: int, *, hidden: int, layers: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=258, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=256, eos_token_id=257)
    torch.manual_seed(seed)  # the script's own models
    LlamaForCausalLM(config).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return f"hf:{folder}"


def _one_thread(run):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each actor runs
    try:
        return run()
    finally:
        torch.set_num_threads(threads)


def _masked(value):
    if isinstance(value, dict):
        return {k: None if k in TIMINGS else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _sweep(mode: str, specs: list[str], reference: Path, out: Path, args: argparse.Namespace) -> float:
    shutil.rmtree(out, ignore_errors=True)
    executor = None if mode == "in-process" else RayExecutor(max_models=int(mode[-1]), progress=False)
    start = time.perf_counter()
    _one_thread(lambda: flasheval.sweep(specs, reference, budget=Budget(max_examples=args.budget), plan=args.plan,
                                        engine=flasheval.EngineOptions(device="cpu"), output=out, executor=executor))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", default="copa,winograd")
    parser.add_argument("--n-examples", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--task-dir", default=str(REPO.parent / "shared" / "data" / "tasks"))
    parser.add_argument("--work-dir", default="runs/bench-executors")
    args = parser.parse_args(argv)
    import ray

    root = Path(args.work_dir)
    shutil.rmtree(root, ignore_errors=True)
    tasks = args.tasks.split(",")
    pool = [f"r{i}={_save_llama(root / 'models' / f'r{i}', i, hidden=args.hidden, layers=args.layers)}" for i in (0, 1)]
    specs = [f"c{i}={_save_llama(root / 'models' / f'c{i}', 10 + i, hidden=args.hidden, layers=args.layers)}"
             for i in range(args.checkpoints)]
    built = _one_thread(lambda: flasheval.build_reference(
        pool, name="bench", suite="dclm-core", tasks=tasks, task_dir=args.task_dir, n_examples=args.n_examples,
        seed=7, engine=flasheval.EngineOptions(device="cpu"), output=root / "refs", work_dir=root / "build"))
    n = args.n_examples
    (root / "plan.yaml").write_text(PLAN.format(max(1, n // 4), max(2, n // 2), max(3, 3 * n // 4)))
    args.plan = str(root / "plan.yaml")
    args.budget = len(specs) * len(tasks) * args.n_examples * 3 // 4
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    for repeat in range(args.repeats):
        order = MODES[repeat % 3:] + MODES[:repeat % 3]
        for mode in order:
            seconds[mode].append(_sweep(mode, specs, built.path, root / "sweeps" / mode, args))
            print(f"repeat {repeat + 1} {mode:<10} {seconds[mode][-1]:7.2f} s", flush=True)
    ray.shutdown()
    local = _masked(read_record(root / "sweeps" / "in-process" / "sweep.json").payload)
    for mode in MODES[1:]:
        if _masked(read_record(root / "sweeps" / mode / "sweep.json").payload) != local:
            print(f"{mode}: the sweep record differs from the in-process one", file=sys.stderr)
            return 1
    median = {m: statistics.median(s) for m, s in seconds.items()}
    print(f"\n{len(specs)} checkpoints x {len(tasks)} tasks x {args.n_examples} examples, budget {args.budget} "
          f"examples, {args.layers} layers x {args.hidden} hidden; medians of {args.repeats}, records equal")
    for mode in MODES:
        print(f"  {mode:<10} {median[mode]:7.2f} s  (runs: {', '.join(f'{s:.2f}' for s in seconds[mode])})")
    print(f"Ray's overhead at 1 actor against in-process: {median['ray-1'] / median['in-process'] - 1:+.1%} "
          "(goal: at most +15%)")
    print(f"2 actors: {median['ray-1'] / median['ray-2']:.2f}x faster than 1 actor, "
          f"{median['in-process'] / median['ray-2']:.2f}x faster than in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
