"""Run records: atomic, versioned, NaN-free, and refused clearly when incompatible."""

import json

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.records.run_record import SCHEMA_VERSION, read_record, write_record


RUN = {"name": "r", "reference_source": "helm_lite", "tiers": [{"first": 1, "resolution": 0}],
       "settings": {"reference": "helm_lite", "plan": "default", "confidence_level": 0.95}}
"""The smallest payload its kind's schema passes (``write_record`` checks it before writing)."""


def test_roundtrip_and_nan_becomes_null(tmp_path):
    p = write_record(tmp_path / "r" / "run.json", kind="run", payload={**RUN, "rank": np.int64(3), "x": float("nan")})
    rec = read_record(p)
    assert rec.kind == "run"
    assert rec.payload == {**RUN, "rank": 3, "x": None}
    assert not list((tmp_path / "r").glob("*.tmp"))


def test_incompatible_version_refused_in_one_line(tmp_path):
    p = write_record(tmp_path / "run.json", kind="run", payload=RUN)
    data = json.loads(p.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match="schema_version") as info:
        read_record(p)
    assert "\n" not in str(info.value)


def test_not_a_record(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="not a JSON run record"):
        read_record(p)
    p.write_text("[]")
    with pytest.raises(InputError, match="schema"):
        read_record(p)
    with pytest.raises(InputError, match="not found"):
        read_record(tmp_path / "missing.json")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o000, 0o644)])
def test_records_get_mode_0644_less_the_umask(tmp_path, umask, mode):
    import os
    import stat

    old = os.umask(umask)
    try:
        record = write_record(tmp_path / "run.json", kind="run", payload=RUN)
    finally:
        os.umask(old)
    assert stat.S_IMODE(record.stat().st_mode) == mode
