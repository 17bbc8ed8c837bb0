"""The one atomic write (flasheval/atomic.py): mode 0644 less the umask (0644 under 022, never more open than it), nothing left by a failure, the old file
intact, and every writer of the package going through it."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

import flasheval
from flasheval.atomic import atomic_file, atomic_write_bytes, atomic_write_text


@pytest.mark.parametrize(("umask", "mode"), [(0o000, 0o644), (0o022, 0o644), (0o002, 0o644), (0o077, 0o600)])
def test_mode_is_0644_less_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        text = atomic_write_text(tmp_path / "sub" / "a.txt", "x")
        data = atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == stat.S_IMODE(data.stat().st_mode) == mode
    assert text.read_text() == "x" and data.read_bytes() == b"\x00\x01"


def test_a_failure_mid_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = atomic_write_text(tmp_path / "run.json", "old\n")
    with pytest.raises(RuntimeError, match="disk gone"):
        with atomic_file(target) as fh:
            fh.write("half of the new")
            fh.flush()
            raise RuntimeError("disk gone")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_failure_before_any_file_existed_leaves_nothing(tmp_path):
    with pytest.raises(ValueError):
        with atomic_file(tmp_path / "new.bin", binary=True) as fh:
            fh.write(b"x")
            raise ValueError
    assert list(tmp_path.iterdir()) == []


def test_every_whole_file_writer_goes_through_the_atomic_write():
    """No module but flasheval/atomic.py renames a temporary file into place or writes a file whole by itself
    (os.replace of a file, Path.write_text/write_bytes, open(..., "w"), savefig to a path, to_parquet to a path)."""
    root = Path(flasheval.__file__).parent
    own = re.compile(r"os\.replace\(|\.write_text\(|\.write_bytes\(|os\.fdopen\([^)]*\"w|open\([^)]*\"wb?\"|"
                     r"savefig\(target|to_parquet\((?!fh)")
    allowed = {
        "atomic.py",
        # an old results file renamed aside once its lines are in the shards (.adopted, .migrated): no file written
        "engine/store/adoption.py", "engine/store/shards.py", "sweeps/folder.py",
    }
    hits = [f"{path.relative_to(root)}:{i}: {line.strip()}" for path in sorted(root.rglob("*.py"))
            if str(path.relative_to(root)) not in allowed
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if own.search(line) and not line.lstrip().startswith((">>>", "#", "..."))]
    assert hits == []
