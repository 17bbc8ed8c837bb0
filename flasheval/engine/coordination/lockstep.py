"""Lockstep scoring of a model whose forward pass is itself collective (FSDP, DeepSpeed ZeRO-3).

Under ``distributed="all"`` the work is split across processes, so one process may run more forward passes
than another (more units, longer generations, an out-of-memory back-off that splits a batch). A sharded model
gathers its parameters from every process inside each forward pass: a process that skips a pass leaves the
others waiting forever. In lockstep every pass is preceded by a one-integer ``all_reduce`` saying "I have a
pass to run"; a process that has run out of work keeps answering with 0 and, while any other answers 1, joins
with a dummy pass (a real forward on a one-token batch, its output discarded), until every process answers 0
(the ``synced_gpus`` rule of ``transformers``' generation, for every pass). Uneven work, generation lengths
and out-of-memory back-offs thus stay matched pass for pass. An out-of-memory error inside a sharded pass
itself cannot be retried (the others are inside the same pass's collectives): it ends the call, and the
group's timeout ends the others, as it would in training.

:func:`~flasheval.engine.hf.in_memory.is_sharded` (the one test) detects the wrappers: torch FSDP1
(``FullyShardedDataParallel``), FSDP2 (``FSDPModule``, ``fully_shard``, ``DTensor`` parameters) and DeepSpeed
ZeRO-3 (parameters with ``ds_id``). A backend decides whether its passes run in lockstep
(:meth:`~flasheval.engine.base.Backend.lockstep`: the Hugging Face backend calls :func:`lockstep_if_sharded`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from flasheval.engine.base import Collective
from flasheval.engine.hf.in_memory import is_sharded

__all__ = ["lockstep", "lockstep_if_sharded"]


def lockstep_if_sharded(model: Any, collective: Collective) -> AbstractContextManager[None]:
    """:func:`lockstep` when ``model``'s forward is collective (:func:`~flasheval.engine.hf.in_memory.is_sharded`),
    else a null context (a model whose passes are its own needs no matching)."""
    return lockstep(model, collective) if is_sharded(model) else nullcontext()


@contextmanager
def lockstep(model: Any, collective: Collective) -> Iterator[None]:
    """Within the block, every forward pass of ``model`` on this process is matched on every other process.

    Every process of the default group must enter the block together (the runner's rounds do). ``collective``
    names a failed collective in one line (:func:`flasheval.engine.coordination.distributed.collective`). On leaving the block
    normally this process joins the others' remaining passes with dummy ones until no process has work left.
    """
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")

    def others_working(mine: int) -> bool:
        flag = torch.tensor([mine], dtype=torch.int64, device=device)
        with collective("a forward pass in lockstep (a sharded model)"):
            dist.all_reduce(flag)
        return int(flag.item()) > 0

    def before_pass(module: Any, args: Any) -> None:
        others_working(1)

    handle = model.register_forward_pre_hook(before_pass, prepend=True)  # before the wrapper's own gathers
    try:
        yield
    finally:
        handle.remove()
    while others_working(0):  # not after a failure: the others are inside a pass this process left
        _dummy_pass(model)


def _dummy_pass(model: Any) -> None:
    """A real forward pass on a one-token batch (token 0), its output discarded: this process's share of the
    collectives of a pass another process runs. Under :func:`~flasheval.engine.hf.in_memory.no_grad`, as a real
    pass: under ``torch.inference_mode`` FSDP2 would gather the parameters into inference tensors, which the next
    real pass (under ``torch.no_grad``) cannot update in place ("Inplace update to inference tensor outside
    InferenceMode")."""
    import torch

    from flasheval.engine.hf.device_map import input_device
    from flasheval.engine.hf.in_memory import no_grad

    with no_grad(model):
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=input_device(model)))
