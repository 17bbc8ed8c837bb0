"""Live placement on real checkpoints (issue 6, item 3): reference from three models, place the fourth.

Steps, all through the ``flasheval`` CLI (each a fresh process, as a user would run them):

1. ``flasheval reference build`` scores EVERY model on the CORE subset (first ``--n-examples`` of
   each task's seeded order) into one reference ``live-all`` (reused when it exists with the
   same settings; the results store makes a rerun after a kill resume where it stopped). This
   is both the full-data run of each held-out model and the reference build of the others;
2. for each held-out model, the three-model reference is the same build without it (written
   with the same build settings, so a placement checks it exactly as any built reference);
3. ``flasheval place --model NAME=gguf:FILE --reference live-without-NAME`` places the held-out
   model live, with a FRESH results store (nothing is reused from step 1);
4. the placed rank and interval are compared with the model's rank among all four on the
   full data; examples, tokens and wall time of the placement with those of its full run;
5. with ``--evaluate``, ``flasheval evaluate`` of the held-out model on the same tasks and examples
   (a fresh store) is the measured full run: its tokens and seconds against the placement's, and
   against the full run the placement projected at the throughput it measured (``place.json``'s
   ``timing``: wall, load, forward-pass and outside-the-model seconds).

With three reference models the ranks are 1..4. ``--models`` builds the reference from fewer of the
fixture models; ``--in-pool`` places a copy of each held-out model (named ``NAME-live``) on the
all-models reference instead, the model itself staying in the pool (with two models: a pool of two,
ranks 1..3). Prints one table and writes a JSON record.

Usage::

    nice -n 10 /work/venv/bin/python benchmarks/live_placement.py [--holdout NAME ...] \\
        [--tasks copa,openbook_qa,winograd] [--n-examples 40] [--work-dir runs/live_placement]
    python benchmarks/live_placement.py --models smollm2-135m gemma3-270m --holdout smollm2-135m --in-pool \\
        --evaluate --tasks winograd,openbook_qa --n-examples 200 --work-dir runs/live200
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from flasheval.records.run_record import read_record, write_record  # noqa: E402
from flasheval.reference import load_reference, write_reference  # noqa: E402

MODELS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
DEFAULT_TASKS = "copa,openbook_qa,winograd"


def _shared_task_dir() -> Path:
    shared = Path(os.environ.get("FLASHEVAL_SHARED") or REPO.parent / "shared")
    return shared / "data" / "tasks"


def _model_specs(cache: Path, names: list[str]) -> dict[str, str]:
    entries = json.loads((cache / "models.json").read_text(encoding="utf-8"))["models"]
    missing = [n for n in names if n not in entries]
    if missing:
        sys.exit(f"live_placement: models {missing} are not in {cache}/models.json; run benchmarks/fetch_models.py")
    return {n: entries[n]["spec"] for n in names}


def _flasheval(args: list[str]) -> float:
    """Run ``python -m flasheval ARGS`` (output passed through); its wall seconds."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "flasheval", *args], cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"live_placement: 'flasheval {' '.join(args[:2])}' failed with status {proc.returncode}")
    return time.perf_counter() - start


def build_all(args: argparse.Namespace, specs: dict[str, str], refs: Path, work: Path) -> float:
    """Step 1: the all-models reference (reused when its settings match)."""
    folder = refs / "live-all"
    if (folder / "manifest.json").is_file():
        build = load_reference(folder).manifest.build or {}
        same = (build.get("tasks") == args.tasks.split(",") and build.get("n_examples") == args.n_examples
                and build.get("seed") == args.seed and sorted(build.get("models", {})) == sorted(specs))
        if same:
            print(f"reusing {folder} (same settings)")
            return 0.0
    return _flasheval(["-v", "reference", "build", "--models", *[f"{n}={s}" for n, s in specs.items()],
                       "--suite", "dclm-core", "--task-dir", str(args.task_dir), "--tasks", args.tasks,
                       "--n-examples", str(args.n_examples), "--seed", str(args.seed), "--dtype", "float32",
                       "--device", "cpu", "--name", "live-all", "--output-root", str(refs), "--work-dir",
                       str(work / "work"), "--force"])


