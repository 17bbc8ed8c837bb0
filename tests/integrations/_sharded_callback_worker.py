"""Worker for the sharded-callback test: run under ``torchrun --nproc-per-node 2``; each process writes rank<N>.json.

``_sharded_callback_worker.py REFERENCE PLAN RUN OUT``: the script makes its own gloo group, shards the Trainer
example's tiny Llama with FSDP2 (``fully_shard`` on each layer and the model: every forward pass all-gathers the
parameters from both processes) and hands it to a ``transformers.Trainer``. ``attach`` with the default
``distributed="main"`` is refused (both processes, when the callback is made); with ``"all"`` both processes
place step 1 together (the callback's ``on_step_end``, as the Trainer calls it), in lockstep. Each process records
the refusal, its placement and what it logged, and checks the group after.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def main(reference: str, plan: str, run: str, out: str) -> int:
    from torch.distributed.fsdp import fully_shard
    from transformers import Trainer, TrainingArguments

    import flasheval
    from flasheval.integrations.transformers import attach

    sys.path.insert(0, str(EXAMPLES))
    import train_and_place as loop

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = loop.tiny_llama(0)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    args = TrainingArguments(output_dir=f"{out}/trainer", use_cpu=True, report_to="none", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, processing_class=loop.byte_tokenizer())
    try:
        attach(trainer, reference, run=run, every=1, plan=plan)
        refused = None
    except flasheval.InputError as error:
        refused = str(error)
    placement = attach(trainer, reference, run=run, every=1, plan=plan, distributed="all")
    trainer.state.global_step = 1
    placement.on_step_end(trainer.args, trainer.state, trainer.control, model=trainer.model,
                          processing_class=trainer.processing_class)
    placed = placement.placements[1].placement.to_json()
    logged = [e for e in trainer.state.log_history if "flasheval/rank" in e]
    one = torch.ones(1)
    dist.all_reduce(one)
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump({"refused": refused, "placement": {k: placed[k] for k in ("rank", "interval", "tier", "status",
                                                                             "stages", "compute")},
                   "logged": logged, "group": int(one.item())}, fh)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
