"""Worker for ``tests/test_bad_inputs_training.py``: two processes in a real gloo group (``torch.multiprocessing``,
a file store), each shards the tiny Llama with FSDP2 (``fully_shard``: every forward pass all-gathers the parameters
from both processes); process 0 alone calls ``flasheval.place_checkpoint(..., distributed="main")`` as a training
script's ``if rank == 0:`` would, and writes what happened (the error line, the seconds it took, whether the run
folder exists) to ``OUT/rank0.json``. Process 1 waits at a barrier meanwhile, as the other ranks of a job do.

``_sharded_main_worker.py OUT``
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path


def _process(rank: int, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import flasheval
    from tests.engine.conftest import tiny_model_and_tokenizer

    dist.init_process_group("gloo", store=dist.FileStore(str(Path(out) / "store"), 2), rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    model, tokenizer = tiny_model_and_tokenizer(seed=2)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    if rank == 0:
        run, start = Path(out) / "run", time.perf_counter()
        try:
            flasheval.place_checkpoint(model, run=run, step=1, reference="helm_lite", tokenizer=tokenizer,
                                       distributed="main")
            error = None
        except flasheval.FlashevalError as exc:
            error = str(exc)
        seconds = time.perf_counter() - start
        (Path(out) / "rank0.json").write_text(json.dumps({"error": error, "seconds": seconds,
                                                          "run_exists": run.exists()}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(_process, args=(sys.argv[1],), nprocs=2)