def without(refs: Path, holdout: str) -> Path:
    """Step 2: the reference built from every model but ``holdout`` (same build settings)."""
    full = load_reference(refs / "live-all")
    frame = pd.read_parquet(full.path / "scores.parquet")
    frame = frame[frame["model"].astype(str) != holdout]
    build = dict(full.manifest.build or {})
    build["models"] = {k: v for k, v in build["models"].items() if k != holdout}
    name = f"live-without-{holdout}"
    m = full.manifest
    return write_reference(refs / name, frame, name=name, source=m.source, licence=m.licence, metric=m.metric,
                           aggregate=m.aggregate, random_baselines=m.random_baselines, build=build,
                           built_with=f"{m.built_with} (rows of {holdout} removed by benchmarks/live_placement.py)",
                           notes=m.notes)


def evaluate_full(args: argparse.Namespace, specs: dict[str, str], work: Path, holdout: str) -> dict[str, float]:
    """Step 5: ``flasheval evaluate`` of ``holdout`` on the reference's tasks and examples (fresh store)."""
    out = work / f"full-{holdout}"
    if out.exists():
        shutil.rmtree(out)
    seconds = _flasheval(["evaluate", "--model", specs[holdout], "--task-dir", str(args.task_dir), "--tasks",
                          args.tasks, "--n-examples", str(args.n_examples), "--seed", str(args.seed), "--dtype",
                          "float32", "--device", "cpu", "--output", str(out)])
    compute = read_record(out / "summary.json").payload["compute"]
    return {"seconds": seconds, **{k: compute[k] for k in ("n_examples", "n_tokens", "wall_seconds", "load_seconds",
                                                           "scoring_seconds")}}


def full_data(refs: Path, work: Path, holdout: str) -> dict[str, float]:
    """Rank among all models on the full data, and the held-out model's full-run cost."""
    full = load_reference(refs / "live-all")
    rank = {row.model_id: row.rank for row in full.ranking()}[holdout]
    i = full.index(holdout)
    log = read_record(work / "work" / "build.json").payload
    return {"rank": rank, "examples": int(sum(len(e) for e in full.example_ids)),
            "tokens": int(sum(int(t[i].sum()) for t in full.n_tokens)), "seconds": float(log["seconds"][holdout]),
            "value": float(full.aggregate_values()[i])}


def place_one(args: argparse.Namespace, specs: dict[str, str], refs: Path, work: Path, holdout: str) -> dict:
    """Steps 2-5 for one held-out model (``--in-pool``: a copy of it placed on the all-models reference)."""
    in_pool = getattr(args, "in_pool", False)
    ref = refs / "live-all" if in_pool else without(refs, holdout)
    out = work / f"place-{holdout}"
    if out.exists():
        shutil.rmtree(out)  # a fresh store: the placement really runs the model
    name = f"{holdout}-live" if in_pool else holdout
    seconds = _flasheval(["place", "--model", f"{name}={specs[holdout]}", "--reference", str(ref),
                          "--tiers", args.tiers, "--output", str(out), "--device", "cpu"])
    payload = read_record(out / "place.json").payload
    log = read_record(work / "work" / "build.json").payload
    return {"holdout": holdout, "status": payload["status"], "rank": payload["rank"],
            "interval": payload["interval"], "stages": len(payload["stages"]),
            "examples": payload["compute"]["n_examples"], "tokens": payload["compute"]["n_tokens"],
            "full_tokens_projected": payload["compute"]["full_tokens"],
            "seconds": seconds, "load_seconds": payload["live"]["load_seconds"], "timing": payload.get("timing"),
            "reference_seconds": sum(s for m, s in log["seconds"].items() if in_pool or m != holdout),
            "full": full_data(refs, work, holdout),
            "evaluate": evaluate_full(args, specs, work, holdout) if getattr(args, "evaluate", False) else None}


