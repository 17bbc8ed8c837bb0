"""Cost of the in-memory weights digest (:mod:`flasheval.engine.hf.weights_digest`) against a forward pass.

The model: a Llama of SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads / 3 key-value heads,
intermediate 1536, vocabulary 49,152, tied embeddings: 134.5M parameters), float32, on CPU, its
weights as ``transformers`` initialises them (the digest's cost does not depend on the values).
Printed: the digest's median seconds over 5 runs, one forward pass of 32 rows x 256 tokens (the
default batch of the engine at a typical DCLM prompt length), their ratio, and how many tokens of
forward passes the digest costs as much as. The digest reads every weight once (540 MB here): it is
memory-bound, one reduction per parameter tensor. Target: well under 1% of a placement (a placement
of SmolLM2 on CPU scores from about 1,300 tokens, when it stops at its first stage, to tens of thousands).

Run: ``python benchmarks/weights_digest.py`` from the repo root.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.engine.hf.weights_digest import weights_digest  # noqa: E402


def smollm2_shaped_llama():
    """A randomly initialised Llama with SmolLM2-135M's configuration."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                         tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=10000.0)
    return LlamaForCausalLM(config).eval()


def main() -> None:
    import torch

    model = smollm2_shaped_llama()
    n_parameters = sum(p.numel() for p in model.parameters())
    n_tensors = sum(1 for _ in model.parameters())
    weights_digest(model)  # warm-up
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        weights_digest(model)
        seconds.append(time.perf_counter() - started)
    digest_s = statistics.median(seconds)
    ids = torch.randint(0, 49152, (32, 256), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(input_ids=ids[:2, :16])  # warm-up
        started = time.perf_counter()
        model(input_ids=ids)
        forward_s = time.perf_counter() - started
    print(f"model: {n_parameters / 1e6:.1f}M parameters in {n_tensors} tensors, float32, "
          f"{torch.get_num_threads()} torch threads")
    print(f"weights digest: {digest_s:.3f} s (median of 5)")
    print(f"one forward pass, 32 x 256 tokens: {forward_s:.2f} s")
    print(f"digest / one forward pass: {100 * digest_s / forward_s:.2f}% "
          f"(the forward time of about {digest_s / forward_s * ids.numel():.0f} tokens)")


if __name__ == "__main__":
    main()
