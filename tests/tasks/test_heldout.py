"""Held-out text files → rolling log-likelihood requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from flasheval.errors import InputError
from flasheval.tasks import heldout_requests


def test_jsonl_gives_one_request_per_document(tmp_path: Path) -> None:
    path = tmp_path / "val.jsonl"
    path.write_text('{"text": "first doc"}\n\n{"text": "second\\ndoc", "meta": 1}\n', encoding="utf-8")
    requests = heldout_requests(path, task_name="c4_val")
    assert [(r.task_name, r.example_id, r.text) for r in requests] == [
        ("c4_val", "000000", "first doc"), ("c4_val", "000001", "second\ndoc")]


def test_plain_text_is_one_document(tmp_path: Path) -> None:
    path = tmp_path / "val.txt"
    path.write_text("Line one.\n\nLine two.\n", encoding="utf-8")
    (request,) = heldout_requests(path)
    assert request.text == "Line one.\n\nLine two.\n"


@pytest.mark.parametrize(("name", "content", "message"), [
    ("v.jsonl", b'{"text": "a"}\n{"txt": "b"}\n', "v.jsonl:2: field 'text': missing or not a string"),
    ("v.jsonl", b'{"text": "a"\n', "v.jsonl:1: broken JSON: Expecting ',' delimiter"),
    ("v.txt", b"caf\xe9", "v.txt: not valid UTF-8 (byte 4)"),
    ("v.txt", b"  \n", "v.txt: file has no text"),
])
def test_bad_heldout_files(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        heldout_requests(path)
    assert str(info.value) == f"{tmp_path}/{message}"
