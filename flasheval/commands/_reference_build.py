"""``flasheval reference build``: score real models on a suite and write a reference from them.

Registered by :mod:`flasheval.commands.reference` as its ``build`` action.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from flasheval.errors import InputError
from flasheval.live import load_live_tasks
from flasheval.records import write_record
from flasheval.reference import MANIFEST_FILE, load_reference, repo_root, write_reference

__all__ = ["add_build_parser", "run_build", "BUILD_DTYPES"]

BUILD_DTYPES = ("float32", "bfloat16", "float16")
"""A reference pins its dtype (``auto`` would depend on the machine)."""


def add_build_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``build`` action to ``flasheval reference`` (the caller sets its ``func``)."""
    p = sub.add_parser("build", help="score real models on a task suite and write a reference from them")
    p.add_argument("--models", nargs="+", required=True, metavar="[NAME=]SPEC",
                   help="gguf:FILE or hf:PATH_OR_ID, optionally named NAME=SPEC")
    p.add_argument("--suite", required=True, help="task suite (flasheval tasks list), e.g. dclm-core")
    p.add_argument("--task-dir", required=True, help="folder holding the task files (llm-foundry local_data layout)")
    p.add_argument("--tasks", help="comma-separated subset of the suite's tasks (default: all of them)")
    p.add_argument("--n-examples", type=int, help="examples per task: the first N of the seeded order (default: all)")
    p.add_argument("--seed", type=int, default=1234, help="fixes example order and few-shot sets (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=BUILD_DTYPES, help="pinned in the reference (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-prefix-space", action="store_true",
                   help="do not prepend a space to continuations (SentencePiece-only pools; default: prefix space)")
    p.add_argument("--name", required=True, help="reference name (folder name)")
    p.add_argument("--output-root", help="where NAME/ is written (default: $FLASHEVAL_REFERENCES or <repo>/reference_rankings)")
    p.add_argument("--work-dir", help="results store and build log (default: runs/reference-build-NAME)")
    p.add_argument("--force", action="store_true", help="overwrite an existing reference folder")
    return p


def _task_names(args: argparse.Namespace) -> tuple[str, ...]:
    from flasheval.tasks import load_suite

    suite = load_suite(args.suite)
    if not args.tasks:
        return suite.task_names
    wanted = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    outside = [t for t in wanted if t not in suite.task_names]
    if outside or not wanted:
        raise InputError(f"tasks {outside} are not in suite {args.suite!r}", field="--tasks",
                         allowed=suite.task_names)
    return wanted


def run_build(args: argparse.Namespace) -> int:
    from flasheval.reference_build import build_reference, parse_named_models
    from flasheval.tasks import load_suite

    if args.n_examples is not None and args.n_examples < 1:
        raise InputError(f"must be >= 1, got {args.n_examples}", field="--n-examples")
    models = parse_named_models(args.models)
    task_names = _task_names(args)
    root = Path(args.output_root or os.environ.get("FLASHEVAL_REFERENCES") or repo_root() / "reference_rankings")
    out = root / args.name
    if (out / MANIFEST_FILE).exists() and not args.force:
        raise InputError("reference already exists (use --force to overwrite)", path=out)
    tasks = load_live_tasks(task_names, args.task_dir)
    work = Path(args.work_dir or Path("runs") / f"reference-build-{args.name}")
    start = time.perf_counter()
    result = build_reference(models, tasks, suite=args.suite, seed=args.seed, n_examples=args.n_examples,
                             dtype=args.dtype, store_dir=work / "store", prefix_space=not args.no_prefix_space,
                             device=args.device, batch_size=args.batch_size, task_dir=str(Path(args.task_dir).resolve()))
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    suite = load_suite(args.suite)
    centered = suite.aggregate == "centered_mean"
    baselines = {t.name: t.spec.baseline_dclm_v2_pct / 100.0 for t in tasks} if centered else None
    write_reference(out, result.frame, name=args.name, source="flasheval reference build (live scores)",
                    licence="scores of the listed models; see each model's licence",
                    metric="per-example accuracy under llm-foundry's rule (1 correct, 0 not)",
                    aggregate="centered" if centered else "mean", random_baselines=baselines,
                    built_with="flasheval " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                    build=result.settings.to_json(),
                    notes="Built by scoring models live; place live models with the same task files, seed and dtype.")
    write_record(work / "build.json", kind="reference-build", payload={
        "reference": str(out), "settings": result.settings.to_json(), "seconds": dict(result.seconds),
        "computed_requests": dict(result.computed),
        "examples": {m: [o.to_json() for o in outs] for m, outs in result.outcomes.items()}})
    ref = load_reference(out)
    print(f"wrote {out}: {ref.n_models} models x {len(ref.dataset_names)} tasks, "
          f"{sum(len(e) for e in ref.example_ids)} examples per model, in {time.perf_counter() - start:.0f} s")
    for row in ref.ranking():
        m = row.model_id
        print(f"  {row.rank}. {m:<28} {ref.manifest.aggregate} {row.value:.4f}  "
              f"({result.seconds[m]:.0f} s, {result.computed[m]} requests computed)")
    print(f"  build log: {work / 'build.json'}; results store: {work / 'store'}")
    return 0
