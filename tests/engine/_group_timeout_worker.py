"""A 2-process job whose gloo group times out after ``TIMEOUT_S``: run by ``test_training_job.py`` under torchrun.

``_group_timeout_worker.py ROOT``: the script makes its own group with a short timeout. Rank 0 places with
``distributed="main"`` under a time budget that is not below that timeout (flasheval warns, before the placement
starts, naming the group's timeout), while rank 1 waits in the job's next collective; then rank 0 alone calls
with ``distributed="all"`` while rank 1 is in another collective (the job's next all-reduce): the call must end
in one line saying that every process must make it. Rank 0 writes what it saw to ``ROOT/timeout-rank0.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import flasheval
from flasheval.engine.coordination.process_group import caller_group

sys.path.insert(0, str(Path(__file__).parent))
from _training_job_worker import example  # noqa: E402

TIMEOUT_S = 10


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(root: Path) -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    ex = example()
    tokenizer, model = ex.byte_tokenizer(), ex.tiny_llama(0)
    kept = Kept()
    logging.getLogger("flasheval").addHandler(kept)
    got: dict = {"group": list(caller_group())}
    common = {"run": root / "timeout-run", "reference": root / "refs" / "tiny", "tokenizer": tokenizer,
              "plan": root / "plan.yaml"}
    if rank == 0:
        placed = flasheval.place_checkpoint(model, step=1, max_seconds=2 * TIMEOUT_S, **common)
        got["placed"] = placed.placement.status
        got["warnings"] = list(kept.lines)
    dist.barrier()  # rank 1 waited here for the whole "main" placement
    if rank == 0:
        try:
            flasheval.place_checkpoint(model, step=2, distributed="all", **common)
            got["all_alone"] = "placed"
        except flasheval.FlashevalError as exc:
            got["all_alone"] = str(exc)
        (root / "timeout-rank0.json").write_text(json.dumps(got))
    else:
        try:  # the job's next all-reduce: never matched by rank 0's placement
            dist.all_reduce(torch.ones(1))
        except RuntimeError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
