"""Worker for the lockstep test: run under ``torchrun --nproc-per-node 2``; each process writes rank<N>.json.

``_lockstep_worker.py OUT``: the script makes its own gloo group, scores one request (one process joins with dummy
passes only), the distributed tests' uneven log-likelihood requests and generation requests of different lengths
with the tiny Llama first alone
(unsharded, no collective), then sharded with FSDP2 (``fully_shard``: every forward pass all-gathers the
parameters from both processes) through :class:`~flasheval.engine.coordination.distributed.DistributedBackend` with
``distributed="all"``. It records both results, the forward passes it ran for its own work (``real``) and to
join the other's (``dummy``), and checks the group after.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from flasheval.engine.coordination.distributed import DistributedBackend, processes
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.hf.in_memory import scoring_mode
from flasheval.types import GenerationRequest
from tests.engine.conftest import tiny_model_and_tokenizer
from tests.engine.test_distributed import requests_for_test


def generation_requests() -> list[GenerationRequest]:
    """Generations of 1 to 6 new tokens: units of different numbers of forward passes."""
    return [GenerationRequest(task_name="g", example_id=f"g{i}", context="ctx " * (i + 1), max_new_tokens=1 + i % 6)
            for i in range(9)]


def score(backend) -> dict:
    # First one request: one batch, so one process's first passes are dummy ones joining the other's, and its
    # later real passes run on the parameters those gathered (a placement's first stage on two processes).
    first = backend.loglikelihood(requests_for_test()[:1])
    ll = backend.loglikelihood(requests_for_test())
    gen = backend.generate(generation_requests())
    return {"first": [[r.example_id, r.choice_index, r.logprob_sum, r.is_greedy] for r in first],
            "loglikelihood": [[r.example_id, r.choice_index, r.logprob_sum, r.is_greedy] for r in ll],
            "generate": [[r.example_id, r.text, r.n_generated_tokens] for r in gen]}


def main(out: str) -> int:
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, tokenizer = tiny_model_and_tokenizer(seed=2)
    with scoring_mode(model):
        alone = score(HFBackend(model, tokenizer, fingerprint="tiny-2", batch_size=3))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    backend = HFBackend(model, tokenizer, fingerprint="tiny-2", batch_size=3)
    passes = {"real": 0, "dummy": 0}
    inside = [False]
    for name in ("loglikelihood", "generate"):
        method = getattr(backend, name)

        def counted(requests, *, _method=method, **kwargs):
            inside[0] = True
            try:
                return _method(requests, **kwargs)
            finally:
                inside[0] = False

        setattr(backend, name, counted)
    model.register_forward_pre_hook(lambda module, args: passes.__setitem__(
        "real" if inside[0] else "dummy", passes["real" if inside[0] else "dummy"] + 1))
    with scoring_mode(model):
        sharded = score(DistributedBackend(backend, state=processes("all")))
    one = torch.ones(1)
    dist.all_reduce(one)
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump({"alone": alone, "sharded": sharded, "passes": passes, "group": int(one.item())}, fh)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
