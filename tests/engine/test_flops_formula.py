"""2 x parameters x tokens is written once (flasheval.engine.throughput.forward_flops), every caller uses it."""

from __future__ import annotations


def test_the_flops_formula_is_written_once():
    """Every caller computes 2 x parameters x tokens through forward_flops, none writes it out again."""
    import re
    from pathlib import Path

    import flasheval

    written_out = re.compile(r"(?<![*\w.])2(\.0)?\s*\*\s*(float\()?[\w.]*(n_parameters|\bp)\b")  # not x**2 * p
    root = Path(flasheval.__file__).parent
    hits = [f"{path.relative_to(root)}:{i}" for path in sorted(root.rglob("*.py")) if path.name != "throughput.py"
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if written_out.search(line.split("#")[0]) and '"""' not in line]
    assert hits == []
