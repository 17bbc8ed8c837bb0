"""Shared fixtures: where the read-only shared data lives, and a skip with a clear reason if absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def find_shared_dir() -> Path | None:
    """``$FLASHEVAL_SHARED`` if set, else ``<repo root>/../shared``; ``None`` when it does not exist."""
    candidate = Path(os.environ.get("FLASHEVAL_SHARED") or REPO_ROOT.parent / "shared")
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data folder (``../shared`` beside the repo in CI)."""
    found = find_shared_dir()
    if found is None:
        pytest.skip("shared data not found: expected ../shared beside the repo or $FLASHEVAL_SHARED")
    return found


@pytest.fixture(scope="session")
def task_dir(shared_dir: Path) -> Path:
    """The real DCLM / llm-foundry task files (``../shared/data/tasks``)."""
    path = shared_dir / "data" / "tasks"
    if not (path / "local_data").is_dir():
        pytest.skip(f"task files not found under {path} (need local_data/)")
    return path
