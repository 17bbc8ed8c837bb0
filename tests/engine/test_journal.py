"""The durable append-only journal under both results stores."""

from flasheval.engine.store.journal import append_lines, read_journal, truncate_journal


def test_appends_are_complete_lines_and_a_torn_tail_is_reported_not_mixed_in(tmp_path):
    path = tmp_path / "j.jsonl"
    append_lines(path, ['{"a":1}', '{"a":2}'])
    with open(path, "ab") as fh:
        append_lines(fh, ['{"a":3}'])
        fh.write(b'{"a":')  # a process killed mid-write
    contents = read_journal(path)
    assert contents.lines == (b'{"a":1}', b'{"a":2}', b'{"a":3}')
    assert contents.torn_tail == 5 and contents.size == path.stat().st_size
    truncate_journal(path, contents.size - contents.torn_tail)
    assert read_journal(path).torn_tail == 0 and path.read_bytes().endswith(b'{"a":3}\n')


def test_missing_file_and_empty_append(tmp_path):
    assert read_journal(tmp_path / "none.jsonl").lines == ()
    append_lines(tmp_path / "sub" / "j.jsonl", [])
    assert not (tmp_path / "sub" / "j.jsonl").exists()
