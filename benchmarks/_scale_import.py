"""``flasheval reference import`` at leaderboard scale: time and peak memory, against a 10x smaller peer.

Two inputs, written here synthetically:

* lm-evaluation-harness ``--log_samples`` output of 1,000 models x 6 tasks x 2,000 docs (12M sample lines),
  in lm-eval 0.4's own layout (``lm_eval/loggers/evaluation_tracker.py``): per model a folder named by the
  sanitized model name, holding ``results_<date>.json`` and ``samples_<task>_<date>.jsonl`` whose lines have
  lm-eval's keys (``doc_id``, ``doc``, ``target``, ``arguments``, ``resps``, ``filtered_resps``, ``filter``,
  ``metrics``, ``doc_hash``, ``prompt_hash``, ``target_hash``, ``acc``, ``acc_norm``), about 1 KB each as a
  0-shot multiple-choice task logs them;
* a long parquet of 5,000 models x 6 datasets x 1,000 examples (30M rows: ``model``, ``dataset``,
  ``example_id``, ``score``, ``metric``), one row group per block of models.

In both, a few models lack one task / dataset (``n_incomplete``): the import lists them by name. Each
import runs as ``flasheval reference import`` in a child process that reports its own peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at its end: interpreter and libraries included; ``base_mb``
is that peak before the import started). The peer of each figure is the same import of an input 10x
smaller, measured in the same run.

Run: ``python benchmarks/_scale_import.py [--small] [--tmp DIR]`` from the repo root (``--small``: 50 models
of logs and 1,000 of parquet, under a minute). The full size writes about 13 GB of logs (one size at a time)
and a few MB of parquet (zstd of rows sorted by model) under ``--tmp`` (default: a temporary folder, removed at
the end); about 10 minutes on 2 shared cores, most of it writing and parsing the logs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("arc_easy", "hellaswag", "piqa", "winogrande", "boolq", "openbookqa")
DATE = "2025-01-15T10-00-00.000000"  # lm-eval's date_id: datetime.now().isoformat().replace(":", "-")
# the child imports what the command needs first, so base_kb is the libraries' share of the peak
_CHILD = """
import json, resource, sys, time
import flasheval.cli.reference, flasheval.reference.importing
from flasheval.cli import main
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start, cpu = time.perf_counter(), time.process_time()
rc = main(sys.argv[1:])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"rc": rc, "seconds": seconds, "cpu_s": cpu, "base_kb": base,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _task_names(n_tasks: int) -> list[str]:
    return [TASKS[i % len(TASKS)] + (f"_{i // len(TASKS)}" if i >= len(TASKS) else "") for i in range(n_tasks)]


