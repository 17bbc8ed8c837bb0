"""What ``reference build`` prints once a reference is written (both engines)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from flasheval.reference import ReferenceLeaderboard

__all__ = ["print_built"]


def print_built(out: Path, ref: ReferenceLeaderboard, *, start: float, seconds: Mapping[str, float],
                computed: Mapping[str, int], datasets: str, value_label: str | None, footer: str) -> None:
    """Print the size, ranking and per-model cost of the reference ``ref`` written to ``out`` (read back once,
    by :func:`flasheval.build_reference`).

    ``value_label`` names the ranked value (``None``: the reference's aggregate).
    """
    label = ref.manifest.aggregate if value_label is None else value_label
    print(f"wrote {out}: {ref.n_models} models x {len(ref.dataset_names)} {datasets}, "
          f"{sum(len(e) for e in ref.example_ids)} examples per model, in {time.perf_counter() - start:.0f} s")
    for row in ref.ranking():
        m = row.model_id
        print(f"  {row.rank}. {m:<28} {label} {row.value:.4f}  "
              f"({seconds[m]:.0f} s, {computed[m]} requests computed)")
    print(f"  {footer}")
