"""Worker for test_distributed: run under ``accelerate launch``; each process writes rank<N>.json."""

from __future__ import annotations

import json
import sys

from flasheval.engine.distributed import DistributedBackend, make_state
from flasheval.engine.store import CachedBackend, ResultStore
from tests.engine.test_distributed import backend_for_test, requests_for_test


def main(out_dir: str) -> None:
    state = make_state()
    backend = backend_for_test()
    store = ResultStore(out_dir, fingerprint=backend.fingerprint) if state.is_main_process else None
    state.wait_for_everyone()  # the main process opens (and repairs) the store first
    if store is None:
        store = ResultStore(out_dir, fingerprint=backend.fingerprint, writer=False)
    calls = []
    original = backend.loglikelihood

    def counting(requests, **kwargs):
        calls.append(len(requests))
        return original(requests, **kwargs)

    backend.loglikelihood = counting
    results = CachedBackend(DistributedBackend(backend, state=state), store).loglikelihood(requests_for_test())
    store.close()
    rows = [[r.task_name, r.example_id, r.choice_index, r.logprob_sum, r.n_tokens, r.is_greedy] for r in results]
    with open(f"{out_dir}/rank{state.process_index}.json", "w") as fh:
        json.dump({"world": state.num_processes, "results": rows, "n_scored": sum(calls)}, fh)
    state.wait_for_everyone()
    state.destroy_process_group()  # an implicit teardown at exit can abort a gloo process


if __name__ == "__main__":
    main(sys.argv[1])
