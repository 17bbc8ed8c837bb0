"""Smoke test of the real GGUF checkpoints: load them with transformers and time a forward pass.

For every model in ``models.json`` (written by ``benchmarks/fetch_models.py``) and every
requested dtype, this script loads the tokenizer and the model from the GGUF file on CPU
(``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=dtype)``), checks
that the weights are a working language model (mean negative log-likelihood of a fixed English
paragraph, greedy answer to a fixed prompt), and times one plain forward pass over a batch of
about ``--n-tokens`` tokens. It prints one table row per (model, dtype) and can write the rows
as JSON.

Usage::

    nice -n 10 python benchmarks/model_smoke.py [--cache-dir DIR] [--models NAME ...]
        [--dtypes float32 bfloat16] [--n-tokens 2048] [--seq-len 512] [--output rows.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_models import MODEL_SOURCES, default_cache_dir  # noqa: E402

# Written for this script (not task text): plain prose a trained model should find easy.
PARAGRAPH = (
    "The river runs past the old mill and under the stone bridge before it reaches the sea. "
    "In the summer, children swim near the bank while their parents read in the shade of the "
    "trees. When autumn comes, the water rises, the leaves turn red and yellow, and the town "
    "prepares for the long winter ahead. Most people who live here have never wanted to leave."
)
PROMPT = "The capital of France is"


@dataclass(frozen=True, slots=True, kw_only=True)
class SmokeRow:
    """Measurements for one model loaded in one dtype."""

    model: str
    """Short model name from ``models.json``."""
    dtype: str
    """Torch dtype the model was loaded in."""
    n_parameters: int
    """Number of parameters after dequantization."""
    tokenizer_load_s: float
    """Seconds to build the tokenizer from the GGUF file (once per model, shared by dtypes)."""
    model_load_s: float
    """Seconds to read, dequantize and load the weights from the GGUF file."""
    adds_bos: bool
    """Whether the tokenizer prepends a BOS token to plain text."""
    round_trips: bool
    """Whether decoding the encoded paragraph gives the paragraph back."""
    paragraph_nll: float
    """Mean negative log-likelihood (nats per token) of the fixed paragraph."""
    greedy: str
    """Greedy continuation (5 tokens) of the fixed prompt."""
    n_tokens: int
    """Tokens in the timed forward pass (batch size times sequence length)."""
    forward_s: float
    """Wall-clock seconds for the timed forward pass."""
    forward_cpu_s: float
    """CPU seconds (all threads of this process) for the timed forward pass."""

    @property
    def tokens_per_s(self) -> float:
        """Throughput of the timed forward pass."""
        return self.n_tokens / self.forward_s

    @property
    def tokens_per_cpu_s(self) -> float:
        """Tokens per CPU-second: less sensitive than wall time to other load on the machine."""
        return self.n_tokens / self.forward_cpu_s


def _load_tokenizer(path: Path) -> tuple[object, float]:
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return tokenizer, time.perf_counter() - start


def _load_model(path: Path, dtype: torch.dtype) -> tuple[torch.nn.Module, float]:
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    model.eval()
    return model, time.perf_counter() - start


@torch.inference_mode()
def _paragraph_nll(tokenizer: object, model: torch.nn.Module) -> float:
    ids = torch.tensor([tokenizer(PARAGRAPH)["input_ids"]])
    logits = model(ids).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return -logprobs.gather(1, ids[0, 1:, None]).mean().item()


@torch.inference_mode()
def _greedy(tokenizer: object, model: torch.nn.Module, n_new: int = 5) -> str:
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    for _ in range(n_new):
        next_id = model(ids).logits[0, -1].argmax()
        ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    return tokenizer.decode(ids[0, -n_new:])


@torch.inference_mode()
def _time_forward(
    tokenizer: object, model: torch.nn.Module, *, n_tokens: int, seq_len: int
) -> tuple[int, float, float]:
    text_ids = tokenizer(PARAGRAPH, add_special_tokens=False)["input_ids"]
    repeated = (text_ids * math.ceil(seq_len / len(text_ids)))[:seq_len]
    batch_size = max(1, n_tokens // seq_len)
    batch = torch.tensor([repeated] * batch_size)
    model(batch[:1, :32])  # warm-up: first call pays one-off allocation costs
    start, start_cpu = time.perf_counter(), time.process_time()
    model(batch)
    return batch.numel(), time.perf_counter() - start, time.process_time() - start_cpu


def smoke_one(
    name: str, path: Path, dtype_name: str, *, tokenizer: object, tokenizer_load_s: float,
    n_tokens: int, seq_len: int,
) -> SmokeRow:
    """Load one model in one dtype and measure it."""
    model, model_load_s = _load_model(path, getattr(torch, dtype_name))
    encoded = tokenizer(PARAGRAPH)["input_ids"]
    bos = tokenizer.bos_token_id
    n_timed, forward_s, forward_cpu_s = _time_forward(tokenizer, model, n_tokens=n_tokens, seq_len=seq_len)
    row = SmokeRow(
        model=name,
        dtype=dtype_name,
        n_parameters=sum(p.numel() for p in model.parameters()),
        tokenizer_load_s=tokenizer_load_s,
        model_load_s=model_load_s,
        adds_bos=bos is not None and encoded[0] == bos,
        round_trips=tokenizer.decode(encoded, skip_special_tokens=True) == PARAGRAPH,
        paragraph_nll=_paragraph_nll(tokenizer, model),
        greedy=_greedy(tokenizer, model),
        n_tokens=n_timed,
        forward_s=forward_s,
        forward_cpu_s=forward_cpu_s,
    )
    del model
    gc.collect()
    return row


def _format(row: SmokeRow) -> str:
    return (
        f"{row.model:20s} {row.dtype:9s} {row.n_parameters / 1e6:7.1f}M {row.tokenizer_load_s:6.1f} "
        f"{row.model_load_s:6.1f} {str(row.adds_bos):5s} {str(row.round_trips):5s} "
        f"{row.paragraph_nll:6.3f} {row.n_tokens:6d} {row.forward_s:7.2f} {row.tokens_per_s:6.0f} "
        f"{row.tokens_per_cpu_s:7.0f}  {row.greedy!r}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the smoke test and print the table; 1 if ``models.json`` is missing."""
    names = [source.name for source in MODEL_SOURCES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--models", nargs="+", choices=names, default=names, metavar="NAME")
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), default=("float32", "bfloat16"))
    parser.add_argument("--n-tokens", type=int, default=2048)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--output", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    manifest = (args.cache_dir or default_cache_dir()) / "models.json"
    if not manifest.is_file():
        print(f"model_smoke: error: {manifest} not found; run benchmarks/fetch_models.py first", file=sys.stderr)
        return 1
    models = json.loads(manifest.read_text(encoding="utf-8"))["models"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'model':20s} {'dtype':9s} {'params':>8s} {'tok_ld':>6s} {'mdl_ld':>6s} {'bos':5s} {'rt':5s} "
          f"{'nll':>6s} {'tokens':>6s} {'fwd_s':>7s} {'tok/s':>6s} {'tok/cpu':>7s}  greedy")
    rows = []
    for name in args.models:
        if name not in models:
            print(f"model_smoke: error: {name} missing from {manifest}", file=sys.stderr)
            return 1
        path = Path(models[name]["path"])
        tokenizer, tokenizer_load_s = _load_tokenizer(path)
        for dtype_name in args.dtypes:
            row = smoke_one(name, path, dtype_name, tokenizer=tokenizer, tokenizer_load_s=tokenizer_load_s,
                            n_tokens=args.n_tokens, seq_len=args.seq_len)
            rows.append(row)
            print(_format(row), flush=True)
    if args.output is not None:
        payload = [asdict(row) | {"tokens_per_s": row.tokens_per_s, "tokens_per_cpu_s": row.tokens_per_cpu_s}
                   for row in rows]
        args.output.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
