"""The committed suite YAMLs are exactly what scripts/build_suites.py makes from the configs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flasheval.tasks import suite_names

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_committed_suites_match_the_converter(shared_dir: Path, tmp_path: Path) -> None:
    script = REPO_ROOT / "scripts" / "build_suites.py"
    subprocess.run([sys.executable, str(script), str(shared_dir / "data" / "tasks"), str(tmp_path)],
                   check=True, capture_output=True)
    committed = REPO_ROOT / "flasheval" / "tasks" / "suites"
    names = ["tasks", *suite_names()]
    assert sorted(p.stem for p in tmp_path.glob("*.yaml")) == sorted(names)
    for name in names:
        assert (tmp_path / f"{name}.yaml").read_text() == (committed / f"{name}.yaml").read_text(), name
