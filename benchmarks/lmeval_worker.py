"""Runs INSIDE the lm-evaluation-harness venv (imports lm_eval, never flasheval).

Called by ``engine_throughput.py``: scores the given local-jsonl multiple-choice tasks with
lm-eval's HF backend and writes per-choice log-likelihoods and the time spent in
``loglikelihood`` (model loading and dataset preparation excluded, as for flasheval).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--include-path", required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--gguf-file", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--output", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if args.threads:
        torch.set_num_threads(args.threads)
    lm = HFLM(pretrained=args.model_dir, gguf_file=args.gguf_file, dtype=args.dtype, device=args.device,
              batch_size=args.batch_size)
    spent = []
    original = lm.loglikelihood

    def timed(requests, *a, **k):
        started = time.perf_counter()
        out = original(requests, *a, **k)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        spent.append(time.perf_counter() - started)
        return out

    lm.loglikelihood = timed
    results = simple_evaluate(
        model=lm, tasks=args.tasks.split(","), task_manager=TaskManager(include_path=args.include_path), log_samples=True
    )
    samples = {
        task: {str(s["doc"]["id"]): [float(r[0][0]) for r in s["resps"]] for s in rows} for task, rows in results["samples"].items()
    }
    with open(args.output, "w") as fh:
        json.dump({"seconds": sum(spent), "samples": samples}, fh)


if __name__ == "__main__":
    main()