def _docs(task: str, n_docs: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """Per doc, the JSON text of its fixed keys (before and after the model's responses) as lm-eval logs them."""
    out = []
    for i in range(n_docs):
        a, b = (int(x) for x in rng.integers(1, 100, 2))
        choices = [str(a + b + int(k)) for k in rng.permutation([0, 7, -5, 11])]
        gold = choices.index(str(a + b))
        question = f"{task}: what is {a} plus {b}?"
        doc = {"question": question, "choices": choices, "gold": gold}
        prompt = f"Question: {question}\nAnswer:"
        arguments = {f"gen_args_{k}": {"arg_0": prompt, "arg_1": f" {c}"} for k, c in enumerate(choices)}
        head = (f'{{"doc_id": {i}, "doc": {json.dumps(doc)}, "target": "{gold}", "arguments": {json.dumps(arguments)}, '
                '"resps": ')
        tail = (f', "filter": "none", "metrics": ["acc", "acc_norm"], "doc_hash": "{_sha(json.dumps(doc, indent=2))}", '
                f'"prompt_hash": "{_sha(prompt)}", "target_hash": "{_sha(str(gold))}", ')
        out.append((head, tail))
    return out


def _responses(rng: np.random.Generator, n: int = 512) -> list[tuple[str, str]]:
    """A pool of ``(resps, filtered_resps)`` JSON texts: 4 loglikelihoods, as lm-eval logs them (as strings)."""
    pool = []
    for _ in range(n):
        pairs = [[f"{-x:.15g}", "False"] for x in rng.uniform(2, 30, 4)]
        pool.append((json.dumps([[p] for p in pairs]), json.dumps(pairs)))
    return pool


def _results(model: str, tasks: list[str], n_docs: int, means: dict[str, float]) -> dict[str, Any]:
    """A ``results_<date>.json`` with the keys lm-eval 0.4 writes (configs abridged to the task's main fields)."""
    configs = {t: {"task": t, "dataset_path": f"allenai/{t}", "test_split": "test", "output_type": "multiple_choice",
                   "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "gold",
                   "doc_to_choice": "{{choices}}", "num_fewshot": 0,
                   "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                                   {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}],
                   "metadata": {"version": 1.0, "pretrained": model}} for t in tasks}
    return {
        "results": {t: {"alias": t, "acc,none": means[t], "acc_stderr,none": 0.01, "acc_norm,none": means[t],
                        "acc_norm_stderr,none": 0.01} for t in tasks},
        "group_subtasks": {t: [] for t in tasks}, "configs": configs, "versions": {t: 1.0 for t in tasks},
        "n-shot": {t: 0 for t in tasks}, "higher_is_better": {t: {"acc": True, "acc_norm": True} for t in tasks},
        "n-samples": {t: {"original": n_docs, "effective": n_docs} for t in tasks},
        "config": {"model": "hf", "model_args": f"pretrained={model}", "model_num_parameters": 1_000_000,
                   "batch_size": "auto", "device": "cuda:0", "limit": None, "bootstrap_iters": 100000,
                   "random_seed": 0, "numpy_seed": 1234, "torch_seed": 1234, "fewshot_seed": 1234},
        "git_hash": "0000000", "date": 1736935200.0, "transformers_version": "4.48.0", "lm_eval_version": "0.4.13",
        "task_hashes": {t: _sha(model + t) for t in tasks}, "model_source": "hf", "model_name": model,
        "model_name_sanitized": model.replace("/", "__"), "system_instruction": None, "chat_template": None,
        "fewshot_as_multiturn": False, "total_evaluation_time_seconds": "100.0",
    }


def write_lmeval_logs(folder: str | Path, n_models: int, n_tasks: int = 6, n_docs: int = 2000,
                      rng: int | np.random.Generator | None = 0, *, n_incomplete: int = 0) -> Path:
    """Write synthetic ``--log_samples`` output of ``n_models`` models (the last ``n_incomplete`` lack the last task).

    A model's chance of answering a doc right is a logistic of its ability minus the doc's difficulty. Returns
    ``folder``.
    """
    gen = np.random.default_rng(rng)
    root = Path(folder)
    tasks = _task_names(n_tasks)
    docs = {t: _docs(t, n_docs, gen) for t in tasks}
    difficulty = {t: gen.normal(0, 1.5, n_docs) for t in tasks}
    pool = _responses(gen)
    for m in range(n_models):
        model = f"org/model-{m:05d}"
        mdir = root / model.replace("/", "__")  # lm-eval's sanitize_model_name
        mdir.mkdir(parents=True, exist_ok=True)
        has = tasks[:-1] if m >= n_models - n_incomplete else tasks
        ability = gen.normal(0, 1)
        means = {}
        for t in has:
            acc = gen.random(n_docs) < 1 / (1 + np.exp(difficulty[t] - ability))
            norm = gen.random(n_docs) < 1 / (1 + np.exp(difficulty[t] - ability - 0.2))
            means[t] = float(acc.mean())
            picks = gen.integers(0, len(pool), n_docs)
            rows = zip(docs[t], picks.tolist(), acc.tolist(), norm.tolist())
            lines = [f'{head}{pool[k][0]}, "filtered_resps": {pool[k][1]}{tail}"acc": {float(a)}, '
                     f'"acc_norm": {float(b)}}}\n' for (head, tail), k, a, b in rows]
            (mdir / f"samples_{t}_{DATE}.jsonl").write_text("".join(lines), encoding="utf-8")
        (mdir / f"results_{DATE}.json").write_text(json.dumps(_results(model, has, n_docs, means), indent=2),
                                                   encoding="utf-8")
    return root


def write_long_parquet(path: str | Path, n_models: int, *, n_datasets: int = 6, n_examples: int = 1000,
                       rng: int | np.random.Generator | None = 0, n_incomplete: int = 0,
                       models_per_group: int = 50) -> Path:
    """Write a long parquet of 0/1 scores, ``n_models`` x ``n_datasets`` x ``n_examples`` rows (the last
    ``n_incomplete`` models lack the last dataset), sorted by model as leaderboard dumps are. Returns ``path``."""
    gen = np.random.default_rng(rng)
    p = Path(path)
    models = pa.array([f"org/model-{m:05d}" for m in range(n_models)], pa.string())
    datasets = pa.array([f"suite/{t}" for t in _task_names(n_datasets)], pa.string())
    ids = pa.array([f"id{k:06d}" for k in range(n_examples)], pa.large_string())
    metrics = pa.array(["exact_match"], pa.string())
    difficulty = gen.normal(0, 1.5, (n_datasets, n_examples))
    schema = pa.schema([("model", pa.dictionary(pa.int32(), pa.string())),
                        ("dataset", pa.dictionary(pa.int8(), pa.string())), ("example_id", pa.large_string()),
                        ("score", pa.float32()), ("metric", pa.dictionary(pa.int8(), pa.string()))])
    with pq.ParquetWriter(p, schema, compression="zstd") as writer:
        for start in range(0, n_models, models_per_group):
            block = np.arange(start, min(start + models_per_group, n_models))
            keep = np.ones((len(block), n_datasets), dtype=bool)
            keep[block >= n_models - n_incomplete, -1] = False
            m_idx = np.repeat(block, n_datasets * n_examples).reshape(len(block), n_datasets, n_examples)
            d_idx = np.broadcast_to(np.arange(n_datasets)[None, :, None], m_idx.shape)
            e_idx = np.broadcast_to(np.arange(n_examples)[None, None, :], m_idx.shape)
            ability = gen.normal(0, 1, len(block))[:, None, None]
            score = (gen.random(m_idx.shape) < 1 / (1 + np.exp(difficulty[None] - ability))).astype(np.float32)
            rows = np.broadcast_to(keep[:, :, None], m_idx.shape)
            n = int(rows.sum())
            table = pa.Table.from_arrays([
                pa.DictionaryArray.from_arrays(pa.array(m_idx[rows].astype(np.int32)), models),
                pa.DictionaryArray.from_arrays(pa.array(d_idx[rows].astype(np.int8)), datasets),
                ids.take(pa.array(e_idx[rows])), pa.array(score[rows]),
                pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), metrics)], schema=schema)
            writer.write_table(table)
    return p


