"""The CLI shell: version, help, and the one-line error contract."""

import subprocess
import sys

from flasheval import cli
from flasheval.errors import FlashevalError, InputError


def test_version(capsys):
    try:
        cli.main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "flasheval 0.1.0" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: flasheval" in capsys.readouterr().err


def test_input_error_names_file_line_field_and_allowed():
    err = InputError("not in range", path="x.jsonl", line=7, field="gold", allowed=[0, 1, 2])
    assert str(err) == "x.jsonl:7: field 'gold': not in range (allowed: 0, 1, 2)"
    assert isinstance(err, FlashevalError)


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "flasheval", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.strip() == "flasheval 0.1.0"


def test_evaluate_accounts_for_every_request_stored_computed_or_identical_to_another():
    from flasheval.cli.evaluate import format_compute

    base = {"n_examples": 60, "n_requests": 120, "scoring_seconds": 2.0, "world_size": 1, "examples_per_second": None}
    first, = format_compute({**base, "n_requests_computed": 119, "n_requests_from_store": 0})
    assert first.endswith("119 computed in 2.0 s on 1 process(es), 0 from the store, 1 identical to another request "
                          "(scored once)")
    first, = format_compute({**base, "n_requests_computed": 100, "n_requests_from_store": 20})
    assert first.endswith("100 computed in 2.0 s on 1 process(es), 20 from the store")
    assert format_compute({**base, "n_requests_computed": 0, "n_requests_from_store": 120}) == [
        "60 examples: all 120 requests served from the store (nothing computed)"]
