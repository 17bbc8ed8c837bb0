"""Worker for the distributed tests: run under ``accelerate launch`` with the command line's launcher code
(:func:`flasheval.cli.launch.launch`); each process writes rank<N>.json.

``worker.py OUT [--separate-stores] [--also-separate OUT2] [--fail RANK:CALL:HOW]``: with
``--separate-stores`` each process opens its own store folder ``OUT/store<rank>`` (a cluster without
a shared filesystem); otherwise all share ``OUT``. ``--also-separate OUT2`` runs a second job in the
same launch, with separate stores under ``OUT2`` (one launch, one torch import per process, for two
checks). ``--fail`` makes process RANK's backend, on its CALL-th batch, raise (``raise``), vanish
without an error (``exit``) or stop answering (``hang``): the test's own failing backend, so the
library needs no failure hook.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from flasheval.cli.launch import launch
from flasheval.engine.coordination.distributed import DistributedBackend, open_shared_store, processes
from flasheval.engine.store.results import CachedBackend
from flasheval.errors import FlashevalError
from tests.engine.test_distributed import backend_for_test, requests_for_test


def run_job(state, out_dir: str, separate_stores: bool, fail: str) -> int:
    """Score the test's requests data-parallel into ``out_dir``'s store(s); write this rank's results."""
    backend = backend_for_test()
    store_dir = f"{out_dir}/store{state.process_index}" if separate_stores else out_dir
    store = open_shared_store(store_dir, backend.fingerprint, state)
    fail_rank, fail_call, how = (fail.split(":") + ["", "", ""])[:3] if fail else ("-1", "0", "")
    calls = []
    original = backend.loglikelihood

    def counting(requests, **kwargs):
        calls.append(len(requests))
        if state.process_index == int(fail_rank) and len(calls) == int(fail_call):
            if how == "raise":
                raise RuntimeError("the test's backend failed on purpose")
            if how == "exit":
                os._exit(0)
            time.sleep(600)
        return original(requests, **kwargs)

    backend.loglikelihood = counting
    try:
        runner = DistributedBackend(backend, state=state)
        results = CachedBackend(runner, store, share=runner.from_main).loglikelihood(requests_for_test())
    finally:
        store.close()
    rows = [[r.task_name, r.example_id, r.choice_index, r.logprob_sum, r.n_tokens, r.is_greedy] for r in results]
    with open(f"{out_dir}/rank{state.process_index}.json", "w") as fh:
        json.dump({"world": state.num_processes, "results": rows, "n_scored": sum(calls)}, fh)
    state.wait_for_everyone()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--separate-stores", action="store_true")
    parser.add_argument("--also-separate", default="")
    parser.add_argument("--fail", default="")
    args = parser.parse_args(argv)
    try:
        with launch() as distributed:  # as the command line runs: the group made (and ended) by the launcher code
            state = processes(distributed)
            code = run_job(state, args.out_dir, args.separate_stores, args.fail)
            if code == 0 and args.also_separate:
                code = run_job(state, args.also_separate, True, "")
    except FlashevalError as exc:  # as the CLI reports it
        print(f"flasheval: error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
