"""Worker for the run-folder tests, in one of two modes.

``launch OUT CONFIG OTHER``: under ``accelerate launch`` each process opens its OWN run folder
``OUT/rank<N>`` (a cluster without a shared filesystem) with the settings in ``CONFIG`` for checkpoint
``m``, scores one new example as every process of a sweep does, then opens the folder again with the
settings ``OTHER``, and writes what it saw and the one-line errors it got to ``OUT/seen<N>.json``
(test_sweep_store).

``sweep FOLDER``: a replay sweep of 8 checkpoints of a synthetic reference into run folder ``FOLDER``
whose scorer sleeps on every batch, so that a test can kill it mid-sweep with SIGKILL (test_sweep).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from flasheval.cli.launch import launch
from flasheval.engine.coordination.distributed import processes
from flasheval.errors import FlashevalError
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.reference.scoring.scorers import ScoredExamples
from flasheval.sweeps.folder import STORE_FORMAT, open_run_folder

SWEEP_CONFIG = {"store_format": STORE_FORMAT, "sweep": "killed"}
"""The settings of the ``sweep`` mode's run folder (a resuming test opens it with the same)."""


def sweep_world():
    """The reference, the pool and the 8 checkpoints held out of it (shared with test_sweep's ``world``)."""
    from flasheval.analysis.simulation import synthetic_reference

    ref = synthetic_reference(40, [300, 400, 500], rng=1, ability_spread=1.5)
    held = [r.model_id for r in ref.ranking()][0:40:5]  # 8 checkpoints spread over the ranking
    return ref, ref.without(*held), held


class _Slow(ReplayScorer):
    def score_many(self, asks):
        time.sleep(0.05 * len(asks))
        return super().score_many(asks)


def killed_sweep(folder: str) -> int:
    from flasheval.placement.results import Budget
    from flasheval.sweeps.schedule import sweep
    from flasheval.placement.tiers import load_tier_plan

    ref, pool, held = sweep_world()
    with open_run_folder(Path(folder), SWEEP_CONFIG, held) as run:
        sweep(pool, {m: run.scorer(m, _Slow(ref, m)) for m in held}, load_tier_plan("default"),
              budget=Budget(max_examples=4000), seed=2)
    return 0


class _One:
    """Scores 1.0 with 7 tokens for every example."""

    n_parameters = None

    def score_many(self, asks):
        return [ScoredExamples(scores=np.ones(len(ids)), n_tokens=np.full(len(ids), 7)) for _, ids in asks]


def launched(out: str, config: str, other: str) -> int:
    with launch() as distributed:  # the group made and ended as the command line does
        return _launched(processes(distributed), out, config, other)


def _launched(state, out: str, config: str, other: str) -> int:
    folder = Path(out) / f"rank{state.process_index}"
    seen: dict = {}
    try:
        run = open_run_folder(folder, json.loads(config), ["m"], state)
    except FlashevalError as exc:
        seen["error"] = str(exc)
    else:
        run.scorer("m", _One()).score("t", ["x9"])  # every process scores the same new example, as in a sweep
        seen["rows"] = sorted([r.task_name, r.example_id, r.score, r.n_tokens] for r in run.stores["m"].results().values())
        run.close()
        try:  # then a sweep with other settings on the same folders: refused on every process with the main's line
            open_run_folder(folder, json.loads(other), ["n"], state).close()
        except FlashevalError as exc:
            seen["other"] = str(exc)
    Path(out, f"seen{state.process_index}.json").write_text(json.dumps(seen))
    return 0


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    sys.exit(killed_sweep(*args) if mode == "sweep" else launched(*args))
