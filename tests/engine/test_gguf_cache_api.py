"""A GGUF file is parsed once on the path users take (issue 46, item 1): the first ``flasheval.evaluate`` of a
``gguf:`` file, in a fresh process, keeps the converted folder (although the deferred backend loaded the tokenizer
for planning); a second fresh process reads it, at most a third of the first's seconds, with the same scores.

The file is a small Llama written here with ``gguf.GGUFWriter`` (Q8_0 weights, a byte-level vocabulary of
20,259 tokens: the per-token metadata parse is what makes a real GGUF load slow), so the test stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.engine.conftest import tiny_model_and_tokenizer

pytestmark = pytest.mark.slow  # two fresh processes (about 23 s on 2 busy cores)

ROOT = Path(__file__).resolve().parents[2]
N_EXTRA_TOKENS = 20_000


def write_tiny_gguf(path: Path, *, hidden: int = 64, layers: int = 2, intermediate: int = 128, heads: int = 4,
                    kv_heads: int = 2, seed: int = 0) -> None:
    """A Llama GGUF that transformers loads: byte-level BPE (256 bytes, BOS, EOS, one merge, ``N_EXTRA_TOKENS``
    unreachable tokens), seeded random weights, the matrices quantised to Q8_0."""
    import gguf
    from tokenizers import pre_tokenizers

    rng = np.random.default_rng(seed)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    extra = ["".join(alphabet[j] for j in rng.integers(0, 256, 6)) + str(k) for k in range(N_EXTRA_TOKENS)]
    tokens = [*alphabet, "<s>", "</s>", "he", *extra]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(intermediate)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 256 + [3, 3] + [1] * (1 + N_EXTRA_TOKENS))
    writer.add_token_merges(["h e"])
    writer.add_bos_token_id(256)
    writer.add_eos_token_id(257)

    def tensor(name: str, shape: tuple[int, ...]) -> None:
        values = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if len(shape) == 1:
            writer.add_tensor(name, values)
        else:
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(values, q8), raw_dtype=q8)

    head = hidden // heads
    tensor("token_embd.weight", (len(tokens), hidden))
    tensor("output_norm.weight", (hidden,))
    for i in range(layers):
        for name, shape in (("attn_norm", (hidden,)), ("attn_q", (hidden, hidden)), ("attn_k", (kv_heads * head, hidden)),
                            ("attn_v", (kv_heads * head, hidden)), ("attn_output", (hidden, hidden)),
                            ("ffn_norm", (hidden,)), ("ffn_gate", (intermediate, hidden)),
                            ("ffn_up", (intermediate, hidden)), ("ffn_down", (hidden, intermediate))):
            tensor(f"blk.{i}.{name}.weight", shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _fresh_process(args: list[Path], cache: Path) -> dict:
    env = {**os.environ, "FLASHEVAL_GGUF_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.engine._gguf_worker", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_evaluate_of_a_gguf_file_keeps_it_converted_and_a_second_process_reads_that(tmp_path):
    gguf_file, warmup, text, cache = tmp_path / "m.gguf", tmp_path / "warmup", tmp_path / "t.jsonl", tmp_path / "cache"
    write_tiny_gguf(gguf_file)
    model, tokenizer = tiny_model_and_tokenizer(0)
    model.save_pretrained(warmup)
    tokenizer.save_pretrained(warmup)
    text.write_text("".join(json.dumps({"text": "hello there, " * (i + 2)}) + "\n" for i in range(3)), encoding="utf-8")

    first = _fresh_process([gguf_file, warmup, text, tmp_path / "store-1"], cache)
    key = hashlib.sha256(gguf_file.read_bytes()).hexdigest()  # the cache's key, computed independently
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [f"{key}-float32"]
    assert (cache / f"{key}-float32" / "model.safetensors").is_file()
    second = _fresh_process([gguf_file, warmup, text, tmp_path / "store-2"], cache)  # a new store: it must load
    assert second["fingerprint"] == first["fingerprint"]  # stored results keep their keys
    assert second["validation"] == first["validation"]  # the same model: the same losses, to the last bit
    assert second["seconds"] <= first["seconds"] / 3, f"second {second['seconds']:.2f} s, first {first['seconds']:.2f} s"


def test_a_plan_made_before_the_file_was_converted_reads_the_converted_folder(tmp_path, monkeypatch):
    """A deferred backend's plan outlives its first load (a release, then a reload) and another process may convert
    the file after this one planned: the load reads the converted folder whenever it exists, not the file."""
    import torch

    from flasheval.engine.hf import gguf_cache, loading

    monkeypatch.setenv(gguf_cache.GGUF_CACHE_ENV, str(tmp_path / "cache"))
    write_tiny_gguf(tmp_path / "m.gguf")
    plan = loading.plan_hf_load(str(tmp_path), gguf_file="m.gguf", dtype="float32", device="cpu")
    assert plan.converted is None
    reads: list[tuple[str, str | None]] = []
    real = loading._from_pretrained
    monkeypatch.setattr(loading, "_from_pretrained",
                        lambda auto, source, gguf, *a, **k: reads.append((auto, gguf)) or real(auto, source, gguf, *a, **k))
    first = loading.load_planned(plan)
    assert reads == [("AutoTokenizer", "m.gguf"), ("AutoModelForCausalLM", "m.gguf")]
    reads.clear()
    second = loading.load_planned(plan)  # the same plan, made before the folder existed
    assert reads == [("AutoTokenizer", None), ("AutoModelForCausalLM", None)]
    a, b = first.model.state_dict(), second.model.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert second.fingerprint == first.fingerprint
