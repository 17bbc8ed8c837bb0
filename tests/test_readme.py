"""README.md stays true and short.

* its two opening commands: CI runs exactly the test command README shows, step by step;
* at most 200 lines, its sections in the order a newcomer needs them (place before evaluate);
* every ``flasheval SUBCOMMAND`` in its code blocks is a real subcommand;
* neither README nor ``docs/*.md`` carries a path of the machine the figures were measured on.
"""

import argparse
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


README_MAX_LINES = 200
"""README is what a newcomer reads in ten minutes; the details live in docs/*.md."""

README_SECTIONS = (
    "Place a model", "Sweeps", "Does it work", "Evaluation", "lm-eval", "Scaling", "Performance", "Progress", "Layout",
)
"""Keywords of README's ``## `` sections, in the order they must appear (the main job, placing, before evaluate)."""

MACHINE_PATHS = ("/work/", "/tmp/")
"""Paths of the machine the project was measured on; example commands use generic paths instead."""


def _readme_text() -> str:
    return (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short():
    n_lines = len(_readme_text().splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines (at most {README_MAX_LINES}); move details to docs/"


def test_readme_and_docs_carry_no_machine_path():
    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    found = [f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
             for path in files
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if any(machine_path in line for machine_path in MACHINE_PATHS)]
    assert not found, "machine paths (use generic ones, e.g. PATH/TO/...):\n" + "\n".join(found)


def test_readme_sections_in_order():
    headings = re.findall(r"^## (.+)$", _readme_text(), flags=re.M)
    positions = []
    for keyword in README_SECTIONS:
        matches = [i for i, heading in enumerate(headings) if keyword.lower() in heading.lower()]
        assert matches, f"README has no '## ' section about {keyword!r}; sections: {headings}"
        positions.append(matches[0])
    assert positions == sorted(positions) and len(set(positions)) == len(positions), (
        f"README's sections must come in the order {README_SECTIONS}; they are {headings}")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def test_readme_commands_are_real_subcommands():
    from flasheval.cli import build_parser

    commands = _subparsers(build_parser())
    text = _readme_text()
    blocks = [block for language, block in re.findall(r"```([a-z]*)\n(.*?)```", text, flags=re.S) if language != "python"]
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))  # inline code in the prose
    named = [m.groups() for snippet in blocks + spans
             for m in re.finditer(r"\bflasheval[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?", snippet)]
    assert "place" in {sub for sub, _ in named}  # the main job is shown
    for sub, action in named:
        assert sub in commands, f"README names `flasheval {sub}`, which is not a subcommand ({sorted(commands)})"
        actions = _subparsers(commands[sub])
        if actions and action is not None:
            assert action in actions, f"README names `flasheval {sub} {action}`; {sub}'s actions are {sorted(actions)}"
