"""Tiny seeded Llamas saved as Hugging Face folders, for the live build / placement tests."""

from __future__ import annotations

from pathlib import Path


def save_tiny_models(root: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, Path]:
    """``{"m<seed>": folder}``: a 2-layer Llama over a byte tokenizer per seed (fast, meaningless scores)."""
    from tests.engine.conftest import tiny_model_and_tokenizer

    folders = {}
    for seed in seeds:
        model, tokenizer = tiny_model_and_tokenizer(seed, max_positions=512)
        folders[f"m{seed}"] = root / f"m{seed}"
        model.save_pretrained(folders[f"m{seed}"])
        tokenizer.save_pretrained(folders[f"m{seed}"])
    return folders
