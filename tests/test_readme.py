"""README.md's two opening commands stay true: CI runs exactly the test command README shows."""

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line for block in blocks[:2] for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_setup_and_main_job_then_tests():
    main_job, tests = _readme_commands()[:2]
    assert main_job.endswith(".venv/bin/flasheval place")
    assert tests.endswith(".venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25")
    assert "pip install -q torch==2.13.0" in main_job and "pip install -q torch==2.13.0" in tests


def test_ci_runs_the_readme_test_command_step_by_step():
    tests = _readme_commands()[1]
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [step.strip() for step in tests.split("&&")]
    ci_lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    positions = [ci_lines.index(step) for step in steps]  # raises ValueError if a step is missing
    assert positions == sorted(positions)
