"""What a user gets from ``pip wheel .`` / ``pip install .``: the package *with* its embedded data.

The tier plans (``tiers/``) and the embedded references (``reference_rankings/``) live at the repo
root, outside ``flasheval/``; ``pyproject.toml`` ships them as ``flasheval/_data/`` and
:mod:`flasheval.data_paths` finds them in a checkout and in an installed wheel alike. The slow test
builds the wheel and the sdist, installs the wheel into a fresh venv outside the checkout and runs the
commands that need the data there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_PACKAGES = {"flasheval._data.tiers": "tiers", "flasheval._data.reference_rankings": "reference_rankings"}
# what the wheel and the sdist must carry (relative to the data folder / the sdist root)
REQUIRED_DATA = ("tiers/default.yaml", "tiers/flash_helm.yaml", "tiers/lean.yaml",
                 "reference_rankings/helm_lite/manifest.json", "reference_rankings/helm_lite/scores.parquet",
                 "reference_rankings/helm_lite_random_baselines.json")


def _pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_pyproject_lists_every_package_folder_and_maps_the_data_folders():
    # The packages are listed (not found), so a new folder of flasheval/ must be added there or the wheel lacks it.
    config = _pyproject()["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "flasheval").rglob("__init__.py")}
    listed = set(config["packages"])
    assert listed - set(DATA_PACKAGES) == on_disk
    assert {k: config["package-dir"][k] for k in DATA_PACKAGES} == DATA_PACKAGES
    assert all((REPO_ROOT / folder).is_dir() for folder in DATA_PACKAGES.values())


def _run(args: list[str | Path], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, **kwargs)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _build_wheel(source: Path, out: Path) -> Path:
    # --no-build-isolation: setuptools comes from this venv (the [test] extra), so the build works offline.
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, source])
    (wheel,) = out.glob("flasheval-*.whl")
    return wheel


def _build_sdist(source: Path, out: Path) -> Path:
    out.mkdir(parents=True)
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    name = _run([sys.executable, "-c", code, out], cwd=source).stdout.strip().splitlines()[-1]
    return out / name


def _sdist_members(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name}


def _wheel_members(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


def _expected_in_wheel() -> set[str]:
    """Every module and data file of the checkout, where the wheel puts it (a stale ``build/`` may add more)."""
    files = {p for p in (REPO_ROOT / "flasheval").rglob("*") if p.suffix in (".py", ".yaml", ".json", ".csv")
             and p.is_file() and "__pycache__" not in p.parts}
    names = {p.relative_to(REPO_ROOT).as_posix() for p in files}
    for pattern in ("tiers/*.yaml", "reference_rankings/*.json", "reference_rankings/*/*.json",
                    "reference_rankings/*/*.parquet"):
        names |= {f"flasheval/_data/{p.relative_to(REPO_ROOT).as_posix()}" for p in REPO_ROOT.glob(pattern)}
    return names


def _fresh_venv(root: Path, wheel: Path) -> tuple[Path, Path]:
    """A venv holding only the wheel's flasheval; its dependencies are this interpreter's, by a ``.pth``."""
    _run([sys.executable, "-m", "venv", "--without-pip", root])
    python = root / ("Scripts" if os.name == "nt" else "bin") / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel])
    paths = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib')); "
                  "print(sysconfig.get_path('scripts'))"]).stdout.split("\n")
    purelib, scripts = Path(paths[0]), Path(paths[1])
    # Plain path entries, none holding a flasheval/ folder (the checkout): an editable install's finder (run by
    # a .pth *in* a site dir) is not executed from them, so the only flasheval on the path is the wheel's.
    deps = [p for p in dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *sys.path])
            if p and Path(p).is_dir() and not (Path(p) / "flasheval").exists()]
    (purelib / "_flasheval_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")
    return python, scripts / "flasheval"


def _known(folder: str, pattern: str) -> str:
    return ", ".join(sorted(p.parent.name if p.name == "manifest.json" else p.stem
                            for p in (REPO_ROOT / folder).glob(pattern)))


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_carries_the_tier_plans_and_the_references(tmp_path):
    assert not tmp_path.resolve().is_relative_to(REPO_ROOT)
    wheel = _build_wheel(REPO_ROOT, tmp_path / "dist")
    in_wheel = _wheel_members(wheel)
    assert {f"flasheval/_data/{f}" for f in REQUIRED_DATA} <= in_wheel, sorted(in_wheel)
    assert _expected_in_wheel() <= in_wheel, sorted(_expected_in_wheel() - in_wheel)

    sdist = _build_sdist(REPO_ROOT, tmp_path / "sdist")
    in_sdist = _sdist_members(sdist)
    assert set(REQUIRED_DATA) <= in_sdist, sorted(in_sdist)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    from_sdist = _wheel_members(_build_wheel(unpacked, tmp_path / "dist-from-sdist"))
    assert _expected_in_wheel() <= from_sdist, sorted(_expected_in_wheel() - from_sdist)

    python, flasheval = _fresh_venv(tmp_path / "venv", wheel)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "FLASHEVAL_REFERENCES")}
    where = _run([python, "-c", "import flasheval, flasheval.data_paths as d; print(flasheval.__file__); "
                  "print(d.embedded_data_dir('tiers')); print(d.embedded_data_dir('reference_rankings'))"],
                 cwd=work, env=env).stdout.split("\n")
    venv = (tmp_path / "venv").resolve()
    assert all(Path(p).resolve().is_relative_to(venv) for p in where[:3]), where

    place = _run([flasheval, "place"], cwd=work, env=env).stdout
    assert "meta/llama-3-70b" in place and "helm_lite" in place, place
    assert re.search(r"rank \d+ of \d+, 95% interval \[\d+, \d+\]", place), place
    assert "default: valid" in _run([flasheval, "tiers", "validate", "default"], cwd=work, env=env).stdout
    assert "reference helm_lite: 69 models" in _run([flasheval, "reference", "show", "helm_lite"], cwd=work, env=env).stdout

    # the refusals name what exists, as in a checkout
    for args, allowed in ((["tiers", "validate", "nope"], _known("tiers", "*.yaml")),
                          (["place", "--reference", "nope"], _known("reference_rankings", "*/manifest.json"))):
        proc = subprocess.run([str(flasheval), *args], capture_output=True, text=True, cwd=work, env=env, timeout=120)
        assert proc.returncode != 0 and f"(allowed: {allowed})" in proc.stderr, proc.stderr

    # a reference the user imports goes to ./reference_rankings (never into the installed package) and is found by name
    rows = [{"model": m, "dataset": d, "example_id": str(i), "score": float((i + k) % 2)}
            for k, m in enumerate(("m0", "m1", "m2")) for d in ("a", "b") for i in range(4)]
    pd.DataFrame(rows).to_parquet(work / "long.parquet")
    _run([flasheval, "reference", "import", "long.parquet", "--format", "long-parquet", "--name", "mine",
          "--metric-description", "0/1 correctness"], cwd=work, env=env)
    assert (work / "reference_rankings" / "mine" / "manifest.json").is_file()
    assert not (venv_data := Path(where[2].strip()) / "mine").exists(), venv_data
    assert "reference mine: 3 models" in _run([flasheval, "reference", "show", "mine"], cwd=work, env=env).stdout