def _table(rows: list[dict]) -> str:
    head = (f"{'held out':<20} {'placed rank [95% CI]':<21} {'full rank':>9} {'status':<22} {'examples':>11} "
            f"{'tokens':>15} {'place s':>8} {'full s':>7} {'ref build s':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        f = r["full"]
        lines.append(f"{r['holdout']:<20} {r['rank']!s:>2} [{r['interval'][0]}, {r['interval'][1]}]{'':<12} "
                     f"{f['rank']:>9} {r['status']:<22} {r['examples']:>5}/{f['examples']:<5} "
                     f"{r['tokens']:>7}/{f['tokens']:<7} {r['seconds']:>8.0f} {f['seconds']:>7.0f} "
                     f"{r['reference_seconds']:>11.0f}")
    return "\n".join(lines)


def _seconds_table(rows: list[dict]) -> str:
    """Placement against the measured full run (``--evaluate``): tokens and seconds, and the projection."""
    head = (f"{'held out':<20} {'tokens place/eval':>17} {'place wall':>10} {'load':>5} {'model':>6} {'outside':>7} "
            f"{'looks':>6} {'tok/s':>6} {'projected full':>14} {'eval wall':>9} {'eval load':>9} {'eval scoring':>12}")
    lines = [head, "-" * len(head)]
    for r in rows:
        t, e = r.get("timing") or {}, r.get("evaluate")
        if e is None or not t:
            continue
        lines.append(f"{r['holdout']:<20} {r['tokens']:>8}/{e['n_tokens']:<8} {t['wall_seconds']:>10.1f} "
                     f"{t['load_seconds']:>5.1f} {t['scoring_seconds']:>6.1f} {t['outside_model_seconds']:>7.2f} "
                     f"{t['looks_seconds']:>6.2f} {t['tokens_per_second'] or 0:>6.0f} "
                     f"{t['full_wall_seconds'] or 0:>14.1f} {e['wall_seconds']:>9.1f} {e['load_seconds']:>9.1f} "
                     f"{e['scoring_seconds']:>12.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS),
                   help="fixture models the reference is built from (default: all four)")
    p.add_argument("--holdout", action="append", choices=MODELS, help="model to place (repeat; default: every model)")
    p.add_argument("--in-pool", action="store_true",
                   help="place a copy NAME-live on the all-models reference (the model stays in the pool)")
    p.add_argument("--evaluate", action="store_true",
                   help="also run flasheval evaluate of the held-out model on the same examples (the full run)")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="CORE tasks (default: %(default)s)")
    p.add_argument("--n-examples", type=int, default=40, help="examples per task (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tiers", default="default", help="tier plan of the placements (default: %(default)s)")
    p.add_argument("--task-dir", type=Path, default=_shared_task_dir())
    p.add_argument("--model-cache", type=Path,
                   default=Path(os.environ.get("FLASHEVAL_MODEL_CACHE") or Path.home() / ".cache/flasheval/models"))
    p.add_argument("--work-dir", type=Path, default=REPO / "runs" / "live_placement")
    args = p.parse_args(argv)
    specs = _model_specs(args.model_cache, args.models)
    if not set(args.holdout or ()) <= set(args.models):
        sys.exit(f"live_placement: --holdout must be among --models ({', '.join(args.models)})")
    refs, work = args.work_dir / "refs", args.work_dir
    build_seconds = build_all(args, specs, refs, work)
    rows: list[dict] = []
    for holdout in args.holdout or args.models:
        rows.append(place_one(args, specs, refs, work, holdout))
        print(_table(rows[-1:]), flush=True)
        path = write_record(work / "live_placement.json", kind="benchmark-live-placement",  # after each model
                            payload={"tasks": args.tasks.split(","), "n_examples": args.n_examples, "seed": args.seed,
                                     "tiers": args.tiers, "models": args.models, "in_pool": args.in_pool,
                                     "build_seconds": build_seconds, "rows": rows})
    print(f"\nreference: {args.tasks} x {args.n_examples} examples (seed {args.seed}, float32); all-models build "
          f"{build_seconds:.0f} s this run (0 = reused); ranks are 1..{len(args.models) + args.in_pool} "
          f"({len(args.models) - (not args.in_pool)} reference models + the placed one)")
    print(_table(rows))
    if args.evaluate:
        print("\nseconds (place: its record's timing; eval: flasheval evaluate of the same examples, fresh store)")
        print(_seconds_table(rows))
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