def _import(source: Path, fmt: str, name: str, out: Path) -> dict[str, Any]:
    """Run ``flasheval reference import`` in a child process: its seconds, peak RSS and summary lines."""
    argv = ["reference", "import", str(source), "--format", fmt, "--name", name, "--output-dir", str(out), "--force"]
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"import of {source} failed: {done.stderr[-2000:]}")
    stats = json.loads(lines[-1])
    return {**stats, "summary": lines[:-1]}


def _row(figure: str, run: dict[str, Any], peer: dict[str, Any], peer_text: str, **extra: Any) -> dict[str, Any]:
    return {"figure": figure, "value": round(run["seconds"], 2), "unit": "s", "cpu_s": round(run["cpu_s"], 2),
            "peak_mb": round(run["peak_kb"] / 1024), "base_mb": round(run["base_kb"] / 1024), "peer": peer_text,
            "peer_value": round(peer["seconds"], 2), "peer_cpu_s": round(peer["cpu_s"], 2),
            "peer_peak_mb": round(peer["peak_kb"] / 1024), "summary": run["summary"], **extra}


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else list(path.rglob("*"))
    return round(sum(f.stat().st_size for f in files if f.is_file()) / 2**20)


def measure_import(tmp: str | Path, *, n_models_logs: int = 1000, n_models_parquet: int = 5000,
                   small: bool = False) -> list[dict[str, Any]]:
    """Time and peak memory of both imports at full size and at a 10x smaller peer size (see the module docstring).

    ``small``: 50 models of logs and 1,000 of parquet (peers 5 and 100). Each row: ``figure``, ``value``
    (wall seconds), ``unit``, ``cpu_s`` (the importing process's CPU seconds: on shared cores, the steadier
    figure), ``peak_mb`` (its peak RSS), ``base_mb`` (its peak before the import, libraries loaded),
    ``peer``/``peer_value``/``peer_cpu_s``/``peer_peak_mb`` (the 10x smaller import), ``generate_s`` (writing the
    input), ``input_mb``, ``matrix_mb`` (the float32 score matrices the import must hold) and ``summary`` (what
    the command printed).
    """
    work = Path(tmp)
    if small:
        n_models_logs, n_models_parquet = 50, 1000
    out = work / "refs"
    rows = []
    for fmt, n_models, cells, unit in (("lm-eval-samples", n_models_logs, 6 * 2000, "docs"),
                                       ("long-parquet", n_models_parquet, 6 * 1000, "examples")):
        runs = {}
        for size in (n_models // 10, n_models):
            start = time.perf_counter()
            if fmt == "lm-eval-samples":
                source = write_lmeval_logs(work / f"logs_{size}", size, rng=size, n_incomplete=3)
            else:
                source = write_long_parquet(work / f"long_{size}.parquet", size, rng=size, n_incomplete=3)
            generated = time.perf_counter() - start
            runs[size] = (_import(source, fmt, f"{fmt}-{size}", out), generated, _size_mb(source))
            shutil.rmtree(source, ignore_errors=True) if source.is_dir() else source.unlink()
        (big, gen_s, input_mb), (peer, _, _) = runs[n_models], runs[n_models // 10]
        what = "lm-eval --log_samples logs" if fmt == "lm-eval-samples" else "long parquet"
        rows.append(_row(f"import {what}, {n_models} models x 6 datasets x {cells // 6} {unit}", big, peer,
                         f"the same import at {n_models // 10} models", generate_s=round(gen_s, 1), input_mb=input_mb,
                         matrix_mb=round(n_models * cells * 4 / 2**20)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="50 models of logs, 1,000 of parquet (< 1 minute)")
    parser.add_argument("--tmp", help="where the inputs are written (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
        rows = measure_import(args.tmp, small=args.small)
    else:
        with tempfile.TemporaryDirectory(prefix="scale_import_") as tmp:
            rows = measure_import(tmp, small=args.small)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
