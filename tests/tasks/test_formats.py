"""Task files: the real files load with the documented counts; every kind of bad input gets one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flasheval.errors import InputError
from flasheval.tasks import load_examples, task_spec


def _write(tmp_path: Path, task: str, content: bytes) -> Path:
    """Put ``content`` where ``task``'s file belongs in an llm-foundry local_data-style dir."""
    path = tmp_path / task_spec(task).dataset_uri.removeprefix("local_data/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


GOOD_MC = {"query": "q", "choices": ["a", "b"], "gold": 1}

# (task, file content, expected message after "<path>:")
BAD_INPUTS = [
    ("copa", b'{"query": "q", "choices": ["a", "b"], "gold": 1}\n{"query": "q", "choices": ["a"\n',
     "2: broken JSON: Expecting ',' delimiter (column 31)"),
    ("copa", b'{"query": "q", "gold": 0}\n',
     "1: field 'choices': missing (required for multiple_choice) (allowed: query, choices, gold)"),
    ("copa", b'{"query": "q", "choices": ["a", "b"], "gold": "1"}\n',
     "1: field 'gold': expected int, got str: '1'"),
    ("copa", b'{"query": "q", "choices": ["a", 2], "gold": 1}\n',
     "1: field 'choices': expected list[str], got list: ['a', 2]"),
    ("copa", b'{"query": "q", "choices": ["a", "b"], "gold": 2}\n',
     "1: field 'gold': gold index 2 out of range (allowed: 0, 1)"),
    ("copa", b'{"query": "q", "choices": ["a", "b"], "gold": true}\n',
     "1: field 'gold': expected int, got bool: True"),
    ("winograd", b'{"context_options": ["a", "b"], "continuation": "c", "gold": -1}\n',
     "1: field 'gold': gold index -1 out of range (allowed: 0, 1)"),
    ("squad", b'{"context": "c"}\n',
     "1: field 'continuation': missing (required for language_modeling) (allowed: context, continuation)"),
    ("jeopardy", b'{"context": "c", "continuation": "x"}\n', "1: field 'category': missing (task has categories)"),
    ("triviaqa_sm_sub", b'{"context": "c", "answer": "a", "aliases": "a"}\n',
     "1: field 'aliases': expected list[str], got str: 'a'"),
    ("copa", b"[1, 2]\n", "1: expected a JSON object, got list"),
    ("copa", b"", "file has no examples"),
    ("copa", b"\n  \n", "file has no examples"),
    ("copa", json.dumps(GOOD_MC).encode() + b'\n{"query": "caf\xe9", "choices": ["a", "b"], "gold": 0}\n',
     "2: not valid UTF-8 (byte 15 of the line)"),
]


@pytest.mark.parametrize(("task", "content", "message"), BAD_INPUTS)
def test_bad_input_names_file_line_and_field(tmp_path: Path, task: str, content: bytes, message: str) -> None:
    path = _write(tmp_path, task, content)
    with pytest.raises(InputError) as info:
        load_examples(task_spec(task), tmp_path)
    separator = ":" if message[0].isdigit() else ": "
    assert str(info.value) == f"{path}{separator}{message}"


def test_missing_file_is_reported_with_its_status(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="task 'coqa': data file 'local_data/reading_comprehension/coqa.jsonl' "
                                         "not found \\(no copy of this file is known to be available\\)"):
        load_examples(task_spec("coqa"), tmp_path)


def test_examples_are_stripped_like_llm_foundry(tmp_path: Path) -> None:
    _write(tmp_path, "copa", b'{"query": "  q  ", "choices": [" a ", "b"], "gold": 0}\n\n'
                             b'{"query": "r", "choices": ["c", "d"], "gold": 1, "category": " x "}\n')
    first, second = load_examples(task_spec("copa"), tmp_path)
    assert (first.query, first.choices, first.example_id, first.line) == ("q", (" a ", "b"), "000000", 1)
    assert (second.example_id, second.line, second.category) == ("000001", 3, "x")
