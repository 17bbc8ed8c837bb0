"""Scale: placements on pools of thousands, backtests, sweeps of hundreds of checkpoints, big stores and imports.

Every figure is printed next to its peer measured in the same run: the same job at a smaller size
(placement: a 200-model pool; backtest: a 1,000-model pool; sweep: 100 checkpoints), or the earlier
release's code path (the store's single file, kept verbatim in ``benchmarks/_scale_store.py``), and
the ratio. Times are wall-clock seconds and, for the CPU-bound parts, CPU seconds of this process
(``time.process_time``), which a shared machine's load inflates less; the machine's load average is
printed with them.

Parts (``--only`` picks some; all by default, about 20-30 minutes on 2 cores):

``placement``
    First the issue's figure: ``flasheval.place`` of the model at index ``n // 3`` of each of four synthetic
    pools, ``synthetic_reference(n, [1000, 800, 1200, 500, 1500, 700], rng=r)`` for ``r = 0..3``, replayed
    with the default plan, at ``n = 200`` and ``n = 4,000``: CPU seconds of the whole call (outside the
    scorer: the replay scorer costs nothing), the calibration cold (an empty cache folder, an empty memo),
    after one warm-up placement on a small pool (imports); each pool's 4,000 / 200 ratio and the worst ratio
    (target: at most 10x on every pool). The two sizes alternate; ``--repeats`` runs of each, medians.
    Then one replayed model on pools of 200, 1,000 and 4,000 models (6 datasets, 5,700 examples): the
    calibration's share, the same placement again with the calibration on disk, and the calibrated
    constant with the screen against the full simulation (every position on every path).
``backtest``
    ``backtest --held-out 200`` (default methods) on a 4,000-model pool, and on a 1,000-model pool.
``sweep``
    A replay sweep (``flasheval.sweep``) of 500 checkpoints on a 200-model pool with a budget of 1,500
    examples per checkpoint: seconds per round, per look served, and in total; against 100 checkpoints.
``store``
    ``benchmarks/_scale_store.py``: a store of 1,000,000 results.
``import``
    ``benchmarks/_scale_import.py``: lm-eval sample logs of 1,000 models x 6 tasks x 2,000 docs, and a long
    parquet of 5,000 models (the logs take about 13 GB of temporary disk while they exist).

``--small`` runs every part at about a tenth of its size (a smoke run, minutes).

Run: ``python benchmarks/scale.py`` (or ``--only placement,sweep``, ``--small``) from the repo root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

PARTS = ("placement", "backtest", "sweep", "store", "import")
SIZES = (1000, 1000, 1000, 1000, 1000, 700)  # 6 datasets, 5,700 examples
POOL_SIZES = (1000, 800, 1200, 500, 1500, 700)  # issue 32's four pools: 6 datasets, 5,700 examples


def _row(figure: str, value: float, unit: str, peer: str = "", peer_value: float | None = None,
         note: str = "") -> dict[str, Any]:
    return {"figure": figure, "value": value, "unit": unit, "peer": peer, "peer_value": peer_value, "note": note}


def _timed(fn: Any) -> tuple[Any, float, float]:
    """``(result, wall seconds, CPU seconds)`` of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _fresh_memo() -> None:
    from flasheval.placement import calibration

    calibration._MEMO.clear()


