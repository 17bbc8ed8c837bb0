"""Lockstep: a sharded model (FSDP2 ``fully_shard`` on CPU / gloo, every forward pass gathers the parameters from
both processes) scored with ``distributed="all"`` on uneven work completes without a hang, gives exactly the
results of one process, and every process ran as many forward passes as the other (its own, then dummy ones).

Without lockstep the same launch aborts (gloo's mismatched collectives) or hangs: the launch has a time limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.engine.hf.in_memory import is_sharded
from tests.conftest import REPO_ROOT
from tests.engine.test_distributed import _free_port

torch = pytest.importorskip("torch")

WORKER = Path(__file__).with_name("_lockstep_worker.py")


@pytest.mark.slow  # two processes importing torch and transformers: ~20-40 s on 2 loaded cores
def test_a_sharded_model_scores_in_lockstep_on_uneven_work_as_one_process(tmp_path):
    pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(_free_port()), str(WORKER), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert rank["sharded"] == rank["alone"]  # bitwise: the same batches, gathered by id
        assert rank["group"] == 2  # the script's group is still there
    assert ranks[0]["alone"] == ranks[1]["alone"]
    real = [rank["passes"]["real"] for rank in ranks]
    total = [rank["passes"]["real"] + rank["passes"]["dummy"] for rank in ranks]
    assert real[0] != real[1]  # uneven work: the test would hang or abort without lockstep
    assert total[0] == total[1] and min(real) > 0  # every pass joined by both processes


def test_sharded_models_are_detected():
    assert not is_sharded(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    zero3 = torch.nn.Linear(2, 2)
    zero3.weight.ds_id = 0  # how DeepSpeed ZeRO-3 marks the parameters it partitions
    assert is_sharded(zero3)  # FSDP2 (fully_shard, which needs a group) is detected in the launch above
