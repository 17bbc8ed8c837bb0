"""Every Eval Ever's schemas and worked example, read from ``../shared/data/every_eval_ever`` (the coalition's files,
MIT, not copied here): the tests skip, saying so, where the shared folder is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def eee_dir(shared_dir: Path) -> Path:
    path = shared_dir / "data" / "every_eval_ever"
    if not (path / "eval.schema.json").is_file():
        pytest.skip(f"Every Eval Ever schemas not found under {path}")
    return path


@pytest.fixture(scope="session")
def eee_validators(eee_dir: Path):
    """``(aggregate log validator, instance line validator)``: draft-07, the shared schemas as they are."""
    import jsonschema

    return tuple(jsonschema.Draft7Validator(json.loads((eee_dir / name).read_text(encoding="utf-8")))
                 for name in ("eval.schema.json", "instance_level_eval.schema.json"))


def schema_errors(folder: Path, validators) -> list[str]:
    """Every schema error of every log (``*.json``) and instance line (``*.jsonl``) under ``folder``, named."""
    logs, lines = validators
    errors = []
    for path in sorted(folder.rglob("*.json")):
        errors += [f"{path.name}: {e.message}" for e in logs.iter_errors(json.loads(path.read_text(encoding="utf-8")))]
    for path in sorted(folder.rglob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            errors += [f"{path.name}:{n}: {e.message}" for e in lines.iter_errors(json.loads(line))]
    return errors