def _place_cold(n: int, r: int) -> tuple[float, float, Any]:
    """``(CPU s, wall s, PlaceRun)`` of ``flasheval.place`` of the model at ``n // 3`` of pool ``r`` (``n`` models),
    its calibration cold: an empty cache folder and an empty memo."""
    import flasheval
    from flasheval.analysis.simulation import synthetic_reference

    ref = synthetic_reference(n, POOL_SIZES, rng=r)
    held = ref.model_ids[n // 3]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["FLASHEVAL_CACHE"] = cache
        _fresh_memo()
        run, wall, cpu = _timed(lambda: flasheval.place(f"replay:{held}", ref, seed=0))
    os.environ["FLASHEVAL_CACHE"] = "off"
    return cpu, wall, run


def measure_pools(sizes: tuple[int, int] = (200, 4000), pools: tuple[int, ...] = (0, 1, 2, 3),
                  repeats: int = 3) -> list[dict[str, Any]]:
    """Issue 32's placement overhead: CPU of ``place`` with a cold calibration on each pool at both sizes, medians
    of ``repeats`` alternating runs; one row per pool (the larger size against the smaller) and the worst ratio."""
    small, large = sizes
    _place_cold(50, 9)  # warm-up: imports and first calls are no part of a placement's overhead
    rows, ratios = [], []
    for r in pools:
        cpu: dict[int, list[float]] = {small: [], large: []}
        runs: dict[int, Any] = {}
        loads = []
        for _ in range(repeats):
            for n in sizes:  # alternate the two sizes, so that a change of the machine's load hits both
                seconds, _, runs[n] = _place_cold(n, r)
                cpu[n].append(seconds)
                loads.append(os.getloadavg()[0])
        a, b = float(np.median(cpu[large])), float(np.median(cpu[small]))
        ratios.append(a / b)
        got = {n: runs[n].placement for n in sizes}
        rows.append(_row(f"place, pool {r}: {large} models (CPU, cold calibration)", a, "s", f"{small} models", b,
                         f"runs {', '.join(f'{x:.2f}' for x in cpu[large])} / {', '.join(f'{x:.2f}' for x in cpu[small])}"
                         f" s; load {min(loads):.1f}-{max(loads):.1f}; placed {got[large].rank} {list(got[large].interval)}"
                         f" in {got[large].compute.n_examples} examples / {got[small].rank} {list(got[small].interval)}"
                         f" in {got[small].compute.n_examples}"))
    worst = int(np.argmax(ratios))
    rows.append(_row(f"place, {large} / {small} models: worst ratio of the {len(pools)} pools", max(ratios), "x", "",
                     None, f"pool {pools[worst]}; ratios " + ", ".join(f"{x:.1f}" for x in ratios) + "; target <= 10x"))
    return rows


def measure_placement(sizes: tuple[int, ...] = (200, 1000, 4000)) -> list[dict[str, Any]]:
    """Placement overhead per pool size, the calibration's share, a cached rerun, screened vs full constants."""
    from flasheval.placement import calibration, looks
    from flasheval.placement.controller import place, plan_looks
    from flasheval.reference.scoring.replay import ReplayScorer
    from flasheval.analysis.simulation import synthetic_reference
    from flasheval.placement.tiers import load_tier_plan

    plan = load_tier_plan("default")
    rows, first = [], {}
    for n in sizes:
        ref = synthetic_reference(n + 1, SIZES, rng=0)
        held = ref.model_ids[n // 3]
        pool = ref.without(held)
        with tempfile.TemporaryDirectory() as cache:
            os.environ["FLASHEVAL_CACHE"] = cache
            _fresh_memo()
            plan_ = plan.for_pool(n + 1)
            captured: dict[str, Any] = {}
            real = looks.calibrated_constant

            def capture(values: Any, se: Any, fits: Any, level: float, **kw: Any) -> Any:
                captured.update(values=np.asarray(values), se=np.asarray(se), fits=fits, level=level)
                return real(values, se, fits, level, **kw)

            looks.calibrated_constant = capture
            try:
                lp, wall_looks, cpu_looks = _timed(lambda: plan_looks(pool, plan))
            finally:
                looks.calibrated_constant = real
            result, wall_rest, cpu_rest = _timed(lambda: place(pool, ReplayScorer(ref, held), plan, model_id=held,
                                                               looks=lp))
            _fresh_memo()  # another process: the calibration comes from disk
            _, wall_cached, cpu_cached = _timed(lambda: place(pool, ReplayScorer(ref, held), plan, model_id=held))
        os.environ["FLASHEVAL_CACHE"] = "off"
        cpu_total, wall_total = cpu_looks + cpu_rest, wall_looks + wall_rest
        first.setdefault("cpu", cpu_total)
        first.setdefault("wall", wall_total)
        peer = f"{sizes[0]}-model pool" if n != sizes[0] else ""
        rows.append(_row(f"place, {n}-model pool: overhead outside the scorer (CPU)", cpu_total, "s", peer,
                         first["cpu"] if peer else None,
                         f"wall {wall_total:.1f} s; calibration {cpu_looks:.1f} s CPU; rank {result.rank} "
                         f"{list(result.interval)}"))
        rows.append(_row(f"place, {n}-model pool, calibration on disk (CPU)", cpu_cached, "s",
                         "the same placement calibrating", cpu_total, f"wall {wall_cached:.1f} s"))
        _fresh_memo()
        args = (captured["values"], captured["se"], captured["fits"], captured["level"])
        screened, _, cpu_s = _timed(lambda: calibration._calibrate(*args, n_paths=4000, scales=(0.25, 0.5, 1.0, 2.0),
                                                                   step=0.025, seed=0, chunk=32, screen_paths=1000,
                                                                   screen_tail=1e-6))
        full, _, cpu_f = _timed(lambda: calibration._calibrate(*args, n_paths=4000, scales=(0.25, 0.5, 1.0, 2.0),
                                                               step=0.025, seed=0, chunk=32, screen_paths=4000,
                                                               screen_tail=1e-6))
        rows.append(_row(f"calibrated constant, {n}-model pool (screened)", screened.constant, "",
                         "full simulation (no screen)", full.constant,
                         f"worst miss {screened.worst_miss:.4f} vs {full.worst_miss:.4f}; "
                         f"{cpu_s:.1f} s vs {cpu_f:.1f} s CPU"))
    return rows


def measure_backtest(sizes: tuple[int, ...] = (1000, 4000), k: int = 200) -> list[dict[str, Any]]:
    """``backtest(held_out=k)`` with the default methods on synthetic pools of ``sizes``."""
    from flasheval.api.backtest import backtest
    from flasheval.analysis.simulation import synthetic_reference

    rows, first = [], None
    for n in sizes:
        ref = synthetic_reference(n, SIZES, rng=1)
        _fresh_memo()
        run, wall, cpu = _timed(lambda: backtest(ref, "default", held_out=k))
        adaptive = run.results[0].summaries[0]
        first = wall if first is None else first
        rows.append(_row(f"backtest --held-out {k}, {n}-model pool (wall)", wall, "s",
                         f"{sizes[0]}-model pool" if n != sizes[0] else "", first if n != sizes[0] else None,
                         f"CPU {cpu:.0f} s; adaptive within {adaptive.share_within:.1%} (SE {adaptive.share_within_se:.1%}), "
                         f"coverage {adaptive.coverage:.1%} (SE {adaptive.coverage_se:.1%}), median saving "
                         f"{adaptive.median_saving:.1f}x"))
    return rows


def _sweep_once(n_pool: int, n_checkpoints: int, budget_per_checkpoint: int) -> dict[str, Any]:
    import flasheval
    from flasheval.placement import controller as controller_module  # the looks of every sweep's controllers
    from flasheval.analysis.simulation import synthetic_reference

    ref = synthetic_reference(n_pool + n_checkpoints, SIZES, rng=2)
    rounds: list[tuple[int, float, float]] = []  # (round, seconds, of which the looks' bootstrap)
    last = [time.perf_counter(), 0.0]
    real = controller_module.stage_rank

    def timed_rank(*args: Any, **kwargs: Any) -> Any:  # the looks' bootstrap: its cost grows with the look's examples
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            last[1] += time.perf_counter() - start

    def progress(step: Any) -> None:
        if step.step == "round":
            now = time.perf_counter()
            rounds.append((step.done, now - last[0], last[1]))
            last[0], last[1] = now, 0.0

    controller_module.stage_rank = timed_rank
    try:
        with tempfile.TemporaryDirectory() as out:
            _fresh_memo()
            start = time.perf_counter()
            last[0] = start
            run = flasheval.sweep([f"replay:{m}" for m in ref.model_ids[n_pool:]], ref,
                                  budget=flasheval.Budget(max_examples=n_checkpoints * budget_per_checkpoint),
                                  output=out, progress=progress)
            total = time.perf_counter() - start
    finally:
        controller_module.stage_rank = real
    looks = [sum(1 for c in run.result.checkpoints for s in c.stages if s.round == r) for r, _, _ in rounds]
    served: dict[int, int] = {}  # examples scored in each round (each look's new examples)
    for c in run.result.checkpoints:
        before = 0
        for stage in c.stages:
            served[stage.round] = served.get(stage.round, 0) + stage.n_examples - before
            before = stage.n_examples
    return {"total": total, "rounds": rounds, "looks": looks, "served": [served.get(r, 0) for r, _, _ in rounds],
            "result": run.result,
            "sweep_seconds": sum(s for _, s, _ in rounds)}


def measure_sweep(n_pool: int = 200, sizes: tuple[int, ...] = (100, 500), budget: int = 1500) -> list[dict[str, Any]]:
    """Replay sweeps of ``sizes`` checkpoints: seconds per round and per look, in total; per-round growth."""
    rows, first = [], None
    for n in sizes:
        got = _sweep_once(n_pool, n, budget)
        # the sweep's own work (all but the looks' bootstrap) per example it scored and stored: what would grow
        # with the rounds already finished if any bookkeeping re-read or re-added the earlier rounds' work
        own = [s - b for _, s, b in got["rounds"]]
        half = max(1, len(own) // 2)
        early = sum(own[:half]) / max(sum(got["served"][:half]), 1)
        late = sum(own[half:] or own) / max(sum(got["served"][half:] or got["served"]), 1)
        first = got if first is None else first
        peer = f"{sizes[0]} checkpoints" if n != sizes[0] else ""
        res = got["result"]
        rows.append(_row(f"replay sweep, {n} checkpoints on a {n_pool}-model pool (wall, total)", got["total"], "s",
                         peer, first["total"] if peer else None,
                         f"{res.n_rounds} rounds ({got['sweep_seconds']:.0f} s), {res.n_examples} examples "
                         f"({res.saving:.1f}x saving); the rest: separate placements for the record"))
        rows.append(_row(f"replay sweep, {n} checkpoints: bookkeeping per example, later / earlier rounds",
                         late / early, "x", "", None,
                         f"{early * 1e6:.0f} then {late * 1e6:.0f} us per example scored; rounds (s, of which "
                         "bootstrap; looks): " + ", ".join(f"{r}: {s:.1f}/{b:.1f}; {k}" for (r, s, b), k
                                                            in zip(got["rounds"], got["looks"]))))
    return rows


def measure_store_part(small: bool) -> list[dict[str, Any]]:
    from _scale_store import measure_store

    return measure_store(n_results=100_000 if small else 1_000_000)


def measure_import_part(small: bool) -> list[dict[str, Any]]:
    from _scale_import import measure_import

    with tempfile.TemporaryDirectory() as tmp:  # the full-size logs take about 13 GB while they exist
        return measure_import(tmp, small=small)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """The figures as a table: figure, value, peer, peer's value, ratio, note."""
    lines = [f"{'figure':<78} {'value':>10} {'peer':<32} {'peer value':>10} {'ratio':>7}  note"]
    for r in rows:
        value = f"{r['value']:.3g} {r['unit']}".strip()
        peer_value = "" if r.get("peer_value") is None else f"{r['peer_value']:.3g} {r['unit']}".strip()
        ratio = ""
        if r.get("peer_value") not in (None, 0) and r["unit"] in ("s", "MB", "MiB", "results/s"):
            ratio = f"{r['value'] / r['peer_value']:.2f}"
        note = r.get("note", "")
        if "peak_mb" in r:  # the imports: CPU seconds and peak memory of the importing process, and of its peer
            note = (f"CPU {r['cpu_s']} s, peak {r['peak_mb']} MB (libraries {r['base_mb']} MB); peer CPU "
                    f"{r['peer_cpu_s']} s, peak {r['peer_peak_mb']} MB; " + "; ".join(r.get("summary", [])[-1:]))
        lines.append(f"{r['figure']:<78} {value:>10} {r.get('peer', ''):<32} {peer_value:>10} {ratio:>7}  {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts out of {', '.join(PARTS)}")
    parser.add_argument("--small", action="store_true", help="every part at about a tenth of its size (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="placement: alternating runs per pool and size (medians)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)} (allowed: {', '.join(PARTS)})")
    os.environ["FLASHEVAL_CACHE"] = "off"  # each part measures its own calibrations
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    jobs = OrderedDict([
        ("placement", lambda: measure_pools((100, 400) if args.small else (200, 4000), repeats=args.repeats)
         + measure_placement((100, 200, 400) if args.small else (200, 1000, 4000))),
        ("backtest", lambda: measure_backtest((100, 400), k=20) if args.small else measure_backtest()),
        ("sweep", lambda: measure_sweep(n_pool=50, sizes=(20, 50)) if args.small else measure_sweep()),
        ("store", lambda: measure_store_part(args.small)),
        ("import", lambda: measure_import_part(args.small)),
    ])
    rows: list[dict[str, Any]] = []
    for name, job in jobs.items():
        if name in parts:
            start = time.perf_counter()
            got = job()
            rows.extend(got)
            print(format_rows(got), flush=True)
            print(f"[{name}: {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.1f}]\n", flush=True)
    print("all figures:")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
