"""``flasheval reference build --engine lm-eval`` (called by :mod:`flasheval.cli.reference`).

Every model is scored on the same docs of lm-eval tasks through lm-eval's task code and
flasheval's engine (:func:`flasheval.reference.lmeval_live.build_lmeval_reference`); the reference
records the lm-eval settings a live placement must reproduce.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from flasheval.cli._built import print_built
from flasheval.engine import parse_named_models
from flasheval.errors import InputError
from flasheval.lmeval import require_lm_eval
from flasheval.reference import MANIFEST_FILE, references_root, write_reference

__all__ = ["build_lmeval"]


def build_lmeval(args: argparse.Namespace) -> int:
    """Build an lm-eval reference from ``args`` (the ``reference build`` arguments); returns the exit code."""
    require_lm_eval()
    from flasheval.reference.lmeval_live import build_lmeval_reference

    tasks = [t.strip() for t in (args.tasks or "").split(",") if t.strip()]
    if not tasks:
        raise InputError("name the lm-eval tasks to score (comma-separated)", field="--tasks")
    models = parse_named_models(args.models)
    out = references_root(args.output_root) / args.name
    if (out / MANIFEST_FILE).exists() and not args.force:
        raise InputError("reference already exists (use --force to overwrite)", path=out)
    work = Path(args.work_dir or Path("runs") / f"reference-build-{args.name}")
    include = str(Path(args.include_path).resolve()) if args.include_path else None
    start = time.perf_counter()
    result = build_lmeval_reference(models, tasks, include_path=include, num_fewshot=args.num_fewshot,
                                    fewshot_seed=args.fewshot_seed, n_examples=args.n_examples, seed=args.seed,
                                    metric=args.metric, dtype=args.dtype, store_dir=work / "store",
                                    device=args.device, batch_size=args.batch_size)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    metrics = sorted({t.metric for t in result.settings.tasks.values()})
    write_reference(out, result.frame, name=args.name,
                    source=f"flasheval reference build --engine lm-eval (lm-eval {result.settings.lm_eval_version})",
                    licence="scores of the listed models; see each model's licence",
                    metric=f"per-example lm-eval metric ({', '.join(metrics)})", aggregate="mean",
                    built_with="flasheval " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                    build=result.settings.to_json(),
                    notes="Built through lm-eval's task code; place live models with the same lm-eval version "
                          "and tasks.")
    print_built(out, start=start, seconds=result.seconds, computed=result.computed, datasets="lm-eval tasks",
                value_label="mean", footer=f"results store: {work / 'store'}")
    return 0
