"""Scale of the engine's results store: opening one model among 1,000,000 stored results, and writers at once.

:func:`measure_store` builds one store of ``n_results`` results (one model holds 30 %, seven others
the rest) twice: as per-model shards (the store today) and as the earlier release's single
``results.jsonl`` holding the same lines. It returns figure rows for the scale benchmark:

* opening the store for a model with no results (the peer: the earlier release's open, which read
  and checksummed every line of every model);
* opening it for the model holding 30 % of them, time and peak memory;
* write throughput of 4 processes writing 4 models into one folder at once, against 1 process (the
  earlier release refused a second writer in a folder).

Each open runs in a fresh process (spawned), timed there, its peak memory read from ``ru_maxrss``
(the growth over the same process before the open), so one measurement never warms another. The
peer's open is a verbatim copy of the earlier release's loading loop (below), checksum included.

Run: ``python benchmarks/_scale_store.py`` (1,000,000 results, about 2 minutes on 2 cores) or
``python benchmarks/_scale_store.py --small`` (100,000).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.engine.store.journal import append_lines, read_journal  # noqa: E402
from flasheval.engine.store.results import ResultStore  # noqa: E402
from flasheval.engine.store.shards import LEGACY_FILE, encode_record, shard_path  # noqa: E402
from flasheval.hashing import stable_hash  # noqa: E402
from flasheval.types import LoglikelihoodResult  # noqa: E402

__all__ = ["measure_store"]

logger = logging.getLogger(__name__)

N_OTHER_MODELS = 7
PRESENT_SHARE = 0.3
WRITE_SECONDS = 2.0
WRITE_BATCH = 32
_CHUNK = 50_000


def _fingerprint(m: int) -> str:
    return f"{stable_hash(('bench-model', m), n_chars=64)}|bfloat16|2048|v3"  # as long as a real one


def _build(tmp: Path, n_results: int) -> tuple[Path, Path, str, int]:
    """The sharded store and the single-file store of the same ``n_results`` lines; the present model, its count."""
    sharded, legacy = tmp / "sharded", tmp / "legacy"
    legacy.mkdir(parents=True)
    n_present = int(n_results * PRESENT_SHARE)
    counts = [n_present] + [(n_results - n_present) // N_OTHER_MODELS] * N_OTHER_MODELS
    counts[-1] += n_results - sum(counts)
    for m, count in enumerate(counts):
        fingerprint = _fingerprint(m)
        path = shard_path(sharded, fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        for start in range(0, count, _CHUNK):
            lines = [encode_record(fingerprint, stable_hash(("ll", m, i)), LoglikelihoodResult(
                task_name=f"task{i % 10}", example_id=str(i), choice_index=i % 4, logprob_sum=-0.001 * i,
                n_tokens=1 + i % 9, is_greedy=i % 3 == 0, n_context_tokens=20 + i % 50))
                for i in range(start, min(start + _CHUNK, count))]
            append_lines(path, lines)
            append_lines(legacy / LEGACY_FILE, lines)
    return sharded, legacy, _fingerprint(0), n_present


# --- the earlier release's loading loop, verbatim (flasheval/engine/store/results.py before shards), as the peer
_KINDS = {"ll": LoglikelihoodResult}


def _legacy_checksum(record: dict[str, Any]) -> str:
    return stable_hash({k: v for k, v in record.items() if k != "crc"}, n_chars=16)


def _legacy_decode(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or record.get("crc") != _legacy_checksum(record) or record["kind"] not in _KINDS:
            return None
        return record
    except (ValueError, KeyError, TypeError):
        return None


def _legacy_open(folder: Path, fingerprint: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    contents = read_journal(folder / LEGACY_FILE)
    for line in contents.lines:
        record = _legacy_decode(line)
        if record is not None and record["fp"] == fingerprint:
            results[record["key"]] = _KINDS[record["kind"]](**record["result"])
    return results


def _memory_kib(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` (peak) of this process, in KiB; ``ru_maxrss`` where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _open_once(layout: str, folder: str, fingerprint: str, queue: Any) -> None:
    """In a fresh process: open ``folder`` for ``fingerprint``; report (seconds, peak memory growth, n results)."""
    try:  # reset the peak so that VmHWM after is the peak of the open alone (Linux >= 4.0)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = _memory_kib("VmRSS")
    start = time.perf_counter()
    if layout == "legacy":
        n = len(_legacy_open(Path(folder), fingerprint))
    else:
        with ResultStore(folder, fingerprint=fingerprint) as store:
            n = len(store)
    seconds = time.perf_counter() - start
    queue.put((seconds, (_memory_kib("VmHWM") - before) * 1024, n))


def _in_fresh_process(target: Any, *args: Any) -> Any:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    out = queue.get(timeout=600)
    process.join()
    return out


def _write_for(folder: str, fingerprint: str, seconds: float, barrier: Any, queue: Any) -> None:
    """In its own process: open the store, wait for the others, append batches for ``seconds``; report the count."""
    result = LoglikelihoodResult(task_name="t", example_id="0", choice_index=0, logprob_sum=-1.0, n_tokens=2,
                                 is_greedy=True)
    n = 0
    with ResultStore(folder, fingerprint=fingerprint) as store:
        barrier.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            store.put_many([(f"{n + j:09d}", result) for j in range(WRITE_BATCH)])
            n += WRITE_BATCH
    queue.put(n)


def _throughput(folder: Path, n_processes: int) -> float:
    """Results per second, all ``n_processes`` together, each writing its own model into ``folder``."""
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(n_processes), context.Queue()
    processes = [context.Process(target=_write_for, args=(str(folder), f"writer-{n_processes}-{p}", WRITE_SECONDS,
                                                          barrier, queue)) for p in range(n_processes)]
    for process in processes:
        process.start()
    total = sum(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join()
    return total / WRITE_SECONDS


def measure_store(n_results: int = 1_000_000, tmp: Path | None = None) -> list[dict[str, Any]]:
    """Figure rows for the results store at ``n_results`` stored results (see the module docstring).

    ``tmp``: a folder to build the stores in (under ``tmp/scale_store``; a temporary folder when omitted),
    removed after: at 1,000,000 results they take about 500 MB.
    Every row: ``figure``, ``value``, ``unit``, ``peer`` (what it is compared with), ``peer_value``.
    """
    root = Path(tempfile.mkdtemp(prefix="flasheval-scale-store-")) if tmp is None else Path(tmp) / "scale_store"
    try:
        start = time.perf_counter()
        sharded, legacy, present, n_present = _build(root, n_results)
        logger.info("built both stores of %d results in %.0f s", n_results, time.perf_counter() - start)
        absent = _fingerprint(10_000)
        opens = {}
        for name, layout, fingerprint in [("new_absent", "sharded", absent), ("old_absent", "legacy", absent),
                                          ("new_present", "sharded", present), ("old_present", "legacy", present)]:
            opens[name] = _in_fresh_process(_open_once, layout, str(sharded if layout == "sharded" else legacy),
                                            fingerprint)
            logger.info("%s: %.3f s, %.0f MiB", name, opens[name][0], opens[name][1] / 2**20)
        new_absent, old_absent, new_present, old_present = opens.values()
        if not new_absent[2] == old_absent[2] == 0 or not new_present[2] == old_present[2] == n_present:
            raise RuntimeError(f"the two layouts disagree: {new_absent}, {old_absent}, {new_present}, {old_present}")
        one = _throughput(root / "writers-1", 1)
        four = _throughput(root / "writers-4", 4)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    today = "same on the earlier release's single-file store"
    others = f"{n_results:,} results of others"
    present_text = f"model with {n_present:,} results, {n_results:,} in the store"
    return [
        {"figure": f"store open, model with no results, {others}", "value": new_absent[0], "unit": "s",
         "peer": today, "peer_value": old_absent[0]},
        {"figure": f"store open, {present_text}", "value": new_present[0], "unit": "s",
         "peer": today, "peer_value": old_present[0]},
        {"figure": f"store open, {present_text}: peak memory growth", "value": new_present[1] / 2**20, "unit": "MiB",
         "peer": today, "peer_value": old_present[1] / 2**20},
        {"figure": f"store write throughput, 4 processes on 4 models in one folder (batches of {WRITE_BATCH}, fsync each)",
         "value": four, "unit": "results/s",
         "peer": "1 process alone (the earlier release refused a second writer in a folder)", "peer_value": one},
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="100,000 results instead of 1,000,000")
    parser.add_argument("--n-results", type=int, default=None, help="stored results (overrides --small)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="# %(message)s", stream=sys.stderr)
    n_results = args.n_results or (100_000 if args.small else 1_000_000)
    start = time.perf_counter()
    for row in measure_store(n_results):
        print(json.dumps(row))
    print(f"# {time.perf_counter() - start:.0f} s in all, {os.cpu_count()} CPUs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
