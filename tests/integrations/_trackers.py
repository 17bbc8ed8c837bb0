"""What the trackers hold after a training: TensorBoard's event files read back, and the tag names docs/runs.md
documents for each callback (its table in "In the trackers"), so that a test finds every placement under them."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar in the TensorBoard event files under ``folder``: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, dict[int, float]] = {}
    for events in sorted({path.parent for path in folder.rglob("events.out.tfevents.*")}):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})  # 0: keep every event
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in accumulator.Scalars(tag)})
    return scalars


def documented_tags(column: int) -> dict[str, str]:
    """From the table under "In the trackers" in docs/runs.md: metric name -> the tag TensorBoard shows it under,
    in column ``column`` (1: the Trainer callback, 2: the Lightning callback)."""
    text = (REPO_ROOT / "docs" / "runs.md").read_text(encoding="utf-8")
    section = text.split("## In the trackers", 1)[1].split("\n#", 1)[0]
    tags = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`flasheval/\w+`", cells[0]):
            tags[cells[0].strip("`")] = cells[column].strip("`")
    return tags
