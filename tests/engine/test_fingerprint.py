"""Model fingerprints change when the model does, and only then (offline: a hub cache laid out on disk)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.engine.hf.fingerprint import hub_commit, path_digest
from tests.engine.conftest import tiny_model_and_tokenizer

REPO = Path(__file__).resolve().parents[2]
SHA_1, SHA_2 = "1" * 40, "2" * 40


def _save_tiny(folder: Path, seed: int) -> Path:
    model, tokenizer = tiny_model_and_tokenizer(seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_local_folder_digest_covers_the_model_files_only(tmp_path):
    pytest.importorskip("torch")
    folder = _save_tiny(tmp_path / "model", seed=0)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    before = path_digest(folder)
    (folder / "run" / "store" / "shards").mkdir(parents=True)  # an --output written inside the model folder
    (folder / "run" / "summary.json").write_text("{}")
    (folder / "run" / "store" / "shards" / "0123abcd.jsonl").write_text("{}\n")
    (folder / "summary.json").write_text("{}")
    (folder / "README.md").write_text("notes")
    assert path_digest(folder) == before
    copy = shutil.copytree(folder, tmp_path / "elsewhere")  # a copy keeps its fingerprint
    assert path_digest(copy) == before
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-3}))
    assert path_digest(folder) != before
    for name in ("tokenizer.json", "model.safetensors"):  # tokenizer and weights from another copy
        changed = shutil.copytree(copy, tmp_path / f"changed-{name}")
        other = _save_tiny(tmp_path / f"seed1-{name}", seed=1) if name == "model.safetensors" else None
        if other is not None:
            shutil.copy(other / name, changed / name)
        else:
            (changed / name).write_text((changed / name).read_text().replace('"</s>"', '"<eos>"'))
        assert path_digest(changed) != before, name


def _hub_cache(root: Path, commits: dict[str, Path], refs: dict[str, str]) -> Path:
    """``models--org--tiny/{refs/<name>, snapshots/<commit>/...}`` as huggingface_hub lays it out."""
    repo = root / "models--org--tiny"
    for commit, folder in commits.items():
        shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for name, commit in refs.items():
        (repo / "refs" / name).write_text(commit)
    return root


def test_hub_commit_reads_refs_offline(tmp_path):
    cache = tmp_path / "hub"
    (cache / "models--org--tiny" / "refs").mkdir(parents=True)
    (cache / "models--org--tiny" / "refs" / "main").write_text(SHA_1 + "\n")
    (cache / "models--org--tiny" / "refs" / "v2").write_text(SHA_2)
    assert hub_commit("org/tiny", cache_dir=cache) == SHA_1
    assert hub_commit("org/tiny", "v2", cache_dir=cache) == SHA_2
    assert hub_commit("org/tiny", "a" * 40, cache_dir=cache) == "a" * 40  # a commit pins itself
    assert hub_commit("org/tiny", "v3", cache_dir=cache) is None
    assert hub_commit("org/other", cache_dir=cache) is None


_LOAD = """
import json, sys
from pathlib import Path
from flasheval.engine import open_backend, parse_model_spec
def fingerprint(spec):
    return open_backend(parse_model_spec(spec), dtype="float32", device="cpu").fingerprint
main = Path(sys.argv[1]) / "models--org--tiny" / "refs" / "main"
fps = {"unpinned": fingerprint("hf:org/tiny"), "pinned_1": fingerprint("hf:org/tiny@" + sys.argv[2])}
main.write_text(sys.argv[3])  # the hub model was updated: main now points at another commit
fps["updated"] = fingerprint("hf:org/tiny")
fps["pinned_2"] = fingerprint("hf:org/tiny@" + sys.argv[3])
print(json.dumps(fps))
"""


def test_unpinned_hub_model_fingerprints_the_resolved_commit(tmp_path):
    pytest.importorskip("torch")
    weights = {SHA_1: _save_tiny(tmp_path / "v1", seed=0), SHA_2: _save_tiny(tmp_path / "v2", seed=1)}
    cache = _hub_cache(tmp_path / "hub", weights, {"main": SHA_1})
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(cache), SHA_1, SHA_2], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert fps["unpinned"] == fps["pinned_1"]  # hf:org/tiny is hf:org/tiny@<the commit main points at>
    assert fps["updated"] == fps["pinned_2"] != fps["unpinned"]  # an updated model never reuses stale results
