"""Worker for test_sweep_store: under ``accelerate launch`` each process opens its OWN run folder
``OUT/rank<N>`` (a cluster without a shared filesystem) with the settings in ``CONFIG`` and writes
what it sees to ``OUT/seen<N>.json``, or the one-line error it got."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from flasheval.engine.distributed import launch_state, shutdown
from flasheval.errors import FlashevalError
from flasheval.placement.scorers import ScoredExamples
from flasheval.placement.sweep_run import open_run_folder


def main(out: str, config: str) -> int:
    state = launch_state()
    folder = Path(out) / f"rank{state.process_index}"
    try:
        store = open_run_folder(folder, json.loads(config), state)
    except FlashevalError as exc:
        Path(out, f"seen{state.process_index}.json").write_text(json.dumps({"error": str(exc)}))
        return 1
    # every process appends the same new batch, as every process of a sweep does
    store.append("m", "t", ["x9"], ScoredExamples(scores=np.array([1.0]), n_tokens=np.array([7])))
    rows = sorted([*key, *value] for key, value in store.rows.items())
    Path(out, f"seen{state.process_index}.json").write_text(json.dumps({"rows": rows}))
    shutdown(state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
